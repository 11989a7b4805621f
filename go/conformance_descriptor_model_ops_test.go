package pdkv

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Runners for the descriptor and model ops of docs/conformance.md: descriptor builders, vLLM
// conv-offset helpers and model description (handshake_validate_engine_ranks and
// transfer_plan_json live with the other planning ops in conformance_planning_ops_test.go).
func init() {
	for name, op := range map[string]opFunc{
		"attention_local_descriptors":   opAttentionLocalDescriptors,
		"attention_remote_descriptors":  opAttentionRemoteDescriptors,
		"attention_split_descriptors":   opAttentionSplitDescriptors,
		"mamba_local_descriptors":       opMambaLocalDescriptors,
		"mamba_remote_descriptors":      opMambaRemoteDescriptors,
		"mamba_local_split_descriptors": opMambaLocalSplitDescriptors,
		"mamba_local_conv_offsets":      opMambaLocalConvOffsets,
		"mamba_remote_conv_offsets":     opMambaRemoteConvOffsets,
		"mamba_ssm_read_range":          opMambaSSMReadRange,
		"model_preset":                  opModelPreset,
		"model_hf_config":               opModelHFConfig,
	} {
		if _, dup := ops[name]; dup {
			panic("duplicate op " + name)
		}
		ops[name] = op
	}
}

// i32 reads a signed 32-bit integer.
func (o *in) i32(key string) int32 {
	v := o.i64(key)
	if v < math.MinInt32 || v > math.MaxInt32 {
		panic(badVector{fmt.Sprintf("input %s.%s = %d does not fit int32", o.path, key, v)})
	}
	return int32(v)
}

// regionsInput reads an array of {base, block_len, num_blocks}.
func regionsInput(i *in, key string) []Region {
	var rs []Region
	for _, r := range i.objs(key) {
		rs = append(rs, Region{Base: r.u64("base"), BlockLen: r.u64("block_len"), NumBlocks: r.u64("num_blocks")})
	}
	return rs
}

// mappingInput reads a mapping object with the tp_mapping input keys.
func mappingInput(i *in, key string) TpMappingParams {
	m := i.obj(key)
	return TpMappingParams{
		LocalTpSize: m.u32("local_tp_size"), LocalTpRank: m.u32("local_tp_rank"), RemoteTpSize: m.u32("remote_tp_size"),
		TotalKVHeads: m.u32("total_kv_heads"), UseMLA: m.boolean("use_mla"), HasMamba: m.boolean("has_mamba"),
	}
}

// newMapping builds a TP mapping closed at the end of the test.
func newMapping(t *testing.T, p TpMappingParams) (*TpMapping, error) {
	m, err := NewTpMapping(p)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, nil
}

// descriptorsOut takes a built list (or its error) and reports it as {"descriptors": [...]}.
func descriptorsOut(l *DescriptorList, err error) (out, error) {
	if err != nil {
		return nil, err
	}
	defer l.Close()
	items, err := l.Items()
	if err != nil {
		return nil, err
	}
	ds := make([]interface{}, len(items))
	for k, d := range items {
		ds[k] = out2{"addr": d.Addr, "len": d.Len}
	}
	return out{"descriptors": ds}, nil
}

func opAttentionLocalDescriptors(t *testing.T, i *in) (out, error) {
	return descriptorsOut(AttentionLocalDescriptors(regionsInput(i, "regions"), i.u32("block_size_ratio")))
}

func opAttentionRemoteDescriptors(t *testing.T, i *in) (out, error) {
	local, remote := regionsInput(i, "local_regions"), regionsInput(i, "remote_regions")
	mp, bsr := mappingInput(i, "mapping"), i.u32("block_size_ratio")
	m, err := newMapping(t, mp)
	if err != nil {
		return nil, err
	}
	return descriptorsOut(AttentionRemoteDescriptors(local, remote, m, bsr))
}

