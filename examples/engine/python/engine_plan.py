#!/usr/bin/env python3
"""What a decode engine does with pdkv for one request, from the model's config.json to the
transfer plan, in Python (the same deployment and request as examples/engine/c/engine_plan.c).

Deployment: the model of CONFIG_JSON (Nemotron-3-Nano-30B), prefill (P) TP4 -> decode (D) TP2,
this is D rank 0, Mamba cache mode "align" (prefix caching) on both, one KV region of 16 logical
blocks per rank. Request: P computed all 5000 prompt tokens (blocks 1..5, Mamba state in block
8); D's prefix cache holds the first 2096 tokens, so D reads tokens 2096..4999 into blocks 4 and
5 and P's running Mamba state into slot 7.

Prints the plan as JSON; with EXPECTED_JSON, exits 1 unless the plan is exactly that text.

Usage: engine_plan.py CONFIG_JSON [EXPECTED_JSON]   (with pdkv installed: docs/install-python.md)
"""

from __future__ import annotations

import sys
from typing import List, Tuple

import pdkv

P_TP, D_TP, D_RANK = 4, 2, 0


def engine_config(tp: int) -> pdkv.EngineConfig:
    """What the engine's vLLM flags say (TP size, --mamba-cache-mode align)."""
    return pdkv.EngineConfig(tp_size=tp, mamba_cache_mode=pdkv.MambaCacheMode.ALIGN)


def rank_metadata(model: pdkv.Model, config: pdkv.EngineConfig, engine_id: str, rank: int,
                  base: int) -> pdkv.EngineMetadata:
    """What one rank advertises in the handshake: its id, rank and where its KV region lives."""
    layout = pdkv.EngineLayout(engine_id=engine_id, tp_rank=rank, num_logical_blocks=16, num_regions=1, base=base)
    return pdkv.EngineMetadata.from_model(model, config, layout)


def plan_json(config_json: str) -> str:
    # Once per engine: the model, both sides' configurations and geometries.
    with pdkv.Model.from_hf_config_file(config_json) as model:
        p_config, d_config = engine_config(P_TP), engine_config(D_TP)
        p_geo, d_geo = pdkv.Geometry(model, p_config), pdkv.Geometry(model, d_config)

        # Once per P engine: the handshake (D would decode each P rank's metadata from the wire).
        d_md = rank_metadata(model, d_config, "decode", D_RANK, 1 << 40)
        p_md: List[pdkv.EngineMetadata] = []
        for r in range(P_TP):
            p_md.append(rank_metadata(model, p_config, "prefill", r, (2 + r) << 40))
            pdkv.handshake_require_compatible(d_md, p_md[-1])
        ctx = pdkv.PlanContext(d_md, p_md, local_geometry=d_geo, remote_geometry=p_geo)

        # Per request: the block ids D's scheduler holds after its prefix hit of 2096 tokens.
        def group(kind: pdkv.GroupKind, mode: pdkv.MambaCacheMode, local: Tuple[int, ...],
                  remote: Tuple[int, ...]) -> pdkv.PlanGroup:
            return pdkv.PlanGroup(pdkv.GroupTrimInput(kind=kind, cache_mode=mode, local_blocks=local,
                                                      remote_blocks=remote, remote_computed_tokens=5000,
                                                      local_hit_tokens=2096))

        with ctx.compile([
            group(pdkv.GroupKind.ATTENTION, pdkv.MambaCacheMode.NONE, (4, 5), (1, 2, 3, 4, 5)),
            group(pdkv.GroupKind.MAMBA, pdkv.MambaCacheMode.ALIGN, (0, 6, 7), (0, 0, 0, 0, 8)),
        ]) as plan:
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
