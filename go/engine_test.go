package pdkv

import (
	"errors"
	"strings"
	"testing"
)

// The request of the engine examples (examples/engine/*, engine.json): Nemotron-3-Nano, P TP4 ->
// D TP2 rank 0, align mode, a 5001-token prompt of which D holds the first 2096 tokens.
var exampleGroups = []RequestGroup{
	{[]uint64{10, 0, 6}, []uint64{6}}, {[]uint64{11, 0, 7}, []uint64{7}}, {[]uint64{12, 0, 13}, []uint64{8}},
	{[]uint64{14, 0, 15}, []uint64{9}}, {[]uint64{9, 4, 5}, []uint64{1, 2, 3, 4, 5}},
}

func alignConfig(tp uint32) EngineConfig {
	c := DefaultEngineConfig()
	c.TpSize = tp
	c.MambaCacheMode = MambaCacheAlign
	return c
}

type enginePair struct {
	model  *Model
	d      *Engine
	remote []*EngineMetadata
	ctx    *PlanContext
}

func newEnginePair(t *testing.T) enginePair {
	t.Helper()
	m, err := ModelFromPreset("nemotron-3-nano-30b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	opts := func(id string, rank uint32) EngineOptions {
		o := DefaultEngineOptions()
		o.EngineID, o.TpRank, o.NumLogicalBlocks = id, rank, 16
		return o
	}
	d, err := NewEngine(m, alignConfig(2), opts("decode", 0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	var remote []*EngineMetadata
	for r := uint32(0); r < 4; r++ {
		p, err := NewEngine(m, alignConfig(4), opts("prefill", r))
		if err != nil {
			t.Fatal(err)
		}
		md, err := p.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		_ = p.Close()
		t.Cleanup(func() { _ = md.Close() })
		remote = append(remote, md)
	}
	ctx, err := d.PlanContext(remote, alignConfig(4), false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ctx.Close() })
	return enginePair{m, d, remote, ctx}
}

func TestEngineGroupsAndMetadata(t *testing.T) {
	e := newEnginePair(t)
	info, err := e.d.Info()
	if err != nil {
		t.Fatal(err)
	}
	if info.NumGroups != 5 || info.NumRegions != 6 || info.LogicalBlockSize != 2096 || !info.PrefixCaching ||
		info.CacheMode != MambaCacheAlign || info.NumLogicalBlocks != 16 {
		t.Fatalf("info %+v", info)
	}
	groups, err := e.d.Groups()
	if err != nil {
		t.Fatal(err)
	}
	desc, err := e.model.Describe()
	if err != nil {
		t.Fatal(err)
	}
	var mamba, attention []uint32
	for i, c := range desc.LayerPattern {
		switch c {
		case 'M':
			mamba = append(mamba, uint32(i))
		case '*':
			attention = append(attention, uint32(i))
		}
	}
	for g := 0; g < 4; g++ {
		var want []uint32
		for k := g; k < len(mamba); k += 4 {
			want = append(want, mamba[k])
		}
		if groups[g].Kind != GroupMamba || !equalU32(groups[g].Layers, want) {
			t.Fatalf("group %d: %+v, want Mamba layers %v", g, groups[g], want)
		}
	}
	if groups[4].Kind != GroupAttention || !equalU32(groups[4].Layers, attention) ||
		!equalU32(groups[4].Regions, []uint32{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("attention group %+v", groups[4])
	}
	if _, err := e.d.Group(5); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("Group(5): %v", err)
	}
	if _, err := e.d.Group(-1); !errors.Is(err, ErrOutOfBounds) {
		t.Fatalf("Group(-1): %v", err)
	}
	md, err := e.d.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	l := DefaultEngineLayout()
	l.EngineID, l.NumLogicalBlocks, l.NumRegions = "decode", 16, 6
	hand, err := EngineMetadataFromModel(e.model, alignConfig(2), l)
	if err != nil {
		t.Fatal(err)
	}
	defer hand.Close()
	if eq, err := md.Equal(hand); err != nil || !eq {
		t.Fatalf("engine metadata differs from pdkv_engine_metadata_from_model (%v)", err)
	}
	descs, err := e.d.RegistrationDescriptors()
	if err != nil {
		t.Fatal(err)
	}
	defer descs.Close()
	items, err := descs.Items()
	if err != nil {
		t.Fatal(err)
	}
	if len(items) <= 6*16 || items[0].Addr != 1<<40 {
		t.Fatalf("%d descriptors, first %+v", len(items), items[0])
	}
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestEnginePlanEqualsTheLowLevelPlan(t *testing.T) {
	e := newEnginePair(t)
	plan, err := e.d.PlanRequest(e.ctx, EngineRequest{Groups: exampleGroups, NumPromptTokens: 5001, NumLocalComputedTokens: 2096})
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	got, err := plan.JSON()
	if err != nil {
		t.Fatal(err)
	}
	// By hand: P computed 5000 tokens (N-1), D's attention blocks after its one-block hit (ppl 1
	// with FlashAttention), each Mamba group's running state.
	groups, err := e.d.Groups()
	if err != nil {
		t.Fatal(err)
	}
	var hand []PlanGroup
	for k, g := range groups {
		loc, rem := exampleGroups[k].LocalBlockIDs, exampleGroups[k].RemoteBlockIDs
		tr := GroupTrimInput{Kind: g.Kind, RemoteBlocks: rem, RemoteComputedTokens: 5000, LocalHitTokens: 2096}
		if g.Kind == GroupAttention {
			tr.LocalBlocks, tr.LocalFirstBlock = loc[1:], Ptr[uint64](1)
		} else {
			tr.CacheMode, tr.LocalBlocks = MambaCacheAlign, loc[len(loc)-1:]
		}
		hand = append(hand, PlanGroup{Trim: tr, Regions: g.Regions})
	}
	md, err := e.d.Metadata()
	if err != nil {
		t.Fatal(err)
	}
	defer md.Close()
	dg, err := NewGeometry(e.model, alignConfig(2))
	if err != nil {
		t.Fatal(err)
	}
	defer dg.Close()
	pg, err := NewGeometry(e.model, alignConfig(4))
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	low, err := NewPlanContext(PlanContextParams{Local: md, Remote: e.remote, LocalGeometry: dg, RemoteGeometry: pg})
	if err != nil {
		t.Fatal(err)
	}
	defer low.Close()
	lp, err := low.Compile(hand)
	if err != nil {
		t.Fatal(err)
	}
	defer lp.Close()
	want, err := lp.JSON()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("engine-level plan differs from the low-level plan:\n%s\nvs\n%s", got, want)
	}
	// PlanRequestInto plans the same into a plan that held another request's plan.
	into, err := low.Compile(hand[:0])
	if err != nil {
		t.Fatal(err)
	}
	defer into.Close()
	if err := e.d.PlanRequestInto(e.ctx, EngineRequest{Groups: exampleGroups, NumPromptTokens: 5001, NumLocalComputedTokens: 2096}, into); err != nil {
		t.Fatal(err)
	}
	if j, err := into.JSON(); err != nil || j != want {
		t.Fatalf("PlanRequestInto: %v\n%s\nvs\n%s", err, j, want)
	}
}

func TestEngineRefusalsSayWhatToPass(t *testing.T) {
	e := newEnginePair(t)
	// Every refusal also through PlanRequestInto, into a plan holding a request's plan: the same
	// error, and the plan left empty.
	reused, err := e.d.PlanRequest(e.ctx, EngineRequest{Groups: exampleGroups, NumPromptTokens: 5001, NumLocalComputedTokens: 2096})
	if err != nil {
		t.Fatal(err)
	}
	defer reused.Close()
	req := func(groups []RequestGroup, n, hit uint64) error {
		r := EngineRequest{Groups: groups, NumPromptTokens: n, NumLocalComputedTokens: hit}
		p, err := e.d.PlanRequest(e.ctx, r)
		_ = p.Close()
		if err := e.d.PlanRequestInto(e.ctx, EngineRequest{Groups: exampleGroups, NumPromptTokens: 5001, NumLocalComputedTokens: 2096}, reused); err != nil {
			t.Fatal(err)
		}
		intoErr := e.d.PlanRequestInto(e.ctx, r, reused)
		if intoErr == nil || err == nil || intoErr.Error() != err.Error() {
			t.Fatalf("PlanRequestInto: %v, PlanRequest: %v", intoErr, err)
		}
		if info, ierr := reused.Info(); ierr != nil || info.Bytes != 0 || info.NumGroups != 0 {
			t.Fatalf("a refused PlanRequestInto left %+v (%v)", info, ierr)
		}
		return err
	}
	cases := []struct {
		err  error
		want []string
	}{
		{req(exampleGroups[:4], 5001, 2096), []string{"4 groups", "5 KV-cache groups"}},
		{req(exampleGroups, 5001, 100), []string{"num_local_computed_tokens = 100", "whole blocks"}},
		{req(append(append([]RequestGroup{}, exampleGroups[:4]...), RequestGroup{[]uint64{9, 4, 500}, []uint64{1, 2, 3, 4, 5}}), 5001, 2096),
			[]string{"local_block_ids[2] (attention group) = 500", "16 logical blocks"}},
		{req(exampleGroups, 0, 0), []string{"num_prompt_tokens is 0"}},
	}
	for k, c := range cases {
		if !errors.Is(c.err, ErrInvalidArgument) {
			t.Fatalf("case %d: %v is not ErrInvalidArgument", k, c.err)
		}
		for _, w := range c.want {
			if !strings.Contains(c.err.Error(), w) {
				t.Fatalf("case %d: %q lacks %q", k, c.err, w)
			}
		}
	}
	if _, err := e.d.PlanContext(e.remote, alignConfig(2), false); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "tp_size 4") {
		t.Fatalf("PlanContext with P settings of another TP size: %v", err)
	}
	o := DefaultEngineOptions()
	o.RegionBases = []uint64{1 << 40, 2 << 40}
	if _, err := NewEngine(e.model, alignConfig(2), o); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "num_region_bases = 2") {
		t.Fatalf("NewEngine with 2 region bases: %v", err)
	}
	off := false
	o = DefaultEngineOptions()
	o.PrefixCaching = &off
	o.NumLogicalBlocks = 16
	d2, err := NewEngine(e.model, alignConfig(2), o)
	if err != nil {
		t.Fatal(err)
	}
	defer d2.Close()
	if info, _ := d2.Info(); info.PrefixCaching {
		t.Fatal("PrefixCaching false was not passed")
	}
}

func TestEngineCloseIsIdempotent(t *testing.T) {
	m, err := ModelFromPreset("nemotron-3-nano-30b")
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := NewEngine(m, alignConfig(2), DefaultEngineOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Info(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Info after Close: %v", err)
	}
	var nilEngine *Engine
	if err := nilEngine.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewEngine(nil, alignConfig(2), DefaultEngineOptions()); !errors.Is(err, ErrNullPointer) {
		t.Fatalf("NewEngine(nil model): %v", err)
	}
}
