package pdkv

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"testing"
)

// Runners for the planning ops of docs/conformance.md (trimming, scheduler helpers, zeroing,
// Mamba descriptor ids, CRC-32C, metadata, handshake, engine-rank validation, transfer plans and
// their JSON form).
func init() {
	for name, op := range map[string]opFunc{
		"trim_group":                      opTrimGroup,
		"mamba_aligned_split_v0604":       opAlignedSplitV0604,
		"mamba_aligned_split":             opAlignedSplit,
		"truncate_for_remote_decode":      opTruncate,
		"receive_zero_ranges":             opReceiveZeroRanges,
		"uncovered_token_ranges":          opUncoveredTokenRanges,
		"mamba_descriptor_ids":            opMambaDescriptorIDs,
		"crc32c":                          opCRC32C,
		"metadata_roundtrip":              opMetadataRoundtrip,
		"metadata_decode":                 opMetadataDecode,
		"handshake_validate":              opHandshakeValidate,
		"transfer_plan":                   opTransferPlan,
		"transfer_plan_json":              opTransferPlanJSON,
		"handshake_validate_engine_ranks": opHandshakeValidateEngineRanks,
		"pipeline_stage_pairs":            opPipelineStagePairs,
		"permute_kv_block":                opPermuteKVBlock,
	} {
		if _, dup := ops[name]; dup {
			panic("duplicate op " + name)
		}
		ops[name] = op
	}
}

// i64 reads a signed integer.
func (o *in) i64(key string) int64 {
	b := number(o.path+"."+key, o.raw(key))
	if !b.IsInt64() {
		panic(badVector{fmt.Sprintf("input %s.%s = %s does not fit int64", o.path, key, b)})
	}
	return b.Int64()
}

// trimInput reads the trim_group input keys.
func trimInput(i *in) GroupTrimInput {
	t := GroupTrimInput{
		Kind:                    i.kind("kind"),
		CacheMode:               i.cacheMode("cache_mode", "none"),
		LocalBlocks:             i.u64s("local_blocks"),
		RemoteBlocks:            i.u64s("remote_blocks"),
		LocalTokensPerBlock:     i.u64Opt("local_tokens_per_block"),
		RemoteTokensPerBlock:    i.u64Opt("remote_tokens_per_block"),
		RemoteComputedTokens:    i.u64Or("remote_computed_tokens", 0),
		LocalHitTokens:          i.u64Or("local_hit_tokens", 0),
		SlidingWindow:           i.u64Or("sliding_window", 0),
		RemoteFirstBlock:        i.u64Or("remote_first_block", 0),
		LocalKernelBlocksPerID:  i.u64Opt("local_kernel_blocks_per_id"),
		RemoteKernelBlocksPerID: i.u64Opt("remote_kernel_blocks_per_id"),
		LocalFirstBlock:         i.u64Opt("local_first_block"),
	}
	return t
}

func zeroOut(z []ZeroRange) []interface{} {
	out := make([]interface{}, len(z))
	for k, r := range z {
		out[k] = out2{"block": r.Block, "token_begin": r.TokenBegin, "token_end": r.TokenEnd}
	}
	return out
}

// out2 is a nested output object.
type out2 = map[string]interface{}

func opTrimGroup(t *testing.T, i *in) (out, error) {
	g, err := NewGroupTrim(trimInput(i))
	if err != nil {
		return nil, err
	}
	defer g.Close()
	kind, tokens, err := g.Summary()
	if err != nil {
		return nil, err
	}
	runs, err := g.Runs()
	if err != nil {
		return nil, err
	}
	states, err := g.States()
	if err != nil {
		return nil, err
	}
	zero, err := g.ZeroRanges()
	if err != nil {
		return nil, err
	}
	unfilled, err := g.UnfilledStates()
	if err != nil {
		return nil, err
	}
	ro := make([]interface{}, len(runs))
	for k, r := range runs {
		ro[k] = out2{"local_block": r.LocalBlock, "local_token_begin": r.LocalTokenBegin, "remote_block": r.RemoteBlock,
			"remote_token_begin": r.RemoteTokenBegin, "num_tokens": r.NumTokens}
	}
	so := make([]interface{}, len(states))
	for k, s := range states {
		so[k] = out2{"local_block": s.LocalBlock, "remote_block": s.RemoteBlock, "tokens": s.Tokens}
	}
	return out{"kind": kind.String(), "transferred_tokens": tokens, "runs": ro, "states": so,
		"zero_ranges": zeroOut(zero), "unfilled_states": unfilled}, nil
}

