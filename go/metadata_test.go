package pdkv

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// nanoMetadata builds rank `rank` of a Nemotron-3-Nano engine with 6 regions at base.
func nanoMetadata(t *testing.T, m *Model, tp, rank uint32, id string, base uint64) *EngineMetadata {
	t.Helper()
	c := DefaultEngineConfig()
	c.TpSize = tp
	l := DefaultEngineLayout()
	l.EngineID, l.TpRank, l.NumRegions, l.Base = id, rank, 6, base
	md, err := EngineMetadataFromModel(m, c, l)
	must(t, err)
	t.Cleanup(func() { _ = md.Close() })
	return md
}

func TestEngineMetadata(t *testing.T) {
	l := DefaultEngineLayout()
	if l.EngineID != "engine" || l.NumLogicalBlocks != 64 || l.PrefixCaching != nil || l.LayerEnd != nil || l.PpSize != 1 || l.KVLayout != KVLayoutHND {
		t.Fatalf("layout defaults %+v", l)
	}
	m := nano(t)
	d := nanoMetadata(t, m, 2, 1, "decode-0", 1<<40)
	i, err := d.Info()
	must(t, err)
	fp, err := m.Fingerprint()
	must(t, err)
	if i.EngineID != "decode-0" || i.TpSize != 2 || i.TpRank != 1 || i.LogicalBlockSize != 2096 || i.NumKernelBlocks != 64 ||
		i.NumRegions != 6 || i.MambaType != MambaMamba2 || i.ConvBytes != 18432 || i.TotalKVHeads != 2 || i.ModelFingerprint != fp {
		t.Fatalf("info %+v", i)
	}
	regions, err := d.Regions()
	must(t, err)
	const kLd = 1073152
	if len(regions) != 6 || regions[0].Base != 1<<40 || regions[0].BlockLen != kLd || regions[0].Kind != RegionMamba ||
		regions[1].Base != 1<<40+64*kLd || regions[5].Layer != 5 {
		t.Fatalf("regions %+v", regions)
	}
	proj, err := d.ConvProjectionBytes()
	must(t, err)
	if !reflect.DeepEqual(proj, []uint64{12288, 3072, 3072}) {
		t.Fatalf("projections %v", proj)
	}

	enc, err := d.Encode()
	must(t, err)
	if !bytes.HasPrefix(enc, []byte("PDKV")) {
		t.Fatalf("encoding starts %q", enc[:4])
	}
	app, err := d.AppendEncoded([]byte("xy"))
	must(t, err)
	if !bytes.Equal(app[2:], enc) || string(app[:2]) != "xy" {
		t.Fatal("AppendEncoded differs from Encode")
	}
	back, err := DecodeEngineMetadata(enc)
	must(t, err)
	defer back.Close()
	eq, err := back.Equal(d)
	must(t, err)
	if !eq {
		t.Fatal("decoded metadata differs")
	}
	other := nanoMetadata(t, m, 4, 0, "p", 2<<40)
	if eq, _ = other.Equal(d); eq {
		t.Fatal("different metadata compare equal")
	}
	if maj, _ := MetadataWireVersion(); maj != 1 {
		t.Fatalf("wire major %d", maj)
	}
	crc, err := CRC32C([]byte("123456789"))
	must(t, err)
	if crc != 0xE3069283 {
		t.Fatalf("crc32c %08x", crc)
	}
	if crc, err = CRC32C(nil); err != nil || crc != 0 {
		t.Fatalf("crc32c of nothing %08x %v", crc, err)
	}

	// Bad bytes from a peer.
	_, err = DecodeEngineMetadata(nil)
	wantErr(t, err, ErrParse)
	_, err = DecodeEngineMetadata(enc[:len(enc)/2])
	wantErr(t, err, ErrParse)
	flipped := append([]byte(nil), enc...)
	flipped[len(flipped)-1] ^= 0xff
	_, err = DecodeEngineMetadata(flipped)
	if err == nil {
		t.Fatal("a flipped byte decoded")
	}

	// Bad layouts.
	c := DefaultEngineConfig()
	c.TpSize = 2
	bad := DefaultEngineLayout()
	bad.EngineID = ""
	_, err = EngineMetadataFromModel(m, c, bad)
	wantErr(t, err, ErrInvalidArgument)
	bad = DefaultEngineLayout()
	bad.TpRank = 2
	_, err = EngineMetadataFromModel(m, c, bad)
	wantErr(t, err, ErrInvalidArgument)
	bad = DefaultEngineLayout()
	bad.NumRegions, bad.RegionBases = 2, []uint64{1 << 40}
	_, err = EngineMetadataFromModel(m, c, bad)
	wantErr(t, err, ErrInvalidArgument, "RegionBases")
	bad = DefaultEngineLayout()
	bad.EngineID = "a\x00"
	_, err = EngineMetadataFromModel(m, c, bad)
	wantErr(t, err, ErrInvalidArgument)
	c.TpSize = 3
	_, err = EngineMetadataFromModel(m, c, DefaultEngineLayout())
	wantErr(t, err, ErrHeadsNotDivisible, "3")

	must(t, back.Close())
	must(t, back.Close())
	_, err = back.Info()
	wantErr(t, err, ErrClosed)
	_, err = back.Encode()
	wantErr(t, err, ErrClosed)
	_, err = d.Equal(back)
	wantErr(t, err, ErrClosed)
}

