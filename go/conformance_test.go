package pdkv

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// vectorFile is one file of tests/vectors (docs/conformance.md, format 1).
type vectorFile struct {
	Format *int         `json:"format"`
	Cases  []vectorCase `json:"cases"`
}

// vectorCase is one conformance case: exactly one of Output and Error is set.
type vectorCase struct {
	Name   string                 `json:"name"`
	Op     string                 `json:"op"`
	Input  map[string]interface{} `json:"input"`
	Output map[string]interface{} `json:"output"`
	Error  *struct {
		Status          string   `json:"status"`
		MessageContains []string `json:"message_contains"`
	} `json:"error"`
}

// badVector is panicked by input accessors when a case is malformed; the runner reports it as
// a failure of that case.
type badVector struct{ msg string }

// in wraps one input object of a case with typed accessors. It records the keys it reads so
// the runner can fail a case whose input carries a key the op does not define.
type in struct {
	path     string
	m        map[string]interface{}
	used     map[string]bool
	children []*in
}

func newIn(path string, m map[string]interface{}) *in {
	return &in{path: path, m: m, used: map[string]bool{}}
}

// unused lists every key of this object and its nested objects that no accessor read.
func (o *in) unused() []string {
	var out []string
	for k := range o.m {
		if !o.used[k] {
			out = append(out, o.path+"."+k)
		}
	}
	for _, c := range o.children {
		out = append(out, c.unused()...)
	}
	sort.Strings(out)
	return out
}

func (o *in) raw(key string) interface{} {
	v, ok := o.m[key]
	if !ok {
		panic(badVector{fmt.Sprintf("input key %s.%s missing", o.path, key)})
	}
	o.used[key] = true
	return v
}

func (o *in) has(key string) bool { _, ok := o.m[key]; return ok }

func number(path string, v interface{}) *big.Int {
	n, ok := v.(json.Number)
	var b big.Int
	if !ok {
		panic(badVector{fmt.Sprintf("input %s is not an integer: %v", path, v)})
	}
	if _, ok := b.SetString(n.String(), 10); !ok {
		panic(badVector{fmt.Sprintf("input %s = %s is not an integer", path, n)})
	}
	return &b
}

func toU64(path string, v interface{}) uint64 {
	b := number(path, v)
	if b.Sign() < 0 || !b.IsUint64() {
		panic(badVector{fmt.Sprintf("input %s = %s does not fit uint64", path, b)})
	}
	return b.Uint64()
}

func (o *in) u64(key string) uint64 { return toU64(o.path+"."+key, o.raw(key)) }

func (o *in) u32(key string) uint32 {
	v := o.u64(key)
	if v > math.MaxUint32 {
		panic(badVector{fmt.Sprintf("input %s.%s = %d does not fit uint32", o.path, key, v)})
	}
	return uint32(v)
}

func (o *in) u32Or(key string, def uint32) uint32 {
	if !o.has(key) {
		return def
	}
	return o.u32(key)
}

// u32Opt and u64Opt read an optional field: nil (unset) when the vector does not name it.
func (o *in) u32Opt(key string) *uint32 {
	if !o.has(key) {
		return nil
	}
	return Ptr(o.u32(key))
}

func (o *in) u64Opt(key string) *uint64 {
	if !o.has(key) {
		return nil
	}
	return Ptr(o.u64(key))
}

func (o *in) u64Or(key string, def uint64) uint64 {
	if !o.has(key) {
		return def
	}
	return o.u64(key)
}

func (o *in) str(key string) string {
	s, ok := o.raw(key).(string)
	if !ok {
		panic(badVector{fmt.Sprintf("input %s.%s is not a string: %v", o.path, key, o.m[key])})
	}
	return s
}

func (o *in) strOr(key, def string) string {
	if !o.has(key) {
		return def
	}
	return o.str(key)
}

func (o *in) boolean(key string) bool {
	b, ok := o.raw(key).(bool)
	if !ok {
		panic(badVector{fmt.Sprintf("input %s.%s is not a boolean: %v", o.path, key, o.m[key])})
	}
	return b
}

