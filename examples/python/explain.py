#!/usr/bin/env python3
"""Explains a P/D deployment through the pdkv Python bindings, then compiles one request's
transfer plan.

Default: Nemotron-3-Nano-30B, prefill (P) TP4 -> decode (D) TP2, FlashAttention on both.
Usage: explain.py [--preset NAME] [--p-tp N] [--d-tp N] [--prompt-tokens N] [--json]

The package is found from a source checkout (python/ next to examples/) or when installed;
libpdkv through $PDKV_LIB_DIR or the package's other discovery rules.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "python"))

import pdkv  # noqa: E402


def describe_engine(model: pdkv.Model, tp: int, role: str) -> pdkv.Geometry:
    """Prints one engine's geometry and returns it."""
    g = pdkv.Geometry(model, pdkv.EngineConfig(tp_size=tp))
    i = g.info()
    print(f"{role} engine (TP{tp}, {pdkv.backend_name(g.config.backend_value())}):")
    print(f"  attention: {i.kv_heads_per_rank} KV head(s)/rank, {i.attn_bytes_per_token} B/token")
    if i.hybrid:
        print(
            f"  mamba ({pdkv.mamba_type_name(i.mamba_type)}): conv {i.conv_bytes} B + ssm {i.ssm_bytes} B"
            f" = page {i.mamba_page_bytes} B per rank"
        )
        for p in g.projections():
            rep = " (replicated)" if p.replicated else ""
            print(f"    conv {p.name}: {p.dim_local}/{p.dim_total} channels, {p.bytes} B at +{p.offset}{rep}")
    print(
        f"  block size {i.block_size} tokens (min {i.min_block_size}), padded page {i.mamba_page_padded_bytes} B"
        f" (+{i.padding_percent:.2f}%), kernel block {i.kernel_block_size}, ppl {i.physical_per_logical}"
    )
    for line in g.log_lines():
        print(f"  vLLM log: {line}")
    return g


def fmt(ranks: Sequence[int]) -> str:
    """A rank list as "[a, b]"."""
    return "[" + ", ".join(str(r) for r in ranks) + "]"


