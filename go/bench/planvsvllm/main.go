// Command planvsvllm times per-request plan compilation through the Go binding, on the requests
// bench/plan_vs_vllm.cpp times through C++ and C (bench/plan_request.hpp; the id generator is
// mirrored here), with the attention ids given as the block tables hold them (logical ids,
// KernelBlocksPerID = ppl) and one plan reused request after request (CompileInto). Every case
// is checked to plan what Compile plans. bench/plan_vs_vllm.py runs it and puts its medians
// beside C's; each case prints one JSON line.
//
//	go run ./bench/planvsvllm [-tokens 4096,131072] [-hits 0,50] [-alloc contig,frag]
//	    [-geometry flashinfer,flash_attn] [-target-s 0.3]
package main

import (
	"flag"
	"fmt"
	"log"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pdkv/pdkv/go"
)

const (
	dPool   = 5700
	pPool   = 8200
	regions = 6
)

// splitMix is splitmix64, as bench/plan_request.hpp.
type splitMix struct{ s uint64 }

func (g *splitMix) next() uint64 {
	g.s += 0x9E3779B97F4A7C15
	z := g.s
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9
	z = (z ^ (z >> 27)) * 0x94D049BB133111EB
	return z ^ (z >> 31)
}

// logicalIDs draws total distinct ids from [1, pool) as bench/plan_request.hpp does.
func logicalIDs(pool, total uint64, frag bool, seed uint64) []uint64 {
	out := make([]uint64, 0, total)
	if !frag {
		base := 1 + seed%97
		for i := uint64(0); i < total; i++ {
			out = append(out, base+i)
		}
		return out
	}
	all := make([]uint64, pool-1)
	for i := range all {
		all[i] = uint64(i) + 1
	}
	g := splitMix{seed}
	for i := uint64(0); i < total; i++ {
		j := i + g.next()%(uint64(len(all))-i)
		all[i], all[j] = all[j], all[i]
		out = append(out, all[i])
	}
	return out
}

type shape struct {
	tokens, hitPct             uint64
	frag                       bool
	dBlock, pBlock, dPPL, pPPL uint64
}

// groups builds four Mamba groups (the last on regions 0-4), then attention with logical ids.
func groups(s shape, mode pdkv.MambaCacheMode) []pdkv.PlanGroup {
	nLoad := s.tokens - 1
	ndTotal := (nLoad + s.dBlock - 1) / s.dBlock
	hit := ndTotal * s.hitPct / 100
	npf := (nLoad + s.pBlock - 1) / s.pBlock
	seed := s.tokens*31 + s.hitPct*7 + 5
	local := logicalIDs(dPool, 4+ndTotal-hit, s.frag, seed)
	remote := logicalIDs(pPool, 4+npf, s.frag, seed*7+3)
	var out []pdkv.PlanGroup
	for g := 0; g < 4; g++ {
		pg := pdkv.PlanGroup{Trim: pdkv.GroupTrimInput{
			Kind: pdkv.GroupMamba, CacheMode: mode, LocalBlocks: []uint64{local[g]}, RemoteBlocks: []uint64{remote[g]},
			RemoteComputedTokens: nLoad, LocalHitTokens: hit * s.dBlock,
		}}
		if g == 3 {
			pg.Regions = []uint32{0, 1, 2, 3, 4}
		}
		out = append(out, pg)
	}
	return append(out, pdkv.PlanGroup{Trim: pdkv.GroupTrimInput{
		Kind: pdkv.GroupAttention, LocalBlocks: local[4:], RemoteBlocks: remote[4:], RemoteComputedTokens: nLoad,
		LocalHitTokens: hit * s.dBlock, LocalKernelBlocksPerID: pdkv.Ptr(s.dPPL), RemoteKernelBlocksPerID: pdkv.Ptr(s.pPPL),
	}})
}