func TestHandshake(t *testing.T) {
	m := nano(t)
	d := nanoMetadata(t, m, 2, 0, "d", 1<<40)
	p := nanoMetadata(t, m, 4, 0, "p", 2<<40)
	items, err := HandshakeValidate(d, p)
	must(t, err)
	if len(items) != 0 {
		t.Fatalf("compatible pair reported %v", items)
	}
	must(t, HandshakeRequireCompatible(d, p))

	desc, err := m.Describe()
	must(t, err)
	desc.MambaDState = 64
	m2, err := NewModel(desc)
	must(t, err)
	defer m2.Close()
	c := DefaultEngineConfig()
	c.TpSize = 4
	l := DefaultEngineLayout()
	l.EngineID, l.NumRegions, l.Base, l.KVLayout = "p", 6, 2<<40, KVLayoutNHD
	bad, err := EngineMetadataFromModel(m2, c, l)
	must(t, err)
	defer bad.Close()
	items, err = HandshakeValidate(d, bad)
	must(t, err)
	// A different model is refused; the NHD layout alone is not (D permutes on receive, one KV
	// head per rank on both sides).
	for _, it := range items {
		if it.Field == "kv_layout" {
			t.Errorf("layouts that D can permute reported: %+v", it)
		}
		if it.Message == "" || it.Fix == "" || !strings.Contains(it.Text, it.Field) {
			t.Errorf("item %+v incomplete", it)
		}
	}
	if len(items) == 0 || items[0].Field != "model_fingerprint" {
		t.Fatalf("no model_fingerprint item in %+v", items)
	}
	err = HandshakeRequireCompatible(d, bad)
	wantErr(t, err, ErrIncompatible, items[0].Text)

	p1 := nanoMetadata(t, m, 4, 1, "p", 3<<40)
	items, err = HandshakeValidateEngineRanks([]*EngineMetadata{p, p1})
	must(t, err)
	if len(items) != 0 {
		t.Fatalf("agreeing ranks reported %v", items)
	}
	q := nanoMetadata(t, m, 2, 1, "q", 5<<40)
	items, err = HandshakeValidateEngineRanks([]*EngineMetadata{p, q})
	must(t, err)
	if len(items) < 2 {
		t.Fatalf("mixed engines reported %v", items)
	}
	_, err = HandshakeValidateEngineRanks([]*EngineMetadata{p, nil})
	wantErr(t, err, ErrNullPointer, "ranks[1]")
	_, err = HandshakeValidate(d, nil)
	wantErr(t, err, ErrNullPointer)
	must(t, q.Close())
	_, err = HandshakeValidateEngineRanks([]*EngineMetadata{p, q})
	wantErr(t, err, ErrClosed)
	err = HandshakeRequireCompatible(q, p)
	wantErr(t, err, ErrClosed)
}

