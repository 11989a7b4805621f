// Command engine_plan shows what a decode engine does with pdkv for one request, from the
// model's config.json to the transfer plan, in Go (the same deployment and request as
// examples/engine/c/engine_plan.c).
//
// Deployment: the model of CONFIG_JSON (Nemotron-3-Nano-30B), prefill (P) TP4 -> decode (D) TP2,
// this is D rank 0, Mamba cache mode "align" (prefix caching) on both, one KV region of 16
// logical blocks per rank. Request: P computed all 5000 prompt tokens (blocks 1..5, Mamba state
// in block 8); D's prefix cache holds the first 2096 tokens, so D reads tokens 2096..4999 into
// blocks 4 and 5 and P's running Mamba state into slot 7.
//
// It prints the plan as JSON; with EXPECTED_JSON, it exits 1 unless the plan is exactly that text.
//
// Usage: go run . CONFIG_JSON [EXPECTED_JSON]
package main

import (
	"fmt"
	"os"
	"strings"

	pdkv "github.com/pdkv/pdkv/go"
)

const (
	pTP   = 4
	dTP   = 2
	dRank = 0
)

// engineConfig is what the engine's vLLM flags say (TP size, --mamba-cache-mode align).
func engineConfig(tp uint32) pdkv.EngineConfig {
	c := pdkv.DefaultEngineConfig()
	c.TpSize = tp
	c.MambaCacheMode = pdkv.MambaCacheAlign
	return c
}

// rankMetadata is what one rank advertises in the handshake: its id, rank and KV region.
func rankMetadata(model *pdkv.Model, config pdkv.EngineConfig, id string, rank uint32, base uint64) (*pdkv.EngineMetadata, error) {
	layout := pdkv.DefaultEngineLayout()
	layout.EngineID = id
	layout.TpRank = rank
	layout.NumLogicalBlocks = 16
	layout.NumRegions = 1
	layout.Base = base
	return pdkv.EngineMetadataFromModel(model, config, layout)
}

func planJSON(configJSON string) (string, error) {
	// Once per engine: the model, both sides' configurations and geometries.
	model, err := pdkv.ModelFromHFConfigFile(configJSON, "")
	if err != nil {
		return "", err
	}
	defer model.Close()
	pConfig, dConfig := engineConfig(pTP), engineConfig(dTP)
	pGeo, err := pdkv.NewGeometry(model, pConfig)
	if err != nil {
		return "", err
	}
	defer pGeo.Close()
	dGeo, err := pdkv.NewGeometry(model, dConfig)
	if err != nil {
		return "", err
	}
	defer dGeo.Close()

	// Once per P engine: the handshake (D would decode each P rank's metadata from the wire).
	dMd, err := rankMetadata(model, dConfig, "decode", dRank, 1<<40)
	if err != nil {
		return "", err
	}
	defer dMd.Close()
	pMd := make([]*pdkv.EngineMetadata, 0, pTP)
	defer func() {
		for _, m := range pMd {
			m.Close()
		}
	}()
	for r := uint32(0); r < pTP; r++ {
		m, err := rankMetadata(model, pConfig, "prefill", r, uint64(2+r)<<40)
		if err != nil {
			return "", err
		}
		pMd = append(pMd, m)
		if err := pdkv.HandshakeRequireCompatible(dMd, m); err != nil {
			return "", err
		}
	}
	ctx, err := pdkv.NewPlanContext(pdkv.PlanContextParams{Local: dMd, Remote: pMd, LocalGeometry: dGeo, RemoteGeometry: pGeo})
	if err != nil {
		return "", err
	}
	defer ctx.Close()

	// Per request: the block ids D's scheduler holds after its prefix hit of 2096 tokens.
	group := func(kind pdkv.GroupKind, mode pdkv.MambaCacheMode, local, remote []uint64) pdkv.PlanGroup {
		return pdkv.PlanGroup{Trim: pdkv.GroupTrimInput{Kind: kind, CacheMode: mode, LocalBlocks: local,
			RemoteBlocks: remote, RemoteComputedTokens: 5000, LocalHitTokens: 2096}}
	}
	plan, err := ctx.Compile([]pdkv.PlanGroup{
		group(pdkv.GroupAttention, pdkv.MambaCacheNone, []uint64{4, 5}, []uint64{1, 2, 3, 4, 5}),
		group(pdkv.GroupMamba, pdkv.MambaCacheAlign, []uint64{0, 6, 7}, []uint64{0, 0, 0, 0, 8}),
	})
	if err != nil {
		return "", err
	}
	defer plan.Close()
	return plan.JSON()
}

func main() {
	args := os.Args[1:]
	if len(args) < 1 || len(args) > 2 {
		fmt.Fprintln(os.Stderr, "usage: engine_plan CONFIG_JSON [EXPECTED_JSON]")
		os.Exit(2)
	}
	text, err := planJSON(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
	fmt.Println(text)
	if len(args) == 2 {
		want, err := os.ReadFile(args[1])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if strings.TrimRight(string(want), "\n") != text {
			fmt.Fprintln(os.Stderr, "the plan differs from", args[1])
			os.Exit(1)
		}
		fmt.Fprintln(os.Stderr, "plan matches", args[1])
	}
}
