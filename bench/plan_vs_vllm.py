#!/usr/bin/python3
"""Per-request transfer planning: pdkv (C++, C API, Python binding) against vLLM's own Python
planning, measured in one run on the same requests; prints a markdown table of medians and ratios.

vLLM's side is ../shared/tools/vllm_plan_baseline.py (it runs vLLM main's own functions from a
git checkout given with --mirror; no vLLM code is in this repository). pdkv's C++ and C sides are
build/bench/plan_vs_vllm (bench/plan_vs_vllm.cpp); the Python side is timed here through the
``pdkv`` package on the requests bench/plan_request.hpp builds (the generator is mirrored below).

The attention ids are given two ways: as KERNEL ids (expanded from the block tables' logical ids
the way vLLM expands them; columns "C kernel ids", "Python kernel ids": ``ctx.compile(groups,
reuse=plan)``) and as the LOGICAL ids themselves with ``kernel_blocks_per_id`` = ppl, where
vLLM's planning starts (columns "C++", "C" = pdkv_transfer_plan_compile_into into one reused
plan, "Python" = ``ctx.compile(groups, reuse=plan)``, "Py prepared" = ``PlanRequest.compile`` of
a layout prepared once with ``ctx.prepare``; "Rust" = ``TransferPlan::compile_into`` and "Go" =
``PlanContext.CompileInto``, the same logical-id requests, run from rust/pdkv/benches and
go/bench/planvsvllm). Every pdkv path is checked to give the same plan.

    /usr/bin/python3 bench/plan_vs_vllm.py --mirror VLLM_GIT_DIR [--build build] [--repeat 3]
        [--tokens 4096,32768,131072,1048576] [--hits 0,50] [--alloc contig,frag] [--target-s 0.3]

Every measurement is repeated --repeat times (vLLM, C++/C and Python alternate, so a noisy
neighbour hits all of them alike); the table shows the median of the per-run medians.
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
from typing import Dict, List

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
D_POOL, P_POOL, REGIONS = 5700, 8200, 6
MASK = (1 << 64) - 1


def splitmix(seed: int):
    s = seed & MASK
    while True:
        s = (s + 0x9E3779B97F4A7C15) & MASK
        z = s
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        yield z ^ (z >> 31)


def logical_ids(pool: int, total: int, frag: bool, seed: int) -> List[int]:
    """As bench/plan_request.hpp: an ascending run, or a partial Fisher-Yates sample."""
    if not frag:
        base = 1 + seed % 97
        return list(range(base, base + total))
    allv = list(range(1, pool))
    g = splitmix(seed)
    out = []
    for i in range(total):
        j = i + next(g) % (len(allv) - i)
        allv[i], allv[j] = allv[j], allv[i]
        out.append(allv[i])
    return out


def make_groups(pdkv, tokens: int, hit_pct: int, frag: bool, d_block: int, p_block: int, d_ppl: int, p_ppl: int,
                logical: bool = False):
    n_load = tokens - 1
    nd_total = -(-n_load // d_block)
    hit = nd_total * hit_pct // 100
    nd = nd_total - hit
    npf = -(-n_load // p_block)
    seed = tokens * 31 + hit_pct * 7 + 5
    local = logical_ids(D_POOL, 4 + nd, frag, seed)
    remote = logical_ids(P_POOL, 4 + npf, frag, seed * 7 + 3)
    mode = pdkv.MambaCacheMode.ALIGN if hit_pct else pdkv.MambaCacheMode.NONE
    groups = []
    for g in range(4):
        trim = pdkv.GroupTrimInput(
            kind=pdkv.GroupKind.MAMBA, cache_mode=mode, local_blocks=array("Q", [local[g]]),
            remote_blocks=array("Q", [remote[g]]), remote_computed_tokens=n_load, local_hit_tokens=hit * d_block)
        groups.append(pdkv.PlanGroup(trim, (0, 1, 2, 3, 4) if g == 3 else ()))
    if logical:  # the block tables' own ids, kernel_blocks_per_id = ppl
        lk, rk, lpk, rpk = array("Q", local[4:]), array("Q", remote[4:]), d_ppl, p_ppl
    else:  # expanded to kernel ids, as vLLM expands them
        lk = array("Q", [l * d_ppl + j for l in local[4:] for j in range(d_ppl)])
        rk = array("Q", [r * p_ppl + j for r in remote[4:] for j in range(p_ppl)])
        lpk = rpk = 1
    groups.append(pdkv.PlanGroup(pdkv.GroupTrimInput(
        kind=pdkv.GroupKind.ATTENTION, local_blocks=lk, remote_blocks=rk, remote_computed_tokens=n_load,
        local_hit_tokens=hit * d_block, local_kernel_blocks_per_id=lpk, remote_kernel_blocks_per_id=rpk)))
    return groups


def time_python(fn, target_s: float) -> float:
    fn()
    t0 = time.perf_counter_ns()
    fn()
    one = max(time.perf_counter_ns() - t0, 1)
    reps = max(1, int(50_000 / one))
    samples = []
    start = time.perf_counter()
    while len(samples) < 15 or (time.perf_counter() - start < target_s and len(samples) < 100000):
        a = time.perf_counter_ns()
        for _ in range(reps):
            fn()
        samples.append((time.perf_counter_ns() - a) / reps)
    return statistics.median(samples)


def engines(pdkv, model, geometry: str, hit_pct: int):
    """The pair of the table through the Python binding: D TP2 rank 0 and the four P TP4 ranks,
    2096-token blocks, the geometry's backend, Mamba caching in align mode with a hit. Returns
    (D geometry, P geometry, D metadata, [P metadata]); the caller closes them."""
    fi = geometry == "flashinfer"
    backend = pdkv.AttentionBackend.FLASHINFER if fi else pdkv.AttentionBackend.FLASH_ATTN
    mode = pdkv.MambaCacheMode.ALIGN if hit_pct else pdkv.MambaCacheMode.NONE
    dc = pdkv.EngineConfig(tp_size=2, user_block_size=2096, backend=backend, mamba_cache_mode=mode)
    pc = pdkv.EngineConfig(tp_size=4, user_block_size=2096, backend=backend, mamba_cache_mode=mode)
    d = pdkv.EngineMetadata.from_model(model, dc, pdkv.EngineLayout("decode", 0, D_POOL, REGIONS, 1 << 40))
    ps = [pdkv.EngineMetadata.from_model(model, pc, pdkv.EngineLayout("prefill", r, P_POOL, REGIONS, (2 + r) << 44))
          for r in range(4)]
    return pdkv.Geometry(model, dc), pdkv.Geometry(model, pc), d, ps


def prepared_args(groups):
    """What an engine passes PlanRequest.compile for the request of ``groups``: each group's D and
    P ids, the computed tokens and one hit count for the request (every group's is the same here)."""
    hit = groups[-1].trim.local_hit_tokens
    assert all(g.trim.local_hit_tokens == hit for g in groups)
    return ([g.trim.local_blocks for g in groups], [g.trim.remote_blocks for g in groups],
            groups[0].trim.remote_computed_tokens, hit)


def python_side(args, geometry: str) -> Dict[str, tuple]:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import pdkv  # noqa: E402

    out = {}
    with pdkv.Model.from_preset("nemotron-3-nano-30b") as m:
        for hit_s in args.hits.split(","):
            hit_pct = int(hit_s)
            dg, pg, d, ps = engines(pdkv, m, geometry, hit_pct)
            di, pi = dg.info(), pg.info()
            with pdkv.PlanContext(d, ps, local_geometry=dg, remote_geometry=pg) as ctx:
                for tok_s in args.tokens.split(","):
                    for alloc in args.alloc.split(","):
                        shape = (pdkv, int(tok_s), hit_pct, alloc == "frag", di.block_size, pi.block_size,
                                 di.physical_per_logical, pi.physical_per_logical)
                        groups = make_groups(*shape)
                        lgroups = make_groups(*shape, logical=True)
                        plan = pdkv.TransferPlan.empty()

                        def reused():
                            ctx.compile(groups, reuse=plan)

                        def logical():
                            ctx.compile(lgroups, reuse=plan)

                        # The engine's layout prepared once; per request its ids and token counts.
                        req = ctx.prepare(lgroups)
                        ids_l, ids_r, computed, hits = prepared_args(lgroups)

                        def prepared():
                            req.compile(ids_l, ids_r, computed, hits, reuse=plan)

                        want = ctx.compile(groups).to_json()
                        assert ctx.compile(lgroups).to_json() == want and req.compile(ids_l, ids_r, computed, hits).to_json() == want
                        case = f"{geometry}/{tok_s}/hit{hit_pct}/{alloc}"
                        out[case] = (time_python(reused, args.target_s), time_python(logical, args.target_s),
                                     time_python(prepared, args.target_s))
                        plan.close()
            for h in [d, *ps, dg, pg]:
                h.close()
    return out


def binding_side(args, name: str) -> List[dict]:
    """JSON lines of the Rust (rust/pdkv/benches/plan_vs_vllm.rs) or Go (go/bench/planvsvllm)
    timing of the same requests, logical ids, one reused plan."""
    opts = ["--tokens", args.tokens, "--hits", args.hits, "--alloc", args.alloc, "--geometry", args.geometry,
            "--target-s", str(args.target_s)]
    env = dict(os.environ, PDKV_LIB_DIR=os.path.join(os.path.abspath(args.build), "capi"),
               PKG_CONFIG_PATH=os.path.join(os.path.abspath(args.build), "pkgconfig"),
               GOCACHE=os.path.join(os.path.abspath(args.build), "go-cache"), GOFLAGS="-mod=mod", GOPROXY="off")
    if name == "rust":
        cmd, cwd = ["cargo", "bench", "--offline", "-q", "-p", "pdkv", "--bench", "plan_vs_vllm", "--"] + opts, "rust"
    else:
        cmd, cwd = ["go", "run", "./bench/planvsvllm"] + ["-" + o[2:] if o.startswith("--") else o for o in opts], "go"
    out = subprocess.run(cmd, cwd=os.path.join(ROOT, cwd), env=env, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mirror", default=os.environ.get("VLLM_MIRROR"))
    ap.add_argument("--baseline", default=os.path.join(os.path.dirname(ROOT), "shared", "tools", "vllm_plan_baseline.py"))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--tokens", default="4096,32768,131072,1048576")
    ap.add_argument("--hits", default="0,50")
    ap.add_argument("--alloc", default="contig,frag")
    ap.add_argument("--geometry", default="flashinfer,flash_attn")
    ap.add_argument("--target-s", type=float, default=0.3)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write every run's raw numbers here")
    ap.add_argument("--bindings", default="rust,go", help="also time these bindings (rust, go; empty: none)")
    ap.add_argument("--stat", choices=("median", "min"), default="median",
                    help="a cell across the runs: the median of the per-run medians, or the least of them "
                         "(on a VM whose speed jumps between two states for seconds at a time, the runs "
                         "taken in the fast state)")
    ap.add_argument("--from-json", help="print the table of runs saved with --json instead of measuring")
    args = ap.parse_args()
    os.environ.setdefault("PDKV_LIB_DIR", os.path.join(args.build, "capi"))
    runs: List[Dict[str, Dict[str, float]]] = []
    if args.from_json:
        with open(args.from_json) as f:
            runs = json.load(f)
    for rep in range(0 if args.from_json else args.repeat):
        run: Dict[str, Dict[str, float]] = {}
        if args.mirror:
            cmd = ["/usr/bin/python3", args.baseline, "--mirror", args.mirror, "--json", "--topos", "p4d2",
                   "--groups", "5", "--tokens", args.tokens, "--hits", args.hits, "--alloc", args.alloc,
                   "--target-s", str(args.target_s)]
            res = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            for case, r in res.items():  # p4d2/5g/4096/hit0/contig
                _, _, tok, hit, alloc = case.split("/")
                run.setdefault(f"flashinfer/{tok}/{hit}/{alloc}", {})["vllm"] = r["median_ns"]
        cmd = [os.path.join(args.build, "bench", "plan_vs_vllm"), "--tokens", args.tokens, "--hits", args.hits,
               "--alloc", args.alloc, "--geometry", args.geometry, "--target-s", str(args.target_s)]
        for line in subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.splitlines():
            r = json.loads(line)
            e = run.setdefault(r["case"], {})
            e.update(cpp=r["cpp_median_ns"], c=r["c_median_ns"], c_new=r["c_new_median_ns"], reads=r["reads"],
                     kernel_ids=r["kernel_ids"], cpp_logical=r["cpp_logical_median_ns"],
                     c_logical=r["c_logical_median_ns"])
        for name, key in (("rust", "rust_median_ns"), ("go", "go_median_ns")):
            if name in args.bindings.split(","):
                for r in binding_side(args, name):
                    run.setdefault(r["case"], {})[name] = r[key]
        for geo in args.geometry.split(","):
            for case, (ns, ns_logical, ns_prepared) in python_side(args, geo).items():
                run.setdefault(case, {}).update(python=ns, python_logical=ns_logical, python_prepared=ns_prepared)
        runs.append(run)
        print(f"run {rep + 1}/{args.repeat} done", file=sys.stderr)
    if args.json and not args.from_json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)

    def med(case: str, key: str):
        vals = [r[case][key] for r in runs if key in r.get(case, {})]
        return (statistics.median(vals) if args.stat == "median" else min(vals)) if vals else None

    def us(v):
        return "—" if v is None else (f"{v / 1e3:,.1f}" if v < 1e6 else f"{v / 1e3:,.0f}")

    def ratio(a, b):
        return "—" if a is None or b is None else f"{a / b:,.0f}×" if a / b >= 10 else f"{a / b:.1f}×"

    print("| geometry | tokens | hit | ids | kernel ids | reads | vLLM µs | C kernel ids µs | Python kernel ids µs | "
          "C++ µs | C µs | Rust µs | Go µs | Python µs | Py prepared µs | vLLM/C | vLLM/Py prepared | Py prepared/C | "
          "frag/contig C |")
    print("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for case in runs[0]:
        geo, tok, hit, alloc = case.split("/")
        v, ck, pk = med(case, "vllm"), med(case, "c"), med(case, "python")
        cpp, c, py, pp = med(case, "cpp_logical"), med(case, "c_logical"), med(case, "python_logical"), \
            med(case, "python_prepared")
        contig = med(f"{geo}/{tok}/{hit}/contig", "c_logical")
        frag = f"{c / contig:.1f}×" if alloc == "frag" and c is not None and contig else ""
        print(f"| {geo} | {int(tok):,} | {hit[3:]}% | {alloc} | {runs[0][case].get('kernel_ids', '')} | "
              f"{runs[0][case].get('reads', '')} | {us(v)} | {us(ck)} | {us(pk)} | {us(cpp)} | {us(c)} | "
              f"{us(med(case, 'rust'))} | {us(med(case, 'go'))} | {us(py)} | "
              f"{us(pp)} | {ratio(v, c)} | {ratio(v, pp)} | {'—' if pp is None or c is None else f'{pp / c:.1f}×'} | "
              f"{frag} |")


if __name__ == "__main__":
    main()