// A pair that differs only in the KV cache format's name (fp8 e4m3 vs e5m2, same sizes) is
// refused naming both formats; an unnamed format (sizes only) is compatible.
func TestHandshakeRefusesKVFormatsOfEqualSize(t *testing.T) {
	m := nano(t)
	build := func(tp uint32, id string, f ElementFormat) *EngineMetadata {
		c := DefaultEngineConfig()
		c.TpSize = tp
		c.KVCacheDtypeBytes = Ptr(uint32(1))
		c.KVCacheFormat = f
		l := DefaultEngineLayout()
		l.EngineID, l.NumRegions = id, 6
		md, err := EngineMetadataFromModel(m, c, l)
		must(t, err)
		t.Cleanup(func() { _ = md.Close() })
		return md
	}
	e4m3, err := ElementFormatFromName("fp8")
	must(t, err)
	if e4m3 != FormatFP8E4M3 || e4m3.String() != "fp8_e4m3" {
		t.Fatalf("fp8 is %v", e4m3)
	}
	p := build(4, "p", e4m3)
	d := build(2, "d", FormatFP8E5M2)
	info, err := p.Info()
	must(t, err)
	if info.KVCacheFormat != FormatFP8E4M3 || info.ModelFormat != FormatUnknown {
		t.Fatalf("formats %v / %v", info.KVCacheFormat, info.ModelFormat)
	}
	wire, err := p.Encode()
	must(t, err)
	pw, err := DecodeEngineMetadata(wire)
	must(t, err)
	defer pw.Close()
	items, err := HandshakeValidate(d, pw)
	must(t, err)
	if len(items) != 1 || items[0].Field != "kv_cache_format" || items[0].LocalValue != "fp8_e5m2" ||
		items[0].RemoteValue != "fp8_e4m3" {
		t.Fatalf("items %+v", items)
	}
	wantErr(t, HandshakeRequireCompatible(d, pw), ErrIncompatible, "kv_cache_format: fp8_e5m2 vs fp8_e4m3")
	plain := build(2, "d", FormatUnknown)
	must(t, HandshakeRequireCompatible(plain, p))

	c := DefaultEngineConfig()
	c.KVCacheFormat = FormatFP8E5M2 // KV bytes "auto": the model's bf16
	_, err = NewGeometry(m, c)
	wantErr(t, err, ErrInvalidArgument, "kv_cache_format = fp8_e5m2")
	_, err = ElementFormatFromName("nvfp4")
	wantErr(t, err, ErrNotFound, "nvfp4")
	if ElementFormat(99).String() != "unknown" {
		t.Fatal("99 has a name")
	}
}

// nanoContext is the D TP2 rank 0 <- P TP4 context of the C API tests.
func nanoContext(t *testing.T, withGeometry bool) *PlanContext {
	t.Helper()
	m := nano(t)
	d := nanoMetadata(t, m, 2, 0, "d", 1<<40)
	var ps []*EngineMetadata
	for r := uint32(0); r < 4; r++ {
		ps = append(ps, nanoMetadata(t, m, 4, r, "p", (2+uint64(r))<<40))
	}
	params := PlanContextParams{Local: d, Remote: ps}
	if withGeometry {
		params.LocalGeometry, params.RemoteGeometry = geometry(t, m, 2), geometry(t, m, 4)
	}
	ctx, err := NewPlanContext(params)
	must(t, err)
	t.Cleanup(func() { _ = ctx.Close() })
	return ctx
}

