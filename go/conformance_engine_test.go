package pdkv

import (
	"strings"
	"testing"
)

// Runner of the engine_plan op (tests/vectors/engine.json, docs/conformance.md): the D rank and
// every P rank described as Engines; the P ranks' metadata from Engine.Metadata, the context from
// Engine.PlanContext, the plan from Engine.PlanRequest with the request's block tables.

func init() { ops["engine_plan"] = opEnginePlan }

func opEnginePlan(t *testing.T, i *in) (out, error) {
	if i.has("model") == i.has("hf_config") {
		panic(badVector{"engine_plan needs exactly one of input.model / input.hf_config"})
	}
	var model modelSpec
	var hfConfig string
	fromHF := i.has("hf_config")
	if fromHF {
		hfConfig = i.str("hf_config")
	} else {
		model = modelInput(i)
	}
	type side struct {
		cfg    EngineConfig
		err    error
		id     string
		blocks uint64
	}
	sideOf := func(key string) side {
		o := i.obj(key)
		cfg, err := engineConfig(o.obj("engine"))
		l := o.obj("layout")
		return side{cfg: cfg, err: err, id: l.str("engine_id"), blocks: l.u64("num_logical_blocks")}
	}
	p, d := sideOf("prefill"), sideOf("decode")
	dTpRank := i.u32("decode_rank")
	rq := i.obj("request")
	var req EngineRequest
	for _, g := range rq.objs("groups") {
		req.Groups = append(req.Groups, RequestGroup{LocalBlockIDs: g.u64s("local"), RemoteBlockIDs: g.u64s("remote")})
	}
	req.NumPromptTokens = rq.u64("num_prompt_tokens")
	req.NumLocalComputedTokens = rq.u64("num_local_computed_tokens")
	var m *Model
	var err error
	if fromHF {
		if m, err = ModelFromHFConfigJSON([]byte(hfConfig), ""); err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = m.Close() })
	} else if m, err = model.open(t); err != nil {
		return nil, err
	}
	if p.err != nil {
		return nil, p.err
	}
	if d.err != nil {
		return nil, d.err
	}
	opts := func(s side, rank uint32) EngineOptions {
		o := DefaultEngineOptions()
		o.EngineID, o.TpRank, o.NumLogicalBlocks = s.id, rank, s.blocks
		return o
	}
	engine, err := NewEngine(m, d.cfg, opts(d, dTpRank))
	if err != nil {
		return nil, err
	}
	defer engine.Close()
	var remote []*EngineMetadata
	for r := uint32(0); r < p.cfg.TpSize; r++ {
		pe, err := NewEngine(m, p.cfg, opts(p, r))
		if err != nil {
			return nil, err
		}
		md, err := pe.Metadata()
		_ = pe.Close()
		if err != nil {
			return nil, err
		}
		t.Cleanup(func() { _ = md.Close() })
		remote = append(remote, md)
	}
	ctx, err := engine.PlanContext(remote, p.cfg, false)
	if err != nil {
		return nil, err
	}
	defer ctx.Close()
	plan, err := engine.PlanRequest(ctx, req)
	if err != nil {
		return nil, err
	}
	defer plan.Close()
	info, err := engine.Info()
	if err != nil {
		return nil, err
	}
	groups, err := engine.Groups()
	if err != nil {
		return nil, err
	}
	gj := make([]interface{}, len(groups))
	for k, g := range groups {
		gj[k] = out2{"kind": g.Kind.String(), "layers": g.Layers}
	}
	text, err := plan.JSON()
	if err != nil {
		return nil, err
	}
	// PlanRequestInto plans the vector's request to the same bytes.
	into, err := NewTransferPlan()
	if err != nil {
		return nil, err
	}
	defer into.Close()
	if err := engine.PlanRequestInto(ctx, req, into); err != nil {
		t.Fatalf("PlanRequestInto refused what PlanRequest planned: %v", err)
	}
	if again, err := into.JSON(); err != nil || again != text {
		t.Fatalf("PlanRequestInto planned differently (%v):\n%s\nvs\n%s", err, again, text)
	}
	return out{"groups": gj, "num_regions": info.NumRegions, "lines": strings.Split(text, "\n")}, nil
}
