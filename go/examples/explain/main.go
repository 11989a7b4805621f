// Command explain describes a prefill/decode (P/D) deployment of a preset model through the
// pdkv Go bindings: the geometry of each side, which P ranks every D rank handshakes with and
// reads attention KV and Mamba state from, the byte-exact Mamba reads, and the compiled,
// validated transfer plan of one request (a 3000-token prompt, no prefix hit on D) per D rank.
//
// Usage: go run ./examples/explain [preset [p_tp_size d_tp_size]]
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
	pTpSize, dTpSize := uint32(4), uint32(2)
	if len(os.Args) > 1 {
		preset = os.Args[1]
	}
	if len(os.Args) > 3 {
		p, err1 := strconv.ParseUint(os.Args[2], 10, 32)
		d, err2 := strconv.ParseUint(os.Args[3], 10, 32)
		if err1 != nil || err2 != nil {
			fail("usage", fmt.Errorf("explain [preset [p_tp_size d_tp_size]]"))
		}
		pTpSize, dTpSize = uint32(p), uint32(d)
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

	pg := describeEngine(model, pTpSize, "P (prefill)")
	defer pg.Close()
	dg := describeEngine(model, dTpSize, "D (decode)")
	defer dg.Close()
	ratio, err := pdkv.TpRatio(dTpSize, pTpSize)
	if err != nil {
		fail("tp_ratio", err)
	}
	fmt.Printf("\ntp_ratio on D = %d\n", ratio)

	for rank := uint32(0); rank < dTpSize; rank++ {
		explainRank(model, desc, pg, dg, pTpSize, dTpSize, rank)
	}
	compilePlans(model, pg, dg, pTpSize, dTpSize, 3000)
}

// metadataFor builds the handshake metadata of one rank with `regions` registered regions.
func metadataFor(model *pdkv.Model, tp, rank uint32, id string, base uint64, regions uint32) *pdkv.EngineMetadata {
	cfg := pdkv.DefaultEngineConfig()
	cfg.TpSize = tp
	layout := pdkv.DefaultEngineLayout()
	layout.EngineID, layout.TpRank, layout.NumRegions, layout.Base = id, rank, regions, base
	md, err := pdkv.EngineMetadataFromModel(model, cfg, layout)
	if err != nil {
		fail("metadata", err)
	}
	return md
}

// blockRange returns ids first, first+1, ... covering tokens at blockSize tokens per block.
func blockRange(first, tokens, blockSize uint64) []uint64 {
	var ids []uint64
	for i := uint64(0); i*blockSize < tokens; i++ {
		ids = append(ids, first+i)
	}
	return ids
}