def main(argv: List[str]) -> int:
    """Entry point; returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="nemotron-3-nano-30b")
    ap.add_argument("--p-tp", dest="p_tp_size", type=int, default=4)
    ap.add_argument("--d-tp", dest="d_tp_size", type=int, default=2)
    ap.add_argument("--prompt-tokens", type=int, default=3000)
    ap.add_argument("--json", action="store_true", help="also print the plan of D rank 0 as JSON")
    args = ap.parse_args(argv)

    print(f"pdkv {pdkv.version_string()} ({pdkv.library_path()})")
    try:
        model = pdkv.Model.from_preset(args.preset)
        desc = model.describe()
        n_attn, n_mamba = model.layer_counts()
        print(
            f"model {desc.name}: {desc.num_kv_heads} KV heads x {desc.head_size},"
            f" Mamba {pdkv.mamba_type_name(desc.mamba_type)}, {n_attn} attention + {n_mamba} Mamba layers\n"
        )
        pg = describe_engine(model, args.p_tp_size, "P (prefill)")
        dg = describe_engine(model, args.d_tp_size, "D (decode)")
        print(f"\ntp_ratio on D = {pdkv.tp_ratio(args.d_tp_size, args.p_tp_size)}")
        hybrid = desc.mamba_type != pdkv.MambaType.NONE
        for d_tp_rank in range(args.d_tp_size):
            with pdkv.TpMapping(args.d_tp_size, d_tp_rank, args.p_tp_size, desc.num_kv_heads, desc.use_mla, hybrid) as m:
                mi = m.info()
                print(f"\nD rank {d_tp_rank}:")
                print(f"    handshake with P ranks {fmt(m.handshake_targets)}")
                print(f"    attention from         {fmt(m.attention_sources)}")
                print(f"    mamba state from       {fmt(m.mamba_sources)}")
                print(f"    notify                 {fmt(m.notify_targets)}")
                print(
                    f"    rank offset factor {mi.rank_offset_factor}, each P rank expects"
                    f" {mi.notifications_expected} notification(s) per request"
                )
            if hybrid:
                with pdkv.MambaReadList(pg, dg, d_tp_rank) as reads:
                    items = reads.items()
                    print(f"    Mamba reads per block per layer ({len(items)}):")
                    for r in items:
                        print(
                            f"      P{r.p_tp_rank} {r.part:<3}  remote +{r.remote_offset:<8} -> local"
                            f" +{r.local_offset:<8} {r.length} B"
                        )
            vllm = pdkv.MambaReadList(pg, dg, d_tp_rank, pdkv.MambaReadsRule.VLLM).items() if hybrid else ()
            pdkv_reads = pdkv.MambaReadList(pg, dg, d_tp_rank).items() if hybrid else ()
            if hybrid and vllm != pdkv_reads:
                print("    NOTE: vLLM main reads differently here (see vLLM #55208)")

        compile_plan(model, args, pg, dg, n_attn, n_mamba)
        return 0
    except pdkv.PdkvError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1


def compile_plan(
    model: pdkv.Model, args: argparse.Namespace, pg: pdkv.Geometry, dg: pdkv.Geometry, n_attn: int, n_mamba: int
) -> None:
    """Builds handshake metadata for every rank, validates the pair and compiles the plan of one
    request (``--prompt-tokens`` prompt tokens, no prefix hit on D) for every D rank."""
    # HMA: one region per layer of a group; the group size is the attention layer count.
    regions = max(1, n_attn)
    p_cfg, d_cfg = pg.config, dg.config
    p_meta = [
        pdkv.EngineMetadata.from_model(model, p_cfg, pdkv.EngineLayout("prefill", r, num_regions=regions))
        for r in range(args.p_tp_size)
    ]
    report = pdkv.handshake_validate_engine_ranks(p_meta)
    assert report.compatible, [i.text for i in report]
    p_info, d_info_block = p_meta[0].info(), dg.info().kernel_block_size
    p_block = p_info.kernel_block_size
    tokens = args.prompt_tokens
    remote_blocks = tuple(range(20, 20 + -(-tokens // p_block)))
    local_blocks = tuple(range(10, 10 + -(-tokens // d_info_block)))
    print(f"\nTransfer plan for one {tokens}-token prompt (P blocks {fmt(remote_blocks)}, D blocks {fmt(local_blocks)}):")
    for d_tp_rank in range(args.d_tp_size):
        d_meta = pdkv.EngineMetadata.from_model(model, d_cfg, pdkv.EngineLayout("decode", d_tp_rank, num_regions=regions))
        items = pdkv.handshake_validate(d_meta, p_meta[0])
        for item in items:
            print(f"    handshake: {item.text}")
        groups = [pdkv.PlanGroup(pdkv.GroupTrimInput("attention", local_blocks, remote_blocks, remote_computed_tokens=tokens))]
        if n_mamba:
            # Mamba layers form ceil(n_mamba / regions) groups; the last may use fewer regions.
            for g in range(-(-n_mamba // regions)):
                used = min(regions, n_mamba - g * regions)
                groups.append(
                    pdkv.PlanGroup(
                        pdkv.GroupTrimInput("mamba", (40 + g,), (50 + g,), remote_computed_tokens=tokens),
                        tuple(range(used)) if used < regions else (),
                    )
                )
        with pdkv.PlanContext(d_meta, p_meta, dg, pg) as ctx, ctx.compile(groups) as plan:
            plan.validate(ctx, groups)
            i = plan.info()
            print(
                f"  D rank {d_tp_rank}: reads from P {fmt(plan.read_ranks())}, notifies {fmt(plan.notify_ranks())};"
                f" {i.bytes} B ({i.attention_bytes} attention + {i.mamba_bytes} Mamba),"
                f" {i.pieces_before_coalescing} pieces -> {i.pieces_after_coalescing} reads"
            )
            for p_tp_rank in plan.read_ranks():
                reads = plan.rank_reads(p_tp_rank)
                first = reads[0]
                print(
                    f"    P{p_tp_rank}: {len(reads)} reads, {plan.rank_bytes(p_tp_rank)} B; first: region"
                    f" {first.remote_region} +{first.remote_offset} -> region {first.local_region}"
                    f" +{first.local_offset}, {first.length} B"
                )
            for gi, z in enumerate(plan.group_zeros()):
                if z.zero:
                    print(f"    group {gi} ({pdkv.group_kind_name(z.kind)}): zero {len(z.zero)} range(s), first {z.zero[0]}")
            if args.json and d_tp_rank == 0:
                print(json.dumps(plan.to_dict(), indent=2))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