func opAlignedSplitV0604(t *testing.T, i *in) (out, error) {
	n, err := MambaAlignedSplitV0604(AlignedSplitV0604Input{
		NumComputedTokens: i.u64Or("num_computed_tokens", 0), NumNewLocalComputedTokens: i.u64Or("num_new_local_computed_tokens", 0),
		NumExternalComputedTokens: i.u64Or("num_external_computed_tokens", 0), NumNewTokens: i.u64Or("num_new_tokens", 0),
		NumPromptTokens: i.u64Or("num_prompt_tokens", 0), NumTokens: i.u64Or("num_tokens", 0), BlockSize: i.u64Or("block_size", 0),
		UseEagle: i.boolOr("use_eagle", false), LoadKVAsync: i.boolOr("load_kv_async", false),
	})
	return out{"num_new_tokens": n}, err
}

func opAlignedSplit(t *testing.T, i *in) (out, error) {
	n, err := MambaAlignedSplit(AlignedSplitInput{
		Start: i.u64Or("start", 0), NumNewTokens: i.u64Or("num_new_tokens", 0), NumPromptTokens: i.u64Or("num_prompt_tokens", 0),
		NumTokens: i.u64Or("num_tokens", 0), BlockSize: i.u64Or("block_size", 0), FloorUnit: i.u64Opt("floor_unit"),
		TailHashBlockSize: i.u64Opt("tail_hash_block_size"), SharedPrefixTokens: i.u64Or("shared_prefix_tokens", 0),
		MaxNumScheduledTokens: i.u64Opt("max_num_scheduled_tokens"), LongPrefillTokenThreshold: i.u64Opt("long_prefill_token_threshold"),
		UseEagle: i.boolOr("use_eagle", false), LoadKVAsync: i.boolOr("load_kv_async", false),
		DeferOversizedBlock: i.boolOr("defer_oversized_block", false),
	})
	return out{"num_new_tokens": n}, err
}

func opTruncate(t *testing.T, i *in) (out, error) {
	r, err := TruncateForRemoteDecode(RemoteDecodePrefill{
		NumPromptTokens: i.u64("num_prompt_tokens"), MaxTokens: i.u64("max_tokens"), Truncated: i.boolOr("truncated", false),
	}, i.boolean("has_mamba"))
	return out{"num_prompt_tokens": r.NumPromptTokens, "max_tokens": r.MaxTokens, "truncated": r.Truncated}, err
}

func opReceiveZeroRanges(t *testing.T, i *in) (out, error) {
	z, err := ReceiveZeroRanges(i.u64s("local_blocks"), i.u64("tokens_per_block"), i.u64("block_size_ratio"), i.u64("remote_kernel_len"))
	return out{"zero_ranges": zeroOut(z)}, err
}

func opUncoveredTokenRanges(t *testing.T, i *in) (out, error) {
	var written []TokenInterval
	for _, w := range i.objs("written") {
		written = append(written, TokenInterval{Begin: w.u64("begin"), End: w.u64("end")})
	}
	z, err := UncoveredTokenRanges(i.u64s("local_blocks"), i.u64("first_block_index"), i.u64("tokens_per_block"), i.u64("held_tokens"), written)
	return out{"zero_ranges": zeroOut(z)}, err
}

func opMambaDescriptorIDs(t *testing.T, i *in) (out, error) {
	ids, err := MambaDescriptorIDs(i.u64s("ids"), i.u64("num_logical_blocks"), i.u64("num_regions"), i.u64("descs_per_region"), i.u64("first_id"))
	return out{"ids": ids}, err
}

func hexInput(i *in) []byte {
	b, err := hex.DecodeString(i.str("hex"))
	if err != nil {
		panic(badVector{fmt.Sprintf("input hex: %v", err)})
	}
	return b
}

func opCRC32C(t *testing.T, i *in) (out, error) {
	c, err := CRC32C(hexInput(i))
	return out{"crc32c": c}, err
}

// layoutInput reads an optional layout object (defaults are pdkv_engine_layout_init's).
func layoutInput(i *in, key string) EngineLayout {
	if !i.has(key) {
		return DefaultEngineLayout()
	}
	return layoutFrom(i.obj(key))
}

// layoutFrom reads a layout object (defaults are pdkv_engine_layout_init's).
func layoutFrom(o *in) EngineLayout {
	l := DefaultEngineLayout()
	l.EngineID = o.strOr("engine_id", l.EngineID)
	l.TpRank = o.u32Or("tp_rank", l.TpRank)
	l.NumLogicalBlocks = o.u64Or("num_logical_blocks", l.NumLogicalBlocks)
	l.NumRegions = o.u32Or("num_regions", l.NumRegions)
	l.Base = o.u64Or("base", l.Base)
	if o.has("region_bases") {
		l.RegionBases = o.u64s("region_bases")
	}
	switch kv := o.strOr("kv_layout", "HND"); kv {
	case "HND":
		l.KVLayout = KVLayoutHND
	case "NHD":
		l.KVLayout = KVLayoutNHD
	default:
		panic(badVector{fmt.Sprintf("unknown kv_layout %q", kv)})
	}
	if o.has("prefix_caching") {
		l.PrefixCaching = Ptr(o.i64("prefix_caching") != 0)
	}
	if o.has("region_kinds") {
		for k, v := range o.array("region_kinds") {
			name, _ := v.(string)
			kind, ok := regionKindByName[name]
			if !ok {
				panic(badVector{fmt.Sprintf("input region_kinds[%d] = %v is not a region kind", k, v)})
			}
			l.RegionKinds = append(l.RegionKinds, kind)
		}
	}
	l.PpSize = o.u32Or("pp_size", l.PpSize)
	l.PpRank = o.u32Or("pp_rank", l.PpRank)
	l.LayerBegin = o.u32Or("layer_begin", l.LayerBegin)
	l.LayerEnd = o.u32Opt("layer_end")
	return l
}

