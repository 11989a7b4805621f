// Command engine_plan shows what a decode engine does with pdkv for one request, from the
// model's config.json to the transfer plan, in Go, through the engine-level API (the same
// deployment and request as examples/engine/c/engine_plan.c).
//
// Deployment: the model of CONFIG_JSON (Nemotron-3-Nano-30B), prefill (P) TP4 -> decode (D) TP2,
// this is D rank 0, Mamba cache mode "align" (prefix caching) on both, 16 logical blocks per
// region. Each engine rank is described once (pdkv.Engine); pdkv derives its KV-cache groups
// (four Mamba groups, then the attention group), regions and metadata. Request: a 5001-token
// prompt of which D's prefix cache holds the first 2096 tokens; the program passes, per group,
// D's block table and the ids P exported; pdkv applies the N-1 rule, expands kernel ids and picks
// the Mamba slots.
//
// It prints the plan as JSON; with EXPECTED_JSON (tests/vectors/engine.json, case
// engine_plan/example_nano_config_json_p4_d2_align_prefix_hit), it exits 1 unless the plan is
// exactly that text.
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
	pTP     = 4
	dTP     = 2
	dTpRank = 0
)

// groups is the request as the schedulers hold it, one entry per group in the engine's order:
// four Mamba groups (align mode: the hit position's cached state, a null placeholder, the running
// state; P's exported running state), then the attention group (three 2096-token blocks, the
// first one D's prefix hit; P's five 1056-token blocks).
var groups = []pdkv.RequestGroup{
	{LocalBlockIDs: []uint64{10, 0, 6}, RemoteBlockIDs: []uint64{6}},
	{LocalBlockIDs: []uint64{11, 0, 7}, RemoteBlockIDs: []uint64{7}},
	{LocalBlockIDs: []uint64{12, 0, 13}, RemoteBlockIDs: []uint64{8}},
	{LocalBlockIDs: []uint64{14, 0, 15}, RemoteBlockIDs: []uint64{9}},
	{LocalBlockIDs: []uint64{9, 4, 5}, RemoteBlockIDs: []uint64{1, 2, 3, 4, 5}},
}

// engineConfig is what the engine's vLLM flags say (TP size, --mamba-cache-mode align).
func engineConfig(tp uint32) pdkv.EngineConfig {
	c := pdkv.DefaultEngineConfig()
	c.TpSize = tp
	c.MambaCacheMode = pdkv.MambaCacheAlign
	return c
}

// newEngine describes one engine rank: its id and rank, 16 logical blocks per region.
func newEngine(model *pdkv.Model, config pdkv.EngineConfig, id string, rank uint32) (*pdkv.Engine, error) {
	opts := pdkv.DefaultEngineOptions()
	opts.EngineID = id
	opts.TpRank = rank
	opts.NumLogicalBlocks = 16
	return pdkv.NewEngine(model, config, opts)
}

func planJSON(configJSON string) (string, error) {
	model, err := pdkv.ModelFromHFConfigFile(configJSON, "")
	if err != nil {
		return "", err
	}
	defer model.Close()
	pConfig, dConfig := engineConfig(pTP), engineConfig(dTP)

	// Once per engine rank: its description.
	d, err := newEngine(model, dConfig, "decode", dTpRank)
	if err != nil {
		return "", err
	}
	defer d.Close()
	info, err := d.Info()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(os.Stderr, "D rank %d: %d KV-cache groups over %d regions, blocks of %d tokens\n", dTpRank,
		info.NumGroups, info.NumRegions, info.LogicalBlockSize)

	// Once per P engine: each rank's metadata (an engine decodes it from the handshake) and the
	// plan context.
	pMd := make([]*pdkv.EngineMetadata, 0, pTP)
	defer func() {
		for _, m := range pMd {
			m.Close()
		}
	}()
	for r := uint32(0); r < pTP; r++ {
		p, err := newEngine(model, pConfig, "prefill", r)
		if err != nil {
			return "", err
		}
		m, err := p.Metadata()
		p.Close()
		if err != nil {
			return "", err
		}
		pMd = append(pMd, m)
	}
	ctx, err := d.PlanContext(pMd, pConfig, false)
	if err != nil {
		return "", err
	}
	defer ctx.Close()

	// Once per goroutine planning requests: the plan each request is planned into (its buffers
	// reused).
	plan, err := pdkv.NewTransferPlan()
	if err != nil {
		return "", err
	}
	defer plan.Close()

	// Per request: what the schedulers hold; pdkv does the rest.
	if err := d.PlanRequestInto(ctx, pdkv.EngineRequest{Groups: groups, NumPromptTokens: 5001, NumLocalComputedTokens: 2096}, plan); err != nil {
		return "", err
	}
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