func TestTransferPlan(t *testing.T) {
	const kLd, kLp = 1073152, 540672
	ctx := nanoContext(t, true)
	mp, err := ctx.Mapping()
	must(t, err)
	defer mp.Close()
	if mi, err := mp.Info(); err != nil || mi.TpRatio != -2 {
		t.Fatalf("context mapping %+v %v", mi, err)
	}
	groups := []PlanGroup{{Trim: GroupTrimInput{Kind: GroupAttention, LocalBlocks: []uint64{10, 12}, RemoteBlocks: []uint64{20, 25, 22}, RemoteComputedTokens: 3000}}}
	plan, err := ctx.Compile(groups)
	must(t, err)
	defer plan.Close()
	info, err := plan.Info()
	must(t, err)
	if info.DTpRank != 0 || info.DTpSize != 2 || info.PTpSize != 4 || info.NumReadRanks != 1 || info.NumNotifyRanks != 2 ||
		info.Bytes != 6*3000*512 || info.AttentionBytes != info.Bytes || info.MambaBytes != 0 || info.Empty || info.NumGroups != 1 {
		t.Fatalf("plan info %+v", info)
	}
	rr, err := plan.ReadRanks()
	must(t, err)
	nr, err := plan.NotifyRanks()
	must(t, err)
	if !reflect.DeepEqual(rr, []uint32{0}) || !reflect.DeepEqual(nr, []uint32{0, 1}) {
		t.Fatalf("read %v notify %v", rr, nr)
	}
	reads, total, err := plan.RankReads(0)
	must(t, err)
	if total != info.Bytes || len(reads) != 24 {
		t.Fatalf("%d reads, %d B", len(reads), total)
	}
	for r := uint32(0); r < 6; r++ {
		want := []PlanRead{
			{r, 10 * kLd, r, 20 * kLp, 1056 * 512},
			{r, 10*kLd + 1056*512, r, 25 * kLp, 1040 * 512},
			{r, 12 * kLd, r, 25*kLp + 1040*512, 16 * 512},
			{r, 12*kLd + 16*512, r, 22 * kLp, 888 * 512},
		}
		if !reflect.DeepEqual(reads[4*r:4*r+4], want) {
			t.Fatalf("region %d reads %+v", r, reads[4*r:4*r+4])
		}
	}
	if none, b, err := plan.RankReads(1); err != nil || len(none) != 0 || b != 0 {
		t.Fatalf("P1 reads %v %d %v", none, b, err)
	}
	_, _, err = plan.RankReads(4)
	wantErr(t, err, ErrInvalidArgument, "4")
	z, err := plan.GroupZero(0)
	must(t, err)
	if z.Kind != GroupAttention || len(z.Regions) != 6 || !reflect.DeepEqual(z.Zero, []ZeroRange{{12, 904, 2096}}) || len(z.UnfilledStates) != 0 {
		t.Fatalf("group zero %+v", z)
	}
	_, err = plan.GroupZero(1)
	wantErr(t, err, ErrOutOfBounds, "1")
	must(t, plan.Validate(ctx, groups))
	other := []PlanGroup{{Trim: GroupTrimInput{Kind: GroupAttention, LocalBlocks: []uint64{10, 11}, RemoteBlocks: []uint64{20, 21, 22}, RemoteComputedTokens: 3000}}}
	wantErr(t, plan.Validate(ctx, other), ErrCoverage, "D region")
	js, err := plan.JSON()
	must(t, err)
	buf, err := plan.AppendJSON(nil)
	must(t, err)
	if js == "" || js != string(buf) || !strings.HasPrefix(js, "{") {
		t.Fatalf("JSON forms differ or are empty: %d vs %d bytes", len(js), len(buf))
	}

	// Mamba groups: 23 Mamba layers in 4 groups of 6, 6, 6, 5 regions.
	for g := uint64(0); g < 4; g++ {
		pg := PlanGroup{Trim: GroupTrimInput{Kind: GroupMamba, LocalBlocks: []uint64{40 + g}, RemoteBlocks: []uint64{50 + g}, RemoteComputedTokens: 3000}}
		if g == 3 {
			pg.Regions = []uint32{0, 1, 2, 3, 4}
		}
		other = append(other, pg)
	}
	mplan, err := ctx.Compile(other)
	must(t, err)
	defer mplan.Close()
	mi, err := mplan.Info()
	must(t, err)
	if mi.NumReadRanks != 2 || mi.NumGroups != 5 || mi.MambaBytes != 23*(18432+1048576) {
		t.Fatalf("mamba plan %+v", mi)
	}
	r1, _, err := mplan.RankReads(1)
	must(t, err)
	if len(r1) != 23*4 || r1[0] != (PlanRead{0, 40*kLd + 6144, 0, 50 * kLp, 6144}) {
		t.Fatalf("P1 reads %d, first %+v", len(r1), r1[0])
	}
	z4, err := mplan.GroupZero(4)
	must(t, err)
	if z4.Kind != GroupMamba || !reflect.DeepEqual(z4.Regions, []uint32{0, 1, 2, 3, 4}) {
		t.Fatalf("group 4 %+v", z4)
	}

	// Mamba without geometries is refused; bad contexts and groups are errors.
	_, err = nanoContext(t, false).Compile([]PlanGroup{{Trim: GroupTrimInput{Kind: GroupMamba, LocalBlocks: []uint64{40}, RemoteBlocks: []uint64{50}, RemoteComputedTokens: 100}}})
	wantErr(t, err, ErrInvalidArgument)
	_, err = ctx.Compile([]PlanGroup{{Trim: GroupTrimInput{Kind: GroupAttention, LocalBlocks: []uint64{10}, RemoteBlocks: []uint64{20}, RemoteComputedTokens: 3000}}})
	wantErr(t, err, ErrCoverage)
	_, err = ctx.Compile([]PlanGroup{{Trim: GroupTrimInput{Kind: GroupAttention, LocalBlocks: []uint64{10}, RemoteBlocks: []uint64{20}, RemoteComputedTokens: 10}, Regions: []uint32{9}}})
	wantErr(t, err, ErrInvalidArgument)
	_, err = NewPlanContext(PlanContextParams{})
	wantErr(t, err, ErrNullPointer)
	m := nano(t)
	d := nanoMetadata(t, m, 2, 0, "d", 1<<40)
	_, err = NewPlanContext(PlanContextParams{Local: d})
	wantErr(t, err, ErrInvalidArgument)
	_, err = NewPlanContext(PlanContextParams{Local: d, Remote: []*EngineMetadata{nil}})
	wantErr(t, err, ErrNullPointer)

	must(t, mplan.Close())
	must(t, mplan.Close())
	for _, f := range []func() error{
		func() error { _, err := mplan.Info(); return err },
		func() error { _, err := mplan.ReadRanks(); return err },
		func() error { _, err := mplan.NotifyRanks(); return err },
		func() error { _, _, err := mplan.RankReads(0); return err },
		func() error { _, err := mplan.GroupZero(0); return err },
		func() error { _, err := mplan.JSON(); return err },
		func() error { _, err := mplan.AppendJSON(nil); return err },
		func() error { return mplan.Validate(ctx, other) },
	} {
		wantErr(t, f(), ErrClosed)
	}
	must(t, ctx.Close())
	_, err = ctx.Compile(groups)
	wantErr(t, err, ErrClosed)
	_, err = ctx.Mapping()
	wantErr(t, err, ErrClosed)
}