// opPipelineStagePairs pairs the D stages with the P stages and reports, per P stage, the
// notifications each of its ranks waits for.
func opPipelineStagePairs(t *testing.T, i *in) (out, error) {
	model := modelInput(i)
	po, do := i.obj("prefill"), i.obj("decode")
	pCfg, pErr := engineConfig(po.obj("engine"))
	dCfg, dErr := engineConfig(do.obj("engine"))
	var pl, dl []EngineLayout
	for _, o := range po.objs("stages") {
		pl = append(pl, layoutFrom(o))
	}
	for _, o := range do.objs("stages") {
		dl = append(dl, layoutFrom(o))
	}
	m, err := model.open(t)
	if err != nil {
		return nil, err
	}
	if pErr != nil {
		return nil, pErr
	}
	if dErr != nil {
		return nil, dErr
	}
	build := func(cfg EngineConfig, ls []EngineLayout) ([]*EngineMetadata, error) {
		var mds []*EngineMetadata
		for _, l := range ls {
			md, err := modelMetadata(t, m, cfg, l)
			if err != nil {
				return nil, err
			}
			mds = append(mds, md)
		}
		return mds, nil
	}
	p, err := build(pCfg, pl)
	if err != nil {
		return nil, err
	}
	d, err := build(dCfg, dl)
	if err != nil {
		return nil, err
	}
	pairs, err := PipelineStagePairs(p, d)
	if err != nil {
		return nil, err
	}
	po2 := make([]interface{}, len(pairs))
	for k, x := range pairs {
		po2[k] = out2{"p_pp_rank": x.PPpRank, "d_pp_rank": x.DPpRank, "layer_begin": x.LayerBegin, "layer_end": x.LayerEnd}
	}
	info, err := p[0].Info()
	if err != nil {
		return nil, err
	}
	notes := make([]uint32, info.PpSize)
	for s := range notes {
		if notes[s], err = PipelineNotificationsExpected(pairs, uint32(s), pCfg.TpSize, dCfg.TpSize); err != nil {
			return nil, err
		}
	}
	return out{"pairs": po2, "notifications": notes}, nil
}

// regionKindByName spells region kinds as the vectors do.
var regionKindByName = map[string]RegionKind{"attention": RegionAttention, "mamba": RegionMamba, "mla": RegionMLA}

// modelSpec is the `model` input: a preset name, or a pure-attention model described field by
// field (docs/conformance.md), read before any library call.
type modelSpec struct {
	preset string
	desc   *ModelDesc
}

func modelInput(o *in) modelSpec {
	if _, ok := o.raw("model").(string); ok {
		return modelSpec{preset: o.str("model")}
	}
	d := o.obj("model")
	desc := ModelDesc{Name: d.str("name"), NumKVHeads: d.u32("num_kv_heads"), HeadSize: d.u32("head_size"),
		HeadSizeV: d.u32("head_size_v"), UseMLA: d.boolean("use_mla"), DtypeBytes: d.u32("dtype_bytes"),
		LayerPattern: d.str("layer_pattern"), MLAHeadSize: d.u32("mla_head_size")}
	return modelSpec{desc: &desc}
}

// open creates the model (closed at the end of the test).
func (s modelSpec) open(t *testing.T) (*Model, error) {
	if s.desc == nil {
		return presetModel(t, s.preset)
	}
	m, err := NewModel(*s.desc)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = m.Close() })
	return m, nil
}

