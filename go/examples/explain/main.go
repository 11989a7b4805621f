// Command explain describes a prefill/decode (P/D) deployment of a preset model through the
// pdkv Go bindings: the geometry of each side, which P ranks every D rank handshakes with and
// reads attention KV and Mamba state from, and the byte-exact Mamba reads.
//
// Usage: go run ./examples/explain [preset [p_tp d_tp]]
// (default: nemotron-3-nano-30b, P TP4 -> D TP2; cgo flags as documented in package pdkv).
package main

import (
	"fmt"
	"os"
	"strconv"

	pdkv "github.com/pdkv/pdkv/go"
)

// fail prints the error and exits.
func fail(what string, err error) {
	fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
	os.Exit(1)
}

// describeEngine prints one engine's geometry and returns it.
func describeEngine(model *pdkv.Model, tp uint32, role string) *pdkv.Geometry {
	cfg := pdkv.DefaultEngineConfig()
	cfg.TpSize = tp
	g, err := pdkv.NewGeometry(model, cfg)
	if err != nil {
		fail("geometry", err)
	}
	info, err := g.Info()
	if err != nil {
		fail("geometry info", err)
	}
	fmt.Printf("%s engine (TP%d, %s):\n", role, tp, cfg.Backend)
	fmt.Printf("  attention: %d KV head(s)/rank, %d B/token\n", info.KVHeadsPerRank, info.AttnBytesPerToken)
	fmt.Printf("  mamba (%s): conv %d B + ssm %d B = page %d B per rank\n", info.MambaType, info.ConvBytes, info.SSMBytes, info.MambaPageBytes)
	fmt.Printf("  block size %d tokens (min %d), padded page %d B (+%.2f%%), kernel block %d, ppl %d\n",
		info.BlockSize, info.MinBlockSize, info.MambaPagePaddedBytes, info.PaddingPercent, info.KernelBlockSize, info.PhysicalPerLogical)
	lines, err := g.LogLines()
	if err != nil {
		fail("log lines", err)
	}
	for _, l := range lines {
		fmt.Printf("  vLLM log: %s\n", l)
	}
	return g
}

func main() {
	preset := "nemotron-3-nano-30b"
	pTp, dTp := uint32(4), uint32(2)
	if len(os.Args) > 1 {
		preset = os.Args[1]
	}
	if len(os.Args) > 3 {
		p, err1 := strconv.ParseUint(os.Args[2], 10, 32)
		d, err2 := strconv.ParseUint(os.Args[3], 10, 32)
		if err1 != nil || err2 != nil {
			fail("usage", fmt.Errorf("explain [preset [p_tp d_tp]]"))
		}
		pTp, dTp = uint32(p), uint32(d)
	}

	fmt.Printf("pdkv %s\n", pdkv.VersionString())
	model, err := pdkv.ModelFromPreset(preset)
	if err != nil {
		fail("preset", err)
	}
	defer model.Close()
	desc, err := model.Describe()
	if err != nil {
		fail("describe", err)
	}
	fmt.Printf("model %s: %d KV heads x %d, Mamba %s\n\n", desc.Name, desc.NumKVHeads, desc.HeadSize, desc.MambaType)

	pg := describeEngine(model, pTp, "P (prefill)")
	defer pg.Close()
	dg := describeEngine(model, dTp, "D (decode)")
	defer dg.Close()
	ratio, err := pdkv.TpRatio(dTp, pTp)
	if err != nil {
		fail("tp_ratio", err)
	}
	fmt.Printf("\ntp_ratio on D = %d\n", ratio)

	for rank := uint32(0); rank < dTp; rank++ {
		explainRank(model, desc, pg, dg, pTp, dTp, rank)
	}
}

// explainRank prints what D rank `rank` reads and from where.
func explainRank(model *pdkv.Model, desc pdkv.ModelDesc, pg, dg *pdkv.Geometry, pTp, dTp, rank uint32) {
	m, err := pdkv.NewTpMapping(pdkv.TpMappingParams{
		LocalTp: dTp, LocalRank: rank, RemoteTp: pTp, TotalKVHeads: desc.NumKVHeads,
		UseMLA: desc.UseMLA, HasMamba: desc.MambaType != pdkv.MambaNone,
	})
	if err != nil {
		fail("tp mapping", err)
	}
	defer m.Close()
	info, err := m.Info()
	if err != nil {
		fail("mapping info", err)
	}
	fmt.Printf("\nD rank %d:\n", rank)
	for _, l := range []struct {
		label string
		which pdkv.TpList
	}{
		{"handshake with P ranks", pdkv.TpListHandshakeTargets},
		{"attention from", pdkv.TpListAttentionSources},
		{"mamba state from", pdkv.TpListMambaSources},
		{"notify", pdkv.TpListNotifyTargets},
	} {
		r, err := m.Ranks(l.which)
		if err != nil {
			fail("ranks", err)
		}
		fmt.Printf("    %-22s %v\n", l.label, r)
	}
	fmt.Printf("    rank offset factor %d, each P rank expects %d notification(s) per request\n",
		info.RankOffsetFactor, info.NotificationsExpected)
	if desc.MambaType == pdkv.MambaNone {
		return
	}
	reads, err := pdkv.NewMambaReads(pg, dg, rank, pdkv.MambaReadsPdkv)
	if err != nil {
		fail("mamba reads", err)
	}
	defer reads.Close()
	items, err := reads.Items()
	if err != nil {
		fail("mamba read items", err)
	}
	fmt.Printf("    Mamba reads per block per layer (%d):\n", len(items))
	for _, r := range items {
		fmt.Printf("      P%d %-3s  remote +%-8d -> local +%-8d %d B\n", r.PRank, r.Part, r.RemoteOffset, r.LocalOffset, r.Length)
	}
}