// TestMixedMLAModel: a GQA model with MLA-typed layers round-trips its latent width, reports the
// latent's bytes per token, and registers regions by the layer pattern or the layout's kinds.
func TestMixedMLAModel(t *testing.T) {
	desc := ModelDesc{Name: "mixed", NumKVHeads: 4, HeadSize: 8, HeadSizeV: 8, DtypeBytes: 2, LayerPattern: "*L", MLAHeadSize: 24}
	m, err := NewModel(desc)
	must(t, err)
	defer m.Close()
	back, err := m.Describe()
	must(t, err)
	if back.MLAHeadSize != 24 {
		t.Fatalf("MLAHeadSize %d", back.MLAHeadSize)
	}
	c := DefaultEngineConfig()
	c.TpSize, c.UserBlockSize = 2, Ptr[uint32](16)
	g, err := NewGeometry(m, c)
	must(t, err)
	defer g.Close()
	info, err := g.Info()
	must(t, err)
	if info.AttnBytesPerToken != 64 || info.MLABytesPerToken != 48 || info.MLAKernelPageBytes != 768 {
		t.Fatalf("geometry %+v", info)
	}
	l := DefaultEngineLayout()
	l.NumRegions = 2
	md, err := EngineMetadataFromModel(m, c, l)
	must(t, err)
	defer md.Close()
	regions, err := md.Regions()
	must(t, err)
	if regions[0].Kind != RegionAttention || regions[0].BlockLen != 1024 || regions[1].Kind != RegionMLA || regions[1].BlockLen != 768 {
		t.Fatalf("regions %+v", regions)
	}
	l.RegionKinds = []RegionKind{RegionMLA}
	if _, err := EngineMetadataFromModel(m, c, l); err == nil || !strings.Contains(err.Error(), "RegionKinds has 1 entries") {
		t.Fatalf("want a RegionKinds length error, got %v", err)
	}
	l.RegionKinds = []RegionKind{RegionMLA, RegionAttention}
	md2, err := EngineMetadataFromModel(m, c, l)
	must(t, err)
	defer md2.Close()
	regions, err = md2.Regions()
	must(t, err)
	if regions[0].Kind != RegionMLA || regions[1].Kind != RegionAttention {
		t.Fatalf("explicit kinds %+v", regions)
	}
}

