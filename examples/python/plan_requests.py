#!/usr/bin/env python3
"""Plans requests the way a Python decode engine does on its hot path: the engine's group
layout is prepared once per P engine (``ctx.prepare``), then each request is planned from the
schedulers' block tables as they are (logical ids, ``kernel_blocks_per_id``: nothing expanded in
Python), into one reused plan; the last plan's reads are then taken as a zero-copy view.

Nemotron-3-Nano-30B, P TP4 -> D TP2 rank 0, FlashInfer (16-token kernel blocks, 131 per
2096-token block), Mamba cache mode "none": four Mamba groups and one attention group.
Usage: plan_requests.py [--requests N] [--tokens T]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from array import array
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "python"))

import pdkv  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=131072)
    args = ap.parse_args()
    with pdkv.Model.from_preset("nemotron-3-nano-30b") as m:
        cfg = {tp: pdkv.EngineConfig(tp_size=tp, user_block_size=2096, backend="flashinfer") for tp in (2, 4)}
        d = pdkv.EngineMetadata.from_model(m, cfg[2], pdkv.EngineLayout("decode", 0, 5700, 6))
        ps = [pdkv.EngineMetadata.from_model(m, cfg[4], pdkv.EngineLayout("prefill", r, 8200, 6)) for r in range(4)]
        dg, pg = pdkv.Geometry(m, cfg[2]), pdkv.Geometry(m, cfg[4])
        d_ppl, p_ppl = dg.info().physical_per_logical, pg.info().physical_per_logical
        with pdkv.PlanContext(d, ps, local_geometry=dg, remote_geometry=pg) as ctx:
            # Once per P engine: which groups, their regions, and that attention ids are logical.
            mamba = pdkv.GroupTrimInput(pdkv.GroupKind.MAMBA)
            attention = pdkv.GroupTrimInput(pdkv.GroupKind.ATTENTION, local_kernel_blocks_per_id=d_ppl,
                                            remote_kernel_blocks_per_id=p_ppl)
            layout = [pdkv.PlanGroup(mamba)] * 3 + [pdkv.PlanGroup(mamba, (0, 1, 2, 3, 4)),
                                                     pdkv.PlanGroup(attention)]
            req = ctx.prepare(layout)
            plan = pdkv.TransferPlan.empty()
            rng = random.Random(7)
            blocks = -(-(args.tokens - 1) // 2096)
            total_reads = 0
            start = time.perf_counter()
            for _ in range(args.requests):
                # The schedulers' block tables for this request (fragmented, as in a busy pool).
                d_ids = rng.sample(range(1, 5700), blocks + 4)
                p_ids = rng.sample(range(1, 8200), blocks + 4)
                local = [array("Q", [i]) for i in d_ids[:4]] + [array("Q", d_ids[4:])]
                remote = [array("Q", [i]) for i in p_ids[:4]] + [array("Q", p_ids[4:])]
                plan = req.compile(local, remote, computed_tokens=args.tokens - 1, hit_tokens=0, reuse=plan)
                total_reads += plan.info().pieces_after_coalescing
            elapsed = time.perf_counter() - start
            info = plan.info()
            print(f"{args.requests} requests of {args.tokens} tokens planned in {elapsed * 1e3:.1f} ms "
                  f"({elapsed / args.requests * 1e6:.1f} µs each, block tables drawn in Python included)")
            print(f"last plan: {info.pieces_after_coalescing} reads from P ranks, {info.bytes} bytes "
                  f"({info.attention_bytes} attention, {info.mamba_bytes} Mamba)")
            print(f"all plans: {total_reads} reads")
            # The reads of P rank 0 as a zero-copy view of the plan's memory (kept alive by it;
            # a plan with views is never recompiled in place, so take them after the loop).
            view = plan.rank_reads_view(0)
            print(f"P rank 0: {len(view)} reads of {view.itemsize} bytes each, viewed in place")


if __name__ == "__main__":
    main()