func (o *in) boolOr(key string, def bool) bool {
	if !o.has(key) {
		return def
	}
	return o.boolean(key)
}

func (o *in) obj(key string) *in {
	m, ok := o.raw(key).(map[string]interface{})
	if !ok {
		panic(badVector{fmt.Sprintf("input %s.%s is not an object: %v", o.path, key, o.m[key])})
	}
	c := newIn(o.path+"."+key, m)
	o.children = append(o.children, c)
	return c
}

func (o *in) array(key string) []interface{} {
	a, ok := o.raw(key).([]interface{})
	if !ok {
		panic(badVector{fmt.Sprintf("input %s.%s is not an array: %v", o.path, key, o.m[key])})
	}
	return a
}

func (o *in) u64s(key string) []uint64 {
	a := o.array(key)
	out := make([]uint64, len(a))
	for i, v := range a {
		out[i] = toU64(fmt.Sprintf("%s.%s[%d]", o.path, key, i), v)
	}
	return out
}

func (o *in) objs(key string) []*in {
	a := o.array(key)
	out := make([]*in, len(a))
	for i, v := range a {
		m, ok := v.(map[string]interface{})
		if !ok {
			panic(badVector{fmt.Sprintf("input %s.%s[%d] is not an object", o.path, key, i)})
		}
		out[i] = newIn(fmt.Sprintf("%s.%s[%d]", o.path, key, i), m)
		o.children = append(o.children, out[i])
	}
	return out
}

// kind reads a group kind name.
func (o *in) kind(key string) GroupKind {
	k, err := GroupKindFromName(o.str(key))
	if err != nil {
		panic(badVector{err.Error()})
	}
	return k
}

// cacheMode reads a Mamba cache mode name ("none" | "align" | "all").
func (o *in) cacheMode(key, def string) MambaCacheMode {
	switch mode := o.strOr(key, def); mode {
	case "none":
		return MambaCacheNone
	case "align":
		return MambaCacheAlign
	case "all":
		return MambaCacheAll
	default:
		panic(badVector{fmt.Sprintf("unknown %s %q", key, mode)})
	}
}

// out is an op's full output object (Go values; normalised through JSON before comparing).
type out map[string]interface{}

// opFunc computes an op's full output from its input through the idiomatic API.
type opFunc func(t *testing.T, input *in) (out, error)

// engineConfig builds an EngineConfig from the shared "engine" input shape.
func engineConfig(e *in) (EngineConfig, error) {
	c := DefaultEngineConfig()
	c.TpSize = e.u32("tp_size")
	c.KVCacheDtypeBytes = e.u32Opt("kv_cache_dtype_bytes")
	c.ConvStateDtypeBytes = e.u32Opt("conv_state_dtype_bytes")
	c.SSMStateDtypeBytes = e.u32Opt("ssm_state_dtype_bytes")
	c.NumSpeculativeTokens = e.u32Or("num_speculative_tokens", 0)
	c.UserBlockSize = e.u32Opt("user_block_size")
	c.UserMambaBlockSize = e.u32Opt("user_mamba_block_size")
	c.KVCacheElementBits = e.u32Opt("kv_cache_element_bits")
	c.KVCacheHeadExtraBytes = e.u32Or("kv_cache_head_extra_bytes", 0)
	backend := e.strOr("backend", "flash_attn")
	c.MambaCacheMode = e.cacheMode("mamba_cache_mode", "none")
	switch l := e.strOr("conv_layout", "DS"); l {
	case "DS":
		c.ConvLayout = ConvLayoutDS
	case "SD":
		c.ConvLayout = ConvLayoutSD
	default:
		panic(badVector{fmt.Sprintf("unknown conv_layout %q", l)})
	}
	formats := []struct {
		name   string
		target *ElementFormat
	}{
		{e.strOr("model_format", "auto"), &c.ModelFormat},
		{e.strOr("kv_cache_format", "auto"), &c.KVCacheFormat},
		{e.strOr("conv_state_format", "auto"), &c.ConvStateFormat},
		{e.strOr("ssm_state_format", "auto"), &c.SSMStateFormat},
	}
	// Every key is read before the first library call, which may fail the case.
	b, err := BackendFromName(backend)
	if err != nil {
		return c, err
	}
	c.Backend = b
	for _, f := range formats {
		if *f.target, err = ElementFormatFromName(f.name); err != nil {
			return c, err
		}
	}
	return c, nil
}

