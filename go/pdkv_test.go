package pdkv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// must fails the test on a non-nil error.
func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr checks err is a *Error of the sentinel's status whose message contains every part.
// For ErrClosed it also checks the error is a *Error of StatusNullPointer matching
// ErrNullPointer whose message is "pdkv.<Type> is closed".
func wantErr(t *testing.T, err error, sentinel error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected %v, got success", sentinel)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("expected errors.Is(%v), got %v", sentinel, err)
	}
	var pe *Error
	if sentinel == ErrClosed {
		if !errors.As(err, &pe) || pe.Status != StatusNullPointer || !errors.Is(err, ErrNullPointer) {
			t.Fatalf("closed error %v (%T) is not a *Error of PDKV_ERR_NULL_POINTER", err, err)
		}
		if !strings.HasPrefix(pe.Message, "pdkv.") || !strings.HasSuffix(pe.Message, " is closed") ||
			pe.Message == "pdkv.handle is closed" {
			t.Fatalf("closed error message %q does not name the handle type", pe.Message)
		}
	}
	if errors.As(err, &pe) {
		for _, p := range parts {
			if !strings.Contains(pe.Message, p) {
				t.Errorf("message %q does not contain %q", pe.Message, p)
			}
		}
	} else if len(parts) > 0 {
		t.Fatalf("expected a *Error, got %T", err)
	}
}