func opAttentionSplitDescriptors(t *testing.T, i *in) (out, error) {
	regions, mp := regionsInput(i, "regions"), mappingInput(i, "mapping")
	bsr, pTpRank := i.u32("block_size_ratio"), i.u32("p_tp_rank")
	m, err := newMapping(t, mp)
	if err != nil {
		return nil, err
	}
	local, err := AttentionLocalDescriptors(regions, bsr)
	if err != nil {
		return nil, err
	}
	defer local.Close()
	return descriptorsOut(AttentionSplitDescriptors(local, m, bsr, pTpRank))
}

func opMambaLocalDescriptors(t *testing.T, i *in) (out, error) {
	name := i.str("model")
	cfg, cfgErr := engineConfig(i.obj("engine"))
	regions, ppl := regionsInput(i, "regions"), i.u64("ppl")
	m, err := presetModel(t, name)
	if err != nil {
		return nil, err
	}
	g, err := presetGeometry(t, m, cfg, cfgErr)
	if err != nil {
		return nil, err
	}
	return descriptorsOut(MambaLocalDescriptors(regions, ppl, g))
}

// readsCase is the read list of a mamba_*_descriptors case with both geometries.
type readsCase struct {
	p, d  *Geometry
	reads *MambaReadList
}

// readsInput reads model, prefill, decode, decode_rank and rule; build makes the read list.
type readsInput struct {
	model      string
	pCfg, dCfg EngineConfig
	pErr, dErr error
	dTpRank    uint32
	rule       MambaReadsRule
}

func readReadsInput(i *in) readsInput {
	r := readsInput{model: i.str("model")}
	r.pCfg, r.pErr = engineConfig(i.obj("prefill"))
	r.dCfg, r.dErr = engineConfig(i.obj("decode"))
	r.dTpRank = i.u32("decode_rank")
	switch rule := i.str("rule"); rule {
	case "pdkv":
		r.rule = MambaReadsPdkv
	case "vllm":
		r.rule = MambaReadsVLLM
	default:
		panic(badVector{fmt.Sprintf("unknown rule %q", rule)})
	}
	return r
}

// build makes both geometries and the read list (closed at the end of the test).
func (r readsInput) build(t *testing.T) (readsCase, error) {
	m, err := presetModel(t, r.model)
	if err != nil {
		return readsCase{}, err
	}
	pg, err := presetGeometry(t, m, r.pCfg, r.pErr)
	if err != nil {
		return readsCase{}, err
	}
	dg, err := presetGeometry(t, m, r.dCfg, r.dErr)
	if err != nil {
		return readsCase{}, err
	}
	l, err := NewMambaReads(pg, dg, r.dTpRank, r.rule)
	if err != nil {
		return readsCase{}, err
	}
	t.Cleanup(func() { _ = l.Close() })
	return readsCase{p: pg, d: dg, reads: l}, nil
}

func opMambaRemoteDescriptors(t *testing.T, i *in) (out, error) {
	ri := readReadsInput(i)
	regions, ppl, pTpRank := regionsInput(i, "p_regions"), i.u64("p_ppl"), i.u32("p_tp_rank")
	rc, err := ri.build(t)
	if err != nil {
		return nil, err
	}
	return descriptorsOut(MambaRemoteDescriptors(regions, ppl, rc.p, rc.reads, pTpRank))
}

func opMambaLocalSplitDescriptors(t *testing.T, i *in) (out, error) {
	ri := readReadsInput(i)
	regions, ppl, pTpRank := regionsInput(i, "d_regions"), i.u64("d_ppl"), i.u32("p_tp_rank")
	rc, err := ri.build(t)
	if err != nil {
		return nil, err
	}
	return descriptorsOut(MambaLocalSplitDescriptors(regions, ppl, rc.d, rc.reads, pTpRank))
}

