#!/usr/bin/python3
"""Generates the shared conformance vectors tests/vectors/*.json (format 1, docs/conformance.md).

Every expected value is computed here by an *independent* Python oracle written from the
reference formulas (shared/reference/vllm-semantics.md, hybrid-geometry.md), never copied
from pdkv's output, and the worked numbers the reference prints are asserted against that
oracle (`check(...)`) before anything is written. Run with /usr/bin/python3 from anywhere:

    /usr/bin/python3 tests/vectors/generate.py

The output is deterministic; commit the regenerated files together with this script.
"""
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def check(actual, expected, what):
    """Fails generation when the oracle disagrees with a number printed in the reference."""
    if actual != expected:
        sys.exit(f"oracle disagrees with the reference for {what}: {actual!r} != {expected!r}")


# ---------------------------------------------------------------------------------------------
# TP topology oracle (vllm-semantics.md §2)
# ---------------------------------------------------------------------------------------------

def tp_ratio(local_tp, remote_tp):
    """§2.1: +local/remote when local >= remote, else -(remote/local); must divide."""
    if local_tp >= remote_tp:
        assert local_tp % remote_tp == 0
        return local_tp // remote_tp
    assert remote_tp % local_tp == 0
    return -(remote_tp // local_tp)


def handshake_targets(local_tp, local_rank, remote_tp):
    """§2.2 handshake_target_ranks."""
    r = tp_ratio(local_tp, remote_tp)
    if r > 0:
        return [local_rank // r]
    a = -r
    return [local_rank * a + i for i in range(a)]


def head_range(tp, k, rank):
    """§2.3 _physical_head_range (contiguous GQA placement)."""
    if tp <= k:
        assert k % tp == 0
        return [rank * k // tp, (rank + 1) * k // tp]
    h = rank * k // tp
    return [h, h + 1]


def notifications(p_tp, d_tp):
    """§7: D_TP/P_TP readers per P rank when D_TP > P_TP, else 1."""
    return d_tp // p_tp if d_tp > p_tp else 1


def tp_mapping(local_tp, local_rank, remote_tp, k, mla, mamba):
    """§2.2 compute_tp_mapping, with the rank lists and scalars pdkv exposes."""
    ratio = tp_ratio(local_tp, remote_tp)
    hs = handshake_targets(local_tp, local_rank, remote_tp)
    h = lambda r: r * k // remote_tp  # head of remote rank r
    if mla or local_tp >= remote_tp:
        attn = [local_rank * remote_tp // local_tp]
        cands = attn
    else:
        a = remote_tp // local_tp
        cands = list(range(local_rank * a, (local_rank + 1) * a))
        attn, seen = [], set()
        for r in cands:
            if h(r) not in seen:
                seen.add(h(r))
                attn.append(r)
    if not mamba:
        ssm = []
    elif local_tp < remote_tp:
        ssm = list(cands) if not mla else list(range(local_rank * (remote_tp // local_tp),
                                                     (local_rank + 1) * (remote_tp // local_tp)))
    else:
        ssm = list(attn)
    allr = sorted(set(attn) | set(ssm))

    def slot(r):
        for i, s in enumerate(attn):
            if h(s) == h(r):
                return i
        return 0

    if mla or local_tp <= remote_tp:
        off = 0
    elif local_tp > k:
        off = local_rank * k // local_tp - attn[0] * k // remote_tp
    else:
        off = local_rank % (local_tp // remote_tp)
    return {
        "tp_ratio": ratio,
        "handshake_targets": hs,
        "attention_source_ranks": attn,
        "mamba_source_ranks": ssm,
        "all_source_ranks": allr,
        "attention_slots": [slot(r) for r in allr],
        "notify_ranks": hs,
        "rank_offset_factor": off,
        "local_replicated": local_tp > k,
        "remote_replicated": remote_tp > k,
        "local_physical_heads": max(1, k // local_tp),
        "remote_physical_heads": max(1, k // remote_tp),
    }


def block_size_ratio(local_bs, remote_bs):
    """§2.1: local kernel block size / remote kernel block size (must divide)."""
    assert local_bs % remote_bs == 0
    return local_bs // remote_bs


def ppl_of(conv, ssm, block_len):
    """§4 compute_physical_blocks_per_logical."""
    return -(-(conv + ssm) // block_len)


def topology_cases():
    cases = []
    add = lambda name, op, inp, out=None, err=None: cases.append(
        dict(name=name, op=op, input=inp, **({"output": out} if err is None else {"error": err})))

    # tp_ratio (§2.1)
    for l, r in [(1, 1), (4, 2), (2, 4), (8, 8), (8, 1), (1, 8), (4, 1), (1, 4)]:
        add(f"tp_ratio/local{l}_remote{r}", "tp_ratio", {"local_tp": l, "remote_tp": r},
            {"tp_ratio": tp_ratio(l, r)})
    check(tp_ratio(2, 4), -2, "tp_ratio D2<-P4")
    add("tp_ratio/not_divisible_2_3", "tp_ratio", {"local_tp": 2, "remote_tp": 3},
        err={"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["2", "3"]})
    add("tp_ratio/not_divisible_3_2", "tp_ratio", {"local_tp": 3, "remote_tp": 2},
        err={"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["3", "2"]})
    add("tp_ratio/zero_local", "tp_ratio", {"local_tp": 0, "remote_tp": 2},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["0"]})

    # handshake targets (§2.2)
    for l, rank, r in [(2, 1, 4), (4, 3, 2), (1, 0, 8), (4, 0, 4), (8, 5, 2), (2, 0, 8)]:
        add(f"handshake_target_ranks/d{l}_r{rank}_p{r}", "handshake_target_ranks",
            {"local_tp": l, "local_rank": rank, "remote_tp": r},
            {"ranks": handshake_targets(l, rank, r)})
    check(handshake_targets(2, 1, 4), [2, 3], "handshake D2 rank1 <- P4")
    add("handshake_target_ranks/rank_out_of_range", "handshake_target_ranks",
        {"local_tp": 2, "local_rank": 2, "remote_tp": 4},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["2"]})
    add("handshake_target_ranks/not_divisible", "handshake_target_ranks",
        {"local_tp": 4, "local_rank": 0, "remote_tp": 6},
        err={"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["4", "6"]})

    # physical head range (§2.3)
    for tp, k, rank in [(1, 2, 0), (2, 2, 1), (4, 2, 3), (4, 2, 1), (2, 8, 1), (8, 8, 7), (8, 2, 5),
                        (16, 4, 15)]:
        b, e = head_range(tp, k, rank)
        add(f"physical_head_range/tp{tp}_k{k}_r{rank}", "physical_head_range",
            {"tp": tp, "total_kv_heads": k, "rank": rank}, {"begin": b, "end": e})
    check(head_range(4, 2, 3), [1, 2], "4 ranks over 2 heads, rank 3")
    add("physical_head_range/heads_not_divisible", "physical_head_range",
        {"tp": 4, "total_kv_heads": 6, "rank": 0},
        err={"status": "PDKV_ERR_HEADS_NOT_DIVISIBLE", "message_contains": ["6", "4"]})
    add("physical_head_range/rank_out_of_range", "physical_head_range",
        {"tp": 2, "total_kv_heads": 8, "rank": 2},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["2"]})

    # notifications (§7)
    for p, d in [(1, 1), (1, 4), (2, 4), (4, 2), (4, 1), (2, 8)]:
        add(f"notifications_expected/p{p}_d{d}", "notifications_expected", {"p_tp": p, "d_tp": d},
            {"count": notifications(p, d)})
    check(notifications(2, 8), 4, "P2 D8 notifications")
    add("notifications_expected/not_divisible", "notifications_expected", {"p_tp": 3, "d_tp": 4},
        err={"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["3", "4"]})

    # TP mapping: §2.2 examples and the §2.3 worked table (K=2 hybrid)
    def tm(name, l, rank, r, k, mla, mamba, expect=None):
        out = tp_mapping(l, rank, r, k, mla, mamba)
        for key, val in (expect or {}).items():
            check(out[key], val, f"{name}.{key}")
        add(f"tp_mapping/{name}", "tp_mapping",
            {"local_tp": l, "local_rank": rank, "remote_tp": r, "total_kv_heads": k,
             "use_mla": mla, "has_mamba": mamba}, out)

    tm("k2_d1_from_p4_hybrid", 1, 0, 4, 2, False, True,
       {"attention_source_ranks": [0, 2], "mamba_source_ranks": [0, 1, 2, 3],
        "attention_slots": [0, 0, 1, 1]})
    tm("k2_d4_rank3_from_p1", 4, 3, 1, 2, False, True, {"rank_offset_factor": 1})
    tm("k8_d4_rank3_from_p2", 4, 3, 2, 8, False, False, {"rank_offset_factor": 1})
    tm("mla_ssm_d2_rank1_from_p8", 2, 1, 8, 1, True, True,
       {"attention_source_ranks": [4], "mamba_source_ranks": [4, 5, 6, 7]})
    # §2.3 worked table
    tm("table_2p1d", 1, 0, 2, 2, False, True,
       {"attention_source_ranks": [0, 1], "all_source_ranks": [0, 1]})
    tm("table_4p1d", 1, 0, 4, 2, False, True,
       {"attention_source_ranks": [0, 2], "all_source_ranks": [0, 1, 2, 3],
        "attention_slots": [0, 0, 1, 1]})
    tm("table_4p2d_d0", 2, 0, 4, 2, False, True,
       {"attention_source_ranks": [0], "all_source_ranks": [0, 1]})
    tm("table_4p2d_d1", 2, 1, 4, 2, False, True,
       {"attention_source_ranks": [2], "all_source_ranks": [2, 3]})
    for rank in range(4):
        tm(f"table_1p4d_d{rank}", 4, rank, 1, 2, False, True,
           {"attention_source_ranks": [0], "local_replicated": True})
    for rank in range(4):
        tm(f"table_2p4d_d{rank}", 4, rank, 2, 2, False, True,
           {"attention_source_ranks": [rank // 2], "rank_offset_factor": 0})
    for rank in range(8):
        tm(f"table_4p8d_d{rank}", 8, rank, 4, 2, False, True,
           {"attention_source_ranks": [rank // 2],
            "rank_offset_factor": rank * 2 // 8 - (rank // 2) * 2 // 4})
    # More: homogeneous, pure attention P>D, MLA without Mamba, both replicated.
    tm("homogeneous_tp4_r2", 4, 2, 4, 8, False, True, {"attention_source_ranks": [2]})
    tm("attention_only_k8_d2_r1_from_p8", 2, 1, 8, 8, False, False,
       {"attention_source_ranks": [4, 5, 6, 7], "mamba_source_ranks": []})
    tm("mla_d1_from_p4", 1, 0, 4, 1, True, False, {"attention_source_ranks": [0]})
    tm("both_replicated_k2_d8_r7_from_p4", 8, 7, 4, 2, False, True)
    tm("k4_d2_r1_from_p8_dedup", 2, 1, 8, 4, False, True,
       {"attention_source_ranks": [4, 6], "attention_slots": [0, 0, 1, 1]})
    add("tp_mapping/not_divisible", "tp_mapping",
        {"local_tp": 2, "local_rank": 0, "remote_tp": 3, "total_kv_heads": 2,
         "use_mla": False, "has_mamba": False},
        err={"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["2", "3"]})
    add("tp_mapping/rank_out_of_range", "tp_mapping",
        {"local_tp": 2, "local_rank": 5, "remote_tp": 4, "total_kv_heads": 2,
         "use_mla": False, "has_mamba": True},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["5"]})

    # block_size_ratio (§2.1)
    for l, r in [(16, 16), (64, 16), (2096, 16), (1056, 32)]:
        add(f"block_size_ratio/{l}_{r}", "block_size_ratio",
            {"local_kernel_block_size": l, "remote_kernel_block_size": r},
            {"ratio": block_size_ratio(l, r)})
    add("block_size_ratio/remote_larger", "block_size_ratio",
        {"local_kernel_block_size": 16, "remote_kernel_block_size": 64},
        err={"status": "PDKV_ERR_INCOMPATIBLE", "message_contains": ["16", "64"]})

    # physical_blocks_per_logical (§4 tests)
    for conv, ssm, bl, want in [(36864, 2097152, 8192, 261), (18432, 1048576, 4096, 261),
                                (9216, 524288, 4096, 131)]:
        check(ppl_of(conv, ssm, bl), want, f"ppl {conv}+{ssm}/{bl}")
        add(f"physical_blocks_per_logical/{conv}_{ssm}_{bl}", "physical_blocks_per_logical",
            {"conv_bytes": conv, "ssm_bytes": ssm, "block_len": bl}, {"ppl": want})
    add("physical_blocks_per_logical/exact", "physical_blocks_per_logical",
        {"conv_bytes": 1024, "ssm_bytes": 3072, "block_len": 4096}, {"ppl": ppl_of(1024, 3072, 4096)})
    add("physical_blocks_per_logical/zero_block_len", "physical_blocks_per_logical",
        {"conv_bytes": 1, "ssm_bytes": 1, "block_len": 0},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["block_len"]})
    return cases


# ---------------------------------------------------------------------------------------------
# Geometry oracle (hybrid-geometry.md §2.1-§2.4); model numbers from shared/reference/models.json
# ---------------------------------------------------------------------------------------------

# Preset name -> published config values (models.json). kind: mamba1 | mamba2 | gdn.
MODELS = {
    # nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16: K=2 x 128, Mamba2 64 heads x 64, d_state 128,
    # 8 groups, d_conv 4, chunk 128, mamba_ssm_cache_dtype float32, NemotronH (spec adds rows).
    "nemotron-3-nano-30b": dict(kind="mamba2", k=2, head=128, head_v=128, dt=2, ssm_dt=4,
                                heads=64, head_dim=64, d_state=128, groups=8, d_conv=4,
                                chunk=128, spec_rows=True),
    # Qwen/Qwen3-Next-80B-A3B-Instruct: K=2 x 256, GDN Hv=32 dv=128, Hk=16 dk=128, kernel 4,
    # no SSM dtype hook -> model dtype; chunk unset -> 2048.
    "qwen3-next-80b": dict(kind="gdn", k=2, head=256, head_v=256, dt=2, ssm_dt=2,
                           hv=32, dv=128, hk=16, dk=128, d_conv=4, chunk=2048, spec_rows=True),
    # tiiuae/Falcon-H1-0.5B-Instruct: K=2 x 64, Mamba2 24 heads x 64 (d_ssm 1536), d_state 128,
    # 1 group, d_conv 4, bf16 everywhere, no spec rows.
    "falcon-h1-0.5b": dict(kind="mamba2", k=2, head=64, head_v=64, dt=2, ssm_dt=2,
                           heads=24, head_dim=64, d_state=128, groups=1, d_conv=4,
                           chunk=2048, spec_rows=False),
    # ai21labs/Jamba-v0.1: K=8 x 128, Mamba1 d_inner 8192, d_state 16, d_conv 4 (bf16 assumed).
    "jamba-v0.1": dict(kind="mamba1", k=8, head=128, head_v=128, dt=2, ssm_dt=2,
                       d_inner=8192, d_state=16, d_conv=4, chunk=2048, spec_rows=False),
}

BACKEND_KERNELS = {"flash_attn": None, "triton": None, "flashinfer": [16, 32, 64]}


def units(n, tp, r):
    """Global unit range [u0, u1) held by rank r of tp over n units (replicated when tp > n)."""
    if n >= tp:
        assert n % tp == 0
        return (r * n // tp, (r + 1) * n // tp)
    assert tp % n == 0
    u = r * n // tp
    return (u, u + 1)


def parts_of(m, tp, spec, conv_dt, ssm_dt, rank=0):
    """The page of one rank: list of (name, unit range, bytes per unit), conv parts then ssm."""
    rows = m["d_conv"] - 1 + (spec if m["spec_rows"] else 0)
    cb = rows * conv_dt
    if m["kind"] == "mamba2":
        return rows, [("x", units(m["heads"], tp, rank), m["head_dim"] * cb),
                      ("B", units(m["groups"], tp, rank), m["d_state"] * cb),
                      ("C", units(m["groups"], tp, rank), m["d_state"] * cb),
                      ("ssm", units(m["heads"], tp, rank), m["head_dim"] * m["d_state"] * ssm_dt)]
    if m["kind"] == "gdn":
        return rows, [("Q", units(m["hk"], tp, rank), m["dk"] * cb),
                      ("K", units(m["hk"], tp, rank), m["dk"] * cb),
                      ("V", units(m["hv"], tp, rank), m["dv"] * cb),
                      ("ssm", units(m["hv"], tp, rank), m["dv"] * m["dk"] * ssm_dt)]
    return rows, [("x", units(m["d_inner"], tp, rank), cb),
                  ("ssm", units(m["d_inner"], tp, rank), m["d_state"] * ssm_dt)]


def geometry(model, engine):
    """The `geometry` op's full output, from the formulas of hybrid-geometry.md."""
    m = MODELS[model]
    tp = engine["tp_size"]
    spec = engine.get("num_speculative_tokens", 0)
    kv_dt = engine.get("kv_cache_dtype_bytes", 0) or m["dt"]
    conv_dt = engine.get("conv_state_dtype_bytes", 0) or m["dt"]
    ssm_dt = engine.get("ssm_state_dtype_bytes", 0) or m["ssm_dt"]
    backend = engine.get("backend", "flash_attn")
    mode = engine.get("mamba_cache_mode", "none")
    user_bs = engine.get("user_block_size", 0)
    user_mbs = engine.get("user_mamba_block_size", 0)
    assert tp <= m["k"] and m["k"] % tp == 0 or tp > m["k"] and tp % m["k"] == 0
    kvh = max(1, m["k"] // tp)
    a = kvh * (m["head"] + m["head_v"]) * kv_dt
    rows, parts = parts_of(m, tp, spec, conv_dt, ssm_dt)
    projections, off = [], 0
    for name, (u0, u1), ub in parts[:-1]:
        n_units = {"x": m.get("heads", m.get("d_inner")), "B": m.get("groups"), "C": m.get("groups"),
                   "Q": m.get("hk"), "K": m.get("hk"), "V": m.get("hv")}[name]
        size = (u1 - u0) * ub
        per_unit_channels = ub // (rows * conv_dt)
        projections.append({"name": name, "dim_local": (u1 - u0) * per_unit_channels, "bytes": size,
                            "offset": off, "replicated": n_units < tp})
        off += size
    conv = off
    ssm = (parts[-1][1][1] - parts[-1][1][0]) * parts[-1][2]
    page = conv + ssm
    align = max(16, user_bs)
    if mode == "all":
        chunk = math.lcm(user_mbs or m["chunk"], align)
        b = chunk * -(-(-(-page // a)) // chunk)
    else:
        b = align * -(-page // (align * a))
    block = user_bs or 16
    lines = []
    if block < b:
        block = b
        lines.append(f"Setting attention block size to {b} tokens to ensure that attention page "
                     "size is >= mamba page size.")
    mbs = {"none": 0, "align": block, "all": b}[mode]
    attn_page = block * a
    assert attn_page >= page
    if attn_page != page:
        pct = 100.0 * (attn_page - page) / page
        lines.append("Padding mamba page size by %.2f%% to ensure that mamba page size and "
                     "attention page size are exactly equal." % pct)
    kernels = BACKEND_KERNELS[backend]
    kernel = block if kernels is None else max(k for k in kernels if block % k == 0)
    ppl = block // kernel
    return {
        "kv_heads_per_rank": kvh, "attn_bytes_per_token": a, "conv_bytes": conv, "ssm_bytes": ssm,
        "mamba_page_bytes": page, "block_size": block, "mamba_block_size": mbs,
        "attn_page_bytes": attn_page, "padding_ppm": 1000000 * (attn_page - page) // page,
        "kernel_block_size": kernel, "physical_per_logical": ppl,
        "kernel_page_bytes": attn_page // ppl, "projections": projections, "log_lines": lines,
    }


def geometry_cases():
    cases = []

    def g(name, model, engine, expect=None):
        out = geometry(model, engine)
        for key, val in (expect or {}).items():
            check(out[key], val, f"{name}.{key}")
        cases.append({"name": f"geometry/{name}", "op": "geometry",
                      "input": {"model": model, "engine": engine}, "output": out})
        return out

    # Nemotron-3-Nano-30B (hybrid-geometry worked numbers, capi tests): TP1/2/4
    g("nemotron3_nano_tp1", "nemotron-3-nano-30b", {"tp_size": 1},
      {"conv_bytes": 36864, "ssm_bytes": 2097152, "block_size": 2096})
    o = g("nemotron3_nano_tp2", "nemotron-3-nano-30b", {"tp_size": 2},
          {"conv_bytes": 18432, "ssm_bytes": 1048576, "mamba_page_bytes": 1067008, "block_size": 2096,
           "padding_ppm": 5758})
    check(o["log_lines"][1][:32], "Padding mamba page size by 0.58%", "0.58% line")
    g("nemotron3_nano_tp4", "nemotron-3-nano-30b", {"tp_size": 4},
      {"conv_bytes": 9216, "ssm_bytes": 524288, "block_size": 1056})
    g("nemotron3_nano_tp2_flashinfer", "nemotron-3-nano-30b", {"tp_size": 2, "backend": "flashinfer"},
      {"kernel_block_size": 16, "physical_per_logical": 131})
    g("nemotron3_nano_tp4_flashinfer", "nemotron-3-nano-30b", {"tp_size": 4, "backend": "flashinfer"},
      {"kernel_block_size": 32, "physical_per_logical": 33})
    g("nemotron3_nano_tp2_fp8_kv", "nemotron-3-nano-30b", {"tp_size": 2, "kv_cache_dtype_bytes": 1})
    g("nemotron3_nano_tp2_spec2", "nemotron-3-nano-30b", {"tp_size": 2, "num_speculative_tokens": 2})
    g("nemotron3_nano_tp2_user_block_32", "nemotron-3-nano-30b", {"tp_size": 2, "user_block_size": 32})
    g("nemotron3_nano_tp2_user_block_4096", "nemotron-3-nano-30b", {"tp_size": 2, "user_block_size": 4096})
    g("nemotron3_nano_tp2_align_mode", "nemotron-3-nano-30b", {"tp_size": 2, "mamba_cache_mode": "align"})
    g("nemotron3_nano_tp2_all_mode", "nemotron-3-nano-30b", {"tp_size": 2, "mamba_cache_mode": "all"})
    g("nemotron3_nano_tp8", "nemotron-3-nano-30b", {"tp_size": 8})
    # Qwen3-Next: 544 at TP1/TP2, 272 at TP4, 144 at TP8; 1.49% padding at TP1
    o = g("qwen3_next_tp1", "qwen3-next-80b", {"tp_size": 1}, {"block_size": 544})
    check(o["log_lines"][1][:32], "Padding mamba page size by 1.49%", "1.49% line")
    g("qwen3_next_tp2", "qwen3-next-80b", {"tp_size": 2}, {"block_size": 544})
    g("qwen3_next_tp4", "qwen3-next-80b", {"tp_size": 4}, {"block_size": 272})
    g("qwen3_next_tp8", "qwen3-next-80b", {"tp_size": 8}, {"block_size": 144})
    g("qwen3_next_tp4_ssm_fp32", "qwen3-next-80b", {"tp_size": 4, "ssm_state_dtype_bytes": 4})
    # Falcon-H1 (n_groups 1 < TP replicates B/C) and Jamba (Mamba1)
    g("falcon_h1_tp1", "falcon-h1-0.5b", {"tp_size": 1})
    g("falcon_h1_tp2", "falcon-h1-0.5b", {"tp_size": 2})
    g("jamba_tp1", "jamba-v0.1", {"tp_size": 1})
    g("jamba_tp2_triton", "jamba-v0.1", {"tp_size": 2, "backend": "triton"})

    def e(name, model, engine, status, contains):
        cases.append({"name": f"geometry/{name}", "op": "geometry",
                      "input": {"model": model, "engine": engine},
                      "error": {"status": status, "message_contains": contains}})

    e("kda_unsupported", "kimi-linear-48b", {"tp_size": 1, "backend": "flashmla"}, "PDKV_ERR_UNSUPPORTED_MAMBA_TYPE", ["kda"])
    e("sd_layout", "nemotron-3-nano-30b", {"tp_size": 2, "conv_layout": "SD"},
      "PDKV_ERR_UNSUPPORTED_LAYOUT", ["SD"])
    e("heads_not_divisible", "nemotron-3-nano-30b", {"tp_size": 3}, "PDKV_ERR_HEADS_NOT_DIVISIBLE", ["2", "3"])
    e("unknown_preset", "no-such-model", {"tp_size": 1}, "PDKV_ERR_NOT_FOUND", ["no-such-model"])
    e("unknown_backend", "nemotron-3-nano-30b", {"tp_size": 1, "backend": "warp_attn"},
      "PDKV_ERR_NOT_FOUND", ["warp_attn"])
    e("mla_backend_on_gqa_model", "nemotron-3-nano-30b", {"tp_size": 1, "backend": "flashmla"},
      "PDKV_ERR_INCOMPATIBLE", [])
    return cases


# ---------------------------------------------------------------------------------------------
# Mamba reads oracle (vllm-semantics.md §4): "pdkv" = every D byte from the P rank owning it;
# "vllm" = what vLLM main reads (remote_conv_offsets / ssm read), including #55208.
# ---------------------------------------------------------------------------------------------

def layout(m, tp, rank, spec, dt, ssm_dt):
    """[(name, u0, u1, unit_bytes, page_offset)] of one rank's page."""
    _, parts = parts_of(m, tp, spec, dt, ssm_dt, rank)
    out, off = [], 0
    for name, (u0, u1), ub in parts:
        out.append((name, u0, u1, ub, off))
        off += (u1 - u0) * ub
    return out


def mamba_reads(model, p_tp, d_tp, d_rank, rule):
    m = MODELS[model]
    dt, sdt = m["dt"], m["ssm_dt"]
    reads = []
    if rule == "pdkv":
        dl = layout(m, d_tp, d_rank, 0, dt, sdt)
        for i, (name, u0, u1, ub, doff) in enumerate(dl):
            for p in range(p_tp):
                pname, p0, p1, pub, poff = layout(m, p_tp, p, 0, dt, sdt)[i]
                assert pname == name and pub == ub
                lo, hi = max(u0, p0), min(u1, p1)
                if lo >= hi:
                    continue
                reads.append({"p_rank": p, "part": name, "remote_offset": poff + (lo - p0) * ub,
                              "local_offset": doff + (lo - u0) * ub, "length": (hi - lo) * ub})
                if p1 - p0 == 1 and p_tp > ({"B": m.get("groups"), "C": m.get("groups")}.get(name) or 1 << 30):
                    sys.exit("replicated P parts have no unique owner: not generated")
    else:
        ratio = tp_ratio(d_tp, p_tp)
        dl = layout(m, d_tp, d_rank, 0, dt, sdt)
        d_conv = sum((u1 - u0) * ub for (n, u0, u1, ub, o) in dl[:-1])
        d_ssm = (dl[-1][2] - dl[-1][1]) * dl[-1][3]
        if ratio >= 1:
            p = d_rank // ratio
            lo = d_rank % ratio
            pl = layout(m, p_tp, p, 0, dt, sdt)
            p_conv = sum((u1 - u0) * ub for (n, u0, u1, ub, o) in pl[:-1])
            base = 0
            for (name, u0, u1, ub, doff) in dl[:-1]:
                size = (u1 - u0) * ub
                reads.append({"p_rank": p, "part": name, "remote_offset": base + lo * size,
                              "local_offset": doff, "length": size})
                base += size * ratio
            reads.append({"p_rank": p, "part": "ssm", "remote_offset": p_conv + lo * d_ssm,
                          "local_offset": d_conv, "length": d_ssm})
        else:
            a = -ratio
            for idx in range(a):
                p = d_rank * a + idx
                pl = layout(m, p_tp, p, 0, dt, sdt)
                for (name, u0, u1, ub, doff), (pn, p0, p1, pub, poff) in zip(dl, pl):
                    size = (p1 - p0) * pub
                    reads.append({"p_rank": p, "part": name, "remote_offset": poff,
                                  "local_offset": doff + idx * size, "length": size})
    reads.sort(key=lambda r: (r["local_offset"], r["p_rank"]))
    return {"reads": reads, "source_ranks": sorted({r["p_rank"] for r in reads})}


def mamba_cases():
    cases = []

    def r(name, model, p_tp, d_tp, d_rank, rule, expect_reads=None):
        out = mamba_reads(model, p_tp, d_tp, d_rank, rule)
        if expect_reads is not None:
            got = [(x["p_rank"], x["part"], x["remote_offset"], x["local_offset"], x["length"])
                   for x in out["reads"]]
            check(got, expect_reads, name)
        cases.append({"name": f"mamba_reads/{name}", "op": "mamba_reads",
                      "input": {"model": model, "prefill": {"tp_size": p_tp},
                                "decode": {"tp_size": d_tp}, "decode_rank": d_rank, "rule": rule},
                      "output": out})

    # Falcon-H1-0.5B P TP1 -> D TP2 (n_groups 1 < TP: B/C replicated on D). Hand-derived:
    # P page x[0,9216) B[9216,9984) C[9984,10752) ssm[10752,404k); D page x 4608, B 768, C 768, ssm 196608.
    r("falcon_h1_p1_d2_rank0_pdkv", "falcon-h1-0.5b", 1, 2, 0, "pdkv",
      [(0, "x", 0, 0, 4608), (0, "B", 9216, 4608, 768), (0, "C", 9984, 5376, 768),
       (0, "ssm", 10752, 6144, 196608)])
    r("falcon_h1_p1_d2_rank1_pdkv", "falcon-h1-0.5b", 1, 2, 1, "pdkv",
      [(0, "x", 4608, 0, 4608), (0, "B", 9216, 4608, 768), (0, "C", 9984, 5376, 768),
       (0, "ssm", 10752 + 196608, 6144, 196608)])
    # vLLM main (#55208): B/C scaled by tp_ratio; rank 1 reads P's C as B and the ssm as C.
    r("falcon_h1_p1_d2_rank0_vllm_55208", "falcon-h1-0.5b", 1, 2, 0, "vllm",
      [(0, "x", 0, 0, 4608), (0, "B", 9216, 4608, 768), (0, "C", 10752, 5376, 768),
       (0, "ssm", 10752, 6144, 196608)])
    r("falcon_h1_p1_d2_rank1_vllm_55208", "falcon-h1-0.5b", 1, 2, 1, "vllm",
      [(0, "x", 4608, 0, 4608), (0, "B", 9984, 4608, 768), (0, "C", 11520, 5376, 768),
       (0, "ssm", 10752 + 196608, 6144, 196608)])
    # Nemotron-3-Nano P TP4 -> D TP2: P x 6144, B 1536, C 1536, ssm 524288; D x 12288, B/C 3072.
    nem = [(0, "x", 0, 0, 6144), (1, "x", 0, 6144, 6144), (0, "B", 6144, 12288, 1536),
           (1, "B", 6144, 13824, 1536), (0, "C", 7680, 15360, 1536), (1, "C", 7680, 16896, 1536),
           (0, "ssm", 9216, 18432, 524288), (1, "ssm", 9216, 542720, 524288)]
    r("nemotron3_nano_p4_d2_rank0_pdkv", "nemotron-3-nano-30b", 4, 2, 0, "pdkv", nem)
    r("nemotron3_nano_p4_d2_rank1_pdkv", "nemotron-3-nano-30b", 4, 2, 1, "pdkv",
      [(p + 2,) + t[1:] for (p, *_), t in zip(nem, nem)])
    r("nemotron3_nano_p4_d2_rank1_vllm", "nemotron-3-nano-30b", 4, 2, 1, "vllm",
      [(p + 2,) + t[1:] for (p, *_), t in zip(nem, nem)])
    r("nemotron3_nano_p2_d4_rank3_pdkv", "nemotron-3-nano-30b", 2, 4, 3, "pdkv")
    r("nemotron3_nano_p2_d2_rank1_pdkv", "nemotron-3-nano-30b", 2, 2, 1, "pdkv")
    # Jamba (Mamba1): one conv projection x, then ssm.
    r("jamba_p2_d1_pdkv", "jamba-v0.1", 2, 1, 0, "pdkv",
      [(0, "x", 0, 0, 24576), (1, "x", 0, 24576, 24576), (0, "ssm", 24576, 49152, 131072),
       (1, "ssm", 24576, 180224, 131072)])
    r("jamba_p1_d2_rank1_pdkv", "jamba-v0.1", 1, 2, 1, "pdkv",
      [(0, "x", 24576, 0, 24576), (0, "ssm", 49152 + 131072, 24576, 131072)])
    r("jamba_p1_d2_rank1_vllm", "jamba-v0.1", 1, 2, 1, "vllm",
      [(0, "x", 24576, 0, 24576), (0, "ssm", 49152 + 131072, 24576, 131072)])
    # GDN (Qwen3-Next): [Q|K|V] then the recurrent state.
    r("qwen3_next_p2_d1_pdkv", "qwen3-next-80b", 2, 1, 0, "pdkv",
      [(0, "Q", 0, 0, 6144), (1, "Q", 0, 6144, 6144), (0, "K", 6144, 12288, 6144),
       (1, "K", 6144, 18432, 6144), (0, "V", 12288, 24576, 12288), (1, "V", 12288, 36864, 12288),
       (0, "ssm", 24576, 49152, 524288), (1, "ssm", 24576, 573440, 524288)])
    r("qwen3_next_p1_d2_rank1_pdkv", "qwen3-next-80b", 1, 2, 1, "pdkv",
      [(0, "Q", 6144, 0, 6144), (0, "K", 18432, 6144, 6144), (0, "V", 36864, 12288, 12288),
       (0, "ssm", 573440, 24576, 524288)])
    r("qwen3_next_p4_d2_rank0_vllm", "qwen3-next-80b", 4, 2, 0, "vllm")

    def e(name, inp, status, contains):
        cases.append({"name": f"mamba_reads/{name}", "op": "mamba_reads", "input": inp,
                      "error": {"status": status, "message_contains": contains}})

    base = {"model": "nemotron-3-nano-30b", "prefill": {"tp_size": 4}, "decode": {"tp_size": 2},
            "decode_rank": 0, "rule": "pdkv"}
    e("decode_rank_out_of_range", dict(base, decode_rank=2), "PDKV_ERR_INVALID_ARGUMENT", ["2"])
    e("prefill_sd_layout", dict(base, prefill={"tp_size": 4, "conv_layout": "SD"}),
      "PDKV_ERR_UNSUPPORTED_LAYOUT", ["SD"])
    return cases


# ---------------------------------------------------------------------------------------------
# Block ids, exchange clipping (vllm-semantics.md §3, §6, §8), scheduler N-1 rule, offload (§9)
# ---------------------------------------------------------------------------------------------

def clip(ids, kind, hma=True, window=0, block_size=0, mode="none", spec=0):
    """§8 get_exchange_clipped_blocks."""
    if not ids or not hma or kind == "attention":
        return list(ids)
    if kind == "sliding_window":
        keep = -(-window // block_size) + 1
        return list(ids[-keep:]) if keep < len(ids) else list(ids)
    drop = min(spec, len(ids) - 1)
    rest = ids[:len(ids) - drop]
    return list(rest) if mode == "all" else [rest[-1]]


def desc_ids(groups, num_blocks, bsr, ppl, n_attn, n_mamba):
    """§3 _compute_desc_ids."""
    nb = num_blocks * bsr
    n_fa = n_attn * nb
    out = []
    if not any(g["kind"] == "mamba" for g in groups):
        blocks = [b for g in groups for b in g["ids"]]
        return [r * nb + b for r in range(n_attn) for b in blocks]
    for g in groups:
        if g["kind"] == "mamba":
            out += [r * (num_blocks // ppl) + b + n_fa for r in range(n_mamba) for b in g["ids"]]
        else:
            out += [r * nb + b for r in range(n_attn) for b in g["ids"]]
    return out


def blocks_cases():
    cases = []
    add = lambda name, op, inp, out=None, err=None: cases.append(
        dict(name=name, op=op, input=inp, **({"output": out} if err is None else {"error": err})))

    # §8 exchange clipping: the five Mamba vectors (2 speculative scratch slots) and SWA.
    for name, ids, mode, want in [("mamba_null_null", [0, 0, 7, 8, 9], "align", [7]),
                                  ("mamba_null_prefix", [0, 6, 7, 8, 9], "align", [7]),
                                  ("mamba_three", [7, 8, 9], "none", [7]),
                                  ("mamba_single", [5], "none", [5]),
                                  ("mamba_all_mode", [0, 5, 6, 7, 8, 9], "all", [0, 5, 6, 7])]:
        got = clip(ids, "mamba", mode=mode, spec=2)
        check(got, want, "§8 " + name)
        add(f"clip_exchange_blocks/{name}", "clip_exchange_blocks",
            {"ids": ids, "kind": "mamba", "cache_mode": mode, "num_speculative_blocks": 2}, {"ids": got})
    add("clip_exchange_blocks/mamba_no_spec_keeps_last", "clip_exchange_blocks",
        {"ids": [4, 5, 6], "kind": "mamba"}, {"ids": clip([4, 5, 6], "mamba")})
    swa = list(range(1, 201))
    add("clip_exchange_blocks/swa_2048_bs16_keeps_129", "clip_exchange_blocks",
        {"ids": swa, "kind": "sliding_window", "sliding_window": 2048, "block_size": 16},
        {"ids": clip(swa, "sliding_window", window=2048, block_size=16)})
    check(len(clip(swa, "sliding_window", window=2048, block_size=16)), 129, "SWA 2048/16")
    add("clip_exchange_blocks/swa_short_list_unchanged", "clip_exchange_blocks",
        {"ids": [3, 4], "kind": "sliding_window", "sliding_window": 2048, "block_size": 16}, {"ids": [3, 4]})
    add("clip_exchange_blocks/attention_unchanged", "clip_exchange_blocks",
        {"ids": [1, 2, 3], "kind": "attention"}, {"ids": [1, 2, 3]})
    add("clip_exchange_blocks/hma_off_unchanged", "clip_exchange_blocks",
        {"ids": [0, 0, 7, 8, 9], "kind": "mamba", "hma_enabled": False, "num_speculative_blocks": 2},
        {"ids": [0, 0, 7, 8, 9]})
    add("clip_exchange_blocks/empty", "clip_exchange_blocks", {"ids": [], "kind": "mamba"}, {"ids": []})
    add("clip_exchange_blocks/swa_zero_block_size", "clip_exchange_blocks",
        {"ids": [1], "kind": "sliding_window", "sliding_window": 64, "block_size": 0},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["block_size"]})
    add("sliding_window_blocks_to_keep/2048_16", "sliding_window_blocks_to_keep",
        {"window": 2048, "block_size": 16}, {"blocks": -(-2048 // 16) + 1})
    add("sliding_window_blocks_to_keep/4096_1056", "sliding_window_blocks_to_keep",
        {"window": 4096, "block_size": 1056}, {"blocks": -(-4096 // 1056) + 1})

    # §3 descriptor ids: the three reference vectors.
    def d(name, groups, nb, bsr, ppl, na, nm, want=None):
        got = desc_ids(groups, nb, bsr, ppl, na, nm)
        if want is not None:
            check(got, want, name)
        add(f"descriptor_ids/{name}", "descriptor_ids",
            {"groups": groups, "num_blocks": nb, "block_size_ratio": bsr, "blocks_per_logical": ppl,
             "num_attention_regions": na, "num_mamba_regions": nm}, {"ids": got})

    fa_ssm = [{"kind": "attention", "ids": [3, 5]}, {"kind": "mamba", "ids": [1, 2]}]
    d("fa_ssm_2_regions_100_blocks", fa_ssm, 100, 1, 1, 2, 4,
      [3, 5, 103, 105, 201, 202, 301, 302, 401, 402, 501, 502])
    d("fa_ssm_ppl4_400_blocks", fa_ssm, 400, 1, 4, 2, 4,
      [3, 5, 403, 405, 801, 802, 901, 902, 1001, 1002, 1101, 1102])
    d("fa_ssm_bsr4", [{"kind": "attention", "ids": [3, 5]}, {"kind": "mamba", "ids": [1]}], 100, 4, 1, 2, 4,
      [3, 5, 403, 405, 801, 901, 1001, 1101])
    d("attention_only_two_groups", [{"kind": "attention", "ids": [1, 2]}, {"kind": "sliding_window", "ids": [7]}],
      10, 1, 1, 3, 0)
    add("descriptor_ids/block_out_of_region", "descriptor_ids",
        {"groups": [{"kind": "attention", "ids": [100]}], "num_blocks": 100, "block_size_ratio": 1,
         "blocks_per_logical": 1, "num_attention_regions": 1, "num_mamba_regions": 0},
        err={"status": "PDKV_ERR_OUT_OF_BOUNDS", "message_contains": ["100"]})

    # Logical -> kernel ids with the owner's ppl (§6.1 step 2) and bsr mapping (§6.2).
    add("logical_to_kernel_block_ids/attention_ppl4", "logical_to_kernel_block_ids",
        {"ids": [2, 5], "kind": "attention", "blocks_per_logical": 4},
        {"ids": [b * 4 + j for b in [2, 5] for j in range(4)]})
    add("logical_to_kernel_block_ids/mamba_passthrough", "logical_to_kernel_block_ids",
        {"ids": [2, 5], "kind": "mamba", "blocks_per_logical": 131}, {"ids": [2, 5]})
    add("logical_to_kernel_block_ids/zero_ppl", "logical_to_kernel_block_ids",
        {"ids": [1], "kind": "attention", "blocks_per_logical": 0},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": []})
    add("map_block_ids_for_block_size_ratio/bsr4_clipped", "map_block_ids_for_block_size_ratio",
        {"ids": [3, 7], "kind": "attention", "block_size_ratio": 4, "remote_len": 6},
        {"ids": [b * 4 + j for b in [3, 7] for j in range(4)][:6]})
    add("map_block_ids_for_block_size_ratio/mamba_1to1", "map_block_ids_for_block_size_ratio",
        {"ids": [3, 7], "kind": "mamba", "block_size_ratio": 4, "remote_len": 6}, {"ids": [3, 7]})
    return cases


def scheduler_cases():
    cases = []
    add = lambda name, op, inp, out=None, err=None: cases.append(
        dict(name=name, op=op, input=inp, **({"output": out} if err is None else {"error": err})))
    # §8 N-1 rule, D side.
    for n, c, mamba in [(100, 0, True), (100, 0, False), (100, 32, True), (1, 0, True), (10, 10, False)]:
        want = max(0, (n - 1 if mamba and n > 1 else n) - c)
        add(f"d_num_new_matched_tokens/n{n}_c{c}_{'mamba' if mamba else 'attn'}", "d_num_new_matched_tokens",
            {"num_prompt_tokens": n, "num_computed_tokens": c, "has_mamba": mamba}, {"tokens": want})
    # #53514: P truncates to N-1, then caps its hit at the last whole block strictly before the
    # last prompt token, so at least one token is computed (vLLM asserted num_new_tokens > 0).
    for n, hit, bs, mamba in [(33, 32, 16, True), (33, 32, 16, False), (100, 0, 16, True), (2, 1, 1, True),
                              (4097, 4096, 2096, True)]:
        np_ = n - 1 if mamba and n > 1 else n
        comp = min(hit, (np_ - 1) // bs * bs)
        add(f"plan_remote_decode_prefill/n{n}_hit{hit}_bs{bs}_{'mamba' if mamba else 'attn'}",
            "plan_remote_decode_prefill",
            {"num_prompt_tokens": n, "local_hit_tokens": hit, "block_size": bs, "has_mamba": mamba},
            {"num_prompt_tokens": np_, "computed_tokens": comp, "new_tokens": np_ - comp})
    return cases


def offload_cases():
    cases = []
    add = lambda name, op, inp, out=None, err=None: cases.append(
        dict(name=name, op=op, input=inp, **({"output": out} if err is None else {"error": err})))
    layers = [{"tensor_bytes": 1000 * 4096, "page_bytes": 4096}, {"tensor_bytes": 1000 * 8192, "page_bytes": 8192}]
    add("derive_offload_geometry/config_blocks", "derive_offload_geometry",
        {"config_num_blocks": 1000, "gpu_block_size": 2096, "hash_block_size": 16, "layers": layers},
        {"num_blocks": 1000, "hash_blocks_per_block": 2096 // 16})
    add("derive_offload_geometry/not_multiple_of_hash", "derive_offload_geometry",
        {"config_num_blocks": 1000, "gpu_block_size": 2096, "hash_block_size": 64, "layers": layers},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["2096", "64"]})
    add("derive_offload_geometry/tensor_too_small", "derive_offload_geometry",
        {"config_num_blocks": 1001, "gpu_block_size": 32, "hash_block_size": 16, "layers": layers},
        err={"status": "PDKV_ERR_OUT_OF_BOUNDS", "message_contains": ["1001"]})
    return cases


def write(name, cases):
    names = [c["name"] for c in cases]
    assert len(names) == len(set(names)), "duplicate case names in " + name
    path = os.path.join(HERE, name + ".json")
    with open(path, "w") as f:
        f.write('{\n  "format": 1,\n  "cases": [\n')
        f.write(",\n".join("    " + json.dumps(c, separators=(", ", ": ")) for c in cases))
        f.write("\n  ]\n}\n")
    print(f"{path}: {len(cases)} cases")


if __name__ == "__main__":
    write("topology", topology_cases())
    write("geometry", geometry_cases())
    write("mamba_reads", mamba_cases())
    write("blocks", blocks_cases())
    write("scheduler", scheduler_cases())
    write("offload", offload_cases())