// presetGeometry builds the geometry of a model on an engine config (or its error).
func presetGeometry(t *testing.T, model *Model, cfg EngineConfig, cfgErr error) (*Geometry, error) {
	if cfgErr != nil {
		return nil, cfgErr
	}
	g, err := NewGeometry(model, cfg)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = g.Close() })
	return g, nil
}

// presetModel opens a preset model closed at the end of the test.
func presetModel(t *testing.T, name string) (*Model, error) {
	m, err := ModelFromPreset(name)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, nil
}

// ops maps every op of docs/conformance.md to its runner. An op not listed here fails.
var ops = map[string]opFunc{
	"tp_mapping": func(t *testing.T, i *in) (out, error) {
		m, err := NewTpMapping(TpMappingParams{
			LocalTpSize: i.u32("local_tp_size"), LocalTpRank: i.u32("local_tp_rank"), RemoteTpSize: i.u32("remote_tp_size"),
			TotalKVHeads: i.u32("total_kv_heads"), UseMLA: i.boolean("use_mla"), HasMamba: i.boolean("has_mamba"),
		})
		if err != nil {
			return nil, err
		}
		defer m.Close()
		info, err := m.Info()
		if err != nil {
			return nil, err
		}
		o := out{
			"tp_ratio":              info.TpRatio,
			"rank_offset_factor":    info.RankOffsetFactor,
			"local_replicated":      info.LocalReplicated,
			"remote_replicated":     info.RemoteReplicated,
			"local_physical_heads":  info.LocalPhysicalHeads,
			"remote_physical_heads": info.RemotePhysicalHeads,
		}
		for key, which := range map[string]TpList{
			"handshake_targets":      TpListHandshakeTargets,
			"attention_source_ranks": TpListAttentionSources,
			"mamba_source_ranks":     TpListMambaSources,
			"all_source_ranks":       TpListAllSources,
			"attention_slots":        TpListAttentionSlots,
			"notify_ranks":           TpListNotifyTargets,
		} {
			r, err := m.Ranks(which)
			if err != nil {
				return nil, err
			}
			o[key] = r
		}
		return o, nil
	},
	"geometry": func(t *testing.T, i *in) (out, error) {
		name := i.str("model")
		cfg, cfgErr := engineConfig(i.obj("engine"))
		m, err := presetModel(t, name)
		if err != nil {
			return nil, err
		}
		g, err := presetGeometry(t, m, cfg, cfgErr)
		if err != nil {
			return nil, err
		}
		info, err := g.Info()
		if err != nil {
			return nil, err
		}
		projs, err := g.Projections()
		if err != nil {
			return nil, err
		}
		lines, err := g.LogLines()
		if err != nil {
			return nil, err
		}
		pj := make([]interface{}, len(projs))
		for k, p := range projs {
			pj[k] = out{"name": p.Name, "dim_local": p.DimLocal, "bytes": p.Bytes, "offset": p.Offset, "replicated": p.Replicated}
		}
		return out{
			"kv_heads_per_rank":       info.KVHeadsPerRank,
			"kv_head_bytes_per_token": info.KVHeadBytesPerToken,
			"attn_bytes_per_token":    info.AttnBytesPerToken,
			"conv_bytes":              info.ConvBytes,
			"ssm_bytes":               info.SSMBytes,
			"mamba_page_bytes":        info.MambaPageBytes,
			"block_size":              info.BlockSize,
			"mamba_block_size":        info.MambaBlockSize,
			"attn_page_bytes":         info.AttnPageBytes,
			"padding_ppm":             info.PaddingPPM,
			"kernel_block_size":       info.KernelBlockSize,
			"physical_per_logical":    info.PhysicalPerLogical,
			"kernel_page_bytes":       info.KernelPageBytes,
			"projections":             pj,
			"log_lines":               lines,
		}, nil
	},
	"mamba_reads": func(t *testing.T, i *in) (out, error) {
		name := i.str("model")
		pcfg, pErr := engineConfig(i.obj("prefill"))
		dcfg, dErr := engineConfig(i.obj("decode"))
		dTpRank := i.u32("decode_rank")
		var rule MambaReadsRule
		switch r := i.str("rule"); r {
		case "pdkv":
			rule = MambaReadsPdkv
		case "vllm":
			rule = MambaReadsVLLM
		default:
			panic(badVector{fmt.Sprintf("unknown rule %q", r)})
		}
		m, err := presetModel(t, name)
		if err != nil {
			return nil, err
		}
		pg, err := presetGeometry(t, m, pcfg, pErr)
		if err != nil {
			return nil, err
		}
		dg, err := presetGeometry(t, m, dcfg, dErr)
		if err != nil {
			return nil, err
		}
		l, err := NewMambaReads(pg, dg, dTpRank, rule)
		if err != nil {
			return nil, err
		}
		defer l.Close()
		items, err := l.Items()
		if err != nil {
			return nil, err
		}
		src, err := l.SourceRanks()
		if err != nil {
			return nil, err
		}
		reads := make([]interface{}, len(items))
		for k, r := range items {
			reads[k] = out{"p_tp_rank": r.PTpRank, "part": r.Part, "remote_offset": r.RemoteOffset, "local_offset": r.LocalOffset, "length": r.Length}
		}
		return out{"reads": reads, "source_ranks": src}, nil
	},
	"logical_to_kernel_block_ids": func(t *testing.T, i *in) (out, error) {
		r, err := LogicalToKernelBlockIDs(i.u64s("ids"), i.kind("kind"), i.u64("blocks_per_logical"))
		return out{"ids": r}, err
	},
	"map_block_ids_for_block_size_ratio": func(t *testing.T, i *in) (out, error) {
		r, err := MapBlockIDsForBlockSizeRatio(i.u64s("ids"), i.kind("kind"), i.u64("block_size_ratio"), i.u64("remote_len"))
		return out{"ids": r}, err
	},
	"descriptor_ids": func(t *testing.T, i *in) (out, error) {
		var groups []GroupBlockIDs
		for _, g := range i.objs("groups") {
			groups = append(groups, GroupBlockIDs{Kind: g.kind("kind"), IDs: g.u64s("ids")})
		}
		r, err := DescriptorIDs(groups, DescriptorLayout{
			NumBlocks: i.u64("num_blocks"), BlockSizeRatio: i.u64("block_size_ratio"),
			BlocksPerLogical: i.u64("blocks_per_logical"), NumAttentionRegions: i.u64("num_attention_regions"),
			NumMambaRegions: i.u64("num_mamba_regions"),
		})
		return out{"ids": r}, err
	},
	"clip_exchange_blocks": func(t *testing.T, i *in) (out, error) {
		r, err := ClipExchangeBlocks(i.u64s("ids"), ExchangeClipParams{
			Kind: i.kind("kind"), HMAEnabled: i.boolOr("hma_enabled", true),
			SlidingWindow: i.u64Or("sliding_window", 0), BlockSize: i.u64Or("block_size", 0),
			CacheMode: i.cacheMode("cache_mode", "none"), NumSpeculativeBlocks: i.u64Or("num_speculative_blocks", 0),
		})
		return out{"ids": r}, err
	},
	"plan_remote_decode_prefill": func(t *testing.T, i *in) (out, error) {
		p, err := PlanRemoteDecodePrefill(i.u64("num_prompt_tokens"), i.u64("local_hit_tokens"), i.u64("block_size"), i.boolean("has_mamba"))
		return out{"num_prompt_tokens": p.NumPromptTokens, "computed_tokens": p.ComputedTokens, "new_tokens": p.NewTokens}, err
	},
	"derive_offload_geometry": func(t *testing.T, i *in) (out, error) {
		var layers []OffloadLayer
		for _, l := range i.objs("layers") {
			layers = append(layers, OffloadLayer{TensorBytes: l.u64("tensor_bytes"), PageBytes: l.u64("page_bytes")})
		}
		g, err := DeriveOffloadGeometry(i.u64("config_num_blocks"), i.u64("gpu_block_size"), i.u64("hash_block_size"), layers)
		return out{"num_blocks": g.NumBlocks, "hash_blocks_per_block": g.HashBlocksPerBlock}, err
	},
}