// CompileInto fills one reused plan with what Compile returns, request after request; a failed
// compile leaves it empty and reusable; a plan another call holds is refused with ErrBusy, and
// while CompileInto holds it every other call on it is. CompileIntoArgs (the C entry taking its
// arguments in one struct) behaves alike.
func TestCompileIntoReusesOnePlan(t *testing.T) {
	ctx := nanoContext(t, true)
	t.Run("CompileInto", func(t *testing.T) { compileIntoReusesOnePlan(t, ctx, ctx.CompileInto) })
	t.Run("CompileIntoArgs", func(t *testing.T) { compileIntoReusesOnePlan(t, ctx, ctx.CompileIntoArgs) })
}

func compileIntoReusesOnePlan(t *testing.T, ctx *PlanContext, compileInto func([]PlanGroup, *TransferPlan) error) {
	plan, err := NewTransferPlan()
	must(t, err)
	defer plan.Close()
	empty, err := plan.Info()
	must(t, err)
	if !empty.Empty || empty.NumGroups != 0 {
		t.Fatalf("new plan %+v", empty)
	}
	for _, local := range [][]uint64{{10, 12}, {3, 4}, {7, 30}} {
		groups := []PlanGroup{{Trim: GroupTrimInput{Kind: GroupAttention, LocalBlocks: local, RemoteBlocks: []uint64{20, 25, 22}, RemoteComputedTokens: 3000}}}
		fresh, err := ctx.Compile(groups)
		must(t, err)
		must(t, compileInto(groups, plan))
		want, _, err := fresh.RankReads(0)
		must(t, err)
		got, _, err := plan.RankReads(0)
		must(t, err)
		wi, err := fresh.Info()
		must(t, err)
		gi, err := plan.Info()
		must(t, err)
		if !reflect.DeepEqual(want, got) || !reflect.DeepEqual(wi, gi) {
			t.Fatalf("local %v: reused plan %+v %v, fresh %+v %v", local, gi, got, wi, want)
		}
		must(t, fresh.Close())
	}
	bad := []PlanGroup{{Trim: GroupTrimInput{Kind: GroupAttention, LocalBlocks: []uint64{10}, RemoteBlocks: []uint64{20}, RemoteComputedTokens: 3000}}}
	wantErr(t, compileInto(bad, plan), ErrCoverage)
	if info, err := plan.Info(); err != nil || !info.Empty {
		t.Fatalf("plan after a failed compile %+v %v", info, err)
	}
	// Held by another call: refused, not waited for.
	if _, err := plan.h.acquire(); err != nil {
		t.Fatal(err)
	}
	wantErr(t, compileInto(bad, plan), ErrBusy)
	plan.h.release()
	if _, err := plan.h.acquireExclusive(); err != nil {
		t.Fatal(err)
	}
	_, err = plan.Info()
	wantErr(t, err, ErrBusy)
	plan.h.releaseExclusive()
	wantErr(t, compileInto(bad, nil), ErrNullPointer)
}