// caseGeometry reads {model, engine} and builds that geometry (closed at the end of the test).
// Every other key of the case must be read before calling it.
func caseGeometry(t *testing.T, name string, cfg EngineConfig, cfgErr error) (*Geometry, error) {
	m, err := presetModel(t, name)
	if err != nil {
		return nil, err
	}
	return presetGeometry(t, m, cfg, cfgErr)
}

// rangesOut reports byte ranges as {"ranges": [{offset, size}]}.
func rangesOut(rs []ByteRange, err error) (out, error) {
	if err != nil {
		return nil, err
	}
	ro := make([]interface{}, len(rs))
	for k, r := range rs {
		ro[k] = out2{"offset": r.Offset, "size": r.Size}
	}
	return out{"ranges": ro}, nil
}

func opMambaLocalConvOffsets(t *testing.T, i *in) (out, error) {
	name := i.str("model")
	cfg, cfgErr := engineConfig(i.obj("engine"))
	g, err := caseGeometry(t, name, cfg, cfgErr)
	if err != nil {
		return nil, err
	}
	return rangesOut(g.LocalConvOffsets())
}

func opMambaRemoteConvOffsets(t *testing.T, i *in) (out, error) {
	name := i.str("model")
	cfg, cfgErr := engineConfig(i.obj("engine"))
	rank, ratio := i.u32("local_tp_rank"), i.i32("tp_ratio")
	g, err := caseGeometry(t, name, cfg, cfgErr)
	if err != nil {
		return nil, err
	}
	return rangesOut(g.RemoteConvOffsets(rank, ratio))
}

func opMambaSSMReadRange(t *testing.T, i *in) (out, error) {
	name := i.str("model")
	cfg, cfgErr := engineConfig(i.obj("engine"))
	conv, ssm := i.u64("remote_conv_bytes"), i.u64("remote_ssm_bytes")
	rank, ratio := i.u32("local_tp_rank"), i.i32("tp_ratio")
	g, err := caseGeometry(t, name, cfg, cfgErr)
	if err != nil {
		return nil, err
	}
	r, err := g.SSMReadRange(conv, ssm, rank, ratio)
	if err != nil {
		return nil, err
	}
	return out{"offset": r.Offset, "size": r.Size}, nil
}

// modelFields reports the model keys of docs/conformance.md (Describe + LayerCounts +
// Fingerprint; Source is free text and not reported).
func modelFields(m *Model) (out, error) {
	d, err := m.Describe()
	if err != nil {
		return nil, err
	}
	na, nm, err := m.LayerCounts()
	if err != nil {
		return nil, err
	}
	fp, err := m.Fingerprint()
	if err != nil {
		return nil, err
	}
	return out{
		"name": d.Name, "num_kv_heads": d.NumKVHeads, "head_size": d.HeadSize, "head_size_v": d.HeadSizeV,
		"use_mla": d.UseMLA, "sliding_window": d.SlidingWindow, "mamba_type": d.MambaType.String(),
		"mamba_num_heads": d.MambaNumHeads, "mamba_head_dim": d.MambaHeadDim, "mamba_d_state": d.MambaDState,
		"mamba_n_groups": d.MambaNGroups, "mamba_d_inner": d.MambaDInner, "mamba_conv_kernel": d.MambaConvKernel,
		"mamba_chunk_size": deref(d.MambaChunkSize, 0), "mamba_conv_rows_include_spec": d.MambaConvRowsIncludeSpec,
		// The vectors write an unset optional field as 0.
		"dtype_bytes": d.DtypeBytes, "default_ssm_dtype_bytes": deref(d.DefaultSSMDtypeBytes, 0), "layer_pattern": d.LayerPattern,
		"num_attention_layers": na, "num_mamba_layers": nm, "model_fingerprint": fmt.Sprintf("%016x", fp),
	}, nil
}

func opModelPreset(t *testing.T, i *in) (out, error) {
	m, err := presetModel(t, i.str("model"))
	if err != nil {
		return nil, err
	}
	return modelFields(m)
}