// decodeNumbers parses JSON keeping integers exact (json.Number).
func decodeNumbers(data []byte, v interface{}) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	d.DisallowUnknownFields()
	return d.Decode(v)
}

// normalise round-trips a Go value through JSON so it compares like the expected value.
func normalise(v interface{}) (interface{}, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var r interface{}
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return r, d.Decode(&r)
}

// compare checks actual against expected: integers exactly, strings, booleans, arrays in
// order, objects key by key (every key of expected must exist in actual).
func compare(path string, expected, actual interface{}) []string {
	switch e := expected.(type) {
	case json.Number:
		a, ok := actual.(json.Number)
		if !ok {
			return []string{fmt.Sprintf("%s: expected %s, got %v", path, e, actual)}
		}
		var eb, ab big.Int
		_, ok1 := eb.SetString(e.String(), 10)
		_, ok2 := ab.SetString(a.String(), 10)
		if !ok1 || !ok2 || eb.Cmp(&ab) != 0 {
			return []string{fmt.Sprintf("%s: expected %s, got %s", path, e, a)}
		}
	case string, bool:
		if expected != actual {
			return []string{fmt.Sprintf("%s: expected %#v, got %#v", path, expected, actual)}
		}
	case []interface{}:
		a, ok := actual.([]interface{})
		if !ok {
			return []string{fmt.Sprintf("%s: expected an array, got %v", path, actual)}
		}
		if len(a) != len(e) {
			return []string{fmt.Sprintf("%s: expected %d elements %v, got %d %v", path, len(e), e, len(a), a)}
		}
		var errs []string
		for k := range e {
			errs = append(errs, compare(fmt.Sprintf("%s[%d]", path, k), e[k], a[k])...)
		}
		return errs
	case map[string]interface{}:
		a, ok := actual.(map[string]interface{})
		if !ok {
			return []string{fmt.Sprintf("%s: expected an object, got %v", path, actual)}
		}
		keys := make([]string, 0, len(e))
		for k := range e {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		var errs []string
		for k := range a {
			if _, ok := e[k]; !ok {
				errs = append(errs, fmt.Sprintf("%s.%s: the vector lacks this output key (vectors state the complete output)", path, k))
			}
		}
		for _, k := range keys {
			av, ok := a[k]
			if !ok {
				errs = append(errs, fmt.Sprintf("%s.%s: the runner does not produce this key", path, k))
				continue
			}
			errs = append(errs, compare(path+"."+k, e[k], av)...)
		}
		return errs
	default:
		return []string{fmt.Sprintf("%s: unsupported expected value %#v (no floats or nulls in vectors)", path, expected)}
	}
	return nil
}

// runCase executes one case and reports every mismatch as a failure of t.
func runCase(t *testing.T, c vectorCase) {
	for _, e := range evalCase(t, c) {
		t.Error(e)
	}
}

// evalCase executes one case and returns every mismatch (empty: the case passed). Unknown ops,
// malformed cases, input keys the op does not define, output keys missing from or added to the
// vector, wrong statuses, missing message parts and runner-side consistency checks (a non-pdkv
// error returned by an op) all fail the case. t only scopes the cleanup of library objects.
func evalCase(t *testing.T, c vectorCase) (failures []string) {
	defer func() {
		if r := recover(); r != nil {
			b, ok := r.(badVector)
			if !ok {
				panic(r)
			}
			failures = append(failures, "malformed case: "+b.msg)
		}
	}()
	op, ok := ops[c.Op]
	if !ok {
		return []string{fmt.Sprintf("unknown op %q: the Go runner cannot execute it", c.Op)}
	}
	if (c.Output == nil) == (c.Error == nil) {
		return []string{"a case needs exactly one of output / error"}
	}
	if c.Input == nil {
		return []string{"case has no input object"}
	}
	input := newIn("input", c.Input)
	got, err := op(t, input)
	if u := input.unused(); len(u) > 0 {
		return []string{fmt.Sprintf("input keys the op does not define: %v", u)}
	}
	if c.Error != nil {
		if err == nil {
			return []string{fmt.Sprintf("expected %s, the call succeeded with %v", c.Error.Status, got)}
		}
		var pe *Error
		if !errors.As(err, &pe) {
			return []string{fmt.Sprintf("expected a *pdkv.Error, got %T: %v", err, err)}
		}
		want, known := StatusFromName(c.Error.Status)
		if !known {
			return []string{fmt.Sprintf("unknown status name %q in the vector", c.Error.Status)}
		}
		if pe.Status != want || pe.Status.String() != c.Error.Status {
			failures = append(failures, fmt.Sprintf("status: expected %s, got %s (%s)", c.Error.Status, pe.Status, pe.Message))
		}
		if !errors.Is(err, &Error{Status: want}) {
			failures = append(failures, fmt.Sprintf("errors.Is does not match the %s sentinel", c.Error.Status))
		}
		for _, s := range c.Error.MessageContains {
			if !strings.Contains(pe.Message, s) {
				failures = append(failures, fmt.Sprintf("message %q does not contain %q", pe.Message, s))
			}
		}
		return failures
	}
	if err != nil {
		return []string{fmt.Sprintf("unexpected error: %v", err)}
	}
	actual, err := normalise(map[string]interface{}(got))
	if err != nil {
		return []string{fmt.Sprintf("cannot normalise the output: %v", err)}
	}
	return compare("output", map[string]interface{}(c.Output), actual)
}

// TestConformance runs every case of every tests/vectors/*.json file through the Go API.
func TestConformance(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "tests", "vectors", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no conformance vectors found under ../tests/vectors")
	}
	total, passed := 0, 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var vf vectorFile
		if err := decodeNumbers(data, &vf); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if vf.Format == nil || *vf.Format != 1 {
			t.Fatalf("%s: unsupported format (want 1)", f)
		}
		if len(vf.Cases) == 0 {
			t.Fatalf("%s: no cases", f)
		}
		seen := map[string]bool{}
		filePassed := 0
		for _, c := range vf.Cases {
			c := c
			if seen[c.Name] {
				t.Errorf("%s: duplicate case name %q", f, c.Name)
			}
			seen[c.Name] = true
			total++
			if t.Run(filepath.Base(f)+"/"+c.Name, func(t *testing.T) { runCase(t, c) }) {
				filePassed++
			}
		}
		passed += filePassed
		t.Logf("%s: %d/%d cases passed", filepath.Base(f), filePassed, len(vf.Cases))
	}
	t.Logf("%d/%d cases passed from %d files", passed, total, len(files))
}

