#!/usr/bin/env python3
"""What a decode engine does with pdkv for one request, from the model's config.json to the
transfer plan, in Python, through the engine-level API (the same deployment and request as
examples/engine/c/engine_plan.c).

Deployment: the model of CONFIG_JSON (Nemotron-3-Nano-30B), prefill (P) TP4 -> decode (D) TP2,
this is D rank 0, Mamba cache mode "align" (prefix caching) on both, 16 logical blocks per region.
Each engine rank is described once (pdkv.Engine); pdkv derives its KV-cache groups (four Mamba
groups, then the attention group), regions and metadata. Request: a 5001-token prompt of which D's
prefix cache holds the first 2096 tokens; the program passes, per group, D's block table and the
ids P exported; pdkv applies the N-1 rule, expands kernel ids and picks the Mamba slots.

Prints the plan as JSON; with EXPECTED_JSON (tests/vectors/engine.json, case
engine_plan/example_nano_config_json_p4_d2_align_prefix_hit), exits 1 unless the plan is exactly
that text.

Usage: engine_plan.py CONFIG_JSON [EXPECTED_JSON]   (with pdkv installed: docs/install-python.md)
"""

from __future__ import annotations

import array
import sys
from typing import List

import pdkv

P_TP, D_TP, D_RANK = 4, 2, 0

# The request as the schedulers hold it, one (D's block table, P's exported ids) pair per group in
# the engine's order: four Mamba groups (align mode: the hit position's cached state, a null
# placeholder, the running state), then the attention group (three 2096-token blocks, the first
# one D's prefix hit; P's five 1056-token blocks).
GROUPS = [([10, 0, 6], [6]), ([11, 0, 7], [7]), ([12, 0, 13], [8]), ([14, 0, 15], [9]),
          ([9, 4, 5], [1, 2, 3, 4, 5])]


def engine_config(tp: int) -> pdkv.EngineConfig:
    """What the engine's vLLM flags say (TP size, --mamba-cache-mode align)."""
    return pdkv.EngineConfig(tp_size=tp, mamba_cache_mode=pdkv.MambaCacheMode.ALIGN)


def plan_json(config_json: str) -> str:
    with pdkv.Model.from_hf_config_file(config_json) as model:
        # Once per engine rank: its description.
        p_config, d_config = engine_config(P_TP), engine_config(D_TP)
        with pdkv.Engine(model, d_config, "decode", D_RANK, num_logical_blocks=16) as d:
            info = d.info()
            print(f"D rank {D_RANK}: {info.num_groups} KV-cache groups over {info.num_regions} regions, "
                  f"blocks of {info.logical_block_size} tokens", file=sys.stderr)
            # Once per P engine: each rank's metadata (an engine decodes it from the handshake) and
            # the plan context.
            p_md: List[pdkv.EngineMetadata] = []
            for r in range(P_TP):
                with pdkv.Engine(model, p_config, "prefill", r, num_logical_blocks=16) as p:
                    p_md.append(p.metadata())
            with d.plan_context(p_md, p_config) as ctx:
                # Once per context: the planner (the request structs packed once; a request then
                # costs little more than the C call; d.plan_request(ctx, ...) plans the same).
                planner = d.prepare(ctx)
                # Per request: block ids as uint64 buffers reach the library without per-id work.
                groups = [pdkv.RequestGroup(array.array("Q", local), array.array("Q", remote))
                          for local, remote in GROUPS]
                # reuse: the plan this thread plans every request into (its C buffers reused);
                # the returned plan is that one whenever it can be rewritten.
                with pdkv.TransferPlan.empty() as reuse, planner.plan(
                        groups, num_prompt_tokens=5001, num_local_computed_tokens=2096, reuse=reuse) as plan:
                    return plan.to_json()


def main(argv: List[str]) -> int:
    if not 1 <= len(argv) <= 2:
        print("usage: engine_plan.py CONFIG_JSON [EXPECTED_JSON]", file=sys.stderr)
        return 2
    print(f"libpdkv: {pdkv.library_path()}", file=sys.stderr)
    text = plan_json(argv[0])
    print(text)
    if len(argv) == 2:
        with open(argv[1]) as f:
            want = f.read().rstrip("\n")
        if want != text:
            print(f"the plan differs from {argv[1]}", file=sys.stderr)
            return 1
        print(f"plan matches {argv[1]}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