func nano(t *testing.T) *Model {
	t.Helper()
	m, err := ModelFromPreset("nemotron-3-nano-30b")
	must(t, err)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func geometry(t *testing.T, m *Model, tp uint32) *Geometry {
	t.Helper()
	c := DefaultEngineConfig()
	c.TpSize = tp
	g, err := NewGeometry(m, c)
	must(t, err)
	t.Cleanup(func() { _ = g.Close() })
	return g
}

func TestStatusesAndSentinels(t *testing.T) {
	// headerStatuses and headerSentinels are generated from the header (zz_generated_test.go):
	// each Status constant (cgo's value of the C enumerator) has the value and the library name
	// the header gives it, and every failure status has its sentinel.
	if len(headerStatuses) != len(allStatuses) {
		t.Fatalf("%d statuses in the header, %d in allStatuses", len(headerStatuses), len(allStatuses))
	}
	for i, h := range headerStatuses {
		if int32(h.status) != h.value || h.status.String() != h.name || allStatuses[i] != h.status {
			t.Errorf("%s: Go constant %d named %q (allStatuses[%d] = %d), header value %d",
				h.name, h.status, h.status.String(), i, allStatuses[i], h.value)
		}
	}
	sentinels := map[Status]error{}
	for _, h := range headerSentinels {
		sentinels[h.status] = h.sentinel
		if e, ok := h.sentinel.(*Error); !ok || e.Status != h.status || e.Message != "" {
			t.Errorf("sentinel of %s is %#v", h.status, h.sentinel)
		}
	}
	if len(sentinels) != len(allStatuses)-1 {
		t.Fatalf("%d sentinels for %d failure statuses", len(sentinels), len(allStatuses)-1)
	}
	if StatusOK.String() != "PDKV_OK" || StatusTpNotDivisible.String() != "PDKV_ERR_TP_NOT_DIVISIBLE" {
		t.Fatalf("names: %s %s", StatusOK, StatusTpNotDivisible)
	}
	for st, s := range sentinels {
		if !strings.HasPrefix(st.String(), "PDKV_ERR_") {
			t.Errorf("status %d has name %q", st, st.String())
		}
		back, ok := StatusFromName(st.String())
		if !ok || back != st {
			t.Errorf("StatusFromName(%q) = %d, %v", st.String(), back, ok)
		}
		e := error(&Error{Status: st, Message: "x"})
		if !errors.Is(e, s) {
			t.Errorf("%s does not match its sentinel", st)
		}
		for other, os := range sentinels {
			if other != st && errors.Is(e, os) {
				t.Errorf("%s matches the %s sentinel", st, other)
			}
		}
		if errors.Is(e, ErrClosed) {
			t.Errorf("%s matches ErrClosed", st)
		}
	}
	// A closed-handle error is a NULL_POINTER *Error matching ErrClosed and ErrNullPointer
	// and no other sentinel; a NULL_POINTER error of the library does not match ErrClosed.
	ce := closedErr("Model")
	var pe *Error
	if !errors.As(ce, &pe) || pe.Status != StatusNullPointer || pe.Message != "pdkv.Model is closed" {
		t.Fatalf("closed error %#v", ce)
	}
	if !errors.Is(ce, ErrClosed) || !errors.Is(ce, ErrNullPointer) {
		t.Fatalf("closed error %v does not match ErrClosed and ErrNullPointer", ce)
	}
	for st, s := range sentinels {
		if st != StatusNullPointer && errors.Is(ce, s) {
			t.Errorf("closed error matches the %s sentinel", st)
		}
	}
	if got := ce.Error(); got != "pdkv: PDKV_ERR_NULL_POINTER: pdkv.Model is closed" {
		t.Errorf("closed Error() = %q", got)
	}
	if errors.Is(&Error{Status: StatusNullPointer, Message: "pdkv.Model is closed"}, ErrClosed) {
		t.Error("a library NULL_POINTER error with the same text matches ErrClosed")
	}
	if !errors.Is(fmt.Errorf("wrapped: %w", ce), ErrClosed) {
		t.Error("a wrapped closed error does not match ErrClosed")
	}
	if _, ok := StatusFromName("PDKV_ERR_NOPE"); ok {
		t.Error("unknown name resolved")
	}
	if got := (&Error{Status: StatusParse, Message: "bad"}).Error(); got != "pdkv: PDKV_ERR_PARSE: bad" {
		t.Errorf("Error() = %q", got)
	}
}

func TestVersion(t *testing.T) {
	maj, min, patch := Version()
	hmaj, hmin, _ := HeaderVersion()
	if maj != hmaj || min < hmin {
		t.Fatalf("library %d.%d.%d does not serve header %d.%d", maj, min, patch, hmaj, hmin)
	}
	if VersionString() == "" || !strings.HasPrefix(VersionString(), strings.Join([]string{itoa(maj), itoa(min)}, ".")) {
		t.Fatalf("version string %q vs %d.%d", VersionString(), maj, min)
	}
}

func itoa(v uint32) string {
	if v == 0 {
		return "0"
	}
	s := ""
	for ; v > 0; v /= 10 {
		s = string(rune('0'+v%10)) + s
	}
	return s
}

func TestTopology(t *testing.T) {
	r, err := TpRatio(2, 4)
	must(t, err)
	if r != -2 {
		t.Fatalf("tp_ratio(2,4) = %d", r)
	}
	if r, _ = TpRatio(4, 2); r != 2 {
		t.Fatalf("tp_ratio(4,2) = %d", r)
	}
	_, err = TpRatio(3, 2)
	wantErr(t, err, ErrTpNotDivisible, "3", "2")
	_, err = TpRatio(0, 2)
	wantErr(t, err, ErrInvalidArgument)

	ranks, err := HandshakeTargetRanks(2, 1, 4)
	must(t, err)
	if !reflect.DeepEqual(ranks, []uint32{2, 3}) {
		t.Fatalf("handshake ranks %v", ranks)
	}
	ranks, err = HandshakeTargetRanks(1, 0, 16)
	must(t, err)
	if len(ranks) != 16 || ranks[15] != 15 {
		t.Fatalf("handshake ranks %v", ranks)
	}
	ranks, err = HandshakeTargetRanks(4, 3, 2)
	must(t, err)
	if !reflect.DeepEqual(ranks, []uint32{1}) {
		t.Fatalf("handshake ranks %v", ranks)
	}
	_, err = HandshakeTargetRanks(2, 0, 3)
	wantErr(t, err, ErrTpNotDivisible, "2", "3")
	_, err = HandshakeTargetRanks(2, 2, 4)
	wantErr(t, err, ErrInvalidArgument)

	b, e, err := PhysicalHeadRange(4, 1, 8)
	must(t, err)
	if b != 2 || e != 4 {
		t.Fatalf("head range [%d,%d)", b, e)
	}
	_, _, err = PhysicalHeadRange(3, 0, 8)
	wantErr(t, err, ErrHeadsNotDivisible, "8", "3")
	_, _, err = PhysicalHeadRange(4, 4, 8)
	wantErr(t, err, ErrInvalidArgument)

	n, err := NotificationsExpectedPerRequest(2, 8)
	must(t, err)
	if n != 4 {
		t.Fatalf("notifications %d", n)
	}
	_, err = NotificationsExpectedPerRequest(3, 8)
	wantErr(t, err, ErrTpNotDivisible, "3", "8")
}

func TestTpMapping(t *testing.T) {
	m, err := NewTpMapping(TpMappingParams{LocalTpSize: 1, LocalTpRank: 0, RemoteTpSize: 4, TotalKVHeads: 2, HasMamba: true})
	must(t, err)
	defer m.Close()
	info, err := m.Info()
	must(t, err)
	if info.TpRatio != -4 || !info.RemoteReplicated || info.LocalReplicated || info.LocalPhysicalHeads != 2 ||
		info.RemotePhysicalHeads != 1 || info.NumAttentionReads != 2 || info.NotificationsExpected != 1 {
		t.Fatalf("info %+v", info)
	}
	want := map[TpList][]uint32{
		TpListHandshakeTargets: {0, 1, 2, 3}, TpListAttentionSources: {0, 2}, TpListMambaSources: {0, 1, 2, 3},
		TpListAllSources: {0, 1, 2, 3}, TpListNotifyTargets: {0, 1, 2, 3},
	}
	for which, w := range want {
		got, err := m.Ranks(which)
		must(t, err)
		if !reflect.DeepEqual(got, w) {
			t.Errorf("list %d = %v, want %v", which, got, w)
		}
	}
	slots, err := m.Ranks(TpListAttentionSlots)
	must(t, err)
	if len(slots) != 4 {
		t.Fatalf("slots %v", slots)
	}
	s, err := m.AttentionSlot(2)
	must(t, err)
	if s != 1 {
		t.Fatalf("slot of rank 2 = %d", s)
	}
	_, err = m.AttentionSlot(9)
	wantErr(t, err, ErrInvalidArgument, "9")
	_, err = m.Ranks(TpList(42))
	wantErr(t, err, ErrInvalidArgument)

	_, err = NewTpMapping(TpMappingParams{LocalTpSize: 2, RemoteTpSize: 3, TotalKVHeads: 8})
	wantErr(t, err, ErrTpNotDivisible, "2", "3")
	_, err = NewTpMapping(TpMappingParams{LocalTpSize: 2, LocalTpRank: 2, RemoteTpSize: 4, TotalKVHeads: 8})
	wantErr(t, err, ErrInvalidArgument)

	must(t, m.Close())
	must(t, m.Close())
	_, err = m.Info()
	wantErr(t, err, ErrClosed)
	_, err = m.Ranks(TpListAllSources)
	wantErr(t, err, ErrClosed)
	_, err = m.AttentionSlot(0)
	wantErr(t, err, ErrClosed)
}

func TestModels(t *testing.T) {
	m := nano(t)
	d, err := m.Describe()
	must(t, err)
	if d.Name != "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" || d.NumKVHeads != 2 || d.HeadSize != 128 ||
		d.MambaType != MambaMamba2 || d.MambaNGroups != 8 || d.LayerPattern == "" {
		t.Fatalf("describe %+v", d)
	}
	if MambaMamba2.String() != "mamba2" || MambaType(99).String() != "unknown" {
		t.Fatal("mamba type names")
	}
	a, mb, err := m.LayerCounts()
	must(t, err)
	if a == 0 || mb == 0 || int(a+mb) > len(d.LayerPattern)*2 {
		t.Fatalf("layer counts %d %d", a, mb)
	}

	// A model rebuilt from its own description describes the same.
	m2, err := NewModel(d)
	must(t, err)
	defer m2.Close()
	d2, err := m2.Describe()
	must(t, err)
	if !reflect.DeepEqual(d, d2) {
		t.Fatalf("round trip:\n%+v\n%+v", d, d2)
	}

	bad := d
	bad.NumKVHeads = 0
	_, err = NewModel(bad)
	wantErr(t, err, ErrInvalidArgument)
	bad = d
	bad.LayerPattern = "M*X"
	_, err = NewModel(bad)
	wantErr(t, err, ErrInvalidArgument)
	bad = d
	bad.Name = "a\x00b"
	_, err = NewModel(bad)
	wantErr(t, err, ErrInvalidArgument, "name")

	_, err = ModelFromPreset("no-such-model-7b")
	wantErr(t, err, ErrNotFound, "no-such-model-7b")
	_, err = ModelFromPreset("")
	wantErr(t, err, ErrNotFound)
	_, err = ModelFromPreset("nemotron\x00-3")
	wantErr(t, err, ErrInvalidArgument)

	presets, err := Presets()
	must(t, err)
	if len(presets) != PresetCount() || len(presets) == 0 {
		t.Fatalf("%d presets, count %d", len(presets), PresetCount())
	}
	found := false
	for _, p := range presets {
		found = found || p.Name == "nemotron-3-nano-30b"
		if p.HFName == "" || p.Source == "" {
			t.Errorf("preset %+v incomplete", p)
		}
	}
	if !found {
		t.Fatal("nemotron-3-nano-30b not among the presets")
	}
	_, err = PresetAt(PresetCount())
	wantErr(t, err, ErrOutOfBounds, itoa(uint32(PresetCount())))
	_, err = PresetAt(-1)
	wantErr(t, err, ErrOutOfBounds)

	must(t, m2.Close())
	must(t, m2.Close())
	_, err = m2.Describe()
	wantErr(t, err, ErrClosed)
	_, _, err = m2.LayerCounts()
	wantErr(t, err, ErrClosed)
	_, err = NewGeometry(m2, DefaultEngineConfig())
	wantErr(t, err, ErrClosed)
	_, err = NewGeometry(nil, DefaultEngineConfig())
	wantErr(t, err, ErrNullPointer)
}

func TestHFConfig(t *testing.T) {
	path := filepath.Join("..", "tests", "data", "hf_configs", "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json")
	fm, err := ModelFromHFConfigFile(path, "")
	must(t, err)
	defer fm.Close()
	data, err := os.ReadFile(path)
	must(t, err)
	jm, err := ModelFromHFConfigJSON(data, "my-name")
	must(t, err)
	defer jm.Close()
	jd, err := jm.Describe()
	must(t, err)
	if jd.Name != "my-name" {
		t.Fatalf("name %q", jd.Name)
	}
	// Both give the preset's TP2 geometry.
	want, err := geometry(t, nano(t), 2).Info()
	must(t, err)
	for _, m := range []*Model{fm, jm} {
		got, err := geometry(t, m, 2).Info()
		must(t, err)
		if got != want {
			t.Fatalf("geometry from config differs:\n%+v\n%+v", got, want)
		}
	}

	_, err = ModelFromHFConfigFile("/nonexistent/config.json", "")
	wantErr(t, err, ErrIO, "/nonexistent/config.json")
	_, err = ModelFromHFConfigFile("", "")
	wantErr(t, err, ErrIO)
	_, err = ModelFromHFConfigJSON(nil, "")
	wantErr(t, err, ErrParse)
	_, err = ModelFromHFConfigJSON([]byte(`{"model_type": "nemotron_h", `), "")
	wantErr(t, err, ErrParse)
	_, err = ModelFromHFConfigJSON(data, "x\x00")
	wantErr(t, err, ErrInvalidArgument)
}

func TestEngineAndGeometry(t *testing.T) {
	c := DefaultEngineConfig()
	if c.TpSize != 1 || c.Backend != BackendFlashAttn || c.MambaCacheMode != MambaCacheNone || c.ConvLayout != ConvLayoutDS {
		t.Fatalf("defaults %+v", c)
	}
	b, err := BackendFromName("FLASHINFER")
	must(t, err)
	if b != BackendFlashInfer || b.String() != "flashinfer" || BackendCustom.String() != "custom" {
		t.Fatalf("backend %v", b)
	}
	_, err = BackendFromName("warp_attn")
	wantErr(t, err, ErrNotFound, "warp_attn")
	_, err = BackendFromName("")
	wantErr(t, err, ErrNotFound)

	m := nano(t)
	g := geometry(t, m, 2)
	i, err := g.Info()
	must(t, err)
	if i.TpSize != 2 || i.KVHeadsPerRank != 1 || i.AttnBytesPerToken != 512 || !i.Hybrid || i.MambaType != MambaMamba2 ||
		i.ConvBytes != 18432 || i.SSMBytes != 1048576 || i.MambaPageBytes != 1067008 || i.MinBlockSize != 2096 ||
		i.BlockSize != 2096 || !i.BlockSizeRaised || i.AttnPageBytes != 1073152 || i.NumProjections != 3 {
		t.Fatalf("TP2 geometry %+v", i)
	}
	projs, err := g.Projections()
	must(t, err)
	names := []string{}
	for _, p := range projs {
		names = append(names, p.Name)
	}
	if !reflect.DeepEqual(names, []string{"x", "B", "C"}) || projs[0].Bytes != 12288 || projs[1].Offset != 12288 {
		t.Fatalf("projections %+v", projs)
	}
	_, err = g.Projection(3)
	wantErr(t, err, ErrOutOfBounds, "3")
	_, err = g.Projection(-1)
	wantErr(t, err, ErrOutOfBounds)
	shape, err := g.TemporalShape()
	must(t, err)
	if len(shape) != i.NumTemporalDims || len(shape) == 0 {
		t.Fatalf("temporal shape %v", shape)
	}
	prod := uint64(i.SSMDtypeBytes)
	for _, d := range shape {
		prod *= d
	}
	if prod != i.SSMBytes {
		t.Fatalf("temporal shape %v x %d B != %d", shape, i.SSMDtypeBytes, i.SSMBytes)
	}
	lines, err := g.LogLines()
	must(t, err)
	if len(lines) != i.NumLogLines {
		t.Fatalf("log lines %v", lines)
	}
	_, err = g.LogLine(i.NumLogLines)
	wantErr(t, err, ErrOutOfBounds)

	// Bad engine settings.
	bad := DefaultEngineConfig()
	bad.TpSize = 0
	_, err = NewGeometry(m, bad)
	wantErr(t, err, ErrInvalidArgument)
	bad.TpSize = 3
	_, err = NewGeometry(m, bad)
	wantErr(t, err, ErrHeadsNotDivisible, "2", "3")
	bad = DefaultEngineConfig()
	bad.ConvLayout = ConvLayoutSD
	_, err = NewGeometry(m, bad)
	wantErr(t, err, ErrUnsupportedLayout)
	bad = DefaultEngineConfig()
	bad.Backend = BackendFlashMLA
	_, err = NewGeometry(m, bad)
	wantErr(t, err, ErrIncompatible)
	bad = DefaultEngineConfig()
	bad.Backend = Backend(77)
	_, err = NewGeometry(m, bad)
	wantErr(t, err, ErrInvalidArgument)

	// A custom backend: the kernel block sizes travel in C memory.
	custom := DefaultEngineConfig()
	custom.TpSize = 2
	custom.Backend = BackendCustom
	custom.PreferredBlockSize = 16
	custom.KernelBlockSizes = []uint32{16, 32, 64}
	cg, err := NewGeometry(m, custom)
	must(t, err)
	defer cg.Close()
	ci, err := cg.Info()
	must(t, err)
	if ci.BlockSize%ci.KernelBlockSize != 0 || (ci.KernelBlockSize != 16 && ci.KernelBlockSize != 32 && ci.KernelBlockSize != 64) {
		t.Fatalf("custom kernel block %d for block %d", ci.KernelBlockSize, ci.BlockSize)
	}

	r, err := BlockSizeRatio(64, 16)
	must(t, err)
	if r != 4 {
		t.Fatalf("bsr %d", r)
	}
	_, err = BlockSizeRatio(64, 48)
	wantErr(t, err, ErrIncompatible, "64", "48")
	_, err = BlockSizeRatio(0, 16)
	wantErr(t, err, ErrInvalidArgument)

	must(t, cg.Close())
	must(t, cg.Close())
	for _, f := range []func() error{
		func() error { _, err := cg.Info(); return err },
		func() error { _, err := cg.Projection(0); return err },
		func() error { _, err := cg.Projections(); return err },
		func() error { _, err := cg.TemporalShape(); return err },
		func() error { _, err := cg.LogLine(0); return err },
		func() error { _, err := cg.LogLines(); return err },
		func() error { _, err := cg.LocalConvOffsets(); return err },
		func() error { _, err := cg.RemoteConvOffsets(0, 1); return err },
		func() error { _, err := cg.SSMReadRange(0, 0, 0, 1); return err },
		func() error { _, err := NewMambaReads(cg, g, 0, MambaReadsPdkv); return err },
		func() error { _, err := NewMambaReads(g, cg, 0, MambaReadsPdkv); return err },
		func() error { _, err := MambaLocalDescriptors(nil, 1, cg); return err },
	} {
		wantErr(t, f(), ErrClosed)
	}
}

func TestMamba(t *testing.T) {
	m := nano(t)
	d2, p4, d4 := geometry(t, m, 2), geometry(t, m, 4), geometry(t, m, 4)
	local, err := d2.LocalConvOffsets()
	must(t, err)
	if !reflect.DeepEqual(local, []ByteRange{{0, 12288}, {12288, 3072}, {15360, 3072}}) {
		t.Fatalf("local conv offsets %v", local)
	}
	remote, err := d2.RemoteConvOffsets(1, -2)
	must(t, err)
	if !reflect.DeepEqual(remote, []ByteRange{{0, 6144}, {6144, 1536}, {7680, 1536}}) {
		t.Fatalf("remote conv offsets %v", remote)
	}
	_, err = d4.RemoteConvOffsets(1, 0)
	wantErr(t, err, ErrInvalidArgument)
	ssm, err := d4.SSMReadRange(18432, 1048576, 1, 2)
	must(t, err)
	if ssm != (ByteRange{18432 + 524288, 524288}) {
		t.Fatalf("ssm read %v", ssm)
	}
	ppl, err := PhysicalBlocksPerLogical(18432, 1048576, 4096)
	must(t, err)
	if ppl != 261 {
		t.Fatalf("ppl %d", ppl)
	}
	_, err = PhysicalBlocksPerLogical(1, 1, 0)
	wantErr(t, err, ErrInvalidArgument)

	l, err := NewMambaReads(p4, d2, 1, MambaReadsPdkv)
	must(t, err)
	defer l.Close()
	items, err := l.Items()
	must(t, err)
	want := []MambaRead{
		{2, "x", 0, 0, 6144}, {3, "x", 0, 6144, 6144},
		{2, "B", 6144, 12288, 1536}, {3, "B", 6144, 13824, 1536},
		{2, "C", 7680, 15360, 1536}, {3, "C", 7680, 16896, 1536},
		{2, "ssm", 9216, 18432, 524288}, {3, "ssm", 9216, 542720, 524288},
	}
	if !reflect.DeepEqual(items, want) {
		t.Fatalf("reads %+v", items)
	}
	src, err := l.SourceRanks()
	must(t, err)
	if !reflect.DeepEqual(src, []uint32{2, 3}) {
		t.Fatalf("source ranks %v", src)
	}

	_, err = NewMambaReads(p4, d2, 2, MambaReadsPdkv)
	wantErr(t, err, ErrInvalidArgument)
	_, err = NewMambaReads(p4, d2, 0, MambaReadsRule(2))
	wantErr(t, err, ErrInvalidArgument, "rule")
	_, err = NewMambaReads(nil, d2, 0, MambaReadsPdkv)
	wantErr(t, err, ErrNullPointer, "p_geometry")
	_, err = NewMambaReads(p4, nil, 0, MambaReadsPdkv)
	wantErr(t, err, ErrNullPointer, "d_geometry")
	other, err := m.Describe()
	must(t, err)
	other.MambaDState = 64
	om, err := NewModel(other)
	must(t, err)
	defer om.Close()
	_, err = NewMambaReads(p4, geometry(t, om, 2), 0, MambaReadsPdkv)
	wantErr(t, err, ErrIncompatible)

	// Pure attention models have no conv state.
	desc, err := m.Describe()
	must(t, err)
	desc.MambaType = MambaNone
	desc.LayerPattern = "****"
	am, err := NewModel(desc)
	must(t, err)
	defer am.Close()
	_, err = geometry(t, am, 2).LocalConvOffsets()
	wantErr(t, err, ErrUnsupportedMambaType)

	must(t, l.Close())
	must(t, l.Close())
	_, err = l.Items()
	wantErr(t, err, ErrClosed)
	_, err = l.SourceRanks()
	wantErr(t, err, ErrClosed)
}

func TestDescriptors(t *testing.T) {
	local := []Region{{1000, 512, 3}, {100000, 512, 3}}
	l, err := AttentionLocalDescriptors(local, 1)
	must(t, err)
	defer l.Close()
	d, err := l.Items()
	must(t, err)
	if len(d) != 6 || d[0] != (Descriptor{1000, 512}) || d[2] != (Descriptor{2024, 512}) || d[3] != (Descriptor{100000, 512}) {
		t.Fatalf("local %v", d)
	}
	_, err = AttentionLocalDescriptors(local, 0)
	wantErr(t, err, ErrInvalidArgument)
	empty, err := AttentionLocalDescriptors(nil, 1)
	must(t, err)
	defer empty.Close()
	if e, err := empty.Items(); err != nil || len(e) != 0 {
		t.Fatalf("empty regions: %v %v", e, err)
	}

	mp, err := NewTpMapping(TpMappingParams{LocalTpSize: 4, LocalTpRank: 3, RemoteTpSize: 2, TotalKVHeads: 8})
	must(t, err)
	defer mp.Close()
	dRegions := []Region{{0, 1024, 4}}
	pRegions := []Region{{1 << 20, 2048, 4}}
	rl, err := AttentionRemoteDescriptors(dRegions, pRegions, mp, 1)
	must(t, err)
	defer rl.Close()
	rd, err := rl.Items()
	must(t, err)
	if len(rd) != 4 || rd[0] != (Descriptor{1<<20 + 1024, 1024}) || rd[3] != (Descriptor{1<<20 + 1024 + 3*2048, 1024}) {
		t.Fatalf("remote %v", rd)
	}
	_, err = AttentionRemoteDescriptors(dRegions, nil, mp, 1)
	wantErr(t, err, ErrIncompatible)
	_, err = AttentionRemoteDescriptors(dRegions, []Region{{1 << 20, 1024, 4}}, mp, 1)
	wantErr(t, err, ErrIncompatible)
	_, err = AttentionSplitDescriptors(rl, mp, 1, 0)
	wantErr(t, err, ErrInvalidArgument)

	neg, err := NewTpMapping(TpMappingParams{LocalTpSize: 1, RemoteTpSize: 4, TotalKVHeads: 2, HasMamba: true})
	must(t, err)
	defer neg.Close()
	fa, err := AttentionLocalDescriptors([]Region{{4096, 1024, 2}}, 1)
	must(t, err)
	defer fa.Close()
	s2, err := AttentionSplitDescriptors(fa, neg, 1, 2)
	must(t, err)
	defer s2.Close()
	sd, err := s2.Items()
	must(t, err)
	if !reflect.DeepEqual(sd, []Descriptor{{4096 + 512, 512}, {4096 + 1024 + 512, 512}}) {
		t.Fatalf("split %v", sd)
	}
	_, err = AttentionSplitDescriptors(fa, neg, 1, 9)
	wantErr(t, err, ErrInvalidArgument, "9")
	_, err = AttentionSplitDescriptors(nil, neg, 1, 2)
	wantErr(t, err, ErrNullPointer)
	_, err = AttentionRemoteDescriptors(dRegions, pRegions, nil, 1)
	wantErr(t, err, ErrNullPointer)

	// Mamba: D TP2 <- P TP4, the worked Nemotron-3-Nano pages.
	m := nano(t)
	p4, d2 := geometry(t, m, 4), geometry(t, m, 2)
	const dPage, pPage = 1073152, 540672
	const pb = uint64(1) << 32
	ml, err := MambaLocalDescriptors([]Region{{0, dPage, 2}}, 1, d2)
	must(t, err)
	defer ml.Close()
	md, err := ml.Items()
	must(t, err)
	if len(md) != 8 || md[0] != (Descriptor{0, 12288}) || md[1] != (Descriptor{dPage, 12288}) || md[7] != (Descriptor{dPage + 18432, 1048576}) {
		t.Fatalf("mamba local %v", md)
	}
	reads, err := NewMambaReads(p4, d2, 1, MambaReadsPdkv)
	must(t, err)
	defer reads.Close()
	mr, err := MambaRemoteDescriptors([]Region{{pb, pPage, 2}}, 1, p4, reads, 3)
	must(t, err)
	defer mr.Close()
	mrd, err := mr.Items()
	must(t, err)
	if len(mrd) != 8 || mrd[0] != (Descriptor{pb, 6144}) || mrd[1] != (Descriptor{pb + pPage, 6144}) || mrd[6] != (Descriptor{pb + 9216, 524288}) {
		t.Fatalf("mamba remote %v", mrd)
	}
	ms, err := MambaLocalSplitDescriptors([]Region{{0, dPage, 2}}, 1, d2, reads, 3)
	must(t, err)
	defer ms.Close()
	msd, err := ms.Items()
	must(t, err)
	if len(msd) != len(mrd) || msd[0] != (Descriptor{6144, 6144}) || msd[6] != (Descriptor{542720, 524288}) {
		t.Fatalf("mamba split %v", msd)
	}
	for i := range msd {
		if msd[i].Len != mrd[i].Len {
			t.Fatalf("split %d length %d != remote %d", i, msd[i].Len, mrd[i].Len)
		}
	}
	none, err := MambaRemoteDescriptors([]Region{{pb, pPage, 2}}, 1, p4, reads, 0)
	must(t, err)
	defer none.Close()
	if n, _ := none.Items(); len(n) != 0 {
		t.Fatalf("P rank 0 supplies %v", n)
	}
	_, err = MambaLocalDescriptors([]Region{{0, dPage, 2}}, 0, d2)
	wantErr(t, err, ErrInvalidArgument)
	_, err = MambaLocalDescriptors([]Region{{0, 4096, 2}}, 1, d2)
	wantErr(t, err, ErrOutOfBounds)
	_, err = MambaLocalDescriptors([]Region{{^uint64(0) - dPage, dPage, 2}}, 1, d2)
	wantErr(t, err, ErrOverflow)
	_, err = MambaLocalDescriptors([]Region{{0, dPage, 2}}, 1, nil)
	wantErr(t, err, ErrNullPointer)
	_, err = MambaRemoteDescriptors([]Region{{pb, pPage, 2}}, 1, p4, nil, 3)
	wantErr(t, err, ErrNullPointer, "reads")
	_, err = MambaLocalSplitDescriptors([]Region{{0, dPage, 2}}, 1, nil, reads, 3)
	wantErr(t, err, ErrNullPointer)

	// Closed inputs and lists.
	must(t, reads.Close())
	_, err = MambaRemoteDescriptors([]Region{{pb, pPage, 2}}, 1, p4, reads, 3)
	wantErr(t, err, ErrClosed)
	_, err = MambaLocalSplitDescriptors([]Region{{0, dPage, 2}}, 1, d2, reads, 3)
	wantErr(t, err, ErrClosed)
	must(t, fa.Close())
	must(t, fa.Close())
	_, err = fa.Items()
	wantErr(t, err, ErrClosed)
	_, err = AttentionSplitDescriptors(fa, neg, 1, 2)
	wantErr(t, err, ErrClosed)
	must(t, mp.Close())
	_, err = AttentionRemoteDescriptors(dRegions, pRegions, mp, 1)
	wantErr(t, err, ErrClosed)
}

// TestCloseAfterFinalizer runs each handle's finalizer body, then Close and a method: Close
// stays a no-op and the method reports ErrClosed.
func TestCloseAfterFinalizer(t *testing.T) {
	m, err := ModelFromPreset("nemotron-3-nano-30b")
	must(t, err)
	m.h.close() // what the finalizer does
	must(t, m.Close())
	_, err = m.Describe()
	wantErr(t, err, ErrClosed)

	g := geometry(t, nano(t), 2)
	g.h.close()
	must(t, g.Close())
	_, err = g.Info()
	wantErr(t, err, ErrClosed)
}

// TestFinalizersFreeForgottenHandles drops handles without Close and lets the GC collect them.
func TestFinalizersFreeForgottenHandles(t *testing.T) {
	for i := 0; i < 200; i++ {
		m, err := ModelFromPreset("nemotron-3-nano-30b")
		must(t, err)
		c := DefaultEngineConfig()
		c.TpSize = 2
		g, err := NewGeometry(m, c)
		must(t, err)
		if _, err := g.Info(); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.GC()
}

// TestConcurrentUseAndClose races queries against Close: every query either succeeds with the
// right value or returns ErrClosed.
func TestConcurrentUseAndClose(t *testing.T) {
	m := nano(t)
	for round := 0; round < 20; round++ {
		g := geometry(t, m, 2)
		var wg sync.WaitGroup
		errs := make(chan error, 64)
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; k < 50; k++ {
					i, err := g.Info()
					if err != nil {
						if !errors.Is(err, ErrClosed) {
							errs <- err
						}
						return
					}
					if i.BlockSize != 2096 {
						errs <- errors.New("wrong block size under concurrency")
						return
					}
				}
			}()
		}
		_ = g.Close()
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
}