// compilePlans validates the handshake and compiles one request's plan for every D rank.
func compilePlans(model *pdkv.Model, pg, dg *pdkv.Geometry, pTpSize, dTpSize uint32, tokens uint64) {
	nAttn, nMamba, err := model.LayerCounts()
	if err != nil {
		fail("layer counts", err)
	}
	// HMA: one region per layer of a group; the group size is the attention layer count.
	regions := nAttn
	if regions == 0 {
		regions = 1
	}
	var pMeta []*pdkv.EngineMetadata
	for r := uint32(0); r < pTpSize; r++ {
		md := metadataFor(model, pTpSize, r, "prefill", (2+uint64(r))<<40, regions)
		defer md.Close()
		pMeta = append(pMeta, md)
	}
	items, err := pdkv.HandshakeValidateEngineRanks(pMeta)
	if err != nil {
		fail("validate P ranks", err)
	}
	for _, it := range items {
		fmt.Printf("P ranks disagree: %s\n", it.Text)
	}
	pInfo, err := pMeta[0].Info()
	if err != nil {
		fail("metadata info", err)
	}
	dInfo, err := dg.Info()
	if err != nil {
		fail("geometry info", err)
	}
	remote := blockRange(20, tokens, uint64(pInfo.KernelBlockSize))
	local := blockRange(10, tokens, dInfo.KernelBlockSize)
	fmt.Printf("\nTransfer plan for one %d-token prompt (P blocks %v, D blocks %v):\n", tokens, remote, local)
	groups := []pdkv.PlanGroup{{Trim: pdkv.GroupTrimInput{Kind: pdkv.GroupAttention, LocalBlocks: local, RemoteBlocks: remote, RemoteComputedTokens: tokens}}}
	// Mamba layers form ceil(nMamba / regions) groups; the last may use fewer regions.
	for g := uint32(0); g*regions < nMamba; g++ {
		group := pdkv.PlanGroup{Trim: pdkv.GroupTrimInput{Kind: pdkv.GroupMamba, LocalBlocks: []uint64{40 + uint64(g)},
			RemoteBlocks: []uint64{50 + uint64(g)}, RemoteComputedTokens: tokens}}
		if used := nMamba - g*regions; used < regions {
			for r := uint32(0); r < used; r++ {
				group.Regions = append(group.Regions, r)
			}
		}
		groups = append(groups, group)
	}
	for rank := uint32(0); rank < dTpSize; rank++ {
		dMeta := metadataFor(model, dTpSize, rank, "decode", 1<<40, regions)
		defer dMeta.Close()
		if err := pdkv.HandshakeRequireCompatible(dMeta, pMeta[0]); err != nil {
			fail("handshake", err)
		}
		ctx, err := pdkv.NewPlanContext(pdkv.PlanContextParams{Local: dMeta, Remote: pMeta, LocalGeometry: dg, RemoteGeometry: pg})
		if err != nil {
			fail("plan context", err)
		}
		defer ctx.Close()
		plan, err := ctx.Compile(groups)
		if err != nil {
			fail("compile", err)
		}
		defer plan.Close()
		if err := plan.Validate(ctx, groups); err != nil {
			fail("validate", err)
		}
		info, err := plan.Info()
		if err != nil {
			fail("plan info", err)
		}
		readRanks, err := plan.ReadRanks()
		if err != nil {
			fail("read ranks", err)
		}
		notify, err := plan.NotifyRanks()
		if err != nil {
			fail("notify ranks", err)
		}
		fmt.Printf("  D rank %d: reads from P %v, notifies %v; %d B (%d attention + %d Mamba), %d pieces -> %d reads\n",
			rank, readRanks, notify, info.Bytes, info.AttentionBytes, info.MambaBytes, info.PiecesBeforeCoalescing, info.PiecesAfterCoalescing)
		for _, p := range readRanks {
			reads, bytes, err := plan.RankReads(p)
			if err != nil {
				fail("rank reads", err)
			}
			f := reads[0]
			fmt.Printf("    P%d: %d reads, %d B; first: region %d +%d -> region %d +%d, %d B\n",
				p, len(reads), bytes, f.RemoteRegion, f.RemoteOffset, f.LocalRegion, f.LocalOffset, f.Length)
		}
		for g := 0; g < info.NumGroups; g++ {
			z, err := plan.GroupZero(g)
			if err != nil {
				fail("group zero", err)
			}
			if len(z.Zero) > 0 {
				fmt.Printf("    group %d (%s): zero %d range(s), first %+v\n", g, z.Kind, len(z.Zero), z.Zero[0])
			}
		}
	}
}

// explainRank prints what D rank `rank` reads and from where.
func explainRank(model *pdkv.Model, desc pdkv.ModelDesc, pg, dg *pdkv.Geometry, pTpSize, dTpSize, rank uint32) {
	m, err := pdkv.NewTpMapping(pdkv.TpMappingParams{
		LocalTpSize: dTpSize, LocalTpRank: rank, RemoteTpSize: pTpSize, TotalKVHeads: desc.NumKVHeads,
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
		fmt.Printf("      P%d %-3s  remote +%-8d -> local +%-8d %d B\n", r.PTpRank, r.Part, r.RemoteOffset, r.LocalOffset, r.Length)
	}
}
