#!/usr/bin/python3
"""Where the time of a prepared Python compile goes: the same request as bench/plan_vs_vllm.py's
"Py prepared" column, split into what the Python binding costs and what the C call costs when
Python calls it, all measured in one process, alternating, on the same request and plan.

Columns (medians of --repeat rounds, each the median of many timed batches):
  C (C bench)       the C compile from bench/plan_vs_vllm (a tight C++ loop, warm caches);
  ctypes loop       the same C entry called from a Python loop on the packed request (no
                    Python work between calls but the loop and ctypes' own ~0.1 us);
  ctypes floor      a trivial libc function through ctypes, for scale;
  Python side       PlanRequest.compile with its C call replaced by a no-op (the binding's
                    own work: checks, packing the ids and counts, the plan's lock);
  prepared          PlanRequest.compile as a user calls it;
  interference      prepared - Python side - ctypes loop: the C call made slower by the
                    Python work around it (caches and branch predictors it leaves cold).

    PDKV_LIB_DIR=build/capi /usr/bin/python3 bench/py_overhead.py [--build build]
        [--cells flash_attn/4096/0/contig,...] [--repeat 5] [--target-s 0.3]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
from typing import Callable, Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import plan_vs_vllm as pvv  # noqa: E402  (the request generator and the timing loop)

DEFAULT_CELLS = ("flash_attn/4096/0/contig,flash_attn/1048576/0/contig,flash_attn/1048576/50/contig,"
                 "flash_attn/32768/50/frag,flashinfer/1048576/0/frag")


def c_bench(build: str, geo: str, tok: int, hit: int, alloc: str, target_s: float) -> float:
    """The C column of bench/plan_vs_vllm (logical ids, one reused plan), in ns."""
    cmd = [os.path.join(build, "bench", "plan_vs_vllm"), "--tokens", str(tok), "--hits", str(hit), "--alloc", alloc,
           "--geometry", geo, "--target-s", str(target_s)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return float(json.loads(out.splitlines()[0])["c_logical_median_ns"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(pvv.ROOT, "build"))
    ap.add_argument("--cells", default=DEFAULT_CELLS, help="geometry/tokens/hit%%/alloc, comma separated")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--target-s", type=float, default=0.3)
    args = ap.parse_args()
    os.environ.setdefault("PDKV_LIB_DIR", os.path.join(os.path.abspath(args.build), "capi"))
    sys.path.insert(0, os.path.join(pvv.ROOT, "python"))
    import pdkv  # noqa: E402
    from pdkv import plan_request  # noqa: E402

    libc = ctypes.PyDLL(None)
    strcmp = libc.strcmp
    strcmp.restype = ctypes.c_int
    empty = ctypes.create_string_buffer(8)
    ep = ctypes.c_void_p(ctypes.addressof(empty))

    print("| cell | C (C bench) µs | ctypes loop µs | ctypes floor µs | Python side µs | prepared µs | "
          "interference µs | prepared/C |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    model = pdkv.Model.from_preset("nemotron-3-nano-30b")
    for cell in args.cells.split(","):
        geo, tok_s, hit_s, alloc = cell.split("/")
        tok, hit = int(tok_s), int(hit_s)
        dg, pg, d, ps = pvv.engines(pdkv, model, geo, hit)
        di, pi = dg.info(), pg.info()
        ctx = pdkv.PlanContext(d, ps, local_geometry=dg, remote_geometry=pg)
        groups = pvv.make_groups(pdkv, tok, hit, alloc == "frag", di.block_size, pi.block_size,
                                 di.physical_per_logical, pi.physical_per_logical, logical=True)
        req = ctx.prepare(groups)
        ids_l, ids_r, computed, hits = pvv.prepared_args(groups)
        plan = pdkv.TransferPlan.empty()
        want = ctx.compile(groups).to_json()

        def prepared() -> None:
            req.compile(ids_l, ids_r, computed, hits, reuse=plan)

        prepared()  # the packing now holds this request: the ctypes loop recompiles exactly it
        assert plan.to_json() == want
        entries = plan_request._args_functions()
        if not entries:
            sys.exit("this library has no pdkv_transfer_plan_compile_args: nothing to split")
        call = req._compile.__globals__["call"]  # the packed pdkv_compile_args_t of the first packing
        total = sum(len(x) + len(y) for x, y in zip(ids_l, ids_r))
        entry = entries[total <= req._compile.__globals__["pk"].gil_ids]  # the one prepared() calls
        parg = plan._arg

        def ctypes_loop() -> None:
            entry(parg, call)

        def ctypes_floor() -> None:
            strcmp(ep, ep)

        fns: Dict[str, Callable[[], None]] = {"loop": ctypes_loop, "floor": ctypes_floor, "py": prepared,
                                              "prepared": prepared}
        noop = [lambda _plan, _call: 0] * 2  # "py": prepared() with its C call replaced by this
        got: Dict[str, List[float]] = {k: [] for k in fns}
        got["c"] = []
        for _ in range(args.repeat):
            got["c"].append(c_bench(args.build, geo, tok, hit, alloc, args.target_s))
            for k, fn in fns.items():
                saved = list(entries)
                if k == "py":
                    entries[:] = noop
                try:
                    got[k].append(pvv.time_python(fn, args.target_s))
                finally:
                    entries[:] = saved
        assert plan.to_json() == want  # the no-op rounds left the plan as it was
        m = {k: statistics.median(v) / 1e3 for k, v in got.items()}
        py = m["py"]
        print(f"| {cell} | {m['c']:.2f} | {m['loop']:.2f} | {m['floor']:.2f} | {py:.2f} | {m['prepared']:.2f} | "
              f"{m['prepared'] - py - m['loop']:.2f} | {m['prepared'] / m['c']:.2f}× |", flush=True)
        plan.close()
        req = None  # type: ignore[assignment]
        ctx.close()
        for h in [d, *ps, dg, pg]:
            h.close()
    model.close()


if __name__ == "__main__":
    main()