// TestConformanceRunnerRejects makes sure the runner itself can fail: unknown ops, wrong
// outputs, wrong statuses and missing message parts are all reported.
func TestConformanceRunnerRejects(t *testing.T) {
	if _, ok := ops["no_such_op"]; ok {
		t.Fatal("test op name collides")
	}
	exp := map[string]interface{}{"tp_ratio": json.Number("-2"), "xs": []interface{}{json.Number("1")}}
	act, _ := normalise(map[string]interface{}{"tp_ratio": int32(-2), "xs": []uint32{1}})
	if errs := compare("output", exp, act); len(errs) != 0 {
		t.Fatalf("equal values reported different: %v", errs)
	}
	act, _ = normalise(map[string]interface{}{"tp_ratio": int32(2), "xs": []uint32{1, 2}})
	if errs := compare("output", exp, act); len(errs) != 2 {
		t.Fatalf("expected 2 mismatches, got %v", errs)
	}
	act, _ = normalise(map[string]interface{}{"xs": []uint32{1}})
	if errs := compare("output", exp, act); len(errs) != 1 {
		t.Fatalf("a missing key must be reported, got %v", errs)
	}
	if errs := compare("output", map[string]interface{}{"f": 1.5}, map[string]interface{}{"f": 1.5}); len(errs) != 1 {
		t.Fatal("floats must be rejected")
	}
}