func opModelHFConfig(t *testing.T, i *in) (out, error) {
	text := i.str("json")
	// An absent name is NULL in the C API; the Go API passes NULL for "" (a present but empty
	// name would be indistinguishable, so the runner refuses it rather than run it differently).
	name := ""
	if i.has("name") {
		if name = i.str("name"); name == "" {
			panic(badVector{"input name is empty: the Go API cannot pass an empty (non-NULL) name"})
		}
	}
	m, err := ModelFromHFConfigJSON([]byte(text), name)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	return modelFields(m)
}

// TestConformanceRunnerFailsCases feeds evalCase cases that must fail (unknown op, unknown
// input key, missing or extra output key, wrong value, status or message, floats, item message
// checks, a changed descriptor or plan JSON line) and cases that must pass.
func TestConformanceRunnerFailsCases(t *testing.T) {
	eval := func(js string) []string {
		t.Helper()
		var c vectorCase
		if err := decodeNumbers([]byte(js), &c); err != nil {
			t.Fatalf("bad test case %s: %v", js, err)
		}
		return evalCase(t, c)
	}
	fails := func(js, want string) {
		t.Helper()
		got := eval(js)
		if len(got) == 0 {
			t.Errorf("case passed, expected a failure containing %q: %s", want, js)
			return
		}
		for _, g := range got {
			if strings.Contains(g, want) {
				return
			}
		}
		t.Errorf("failures %q do not mention %q", got, want)
	}
	passes := func(js string) {
		t.Helper()
		if got := eval(js); len(got) != 0 {
			t.Errorf("expected a pass, got %q", got)
		}
	}
	fails(`{"name":"x","op":"no_such_op","input":{},"output":{}}`, "unknown op")
	fails(`{"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":1,"remote_tp_size":1}}`, "exactly one")
	fails(`{"name":"x","op":"pdkv_physical_head_range","input":{"tp_size":1,"tp_rank":0,"total_kv_heads":2},"output":{"begin":0}}`,
		"the vector lacks this output key")
	fails(`{"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":1,"remote_tp_size":1},"output":{"out":1,"x":2}}`, "does not produce this key")
	fails(`{"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":1,"remote_tp_size":1,"typo":3},"output":{"out":1}}`, "input.typo")
	fails(`{"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":4,"remote_tp_size":2},"output":{"out":3}}`, "expected 3, got 2")
	fails(`{"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":3},"error":{"status":"PDKV_ERR_TP_NOT_DIVISIBLE","message_contains":["zzz"]}}`,
		`does not contain "zzz"`)
	fails(`{"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":3},"error":{"status":"PDKV_ERR_OVERFLOW"}}`,
		"expected PDKV_ERR_OVERFLOW")
	fails(`{"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":4,"remote_tp_size":2},"error":{"status":"PDKV_ERR_OVERFLOW"}}`, "succeeded")
	fails(`{"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":2,"remote_tp_size":1.5},"output":{"out":1}}`, "malformed case")
	passes(`{"name":"x","op":"pdkv_tp_ratio","input":{"local_tp_size":4,"remote_tp_size":2},"output":{"out":2}}`)

	// item_messages_contain: a missing substring or a count different from the item count fails.
	ranks := `"ranks":[{"model":"nemotron-3-nano-30b","engine":{"tp_size":2},"layout":{"engine_id":"p"}},
		{"model":"nemotron-3-nano-30b","engine":{"tp_size":2},"layout":{"engine_id":"q","tp_rank":1}}]`
	items := `"output":{"items":[{"status":"PDKV_ERR_INCOMPATIBLE","field":"engine_id"}]}`
	fails(`{"name":"x","op":"handshake_validate_engine_ranks","input":{`+ranks+`,"item_messages_contain":[["zzz"]]},`+items+`}`,
		`does not contain "zzz"`)
	fails(`{"name":"x","op":"handshake_validate_engine_ranks","input":{`+ranks+`,"item_messages_contain":[]},`+items+`}`,
		"0 entries for 1 items")
	fails(`{"name":"x","op":"handshake_validate_engine_ranks","input":{`+ranks+`,"item_messages_contain":[[1]]},`+items+`}`,
		"malformed case")
	passes(`{"name":"x","op":"handshake_validate_engine_ranks","input":{` + ranks + `,"item_messages_contain":[["p vs q"]]},` + items + `}`)
	passes(`{"name":"x","op":"handshake_validate_engine_ranks","input":{` + ranks + `},` + items + `}`)
	side := func(id string) string {
		return `{"model":"nemotron-3-nano-30b","engine":{"tp_size":2},"layout":{"engine_id":"` + id + `"}}`
	}
	fails(`{"name":"x","op":"handshake_validate","input":{"local":`+side("d")+`,"remote":`+side("p")+`,"item_messages_contain":[["x"]]},
		"output":{"items":[],"compatible":true}}`, "1 entries for 0 items")

	// A descriptor list that differs in one address fails.
	fails(`{"name":"x","op":"attention_local_descriptors","input":{"regions":[{"base":0,"block_len":16,"num_blocks":2}],"block_size_ratio":1},
		"output":{"descriptors":[{"addr":0,"len":16},{"addr":32,"len":16}]}}`, "output.descriptors[1].addr")
	passes(`{"name":"x","op":"attention_local_descriptors","input":{"regions":[{"base":0,"block_len":16,"num_blocks":2}],"block_size_ratio":1},
		"output":{"descriptors":[{"addr":0,"len":16},{"addr":16,"len":16}]}}`)
	fails(`{"name":"x","op":"attention_local_descriptors","input":{"regions":[{"base":0,"block_len":16,"num_blocks":2,"ppl":1}],"block_size_ratio":1},
		"output":{"descriptors":[{"addr":0,"len":16},{"addr":16,"len":16}]}}`, "input.regions[0].ppl")
	fails(`{"name":"x","op":"mamba_remote_conv_offsets","input":{"model":"nemotron-3-nano-30b","engine":{"tp_size":2},
		"local_tp_rank":0,"tp_ratio":4294967297},"output":{"ranges":[]}}`, "does not fit int32")
	fails(`{"name":"x","op":"model_hf_config","input":{"json":"{}","name":""},"output":{}}`, "empty")

	// A changed line of a plan's JSON dump fails.
	plan := `"input":{"model":"nemotron-3-nano-30b","decode_rank":0,"prefill":{"engine":{"tp_size":2},"layout":{"engine_id":"p"}},
		"decode":{"engine":{"tp_size":2},"layout":{"engine_id":"d"}},"groups":[{"kind":"attention","local_blocks":[1],"remote_blocks":[2],"remote_computed_tokens":16}]}`
	got, err := runOp(t, "transfer_plan_json", plan[len(`"input":`):])
	if err != nil {
		t.Fatal(err)
	}
	lines := got["lines"].([]interface{})
	if len(lines) < 3 || lines[0] != "{" || lines[len(lines)-1] != "}" || lines[3] != `  "d_tp_rank": 0,` {
		t.Fatalf("plan JSON lines %q", lines)
	}
	good, _ := json.Marshal(lines)
	passes(`{"name":"x","op":"transfer_plan_json",` + plan + `,"output":{"lines":` + string(good) + `}}`)
	lines[3] = `  "d_tp_rank": 1,`
	bad, _ := json.Marshal(lines)
	fails(`{"name":"x","op":"transfer_plan_json",`+plan+`,"output":{"lines":`+string(bad)+`}}`, "output.lines[3]")

	// The optional transfer_plan inputs: exactly one of model / hf_config, prefill.ranks (a typo
	// of it, a P rank left out, its order).
	mla := `"{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 2, \"kv_lora_rank\": 512, \"qk_rope_head_dim\": 64}"`
	rest := `"decode_rank":1,"prefill":{"engine":{"tp_size":2,"backend":"flashmla"},"layout":{"engine_id":"p"}},
		"decode":{"engine":{"tp_size":2,"backend":"flashmla"},"layout":{"engine_id":"d"}},
		"groups":[{"kind":"attention","local_blocks":[1],"remote_blocks":[2],"remote_computed_tokens":16}]`
	fails(`{"name":"x","op":"transfer_plan","input":{`+rest+`},"output":{}}`, "exactly one of input.model / input.hf_config")
	fails(`{"name":"x","op":"transfer_plan","input":{"model":"nemotron-3-nano-30b","hf_config":`+mla+`,`+rest+`},"output":{}}`,
		"exactly one of input.model / input.hf_config")
	fromHF, err := runOp(t, "transfer_plan", `{"hf_config":`+mla+`,`+rest+`}`)
	if err != nil {
		t.Fatal(err)
	}
	// MLA: every D rank reads the whole (replicated) latent of one P rank; 576 B/token bf16, 16 tokens.
	if fromHF["bytes"] != json.Number("18432") || fromHF["attention_bytes"] != json.Number("18432") {
		t.Fatalf("hf_config MLA plan bytes %v / %v", fromHF["bytes"], fromHF["attention_bytes"])
	}
	byRanks := func(ranks string) string {
		return `{"model":"nemotron-3-nano-30b","decode_rank":1,"prefill":{"engine":{"tp_size":2},"layout":{"engine_id":"p"},` + ranks + `},
			"decode":{"engine":{"tp_size":2},"layout":{"engine_id":"d"}},"groups":[{"kind":"attention","local_blocks":[1],"remote_blocks":[2],"remote_computed_tokens":16}]}`
	}
	fails(`{"name":"x","op":"transfer_plan","input":`+byRanks(`"rank":[0,1]`)+`,"output":{}}`, "input.prefill.rank")
	fails(`{"name":"x","op":"transfer_plan","input":`+byRanks(`"ranks":[4294967296]`)+`,"output":{}}`, "does not fit uint32")
	passes(`{"name":"x","op":"transfer_plan","input":` + byRanks(`"ranks":[0]`) + `,"error":{"status":"PDKV_ERR_NOT_FOUND","message_contains":["P rank 1"]}}`)
	all, err := runOp(t, "transfer_plan", byRanks(`"ranks":[0,1]`))
	if err != nil {
		t.Fatal(err)
	}
	swapped, err := runOp(t, "transfer_plan", byRanks(`"ranks":[1,0]`))
	if err != nil {
		t.Fatal(err)
	}
	if errs := compare("transfer_plan", map[string]interface{}(all), map[string]interface{}(swapped)); len(errs) > 0 {
		t.Errorf("prefill.ranks order changed the plan: %v", errs)
	}
	if all["bytes"] == json.Number("0") {
		t.Fatalf("plan from P rank 1 is empty: %v", all)
	}
}

// TestConformanceOpsMatchDocs checks that the runner executes exactly the ops of the table in
// docs/conformance.md: an op documented but missing here, or run here but undocumented, fails.
func TestConformanceOpsMatchDocs(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "docs", "conformance.md"))
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, line := range strings.Split(string(data), "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		rest := line[len("| `"):]
		if end := strings.Index(rest, "`"); end > 0 {
			documented[rest[:end]] = true
		}
	}
	if len(documented) < 30 {
		t.Fatalf("only %d ops found in the docs table", len(documented))
	}
	for op := range documented {
		if _, ok := ops[op]; !ok {
			t.Errorf("documented op %q has no Go runner", op)
		}
	}
	for op := range ops {
		if !documented[op] && !plainOps[op] { // plain ops: documented once, by their rule
			t.Errorf("Go runner op %q is not in docs/conformance.md", op)
		}
	}
}