// timeCalls returns the median ns per call over samples of repeated calls for about targetS.
func timeCalls(f func(), targetS float64) float64 {
	f()
	t0 := time.Now()
	f()
	one := time.Since(t0).Seconds()
	reps := int(20e-6 / (one + 1e-9))
	if reps < 1 {
		reps = 1
	}
	var samples []float64
	start := time.Now()
	for len(samples) < 15 || (time.Since(start).Seconds() < targetS && len(samples) < 100000) {
		a := time.Now()
		for i := 0; i < reps; i++ {
			f()
		}
		samples = append(samples, float64(time.Since(a).Nanoseconds())/float64(reps))
	}
	sort.Float64s(samples)
	return samples[len(samples)/2]
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func main() {
	tokens := flag.String("tokens", "4096,32768,131072,1048576", "prompt tokens per request")
	hits := flag.String("hits", "0,50", "prefix hits in percent of D's blocks")
	allocs := flag.String("alloc", "contig,frag", "block id layouts")
	geos := flag.String("geometry", "flashinfer,flash_attn", "attention backends")
	targetS := flag.Float64("target-s", 0.3, "seconds of samples per case")
	flag.Parse()
	model, err := pdkv.ModelFromPreset("nemotron-3-nano-30b")
	must(err)
	defer model.Close()
	for _, geo := range strings.Split(*geos, ",") {
		backend := pdkv.BackendFlashAttn
		if geo == "flashinfer" {
			backend = pdkv.BackendFlashInfer
		}
		for _, hs := range strings.Split(*hits, ",") {
			hitPct, err := strconv.ParseUint(hs, 10, 64)
			must(err)
			mode := pdkv.MambaCacheNone
			if hitPct > 0 {
				mode = pdkv.MambaCacheAlign
			}
			cfg := func(tp uint32) pdkv.EngineConfig {
				c := pdkv.DefaultEngineConfig()
				c.TpSize, c.UserBlockSize, c.Backend, c.MambaCacheMode = tp, pdkv.Ptr[uint32](2096), backend, mode
				return c
			}
			dg, err := pdkv.NewGeometry(model, cfg(2))
			must(err)
			pg, err := pdkv.NewGeometry(model, cfg(4))
			must(err)
			// From the defaults (one pipeline stage, HND): a bare EngineLayout{} has PpSize 0.
			layout := func(id string, rank uint32, pool uint64, base uint64) pdkv.EngineLayout {
				l := pdkv.DefaultEngineLayout()
				l.EngineID, l.TpRank, l.NumLogicalBlocks, l.NumRegions, l.Base = id, rank, pool, regions, base
				return l
			}
			d, err := pdkv.EngineMetadataFromModel(model, cfg(2), layout("decode", 0, dPool, 1<<40))
			must(err)
			var ps []*pdkv.EngineMetadata
			for r := uint32(0); r < 4; r++ {
				p, err := pdkv.EngineMetadataFromModel(model, cfg(4), layout("prefill", r, pPool, uint64(2+r)<<44))
				must(err)
				ps = append(ps, p)
			}
			ctx, err := pdkv.NewPlanContext(pdkv.PlanContextParams{Local: d, Remote: ps, LocalGeometry: dg, RemoteGeometry: pg})
			must(err)
			di, err := dg.Info()
			must(err)
			pi, err := pg.Info()
			must(err)
			for _, ts := range strings.Split(*tokens, ",") {
				t, err := strconv.ParseUint(ts, 10, 64)
				must(err)
				for _, alloc := range strings.Split(*allocs, ",") {
					s := shape{t, hitPct, alloc == "frag", uint64(di.BlockSize), uint64(pi.BlockSize), di.PhysicalPerLogical, pi.PhysicalPerLogical}
					gs := groups(s, mode)
					want, err := ctx.Compile(gs)
					must(err)
					plan, err := pdkv.NewTransferPlan()
					must(err)
					must(ctx.CompileInto(gs, plan))
					a, err := want.JSON()
					must(err)
					b, err := plan.JSON()
					must(err)
					if a != b {
						log.Fatalf("%s/%d: CompileInto planned differently from Compile", geo, t)
					}
					ns := timeCalls(func() { must(ctx.CompileInto(gs, plan)) }, *targetS)
					info, err := plan.Info()
					must(err)
					fmt.Printf("{\"case\": \"%s/%d/hit%d/%s\", \"go_median_ns\": %.0f, \"reads\": %d}\n", geo, t, hitPct, alloc, ns,
						info.PiecesAfterCoalescing)
					must(want.Close())
					must(plan.Close())
				}
			}
			must(ctx.Close())
			for _, h := range append(ps, d) {
				must(h.Close())
			}
			must(dg.Close())
			must(pg.Close())
		}
	}
}
