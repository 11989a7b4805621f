#!/usr/bin/python3
"""The engine-level request (pdkv/engine.h) from Python against the same call from C, in one run
on the same requests: what a Python engine pays per request for ``Engine.plan_request``.

The requests are bench/engine_request_bench.cpp's (Nemotron-3-Nano-30B-A3B, P TP4 -> D TP2 rank
0, Mamba cache mode align, FlashAttention or FlashInfer, 2 or 62 D blocks of consecutive ids, no
hit or half the blocks hit), built here the same way. Columns:

* C: ``pdkv_engine_plan_request_into`` one reused plan, timed by engine_request_bench
  (``BM_CEnginePlanRequest/.../into:1``), run by this script between the Python rounds;
* Py, element by element: the checked path (``Engine._plan_request_checked``) with the packing
  switched off, i.e. every id list handed to C as a ctypes array of its own (2.8's only path);
* Py, packed: the checked path as shipped (the request and a copy of its ids packed into one
  array per call): what ``Engine.plan_request`` was until 2026-11-29, and what it still does for
  requests its generated function does not take;
* Py: ``Engine.plan_request(..., reuse=plan)`` as shipped (its generated function: the request
  structs in a buffer made on its first call);
* Py, new plan: the same without ``reuse`` (a new plan handle per request, closed after);
* Py prepared: ``planner.plan(groups, n, hit, reuse=plan)``, the planner made once per
  context with ``Engine.prepare(ctx)`` (the same generated function with the context bound).

Block ids are array('Q') buffers (``--ids list`` for Python lists, ``--ids numpy`` for numpy
``uint64`` arrays). Each Python cell is the
median over ``--repeat`` rounds of the mean of a timed loop of about ``--target-s`` seconds;
rounds of every column alternate, so a noisy neighbour hits them alike.

    /usr/bin/python3 bench/engine_request_py.py [--build build/rel] [--repeat 5] [--ids array]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from array import array
from typing import Any, Callable, Dict, List, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POOL = 16384  # logical blocks per engine, as engine_request_bench's kPool


def setup(pdkv: Any, flashinfer: bool) -> Tuple[Any, Any, int]:
    """D's engine, its plan context with P, and P's logical block size in tokens."""
    model = pdkv.Model.from_preset("nemotron-3-nano-30b")
    backend = "FLASHINFER" if flashinfer else "FLASH_ATTN"

    def cfg(tp: int) -> Any:
        return pdkv.EngineConfig(tp_size=tp, mamba_cache_mode="align", backend=backend)

    d = pdkv.Engine(model, cfg(2), "d", 0, POOL)
    remote = []
    for r in range(4):
        with pdkv.Engine(model, cfg(4), "p", r, POOL) as p:
            remote.append(p.metadata())
            p_block = p.info().logical_block_size
    ctx = d.plan_context(remote, cfg(4))
    return d, ctx, p_block


def request(pdkv: Any, d: Any, p_block: int, d_blocks: int, half_hit: bool, kind: str) -> Tuple[List[Any], int, int]:
    """engine_request_bench's make(): consecutive ids from 1 in each engine's pool."""
    bs = d.info().logical_block_size
    n = d_blocks * bs
    hit = d_blocks // 2 * bs if half_hit else 0
    dpos, ppos = -(-n // bs), -(-(n - 1) // p_block)
    conv: Callable[[List[int]], Any] = list
    if kind == "array":
        conv = lambda x: array("Q", x)  # noqa: E731
    elif kind == "numpy":  # numpy uint64 arrays (numpy imported before the engines plan)
        import numpy as np

        conv = lambda x: np.array(x, dtype=np.uint64)  # noqa: E731
    dn = pn = 1
    groups = []
    for g in d.groups():
        if g.kind == pdkv.GroupKind.MAMBA:
            local = []
            for i in range(dpos):
                if i < hit // bs or i + 1 == dpos:
                    local.append(dn)
                    dn += 1
                else:
                    local.append(0)
            remote = [pn]
            pn += 1
        else:
            local, remote = list(range(dn, dn + dpos)), list(range(pn, pn + ppos))
            dn, pn = dn + dpos, pn + ppos
        groups.append((conv(local), conv(remote)))
    return groups, n, hit


def timed(fn: Callable[[], Any], target_s: float) -> float:
    """Mean seconds per call of a loop lasting about target_s."""
    fn()
    n = 1
    while True:
        t = time.perf_counter()
        for _ in range(n):
            fn()
        dt = time.perf_counter() - t
        if dt >= target_s / 4:
            break
        n *= 4
    reps = max(1, int(n * target_s / dt))
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def c_times(build: str) -> Dict[str, float]:
    exe = os.path.join(build, "bench", "engine_request_bench")
    out = subprocess.run([exe, "--benchmark_filter=BM_CEnginePlanRequest/.*/into:1", "--benchmark_min_time=0.2",
                          "--benchmark_format=json"], check=True, capture_output=True, text=True).stdout
    return {b["name"].split("/into")[0].replace("BM_CEnginePlanRequest/", ""): b["real_time"] * 1e-9
            for b in json.loads(out)["benchmarks"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "rel"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--target-s", type=float, default=0.2)
    ap.add_argument("--ids", choices=["array", "list", "numpy"], default="array")
    args = ap.parse_args()
    os.environ.setdefault("PDKV_LIB_DIR", os.path.join(args.build, "capi"))
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import pdkv
    import pdkv.engine as engine_module

    packed_request = engine_module._packed_request
    cases = []
    for flashinfer in (False, True):
        d, ctx, p_block = setup(pdkv, flashinfer)
        for d_blocks in (2, 62):
            for half_hit in (False, True):
                groups, n, hit = request(pdkv, d, p_block, d_blocks, half_hit, args.ids)
                key = f"flashinfer:{int(flashinfer)}/d_blocks:{d_blocks}/half_hit:{int(half_hit)}"
                cases.append((key, d, ctx, groups, n, hit))
    results: Dict[str, Dict[str, List[float]]] = {c[0]: {"c": [], "element": [], "packed": [], "fast": [], "new": [], "prepared": []} for c in cases}
    for _ in range(args.repeat):
        for key, t in c_times(args.build).items():
            if key in results:
                results[key]["c"].append(t)
        for key, d, ctx, groups, n, hit in cases:
            plan = pdkv.TransferPlan.empty()
            want = d.plan_request(ctx, groups, n, hit, reuse=plan).to_json()

            def into() -> None:
                d._plan_request_checked(ctx, groups, n, hit, reuse=plan)

            def fast() -> None:
                d.plan_request(ctx, groups, n, hit, reuse=plan)

            def new() -> None:
                d.plan_request(ctx, groups, n, hit).close()

            engine_module._packed_request = lambda *a: None  # type: ignore[assignment]
            try:
                assert d._plan_request_checked(ctx, groups, n, hit, reuse=plan).to_json() == want
                results[key]["element"].append(timed(into, args.target_s))
            finally:
                engine_module._packed_request = packed_request
            assert d.plan_request(ctx, groups, n, hit, reuse=plan).to_json() == want
            results[key]["packed"].append(timed(into, args.target_s))
            assert d.plan_request(ctx, groups, n, hit, reuse=plan).to_json() == want
            results[key]["fast"].append(timed(fast, args.target_s))
            results[key]["new"].append(timed(new, args.target_s))
            planner = d.prepare(ctx)
            assert planner.plan(groups, n, hit, reuse=plan).to_json() == want
            prepared = planner.plan

            def planned() -> None:
                prepared(groups, n, hit, reuse=plan)

            results[key]["prepared"].append(timed(planned, args.target_s))
            plan.close()
    print(f"ids as {args.ids}; median of {args.repeat} rounds")
    print("| backend | D blocks | D hit | C `_into` | Py, element by element | Py, packed | Py | Py, new plan "
          "| Py prepared | Py packed / C | Py / C | Py prepared / C |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key, *_ in cases:
        r = {k: statistics.median(v) * 1e6 for k, v in results[key].items()}
        fi, db, hh = (part.split(":")[1] for part in key.split("/"))
        print(f"| {'FlashInfer' if fi == '1' else 'FlashAttention'} | {db} | {'50%' if hh == '1' else '0'} | "
              f"{r['c']:.1f} µs | {r['element']:.1f} µs | {r['packed']:.1f} µs | {r['fast']:.1f} µs | "
              f"{r['new']:.1f} µs | {r['prepared']:.1f} µs | {r['packed'] / r['c']:.1f}× | {r['fast'] / r['c']:.2f}× | "
              f"{r['prepared'] / r['c']:.2f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