// metadataFields reports a metadata's fields as the metadata ops define them.
func metadataFields(md *EngineMetadata, encoded []byte) (out, error) {
	info, err := md.Info()
	if err != nil {
		return nil, err
	}
	regions, err := md.Regions()
	if err != nil {
		return nil, err
	}
	proj, err := md.ConvProjectionBytes()
	if err != nil {
		return nil, err
	}
	names := map[KVLayout]string{KVLayoutHND: "HND", KVLayoutNHD: "NHD"}
	convs := map[ConvLayout]string{ConvLayoutDS: "DS", ConvLayoutSD: "SD"}
	modes := map[MambaCacheMode]string{MambaCacheNone: "none", MambaCacheAlign: "align", MambaCacheAll: "all"}
	kinds := map[RegionKind]string{RegionAttention: "attention", RegionMamba: "mamba", RegionMLA: "mla"}
	ro := make([]interface{}, len(regions))
	for k, r := range regions {
		ro[k] = out2{"base": r.Base, "block_len": r.BlockLen, "num_blocks": r.NumBlocks, "kind": kinds[r.Kind], "layer": r.Layer}
	}
	if len(encoded) < 16 {
		return nil, fmt.Errorf("encoding of %d bytes has no 16-byte header", len(encoded))
	}
	crc, err := CRC32C(encoded[16:])
	if err != nil {
		return nil, err
	}
	return out{
		"engine_id": info.EngineID, "tp_size": info.TpSize, "tp_rank": info.TpRank, "kv_layout": names[info.KVLayout],
		"conv_layout": convs[info.ConvLayout], "logical_block_size": info.LogicalBlockSize, "kernel_block_size": info.KernelBlockSize,
		"physical_blocks_per_logical": info.PhysicalBlocksPerLogical, "num_kernel_blocks": info.NumKernelBlocks, "regions": ro,
		"mamba_type": info.MambaType.String(), "conv_bytes": info.ConvBytes, "ssm_bytes": info.SSMBytes,
		"conv_projection_bytes": proj, "attention_bytes_per_token": info.AttentionBytesPerToken, "use_mla": info.UseMLA,
		"total_kv_heads": info.TotalKVHeads, "prefix_caching": info.PrefixCaching, "cache_mode": modes[info.CacheMode],
		"model_fingerprint": fmt.Sprintf("%016x", info.ModelFingerprint), "encoded_length": len(encoded), "payload_crc32c": crc,
		"pp_size": info.PpSize, "pp_rank": info.PpRank, "layer_begin": info.LayerBegin, "layer_end": info.LayerEnd,
	}, nil
}

// buildMetadata builds one rank's metadata of a model input (closed at the end of the test).
func buildMetadata(t *testing.T, model modelSpec, cfg EngineConfig, cfgErr error, layout EngineLayout) (*EngineMetadata, error) {
	if cfgErr != nil {
		return nil, cfgErr
	}
	m, err := model.open(t)
	if err != nil {
		return nil, err
	}
	return modelMetadata(t, m, cfg, layout)
}

// modelMetadata builds one rank's metadata of an open model (closed at the end of the test).
func modelMetadata(t *testing.T, m *Model, cfg EngineConfig, layout EngineLayout) (*EngineMetadata, error) {
	md, err := EngineMetadataFromModel(m, cfg, layout)
	if err != nil {
		return nil, err
	}
	t.Cleanup(func() { _ = md.Close() })
	return md, nil
}

func opMetadataRoundtrip(t *testing.T, i *in) (out, error) {
	name := modelInput(i)
	cfg, cfgErr := engineConfig(i.obj("engine"))
	layout := layoutInput(i, "layout")
	md, err := buildMetadata(t, name, cfg, cfgErr, layout)
	if err != nil {
		return nil, err
	}
	enc, err := md.Encode()
	if err != nil {
		return nil, err
	}
	buf, err := md.AppendEncoded(nil)
	if err != nil {
		return nil, err
	}
	if string(buf) != string(enc) {
		return nil, fmt.Errorf("caller-buffer encoding (%d B) differs from the owned one (%d B)", len(buf), len(enc))
	}
	back, err := DecodeEngineMetadata(enc)
	if err != nil {
		return nil, err
	}
	defer back.Close()
	if eq, err := back.Equal(md); err != nil || !eq {
		return nil, fmt.Errorf("decoded metadata is not equal to the original (%v)", err)
	}
	o, err := metadataFields(back, enc)
	if err != nil {
		return nil, err
	}
	o["hex"] = hex.EncodeToString(enc)
	return o, nil
}

func opMetadataDecode(t *testing.T, i *in) (out, error) {
	data := hexInput(i)
	md, err := DecodeEngineMetadata(data)
	if err != nil {
		return nil, err
	}
	defer md.Close()
	return metadataFields(md, data)
}

// sideSpec is a {model, engine, layout} input object, read before any library call.
type sideSpec struct {
	model  modelSpec
	cfg    EngineConfig
	cfgErr error
	layout EngineLayout
}

// readSide reads every key of a {model, engine, layout} object.
func readSide(o *in) sideSpec {
	s := sideSpec{model: modelInput(o)}
	s.cfg, s.cfgErr = engineConfig(o.obj("engine"))
	s.layout = layoutInput(o, "layout")
	return s
}

// build builds the side's metadata (closed at the end of the test).
func (s sideSpec) build(t *testing.T) (*EngineMetadata, error) {
	return buildMetadata(t, s.model, s.cfg, s.cfgErr, s.layout)
}

// itemMessagesInput reads the optional item_messages_contain input: one array of strings per
// report item (nil when absent).
func itemMessagesInput(i *in) [][]string {
	if !i.has("item_messages_contain") {
		return nil
	}
	a := i.array("item_messages_contain")
	want := make([][]string, len(a))
	for k, v := range a {
		sub, ok := v.([]interface{})
		if !ok {
			panic(badVector{fmt.Sprintf("input item_messages_contain[%d] is not an array", k)})
		}
		want[k] = []string{}
		for j, x := range sub {
			str, ok := x.(string)
			if !ok {
				panic(badVector{fmt.Sprintf("input item_messages_contain[%d][%d] is not a string", k, j)})
			}
			want[k] = append(want[k], str)
		}
	}
	return want
}

// reportItems is the {status, field} output of a handshake report. When want is not nil
// (item_messages_contain was given) it must have one entry per item and each item's Message
// must contain every string of its entry; a mismatch is returned as a (non-pdkv) error that
// fails the case.
func reportItems(items []Incompatibility, want [][]string) ([]interface{}, error) {
	if want != nil && len(want) != len(items) {
		return nil, fmt.Errorf("item_messages_contain has %d entries for %d items", len(want), len(items))
	}
	io := make([]interface{}, len(items))
	for k, it := range items {
		if want != nil {
			for _, sub := range want[k] {
				if !strings.Contains(it.Message, sub) {
					return nil, fmt.Errorf("item %d message %q does not contain %q", k, it.Message, sub)
				}
			}
		}
		io[k] = out2{"status": it.Status.String(), "field": it.Field}
	}
	return io, nil
}

func opHandshakeValidate(t *testing.T, i *in) (out, error) {
	// Read both sides' keys before the first call that may fail.
	ls, rs := readSide(i.obj("local")), readSide(i.obj("remote"))
	want := itemMessagesInput(i)
	local, err := ls.build(t)
	if err != nil {
		return nil, err
	}
	remote, err := rs.build(t)
	if err != nil {
		return nil, err
	}
	items, err := HandshakeValidate(local, remote)
	if err != nil {
		return nil, err
	}
	io, err := reportItems(items, want)
	if err != nil {
		return nil, err
	}
	rerr := HandshakeRequireCompatible(local, remote)
	if rerr != nil && !errors.Is(rerr, ErrIncompatible) {
		return nil, fmt.Errorf("require_compatible returned an unexpected error: %w", rerr)
	}
	if (rerr == nil) != (len(items) == 0) {
		return nil, fmt.Errorf("require_compatible (%v) disagrees with the report (%d items)", rerr, len(items))
	}
	return out{"items": io, "compatible": rerr == nil}, nil
}

func opHandshakeValidateEngineRanks(t *testing.T, i *in) (out, error) {
	var specs []sideSpec
	for _, r := range i.objs("ranks") {
		specs = append(specs, readSide(r))
	}
	want := itemMessagesInput(i)
	ranks := make([]*EngineMetadata, 0, len(specs))
	for _, s := range specs {
		md, err := s.build(t)
		if err != nil {
			return nil, err
		}
		ranks = append(ranks, md)
	}
	items, err := HandshakeValidateEngineRanks(ranks)
	if err != nil {
		return nil, err
	}
	io, err := reportItems(items, want)
	if err != nil {
		return nil, err
	}
	return out{"items": io}, nil
}

func opTransferPlan(t *testing.T, i *in) (out, error) { return transferPlanCase(t, i, false) }

func opTransferPlanJSON(t *testing.T, i *in) (out, error) { return transferPlanCase(t, i, true) }

// transferPlanCase builds, compiles and re-validates the plan of a transfer_plan case; asJSON
// returns the transfer_plan_json output (the dump split at newlines, after checking that the
// caller-buffer form gives the same text) instead of the transfer_plan one.
func transferPlanCase(t *testing.T, i *in, asJSON bool) (out, error) {
	// Every key is read before the first library call, so a typo fails the case even when the
	// call fails first. The model is a preset name (`model`) or config.json text (`hf_config`):
	// exactly one of the two.
	if i.has("model") == i.has("hf_config") {
		panic(badVector{"transfer_plan needs exactly one of input.model / input.hf_config"})
	}
	var model modelSpec
	var hfConfig string
	fromHF := i.has("hf_config")
	if !fromHF {
		model = modelInput(i)
	} else {
		hfConfig = i.str("hf_config")
	}
	po, do := i.obj("prefill"), i.obj("decode")
	pCfg, pErr := engineConfig(po.obj("engine"))
	dCfg, dErr := engineConfig(do.obj("engine"))
	pLayout, dLayout := layoutInput(po, "layout"), layoutInput(do, "layout")
	// Optional prefill.ranks: the P ranks whose metadata the context receives, in that order
	// (default: every rank 0..P_TP-1, filled in once the engine config is known).
	var pRanks []uint32
	hasPRanks := po.has("ranks")
	if hasPRanks {
		pRanks = []uint32{}
		for k, r := range po.u64s("ranks") {
			if r > math.MaxUint32 {
				panic(badVector{fmt.Sprintf("input prefill.ranks[%d] = %d does not fit uint32", k, r)})
			}
			pRanks = append(pRanks, uint32(r))
		}
	}
	dTpRank := i.u32("decode_rank")
	permute := i.has("permute_on_receive") && i.boolean("permute_on_receive")
	var groups []PlanGroup
	for _, g := range i.objs("groups") {
		pg := PlanGroup{Trim: trimInput(g)}
		if g.has("regions") {
			for _, r := range g.u64s("regions") {
				pg.Regions = append(pg.Regions, uint32(r))
			}
		}
		if g.has("layers") {
			for _, l := range g.u64s("layers") {
				pg.Layers = append(pg.Layers, uint32(l))
			}
		}
		groups = append(groups, pg)
	}
	var m *Model
	var err error
	if fromHF {
		// An absent name is NULL in the C API, as the C++ runner passes it.
		if m, err = ModelFromHFConfigJSON([]byte(hfConfig), ""); err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = m.Close() })
	} else if m, err = model.open(t); err != nil {
		return nil, err
	}
	if pErr != nil {
		return nil, pErr
	}
	if dErr != nil {
		return nil, dErr
	}
	if !hasPRanks {
		for r := uint32(0); r < pCfg.TpSize; r++ {
			pRanks = append(pRanks, r)
		}
	}
	remote := make([]*EngineMetadata, 0, len(pRanks))
	for _, r := range pRanks {
		l := pLayout
		l.TpRank = r
		md, err := modelMetadata(t, m, pCfg, l)
		if err != nil {
			return nil, err
		}
		remote = append(remote, md)
	}
	dLayout.TpRank = dTpRank
	local, err := modelMetadata(t, m, dCfg, dLayout)
	if err != nil {
		return nil, err
	}
	pg, err := presetGeometry(t, m, pCfg, nil)
	if err != nil {
		return nil, err
	}
	dg, err := presetGeometry(t, m, dCfg, nil)
	if err != nil {
		return nil, err
	}
	ctx, err := NewPlanContext(PlanContextParams{Local: local, Remote: remote, LocalGeometry: dg, RemoteGeometry: pg,
		PermuteOnReceive: permute})
	if err != nil {
		return nil, err
	}
	defer ctx.Close()
	plan, err := ctx.Compile(groups)
	if err != nil {
		return nil, err
	}
	defer plan.Close()
	if err := plan.Validate(ctx, groups); err != nil {
		return nil, err
	}
	if asJSON {
		text, err := plan.JSON()
		if err != nil {
			return nil, err
		}
		buf, err := plan.AppendJSON([]byte("prefix:"))
		if err != nil {
			return nil, err
		}
		if string(buf) != "prefix:"+text {
			return nil, fmt.Errorf("AppendJSON text (%d B) differs from JSON (%d B)", len(buf)-len("prefix:"), len(text))
		}
		return out{"lines": strings.Split(text, "\n")}, nil
	}
	info, err := plan.Info()
	if err != nil {
		return nil, err
	}
	readRanks, err := plan.ReadRanks()
	if err != nil {
		return nil, err
	}
	notify, err := plan.NotifyRanks()
	if err != nil {
		return nil, err
	}
	if len(readRanks) != info.NumReadRanks || len(notify) != info.NumNotifyRanks {
		return nil, fmt.Errorf("plan info counts (%d read, %d notify) disagree with the lists %v, %v",
			info.NumReadRanks, info.NumNotifyRanks, readRanks, notify)
	}
	reads := make([]interface{}, info.PTpSize)
	rankBytes := make([]uint64, info.PTpSize)
	total := uint64(0)
	for p := uint32(0); p < info.PTpSize; p++ {
		rs, bytes, err := plan.RankReads(p)
		if err != nil {
			return nil, err
		}
		sum := uint64(0)
		for _, r := range rs {
			sum += r.Length
		}
		if sum != bytes {
			return nil, fmt.Errorf("P rank %d: rank bytes %d != sum of read lengths %d", p, bytes, sum)
		}
		sort.SliceStable(rs, func(a, b int) bool {
			if rs[a].LocalRegion != rs[b].LocalRegion {
				return rs[a].LocalRegion < rs[b].LocalRegion
			}
			return rs[a].LocalOffset < rs[b].LocalOffset
		})
		ro := make([]interface{}, len(rs))
		for k, r := range rs {
			ro[k] = out2{"local_region": r.LocalRegion, "local_offset": r.LocalOffset, "remote_region": r.RemoteRegion,
				"remote_offset": r.RemoteOffset, "length": r.Length}
		}
		reads[p] = ro
		rankBytes[p] = bytes
		total += bytes
	}
	if total != info.Bytes {
		return nil, fmt.Errorf("plan bytes %d differ from the per-rank sum %d", info.Bytes, total)
	}
	gz := make([]interface{}, info.NumGroups)
	for g := 0; g < info.NumGroups; g++ {
		z, err := plan.GroupZero(g)
		if err != nil {
			return nil, err
		}
		gz[g] = out2{"kind": z.Kind.String(), "regions": z.Regions, "zero_ranges": zeroOut(z.Zero), "unfilled_states": z.UnfilledStates,
			"permute_blocks": z.PermuteBlocks, "permute_regions": z.PermuteRegions}
	}
	return out{
		"d_tp_size": info.DTpSize, "p_tp_size": info.PTpSize, "read_ranks": readRanks, "notify_ranks": notify,
		"notifications_per_p_rank": info.NotificationsPerPRank, "reads": reads, "rank_bytes": rankBytes, "groups": gz,
		"pieces_before_coalescing": info.PiecesBeforeCoalescing, "pieces_after_coalescing": info.PiecesAfterCoalescing,
		"bytes": info.Bytes, "attention_bytes": info.AttentionBytes, "mamba_bytes": info.MambaBytes, "empty": info.Empty,
		"d_pp_size": info.DPpSize, "d_pp_rank": info.DPpRank, "p_pp_size": info.PPpSize, "p_pp_rank": info.PPpRank,
		"layer_begin": info.LayerBegin, "layer_end": info.LayerEnd,
		"permute": out2{"from": layoutName(info.Permute.From), "to": layoutName(info.Permute.To),
			"heads": info.Permute.Heads, "tokens": info.Permute.Tokens, "head_bytes": info.Permute.HeadBytes},
	}, nil
}

// layoutName spells a KV layout as the vectors do.
func layoutName(l KVLayout) string {
	if l == KVLayoutNHD {
		return "NHD"
	}
	return "HND"
}

// opPermuteKVBlock permutes one KV block in place.
func opPermuteKVBlock(t *testing.T, i *in) (out, error) {
	b := hexInput(i)
	layout := func(k string) KVLayout {
		switch v := i.str(k); v {
		case "HND":
			return KVLayoutHND
		case "NHD":
			return KVLayoutNHD
		default:
			panic(badVector{fmt.Sprintf("input %s = %q is not a KV layout", k, v)})
		}
	}
	from, to := layout("from"), layout("to")
	if err := PermuteKVBlock(b, from, to, i.u64("heads"), i.u64("tokens"), i.u64("head_bytes")); err != nil {
		return nil, err
	}
	return out{"hex": hex.EncodeToString(b)}, nil
}

// runOp runs an op on a JSON input through the runner's own decoding and key tracking.
func runOp(t *testing.T, op, input string) (map[string]interface{}, error) {
	t.Helper()
	var m map[string]interface{}
	if err := decodeNumbers([]byte(input), &m); err != nil {
		t.Fatal(err)
	}
	i := newIn("input", m)
	got, err := ops[op](t, i)
	if u := i.unused(); len(u) > 0 {
		t.Fatalf("%s: unused input keys %v", op, u)
	}
	if err != nil {
		return nil, err
	}
	n, err := normalise(map[string]interface{}(got))
	if err != nil {
		t.Fatal(err)
	}
	return n.(map[string]interface{}), nil
}

// TestPlanningOpsSelfCheck runs the planning op handlers on worked examples of the C API tests,
// so they are exercised before their vectors land.
func TestPlanningOpsSelfCheck(t *testing.T) {
	expect := func(op, input string, want map[string]interface{}) {
		t.Helper()
		got, err := runOp(t, op, input)
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		w, _ := normalise(want)
		for k, v := range w.(map[string]interface{}) {
			if errs := compare(op+"."+k, v, got[k]); len(errs) > 0 {
				t.Error(errs)
			}
		}
	}
	expect("trim_group", `{"kind": "attention", "local_blocks": [3, 4], "remote_blocks": [8, 9], "local_tokens_per_block": 32,
		"remote_tokens_per_block": 32, "remote_computed_tokens": 40}`,
		map[string]interface{}{"kind": "attention", "transferred_tokens": 40, "states": []int{}, "unfilled_states": []int{},
			"zero_ranges": []interface{}{map[string]int{"block": 4, "token_begin": 8, "token_end": 32}}})
	expect("mamba_aligned_split_v0604", `{"num_external_computed_tokens": 40, "num_prompt_tokens": 100, "num_tokens": 100,
		"block_size": 16, "num_new_tokens": 50, "use_eagle": false}`, map[string]interface{}{"num_new_tokens": 48})
	expect("mamba_aligned_split", `{"num_prompt_tokens": 100, "num_tokens": 100, "block_size": 32, "shared_prefix_tokens": 48,
		"num_new_tokens": 100}`, map[string]interface{}{"num_new_tokens": 32})
	expect("truncate_for_remote_decode", `{"num_prompt_tokens": 100, "max_tokens": 50, "has_mamba": true}`,
		map[string]interface{}{"num_prompt_tokens": 99, "max_tokens": 1, "truncated": true})
	expect("receive_zero_ranges", `{"local_blocks": [11, 12, 13], "tokens_per_block": 64, "block_size_ratio": 4, "remote_kernel_len": 6}`,
		map[string]interface{}{"zero_ranges": []interface{}{map[string]int{"block": 12, "token_begin": 32, "token_end": 64},
			map[string]int{"block": 13, "token_begin": 0, "token_end": 64}}})
	expect("uncovered_token_ranges", `{"local_blocks": [5, 6, 7], "first_block_index": 2, "tokens_per_block": 16, "held_tokens": 32,
		"written": [{"begin": 32, "end": 70}]}`,
		map[string]interface{}{"zero_ranges": []interface{}{map[string]int{"block": 7, "token_begin": 6, "token_end": 16}}})
	expect("crc32c", `{"hex": "313233343536373839"}`, map[string]interface{}{"crc32c": 0xE3069283})
	expect("crc32c", `{"hex": ""}`, map[string]interface{}{"crc32c": 0})

	rt, err := runOp(t, "metadata_roundtrip", `{"model": "nemotron-3-nano-30b", "engine": {"tp_size": 2},
		"layout": {"engine_id": "decode-0", "tp_rank": 1, "num_regions": 6}}`)
	must(t, err)
	w, _ := normalise(map[string]interface{}{"engine_id": "decode-0", "tp_size": 2, "tp_rank": 1, "kv_layout": "HND", "conv_layout": "DS",
		"logical_block_size": 2096, "num_kernel_blocks": 64, "mamba_type": "mamba2", "conv_bytes": 18432,
		"conv_projection_bytes": []int{12288, 3072, 3072}, "use_mla": false, "prefix_caching": false, "cache_mode": "none"})
	if errs := compare("metadata_roundtrip", w, map[string]interface{}(rt)); len(errs) > 0 {
		// compare reports keys of rt absent from w too; only mismatches of w's keys matter here.
		for _, e := range errs {
			if !containsLacks(e) {
				t.Error(e)
			}
		}
	}
	dec, err := runOp(t, "metadata_decode", fmt.Sprintf(`{"hex": %q}`, rt["hex"]))
	must(t, err)
	delete(rt, "hex")
	if errs := compare("metadata_decode", map[string]interface{}(rt), map[string]interface{}(dec)); len(errs) > 0 {
		t.Error(errs)
	}
	_, err = runOp(t, "metadata_decode", `{"hex": "00"}`)
	wantErr(t, err, ErrParse)

	// Distinct engine ids, so NHD on both sides with heads split by TP is the only problem the
	// handshake can report (a different layout alone is served: D permutes on receive).
	hs, err := runOp(t, "handshake_validate", `{"local": {"model": "nemotron-3-nano-30b", "engine": {"tp_size": 1}, "layout": {"engine_id": "d", "kv_layout": "NHD"}},
		"remote": {"model": "nemotron-3-nano-30b", "engine": {"tp_size": 2}, "layout": {"engine_id": "p", "kv_layout": "NHD"}}}`)
	must(t, err)
	if hs["compatible"] != false || len(hs["items"].([]interface{})) == 0 {
		t.Fatalf("NHD both sides, heads split: %v", hs)
	}

	plan, err := runOp(t, "transfer_plan", `{"model": "nemotron-3-nano-30b", "decode_rank": 0,
		"prefill": {"engine": {"tp_size": 4}, "layout": {"engine_id": "p", "num_regions": 6, "base": 2199023255552}},
		"decode": {"engine": {"tp_size": 2}, "layout": {"engine_id": "d", "num_regions": 6}},
		"groups": [{"kind": "attention", "local_blocks": [10, 12], "remote_blocks": [20, 25, 22], "remote_computed_tokens": 3000}]}`)
	must(t, err)
	w, _ = normalise(map[string]interface{}{"d_tp_size": 2, "p_tp_size": 4, "read_ranks": []int{0}, "notify_ranks": []int{0, 1},
		"bytes": 6 * 3000 * 512, "mamba_bytes": 0, "empty": false, "rank_bytes": []int{6 * 3000 * 512, 0, 0, 0}})
	for k, v := range w.(map[string]interface{}) {
		if errs := compare("transfer_plan."+k, v, plan[k]); len(errs) > 0 {
			t.Error(errs)
		}
	}
	if n := len(plan["reads"].([]interface{})[0].([]interface{})); n != 24 {
		t.Fatalf("P0 reads %d", n)
	}
	_, err = runOp(t, "transfer_plan", `{"model": "nemotron-3-nano-30b", "decode_rank": 0,
		"prefill": {"engine": {"tp_size": 3}, "layout": {"engine_id": "p"}},
		"decode": {"engine": {"tp_size": 2}, "layout": {"engine_id": "d"}}, "groups": []}`)
	wantErr(t, err, ErrHeadsNotDivisible)
}

// containsLacks tells the "vector lacks this output key" reports apart from mismatches.
func containsLacks(e string) bool {
	for i := 0; i+len("lacks") <= len(e); i++ {
		if e[i:i+len("lacks")] == "lacks" {
			return true
		}
	}
	return false
}
