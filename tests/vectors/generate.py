#!/usr/bin/python3
"""Generates the shared conformance vectors tests/vectors/*.json (format 1, docs/conformance.md).

Every expected value is computed here by an *independent* Python oracle written from the
rules of docs/semantics.md and docs/hybrid-geometry.md, never copied from pdkv's output, and
the worked numbers of those rules (vLLM's own test vectors and logs) are asserted against that
oracle (`check(...)`) before anything is written. A bare "§N" below names a section of
docs/semantics.md. Run with /usr/bin/python3 from anywhere:

    /usr/bin/python3 tests/vectors/generate.py

The output is deterministic; commit the regenerated files together with this script.
"""
import copy
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
# TP topology oracle (docs/semantics.md §2)
# ---------------------------------------------------------------------------------------------

def tp_ratio(local_tp_size, remote_tp_size):
    """§2.1: +local/remote when local >= remote, else -(remote/local); must divide."""
    if local_tp_size >= remote_tp_size:
        assert local_tp_size % remote_tp_size == 0
        return local_tp_size // remote_tp_size
    assert remote_tp_size % local_tp_size == 0
    return -(remote_tp_size // local_tp_size)


def handshake_targets(local_tp_size, local_tp_rank, remote_tp_size):
    """§2.2 handshake_target_ranks."""
    r = tp_ratio(local_tp_size, remote_tp_size)
    if r > 0:
        return [local_tp_rank // r]
    a = -r
    return [local_tp_rank * a + i for i in range(a)]


def head_range(tp, k, rank):
    """§2.3 _physical_head_range (contiguous GQA placement)."""
    if tp <= k:
        assert k % tp == 0
        return [rank * k // tp, (rank + 1) * k // tp]
    h = rank * k // tp
    return [h, h + 1]


def notifications(p_tp_size, d_tp_size):
    """§7: D_TP/P_TP readers per P rank when D_TP > P_TP, else 1."""
    return d_tp_size // p_tp_size if d_tp_size > p_tp_size else 1


def tp_mapping(local_tp_size, local_tp_rank, remote_tp_size, k, mla, mamba):
    """§2.2 compute_tp_mapping, with the rank lists and scalars pdkv exposes."""
    ratio = tp_ratio(local_tp_size, remote_tp_size)
    hs = handshake_targets(local_tp_size, local_tp_rank, remote_tp_size)
    h = lambda r: r * k // remote_tp_size  # head of remote rank r
    if mla or local_tp_size >= remote_tp_size:
        attn = [local_tp_rank * remote_tp_size // local_tp_size]
        cands = attn
    else:
        a = remote_tp_size // local_tp_size
        cands = list(range(local_tp_rank * a, (local_tp_rank + 1) * a))
        attn, seen = [], set()
        for r in cands:
            if h(r) not in seen:
                seen.add(h(r))
                attn.append(r)
    if not mamba:
        ssm = []
    elif local_tp_size < remote_tp_size:
        ssm = list(cands) if not mla else list(range(local_tp_rank * (remote_tp_size // local_tp_size),
                                                     (local_tp_rank + 1) * (remote_tp_size // local_tp_size)))
    else:
        ssm = list(attn)
    allr = sorted(set(attn) | set(ssm))

    def slot(r):
        for i, s in enumerate(attn):
            if h(s) == h(r):
                return i
        return 0

    if mla or local_tp_size <= remote_tp_size:
        off = 0
    elif local_tp_size > k:
        off = local_tp_rank * k // local_tp_size - attn[0] * k // remote_tp_size
    else:
        off = local_tp_rank % (local_tp_size // remote_tp_size)
    return {
        "tp_ratio": ratio,
        "handshake_targets": hs,
        "attention_source_ranks": attn,
        "mamba_source_ranks": ssm,
        "all_source_ranks": allr,
        "attention_slots": [slot(r) for r in allr],
        "notify_ranks": hs,
        "rank_offset_factor": off,
        "local_replicated": local_tp_size > k,
        "remote_replicated": remote_tp_size > k,
        "local_physical_heads": max(1, k // local_tp_size),
        "remote_physical_heads": max(1, k // remote_tp_size),
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
        add(f"tp_ratio/local{l}_remote{r}", "tp_ratio", {"local_tp_size": l, "remote_tp_size": r},
            {"tp_ratio": tp_ratio(l, r)})
    check(tp_ratio(2, 4), -2, "tp_ratio D2<-P4")
    add("tp_ratio/not_divisible_2_3", "tp_ratio", {"local_tp_size": 2, "remote_tp_size": 3},
        err={"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["2", "3"]})
    add("tp_ratio/not_divisible_3_2", "tp_ratio", {"local_tp_size": 3, "remote_tp_size": 2},
        err={"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["3", "2"]})
    add("tp_ratio/zero_local", "tp_ratio", {"local_tp_size": 0, "remote_tp_size": 2},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["0"]})

    # handshake targets (§2.2)
    for l, rank, r in [(2, 1, 4), (4, 3, 2), (1, 0, 8), (4, 0, 4), (8, 5, 2), (2, 0, 8)]:
        add(f"handshake_target_ranks/d{l}_r{rank}_p{r}", "handshake_target_ranks",
            {"local_tp_size": l, "local_tp_rank": rank, "remote_tp_size": r},
            {"ranks": handshake_targets(l, rank, r)})
    check(handshake_targets(2, 1, 4), [2, 3], "handshake D2 rank1 <- P4")
    add("handshake_target_ranks/rank_out_of_range", "handshake_target_ranks",
        {"local_tp_size": 2, "local_tp_rank": 2, "remote_tp_size": 4},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["2"]})
    add("handshake_target_ranks/not_divisible", "handshake_target_ranks",
        {"local_tp_size": 4, "local_tp_rank": 0, "remote_tp_size": 6},
        err={"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["4", "6"]})

    # physical head range (§2.3)
    for tp, k, rank in [(1, 2, 0), (2, 2, 1), (4, 2, 3), (4, 2, 1), (2, 8, 1), (8, 8, 7), (8, 2, 5),
                        (16, 4, 15)]:
        b, e = head_range(tp, k, rank)
        add(f"physical_head_range/tp{tp}_k{k}_r{rank}", "physical_head_range",
            {"tp_size": tp, "tp_rank": rank, "total_kv_heads": k}, {"begin": b, "end": e})
    check(head_range(4, 2, 3), [1, 2], "4 ranks over 2 heads, rank 3")
    add("physical_head_range/heads_not_divisible", "physical_head_range",
        {"tp_size": 4, "tp_rank": 0, "total_kv_heads": 6},
        err={"status": "PDKV_ERR_HEADS_NOT_DIVISIBLE", "message_contains": ["6", "4"]})
    add("physical_head_range/rank_out_of_range", "physical_head_range",
        {"tp_size": 2, "tp_rank": 2, "total_kv_heads": 8},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["2"]})

    # notifications (§7)
    for p, d in [(1, 1), (1, 4), (2, 4), (4, 2), (4, 1), (2, 8)]:
        add(f"notifications_expected/p{p}_d{d}", "notifications_expected", {"p_tp_size": p, "d_tp_size": d},
            {"count": notifications(p, d)})
    check(notifications(2, 8), 4, "P2 D8 notifications")
    add("notifications_expected/not_divisible", "notifications_expected", {"p_tp_size": 3, "d_tp_size": 4},
        err={"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["3", "4"]})

    # TP mapping: §2.2 examples and the §2.3 worked table (K=2 hybrid)
    def tm(name, l, rank, r, k, mla, mamba, expect=None):
        out = tp_mapping(l, rank, r, k, mla, mamba)
        for key, val in (expect or {}).items():
            check(out[key], val, f"{name}.{key}")
        add(f"tp_mapping/{name}", "tp_mapping",
            {"local_tp_size": l, "local_tp_rank": rank, "remote_tp_size": r, "total_kv_heads": k,
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
        {"local_tp_size": 2, "local_tp_rank": 0, "remote_tp_size": 3, "total_kv_heads": 2,
         "use_mla": False, "has_mamba": False},
        err={"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["2", "3"]})
    add("tp_mapping/rank_out_of_range", "tp_mapping",
        {"local_tp_size": 2, "local_tp_rank": 5, "remote_tp_size": 4, "total_kv_heads": 2,
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
# Geometry oracle (docs/hybrid-geometry.md §1-§4); model numbers from each preset's published
# config.json (the sources named in core/src/presets.cpp)
# ---------------------------------------------------------------------------------------------

# Preset name -> published config values (config.json). kind: mamba1 | mamba2 | gdn.
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
    # Qwen/Qwen3.5-27B: K=4 x 256, GDN Hv=48 dv=128, Hk=16 dk=128, kernel 4, SSM float32
    # (text_config mamba_ssm_dtype), spec rows; chunk unset -> 2048.
    "qwen3.5-27b": dict(kind="gdn", k=4, head=256, head_v=256, dt=2, ssm_dt=4,
                        hv=48, dv=128, hk=16, dk=128, d_conv=4, chunk=2048, spec_rows=True),
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
        # vLLM (MambaMixer2): groups are sharded when TP divides them, else there is one group,
        # replicated on every rank.
        assert m["groups"] % tp == 0 or m["groups"] == 1, (m["groups"], tp)
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


def kv_head_bytes(m, engine):
    """One KV head's entry per token (docs/hybrid-geometry.md §2): K and V elements of the KV
    element bits (default 8 x the KV dtype bytes), plus the bytes packed beside them per token and
    head (the per-token-head modes' two fp32 scales)."""
    bits = engine.get("kv_cache_element_bits", 0) or 8 * (engine.get("kv_cache_dtype_bytes", 0) or m["dt"])
    assert m["head"] * bits % 8 == 0 and m["head_v"] * bits % 8 == 0
    return (m["head"] + m["head_v"]) * bits // 8 + engine.get("kv_cache_head_extra_bytes", 0)


def geometry(model, engine):
    """The `geometry` op's full output, from the formulas of docs/hybrid-geometry.md."""
    m = MODELS[model]
    tp = engine["tp_size"]
    spec = engine.get("num_speculative_tokens", 0)
    conv_dt = engine.get("conv_state_dtype_bytes", 0) or m["dt"]
    ssm_dt = engine.get("ssm_state_dtype_bytes", 0) or m["ssm_dt"]
    backend = engine.get("backend", "flash_attn")
    mode = engine.get("mamba_cache_mode", "none")
    user_bs = engine.get("user_block_size", 0)
    user_mbs = engine.get("user_mamba_block_size", 0)
    assert tp <= m["k"] and m["k"] % tp == 0 or tp > m["k"] and tp % m["k"] == 0
    kvh = max(1, m["k"] // tp)
    a = kvh * kv_head_bytes(m, engine)
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
    align = max(16, user_bs)  # FlashAttention / Triton / FlashInfer: smallest kernel block 16
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
        "kv_heads_per_rank": kvh, "kv_head_bytes_per_token": kv_head_bytes(m, engine),
        "attn_bytes_per_token": a, "conv_bytes": conv, "ssm_bytes": ssm,
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

    # Nemotron-3-Nano-30B (docs/hybrid-geometry.md worked numbers, capi tests): TP1/2/4
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
    # 8 Mamba2 groups at TP16: vLLM's MambaMixer2 asserts that TP divides n_groups or n_groups is 1
    # (only a single group is replicated), so no such engine exists.
    e("mamba2_groups_not_divided_by_tp", "nemotron-3-nano-30b", {"tp_size": 16},
      "PDKV_ERR_HEADS_NOT_DIVISIBLE", ["n_groups 8", "tp_size 16"])
    e("unknown_preset", "no-such-model", {"tp_size": 1}, "PDKV_ERR_NOT_FOUND", ["no-such-model"])
    e("unknown_backend", "nemotron-3-nano-30b", {"tp_size": 1, "backend": "warp_attn"},
      "PDKV_ERR_NOT_FOUND", ["warp_attn"])
    e("mla_backend_on_gqa_model", "nemotron-3-nano-30b", {"tp_size": 1, "backend": "flashmla"},
      "PDKV_ERR_INCOMPATIBLE", [])
    return cases


# ---------------------------------------------------------------------------------------------
# Mamba reads oracle (docs/semantics.md §4): "pdkv" = every D byte from the P rank owning it;
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


def mamba_reads(model, p_tp_size, d_tp_size, d_tp_rank, rule, spec=0):
    """spec: speculative tokens of both engines (conv rows of spec-row models); "pdkv" rule only."""
    m = MODELS[model]
    dt, sdt = m["dt"], m["ssm_dt"]
    reads = []
    if rule == "pdkv":
        dl = layout(m, d_tp_size, d_tp_rank, spec, dt, sdt)
        for i, (name, u0, u1, ub, doff) in enumerate(dl):
            for p in range(p_tp_size):
                pname, p0, p1, pub, poff = layout(m, p_tp_size, p, spec, dt, sdt)[i]
                assert pname == name and pub == ub
                lo, hi = max(u0, p0), min(u1, p1)
                if lo >= hi:
                    continue
                reads.append({"p_tp_rank": p, "part": name, "remote_offset": poff + (lo - p0) * ub,
                              "local_offset": doff + (lo - u0) * ub, "length": (hi - lo) * ub})
                if p1 - p0 == 1 and p_tp_size > ({"B": m.get("groups"), "C": m.get("groups")}.get(name) or 1 << 30):
                    sys.exit("replicated P parts have no unique owner: not generated")
    else:
        ratio = tp_ratio(d_tp_size, p_tp_size)
        dl = layout(m, d_tp_size, d_tp_rank, 0, dt, sdt)
        d_conv = sum((u1 - u0) * ub for (n, u0, u1, ub, o) in dl[:-1])
        d_ssm = (dl[-1][2] - dl[-1][1]) * dl[-1][3]
        if ratio >= 1:
            p = d_tp_rank // ratio
            lo = d_tp_rank % ratio
            pl = layout(m, p_tp_size, p, 0, dt, sdt)
            p_conv = sum((u1 - u0) * ub for (n, u0, u1, ub, o) in pl[:-1])
            base = 0
            for (name, u0, u1, ub, doff) in dl[:-1]:
                size = (u1 - u0) * ub
                reads.append({"p_tp_rank": p, "part": name, "remote_offset": base + lo * size,
                              "local_offset": doff, "length": size})
                base += size * ratio
            reads.append({"p_tp_rank": p, "part": "ssm", "remote_offset": p_conv + lo * d_ssm,
                          "local_offset": d_conv, "length": d_ssm})
        else:
            a = -ratio
            for idx in range(a):
                p = d_tp_rank * a + idx
                pl = layout(m, p_tp_size, p, 0, dt, sdt)
                for (name, u0, u1, ub, doff), (pn, p0, p1, pub, poff) in zip(dl, pl):
                    size = (p1 - p0) * pub
                    reads.append({"p_tp_rank": p, "part": name, "remote_offset": poff,
                                  "local_offset": doff + idx * size, "length": size})
    reads.sort(key=lambda r: (r["local_offset"], r["p_tp_rank"]))
    return {"reads": reads, "source_ranks": sorted({r["p_tp_rank"] for r in reads})}


def mamba_cases():
    cases = []

    def r(name, model, p_tp_size, d_tp_size, d_tp_rank, rule, expect_reads=None):
        out = mamba_reads(model, p_tp_size, d_tp_size, d_tp_rank, rule)
        if expect_reads is not None:
            got = [(x["p_tp_rank"], x["part"], x["remote_offset"], x["local_offset"], x["length"])
                   for x in out["reads"]]
            check(got, expect_reads, name)
        cases.append({"name": f"mamba_reads/{name}", "op": "mamba_reads",
                      "input": {"model": model, "prefill": {"tp_size": p_tp_size},
                                "decode": {"tp_size": d_tp_size}, "decode_rank": d_tp_rank, "rule": rule},
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
# Block ids, exchange clipping (docs/semantics.md §3, §6, §8), scheduler N-1 rule, offload (§9)
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


# ---------------------------------------------------------------------------------------------
# Issue #3 surface: prefix trimming (§6.3), scheduler splits (§8), receive zeroing (§6.4),
# metadata wire format, handshake reports and transfer plans. Written from docs/semantics.md and
# the contracts documented in capi/include/pdkv.h and core/include/pdkv/core/*.hpp headers.
# ---------------------------------------------------------------------------------------------

def merge_ranges(block, offsets):
    """Maximal [begin, end) ranges of sorted token offsets inside one block."""
    out = []
    for o in offsets:
        if out and out[-1]["token_end"] == o:
            out[-1]["token_end"] = o + 1
        else:
            out.append({"block": block, "token_begin": o, "token_end": o + 1})
    return out


def uncovered(local, first, tpb, held, written):
    """Tokens of listed non-null local blocks D neither holds nor receives, per block."""
    out = []
    for i, b in enumerate(local):
        if b == 0:
            continue
        base = (first + i) * tpb
        offs = [o for o in range(tpb) if base + o >= held
                and not any(w0 <= base + o < w1 for w0, w1 in written)]
        out += merge_ranges(b, offs)
    return out


def receive_zero(local, tpb, bsr, remote_len):
    """§6.4 vLLM rule."""
    assert tpb % bsr == 0
    covered = min(len(local) * bsr, remote_len)
    cb, rem = divmod(covered, bsr)
    out = []
    for i in range(cb, len(local)):
        begin = rem * tpb // bsr if i == cb else 0
        if begin < tpb:
            out.append({"block": local[i], "token_begin": begin, "token_end": tpb})
    return out


class Coverage(Exception):
    pass


def expand_logical(ids, k):
    """Kernel ids of logical ids with k kernel blocks each; the null id 0 stays null for all k."""
    return [0 if b == 0 else b * k + j for b in ids for j in range(k)]


def trim(g):
    """Token-position pairing of one group (pdkv's answer to the §6.3 bugs). Attention lists of
    logical ids (`*_kernel_blocks_per_id` k > 1) are expanded to kernel ids first."""
    kind = g["kind"]
    if kind != "mamba":
        g = dict(g)
        for side in ("local", "remote"):
            k = g.pop(side + "_kernel_blocks_per_id", 1) or 1
            g[side + "_blocks"] = expand_logical(g[side + "_blocks"], k)
    n = g.get("remote_computed_tokens", 0)
    hit = g.get("local_hit_tokens", 0)
    lbs, rbs = g.get("local_tokens_per_block", 0), g.get("remote_tokens_per_block", 0)
    local, remote = g["local_blocks"], g["remote_blocks"]
    rf = g.get("remote_first_block", 0)
    out = {"kind": kind, "transferred_tokens": 0, "runs": [], "states": [], "zero_ranges": [],
           "unfilled_states": []}
    if kind != "mamba":
        need = hit
        if kind == "sliding_window" and n > g["sliding_window"]:
            need = max(need, n - g["sliding_window"])
        lf = g.get("local_first_block", hit // lbs)

        def where(t, blocks, first, bs, side):
            i = t // bs
            if not first <= i < first + len(blocks) or blocks[i - first] == 0:
                raise Coverage(f"{side} token {t}")
            return blocks[i - first], t % bs

        runs = []
        for t in range(need, n):  # token by token, then grouped
            lb, lo = where(t, local, lf, lbs, "local")
            rb, ro = where(t, remote, rf, rbs, "remote")
            r = runs[-1] if runs else None
            if r and r["local_block"] == lb and r["remote_block"] == rb and \
                    r["local_token_begin"] + r["num_tokens"] == lo and \
                    r["remote_token_begin"] + r["num_tokens"] == ro:
                r["num_tokens"] += 1
            else:
                runs.append({"local_block": lb, "local_token_begin": lo, "remote_block": rb,
                             "remote_token_begin": ro, "num_tokens": 1})
        out["runs"] = runs
        out["transferred_tokens"] = sum(r["num_tokens"] for r in runs)
        out["zero_ranges"] = uncovered(local, lf, lbs, hit, [(need, n)] if need < n else [])
        return out
    if g.get("cache_mode", "none") != "all":
        if hit >= n:  # D holds the state already
            return out
        real_l = [b for b in local if b]
        if not real_l:  # D misses tokens, so it needs P's running state, but has no slot for it
            raise Coverage("no local slot")
        real_r = [b for b in remote if b]
        if not real_r:
            raise Coverage("no remote state")
        out["states"] = [{"local_block": real_l[-1], "remote_block": real_r[-1], "tokens": n}]
        out["unfilled_states"] = [b for b in local if b and b != real_l[-1]]
        return out
    if hit >= n:
        return out
    lf = g.get("local_first_block", hit // lbs)
    for i, lb in enumerate(local):
        if lb == 0:
            continue
        start = (lf + i) * lbs
        if start >= n:
            continue
        e = min(start + lbs, n)
        if e <= hit:
            continue
        j = (n - 1) // rbs if e == n else (e // rbs - 1 if e % rbs == 0 else None)
        if j is not None and rf <= j < rf + len(remote) and remote[j - rf] != 0:
            out["states"].append({"local_block": lb, "remote_block": remote[j - rf], "tokens": e})
        elif e == n:
            raise Coverage("final state")
        else:
            out["unfilled_states"].append(lb)
    if not any(st["tokens"] == n for st in out["states"]):  # no real D block at the final position
        raise Coverage("final position")
    return out


def split_v0604(i):
    """§8 v0604 _mamba_block_aligned_split."""
    new = i["num_new_tokens"]
    if i.get("load_kv_async"):
        return new
    nc = i.get("num_computed_tokens", 0) + i.get("num_new_local_computed_tokens", 0) + \
        i.get("num_external_computed_tokens", 0)
    bs, nt = i["block_size"], i["num_tokens"]
    if nc < max(i["num_prompt_tokens"], nt - 1):
        last = nt - nt % bs
        if i.get("use_eagle"):
            last = max(last - bs, 0)
        if nc + new < last:
            new = new // bs * bs
        elif nc < last < nc + new:
            new = last - nc
    return new


def split_main(i):
    """§8 main-branch rewrite, with the explicit parameters of pdkv_aligned_split_input_t."""
    start, new, bs, nt = i.get("start", 0), i["num_new_tokens"], i["block_size"], i["num_tokens"]
    prefill_end = max(i["num_prompt_tokens"], nt - 1)
    if i.get("load_kv_async") or start >= prefill_end:
        return new
    end = start + new
    last = nt - nt % bs
    if i.get("use_eagle"):
        last = max(last - bs, 0)
    if end < prefill_end:
        lims = [x for x in (i.get("max_num_scheduled_tokens", 0), i.get("long_prefill_token_threshold", 0)) if x]
        f = end // bs * bs
        if f > start or (not lims or bs <= min(lims)):
            end = f
        else:
            # The block is wider than every chunk: vLLM main (PR #51113) keeps the budget's end;
            # pdkv floors it to floor_unit when that still advances, and waits only when asked.
            fu = i.get("floor_unit", 0)
            fine = end // fu * fu if fu else start
            if fine > start:
                end = fine
            elif i.get("defer_oversized_block"):
                return 0
    cands = [last]
    if start % bs:
        cands.append((start // bs + 1) * bs)
    tail = i.get("tail_hash_block_size", 0)
    if tail and prefill_end // tail * tail > last:
        cands.append(prefill_end // tail * tail)
    if i.get("shared_prefix_tokens", 0):
        cands.append(i["shared_prefix_tokens"] // bs * bs)
    inside = [c for c in cands if start < c < end]
    if inside:
        end = min(inside)
    return max(end, start) - start


def crc32c_py(data):
    """CRC-32C (Castagnoli, reflected 0x82F63B78, init/xorout 0xFFFFFFFF), bitwise."""
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


# Model descriptions of the presets used below (their published config.json), for the fingerprint.
DESCS = {
    "nemotron-3-nano-30b": dict(k=2, head=128, head_v=128, mla=0, swa=0, type=2, heads=64, head_dim=64,
                                d_state=128, groups=8, d_inner=0, d_conv=4, chunk=128, spec=1, dt=2,
                                ssm_dt=4, pattern="MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"
                                .replace("E", "-")),
    # Qwen3.5-27B: GDN Hv 48 x dv 128, Hk 16 x dk 128, fp32 SSM default, every 4th layer attention.
    "qwen3.5-27b": dict(k=4, head=256, head_v=256, mla=0, swa=0, type=3, heads=48, head_dim=128, d_state=128,
                        groups=16, d_inner=0, d_conv=4, chunk=0, spec=1, dt=2, ssm_dt=4,
                        pattern="".join("*" if (i + 1) % 4 == 0 else "M" for i in range(64))),
}


def fingerprint(model):
    """FNV-1a 64 over the canonical field encoding of fingerprint.hpp."""
    d = DESCS[model]
    h = 0xcbf29ce484222325
    buf = bytearray()
    le = lambda v, n: buf.extend(v.to_bytes(n, "little"))
    le(1, 4)
    for f in ("k", "head", "head_v"):
        le(d[f], 4)
    le(d["mla"], 1)
    le(d["swa"], 4)
    for f in ("type", "heads", "head_dim", "d_state", "groups"):
        le(d[f], 4)
    le(d["d_inner"], 8)
    le(d["d_conv"], 4)
    le(d["chunk"], 4)
    le(d["spec"], 1)
    le(d["dt"], 4)
    le(d["ssm_dt"], 4)
    le(len(d["pattern"]), 4)
    buf.extend(d["pattern"].encode())
    for b in buf:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


MAMBA_TYPE_CODE = {"mamba2": 2, "mamba1": 1, "gdn": 3}
MODES = {"none": 0, "align": 1, "all": 2}


def layout_defaults(layout):
    l = {"engine_id": "engine", "tp_rank": 0, "num_logical_blocks": 64, "num_regions": 1,
         "base": 1 << 40, "kv_layout": "HND", "prefix_caching": None,  # None: unset (derived)
         # Pipeline stage (format 1.2): stage pp_rank of pp_size holding layers [begin, end);
         # layer_end 0: through the model's last layer.
         "pp_size": 1, "pp_rank": 0, "layer_begin": 0, "layer_end": 0}
    l.update(layout or {})
    return l


def metadata(model, engine, layout=None):
    """pdkv_engine_metadata_from_model as fields (metadata_from_geometry.cpp contract)."""
    l = layout_defaults(layout)
    g = geometry(model, engine)
    mm = MODELS[model]
    mode = engine.get("mamba_cache_mode", "none")
    nkb = l["num_logical_blocks"] * g["physical_per_logical"]
    kp = g["kernel_page_bytes"]
    bases = l.get("region_bases") or [l["base"] + i * nkb * kp for i in range(l["num_regions"])]
    kind = {"mamba2": "mamba2", "gdn": "gdn", "mamba1": "mamba1"}[mm["kind"]]
    pc = l["prefix_caching"]
    return {
        "engine_id": l["engine_id"], "tp_size": engine["tp_size"], "tp_rank": l["tp_rank"],
        "kv_layout": l["kv_layout"], "conv_layout": engine.get("conv_layout", "DS"),
        "logical_block_size": g["block_size"], "kernel_block_size": g["kernel_block_size"],
        "physical_blocks_per_logical": g["physical_per_logical"], "num_kernel_blocks": nkb,
        "regions": [{"base": b, "block_len": kp, "num_blocks": nkb, "kind": "mamba", "layer": l["layer_begin"] + i}
                    for i, b in enumerate(bases)],
        "mamba_type": kind, "conv_bytes": g["conv_bytes"], "ssm_bytes": g["ssm_bytes"],
        "conv_projection_bytes": [p["bytes"] for p in g["projections"]],
        "attention_bytes_per_token": g["attn_bytes_per_token"], "use_mla": False,
        "total_kv_heads": mm["k"], "prefix_caching": (mode != "none") if pc is None else bool(pc),
        "cache_mode": mode, "model_fingerprint": "%016x" % fingerprint(model),
        "pp_size": l["pp_size"], "pp_rank": l["pp_rank"], "layer_begin": l["layer_begin"],
        "layer_end": l["layer_end"],
    }


def encode(md):
    """Wire format 1.0 (engine_metadata.hpp): 16-byte header then the fields, little-endian."""
    p = bytearray()
    le = lambda v, n: p.extend(int(v).to_bytes(n, "little"))
    eid = md["engine_id"].encode()
    le(len(eid), 2)
    p.extend(eid)
    le(md["tp_size"], 4)
    le(md["tp_rank"], 4)
    le({"HND": 0, "NHD": 1}[md["kv_layout"]], 1)
    le({"DS": 0, "SD": 1}[md["conv_layout"]], 1)
    le(md["logical_block_size"], 4)
    le(md["kernel_block_size"], 4)
    le(md["physical_blocks_per_logical"], 4)
    le(md["num_kernel_blocks"], 8)
    le(MAMBA_TYPE_CODE.get(md["mamba_type"], 0), 1)
    le(md["conv_bytes"], 8)
    le(md["ssm_bytes"], 8)
    le(len(md["conv_projection_bytes"]), 1)
    for b in md["conv_projection_bytes"]:
        le(b, 8)
    le(md["attention_bytes_per_token"], 8)
    pipeline = md.get("pp_size", 1) > 1  # format 1.2: flag bit 4, fields after the regions
    le((1 if md["use_mla"] else 0) | (2 if md["prefix_caching"] else 0) | (4 if pipeline else 0), 1)
    le(md["total_kv_heads"], 4)
    le(MODES[md["cache_mode"]], 1)
    le(int(md["model_fingerprint"], 16), 8)
    le(len(md["regions"]), 4)
    for r in md["regions"]:
        le(r["base"], 8)
        le(r["block_len"], 8)
        le(r["num_blocks"], 8)
        le({"attention": 0, "mamba": 1, "mla": 2}[r["kind"]], 1)
        le(r["layer"], 4)
    if pipeline:
        for k in ("pp_size", "pp_rank", "layer_begin", "layer_end"):
            le(md[k], 4)
    # The lowest minor that describes the metadata: 1.2 for a pipeline stage, 1.1 for an mla
    # region, else 1.0.
    minor = 2 if pipeline else 1 if any(r["kind"] == "mla" for r in md["regions"]) else 0
    head = b"PDKV" + (1).to_bytes(2, "little") + minor.to_bytes(2, "little") + \
        len(p).to_bytes(4, "little") + crc32c_py(p).to_bytes(4, "little")
    return head + bytes(p)


# Pure-attention models the plan vectors describe by config.json text (no preset exists): the
# fields pdkv's hf_config reader takes from them (hf_config.cpp: gqa_attention / mla_attention).
ATTN_MODELS = {
    # DeepSeek-V3-like MLA: one latent "head" of kv_lora_rank 512 + qk_rope_head_dim 64 = 576
    # elements, no separate V, the same on every rank; bf16.
    "mla-576": dict(k=1, head=576, head_v=0, dt=2, mla=True,
                    hf_config='{"model_type": "deepseek_v3", "num_hidden_layers": 2, "kv_lora_rank": 512, '
                              '"qk_rope_head_dim": 64, "torch_dtype": "bfloat16"}'),
}

# GQA models with MLA-typed layers ('L', ModelDesc::mla_head_size), described field by field in
# the vectors (`model` as an object: no preset or config.json describes one). mla_head: the
# latent's elements (one head, replicated on every rank); pattern: the layer kinds.
MIXED_MODELS = {
    # 4 KV heads of 8+8 bf16 elements (32 B per head per token), a 24-element latent (48 B).
    "mixed-gqa-mla": dict(k=4, head=8, head_v=8, dt=2, mla=False, mla_head=24, pattern="*L",
                          desc={"name": "mixed-gqa-mla", "num_kv_heads": 4, "head_size": 8, "head_size_v": 8,
                                "use_mla": False, "dtype_bytes": 2, "layer_pattern": "*L", "mla_head_size": 24}),
}


def region_kinds(mm, nreg, layout):
    """Region kinds of metadata_from_geometry: the layout's, else for a model with MLA-typed
    layers its attention layers' kinds in pattern order, repeated; else attention."""
    if layout.get("region_kinds"):
        return list(layout["region_kinds"])
    pattern = mm.get("pattern", "")
    attn = [c for c in pattern if c in "*PL"] if mm.get("mla_head") else []
    return [("mla" if attn[i % len(attn)] == "L" else "attention") if attn else "attention" for i in range(nreg)]


# Attention backends: (preferred block size, kernel block sizes or None = any multiple of 16).
BACKENDS = {"flash_attn": (16, None), "triton": (16, None), "flashinfer": (16, [16, 32, 64]),
            "flashmla": (64, [64]), "cutlass_mla": (128, [128]), "flashinfer_mla": (32, [32, 64])}


def attn_geometry(m, engine):
    """Pure-attention geometry (no Mamba alignment): the backend's preferred block size unless
    the user chose one, the largest kernel block size dividing it, one page per kernel block."""
    tp = engine["tp_size"]
    pref, kernels = BACKENDS[engine.get("backend", "flash_attn")]
    if m.get("mla"):
        kvh = 1
    else:
        assert m["k"] % tp == 0 or tp % m["k"] == 0
        kvh = max(1, m["k"] // tp)
    a = kvh * kv_head_bytes(m, engine)
    block = engine.get("user_block_size", 0) or pref
    if kernels is None:
        assert block % 16 == 0
        kernel = block
    else:
        kernel = block if block in kernels else max(k for k in kernels if block % k == 0)
    ppl = block // kernel
    return {"kv_heads_per_rank": kvh, "attn_bytes_per_token": a, "block_size": block,
            "kernel_block_size": kernel, "physical_per_logical": ppl, "kernel_page_bytes": kernel * a}


def no_permute_defaults(key, val):
    """Hand-written expected plan groups predate the receive-side permutation: a group of a plan
    without one has empty permute lists."""
    if key != "groups":
        return val
    return [dict({"permute_blocks": [], "permute_regions": []}, **g) for g in val]


class PlanError(Exception):
    """A plan the oracle refuses: status name and the values its message must contain."""

    def __init__(self, status, contains):
        super().__init__(status)
        self.status, self.contains = status, contains


def coalesce(pieces):
    """Merges pieces contiguous on both sides with the previous merged read, in list order."""
    merged = []
    for x in pieces:
        y = merged[-1] if merged else None
        if y and y["local_region"] == x[0] and y["remote_region"] == x[2] and \
                y["local_offset"] + y["length"] == x[1] and y["remote_offset"] + y["length"] == x[3]:
            y["length"] += x[4]
        else:
            merged.append({"local_region": x[0], "local_offset": x[1], "remote_region": x[2],
                           "remote_offset": x[3], "length": x[4]})
    return merged


def plan(model, p_eng, d_eng, d_tp_rank, groups, p_layout=None, d_layout=None, p_ranks=None, permute_on_receive=False,
         issue_order=False):
    """Independent transfer-plan model: trims each group, maps attention tokens to HND head
    slices (per D head, the P rank holding it), Mamba pairs to mamba_reads pieces at page stride,
    then coalesces pieces contiguous on both sides (in local order). `model` is a preset of
    MODELS or a pure-attention model of ATTN_MODELS; `p_ranks` the P ranks whose metadata the
    context holds (None: all). Raises PlanError for a plan pdkv must refuse (a read from a P rank
    without metadata, a read leaving a region) and Coverage from trimming."""
    mm = MODELS[model] if model in MODELS else ATTN_MODELS[model] if model in ATTN_MODELS else MIXED_MODELS[model]
    geo = (lambda e: geometry(model, e)) if model in MODELS else (lambda e: attn_geometry(mm, e))
    k, mla = mm["k"], bool(mm.get("mla"))
    p_tp_size, d_tp_size = p_eng["tp_size"], d_eng["tp_size"]
    pg, dg = geo(p_eng), geo(d_eng)
    dl, pl = layout_defaults(d_layout), layout_defaults(p_layout)
    nreg = dl["num_regions"]
    # Pipeline stages: [begin, end) windows (end 0: open). Stages holding the same window pair
    # regions by index; others pair them by layer (groups name their layers).
    win = lambda l: (l["layer_begin"], l["layer_end"] or 1 << 32)
    dwin, pwin = win(dl), win(pl)
    same_window = dwin == pwin
    if same_window:
        assert pl["num_regions"] == nreg
    w_begin, w_end = max(dwin[0], pwin[0]), min(dwin[1], pwin[1])
    assert w_begin < w_end, "the stages share no layer"
    mapping = tp_mapping(d_tp_size, d_tp_rank, p_tp_size, k, mla, True)
    bph = dg["attn_bytes_per_token"] // dg["kv_heads_per_rank"]
    assert bph == pg["attn_bytes_per_token"] // pg["kv_heads_per_rank"]
    d_heads = range(*head_range(d_tp_size, k, d_tp_rank))
    lbs, rbs = dg["kernel_block_size"], pg["kernel_block_size"]
    Ld, Lp = dg["kernel_page_bytes"], pg["kernel_page_bytes"]
    # MLA-typed regions of a GQA model (MIXED_MODELS): one latent per token, the same bytes on
    # every rank, read whole from P rank d_tp_rank * P_TP / D_TP (the first handshake target).
    d_kinds = region_kinds(mm, nreg, dl)
    p_kinds = region_kinds(mm, pl["num_regions"], pl)
    if same_window:
        check(p_kinds, d_kinds, "both sides register the same region kinds")
    else:
        assert not mm.get("mla_head"), "pipeline vectors use models without MLA-typed layers"
    mla_src = d_tp_rank * p_tp_size // d_tp_size
    kv_bits = lambda eng: eng.get("kv_cache_element_bits", 0) or 8 * (eng.get("kv_cache_dtype_bytes", 0) or mm["dt"])
    mla_a = {side: mm.get("mla_head", 0) * kv_bits(eng) // 8 for side, eng in (("D", d_eng), ("P", p_eng))}
    check(mla_a["D"], mla_a["P"], "MLA latent bytes per token")
    page = lambda side, reg: (lbs if side == "D" else rbs) * mla_a[side] \
        if (d_kinds if side == "D" else p_kinds)[reg] == "mla" else (Ld if side == "D" else Lp)
    # KV layout: HND (heads x tokens) unless both sides say NHD (tokens x heads). MLA has one
    # latent head, so both layouts are the same bytes. NHD with different heads per rank would
    # read a head subset of every token: refused, like layouts that differ.
    # Different layouts (with permute_on_receive): D's blocks are written as P lays them out
    # ("staging"), then each received block is permuted into D's layout. P's NHD blocks cannot be
    # read by head subsets.
    nhd = False
    permute = False
    if any(g["kind"] != "mamba" for g in groups) and not mla:
        heads_differ = mapping["local_physical_heads"] != mapping["remote_physical_heads"]
        if pl["kv_layout"] == "NHD" and heads_differ:
            raise PlanError("PDKV_ERR_UNSUPPORTED_LAYOUT", ["NHD", "%d (D)" % mapping["local_physical_heads"],
                                                            "%d (P)" % mapping["remote_physical_heads"],
                                                            "HND KV cache layout on the prefill engine"])
        if dl["kv_layout"] != pl["kv_layout"]:
            if not permute_on_receive:
                raise PlanError("PDKV_ERR_UNSUPPORTED_LAYOUT", ["D %s, P %s" % (dl["kv_layout"], pl["kv_layout"]),
                                                                "permute_on_receive"])
            permute = True
        nhd = pl["kv_layout"] == "NHD"  # the staging layout: P's (D's own when they agree)
    pieces = {p: [] for p in range(p_tp_size)}  # p -> [(lr, lo, rr, ro, len, kind)]
    issue = []  # (p, piece) in the order the pieces are produced
    gz = []
    trims = []
    for g in groups:  # every group is trimmed before any read is made
        g = dict(g)
        layers = g.pop("layers", None)
        if layers is None:  # regions paired by index
            assert same_window
            regions = [(r, r) for r in g.pop("regions", list(range(nreg)))]
        else:  # a layer's region on a stage: its position among the group's layers in the window
            regions, dpos, ppos = [], 0, 0
            for l in layers:
                ind, inp = dwin[0] <= l < dwin[1], pwin[0] <= l < pwin[1]
                if ind and inp:
                    regions.append((dpos, ppos))
                dpos, ppos = dpos + ind, ppos + inp
        t = dict(g)
        if g["kind"] != "mamba":
            t.setdefault("local_tokens_per_block", lbs)
            t.setdefault("remote_tokens_per_block", rbs)
        elif g.get("cache_mode") == "all":
            t.setdefault("local_tokens_per_block", dg["block_size"])
            t.setdefault("remote_tokens_per_block", pg["block_size"])
        trims.append((g["kind"], regions, trim(t)))
    for (kind, regions, tr), g in zip(trims, groups):
        pblocks, pregions = [], []
        if permute and kind != "mamba":
            pregions = [rd for rd, _ in regions if d_kinds[rd] != "mla"]
            if pregions and tr["runs"]:
                # D blocks that receive bytes; none may hold tokens of D's own prefix hit.
                hit = g.get("local_hit_tokens", 0)
                first = g.get("local_first_block", hit // lbs)
                for run in tr["runs"]:
                    start = (first + g["local_blocks"].index(run["local_block"])) * lbs
                    if start < hit:
                        raise PlanError("PDKV_ERR_UNSUPPORTED_LAYOUT", ["D block %d" % run["local_block"],
                                                                        "prefix-cache hit", "block boundary"])
                pblocks = sorted({run["local_block"] for run in tr["runs"]})
        gz.append({"kind": kind, "regions": [rd for rd, _ in regions], "zero_ranges": tr["zero_ranges"],
                   "unfilled_states": tr["unfilled_states"], "permute_blocks": pblocks, "permute_regions": pregions})

        def add(p, x):
            pieces[p].append(x)
            issue.append((p, x))

        for reg, rreg in regions:
            for run in tr["runs"]:
                if d_kinds[reg] == "mla":  # one latent head: a token run is one piece, one P rank
                    check(p_kinds[rreg], "mla", "an MLA region pairs with an MLA region")
                    ma = mla_a["D"]
                    add(mla_src, (reg, run["local_block"] * page("D", reg) + run["local_token_begin"] * ma, rreg,
                                  run["remote_block"] * page("P", rreg) + run["remote_token_begin"] * ma,
                                  run["num_tokens"] * ma, "a"))
                    continue
                if nhd:  # one P rank holds all of D's heads: a token run is one piece
                    src = mapping["attention_source_ranks"][0]
                    tb = dg["attn_bytes_per_token"]
                    add(src, (reg, run["local_block"] * Ld + run["local_token_begin"] * tb, rreg,
                              run["remote_block"] * Lp + run["remote_token_begin"] * tb, run["num_tokens"] * tb, "a"))
                    continue
                whole = run["num_tokens"] == lbs == rbs
                # D heads grouped by the attention source rank holding them.
                by_src = {}
                for hl, h in enumerate(d_heads):
                    src = next(p for p in mapping["attention_source_ranks"]
                               if head_range(p_tp_size, k, p)[0] <= h < head_range(p_tp_size, k, p)[1])
                    hp = h - head_range(p_tp_size, k, src)[0]
                    by_src.setdefault(src, []).append((hl, hp))
                for src, hs in by_src.items():
                    if whole:
                        hl0, hp0 = hs[0]
                        add(src, (reg, run["local_block"] * Ld + hl0 * lbs * bph, rreg,
                                  run["remote_block"] * Lp + hp0 * rbs * bph, len(hs) * lbs * bph, "a"))
                        continue
                    for hl, hp in hs:
                        add(src, (reg, run["local_block"] * Ld + hl * lbs * bph + run["local_token_begin"] * bph,
                                  rreg, run["remote_block"] * Lp + hp * rbs * bph + run["remote_token_begin"] * bph,
                                  run["num_tokens"] * bph, "a"))
            for st in tr["states"]:
                spec = d_eng.get("num_speculative_tokens", 0)
                assert spec == p_eng.get("num_speculative_tokens", 0), "the plan oracle models equal spec tokens"
                for r in mamba_reads(model, p_tp_size, d_tp_size, d_tp_rank, "pdkv", spec)["reads"]:
                    add(r["p_tp_rank"],
                        (reg, st["local_block"] * Ld * dg["physical_per_logical"] + r["local_offset"], rreg,
                         st["remote_block"] * Lp * pg["physical_per_logical"] + r["remote_offset"],
                         r["length"], "m"))
    before = sum(len(v) for v in pieces.values())
    reads, rank_bytes, after, ab, mb = [], [], 0, 0, 0
    for p in range(p_tp_size):
        if pieces[p] and p_ranks is not None and p not in p_ranks:
            raise PlanError("PDKV_ERR_NOT_FOUND", ["P rank %d" % p])
        # Local-order and issue-order coalescing must agree, or the vector would depend on the
        # order pdkv issues its pieces in.
        merged = coalesce(sorted(pieces[p]))
        check(sorted(coalesce([x for q, x in issue if q == p]),
                     key=lambda r: (r["local_region"], r["local_offset"])), merged, "coalescing order")
        for x in pieces[p]:
            ab += x[4] if x[5] == "a" else 0
            mb += x[4] if x[5] == "m" else 0
        for r in merged:  # no read may leave a registered region (num_logical_blocks x ppl pages)
            for side, off, reg, lay, geo_ in (("D", r["local_offset"], r["local_region"], dl, dg),
                                              ("P", r["remote_offset"], r["remote_region"], pl, pg)):
                size = lay["num_logical_blocks"] * geo_["physical_per_logical"] * page(side, reg)
                if off + r["length"] > size:
                    raise PlanError("PDKV_ERR_OUT_OF_BOUNDS", ["offset %d" % off, "length %d" % r["length"],
                                                               "%d bytes" % size])
        after += len(merged)
        # issue_order: each P rank's reads in the order the pieces are produced (group, region,
        # run), which is the order a plan dump lists them; else in local order.
        reads.append(coalesce([x for q, x in issue if q == p]) if issue_order else merged)
        rank_bytes.append(sum(r["length"] for r in merged))
    return {"p_tp_size": p_tp_size, "d_tp_size": d_tp_size, "read_ranks": [p for p in range(p_tp_size) if reads[p]],
            "notify_ranks": handshake_targets(d_tp_size, d_tp_rank, p_tp_size),
            "notifications_per_p_rank": notifications(p_tp_size, d_tp_size), "reads": reads,
            "rank_bytes": rank_bytes, "groups": gz, "pieces_before_coalescing": before,
            "pieces_after_coalescing": after, "bytes": sum(rank_bytes), "attention_bytes": ab,
            "mamba_bytes": mb, "empty": before == 0,
            "permute": {"from": pl["kv_layout"] if permute else "HND", "to": dl["kv_layout"] if permute else "HND",
                        "heads": dg["kv_heads_per_rank"] if permute else 0, "tokens": lbs if permute else 0,
                        "head_bytes": bph if permute else 0},
            "p_pp_size": pl["pp_size"], "p_pp_rank": pl["pp_rank"], "d_pp_size": dl["pp_size"],
            "d_pp_rank": dl["pp_rank"], "layer_begin": w_begin, "layer_end": 0 if w_end == 1 << 32 else w_end}


def trim_cases():
    cases = []
    add = lambda name, op, inp, out=None, err=None: cases.append(
        dict(name=name, op=op, input=inp, **({"output": out} if err is None else {"error": err})))

    def t(name, inp, expect=None):
        out = trim(inp)
        for key, val in (expect or {}).items():
            check(out[key], val, "trim " + name)
        add("trim_group/" + name, "trim_group", inp, out)

    # Bug 1: a fully cached group (nd == 0) while others still transfer: vLLM's x[-0:] reads P's
    # whole list; pdkv moves nothing for that group.
    t("bug1_full_hit_attention_no_runs",
      {"kind": "attention", "local_blocks": [], "remote_blocks": [7, 8, 9, 10], "local_tokens_per_block": 16,
       "remote_tokens_per_block": 16, "remote_computed_tokens": 64, "local_hit_tokens": 64},
      {"runs": [], "zero_ranges": [], "transferred_tokens": 0})
    t("bug1_full_hit_sliding_window_no_runs",
      {"kind": "sliding_window", "local_blocks": [], "remote_blocks": [5, 6], "local_tokens_per_block": 16,
       "remote_tokens_per_block": 16, "remote_computed_tokens": 32, "local_hit_tokens": 32,
       "sliding_window": 20}, {"runs": []})
    # Bug 2 (v0604 `assert num_local_blocks == 1`): SSM nd == 0, and nd >= 2 < np ("all" mode).
    # nd == 0 is fine when D holds every token (nothing moves); when D misses tokens it needs P's
    # running state and a list without a real slot is a Coverage error (never a silent no-op).
    t("bug2_ssm_nd0_full_hit_no_state",
      {"kind": "mamba", "cache_mode": "align", "local_blocks": [], "remote_blocks": [0, 0, 14],
       "remote_computed_tokens": 100, "local_hit_tokens": 100}, {"states": []})
    add("trim_group/coverage_ssm_nd0_needs_state", "trim_group",
        {"kind": "mamba", "cache_mode": "align", "local_blocks": [], "remote_blocks": [0, 0, 14],
         "remote_computed_tokens": 100, "local_hit_tokens": 0},
        err={"status": "PDKV_ERR_COVERAGE", "message_contains": ["100", "0 blocks"]})
    add("trim_group/coverage_ssm_only_null_local_slots", "trim_group",
        {"kind": "mamba", "cache_mode": "align", "local_blocks": [0, 0], "remote_blocks": [0, 0, 14],
         "remote_computed_tokens": 100, "local_hit_tokens": 16},
        err={"status": "PDKV_ERR_COVERAGE", "message_contains": ["100", "2 blocks"]})
    for c in cases[-2:]:  # the oracle refuses them too
        try:
            trim(c["input"])
            sys.exit("oracle accepts " + c["name"])
        except Coverage:
            pass
    # "all" mode: D's list ends before the final position (tokens 32..47 at position 2).
    add("trim_group/coverage_all_mode_no_final_position", "trim_group",
        {"kind": "mamba", "cache_mode": "all", "local_blocks": [5, 6], "remote_blocks": [1, 2, 3],
         "local_tokens_per_block": 16, "remote_tokens_per_block": 16, "remote_computed_tokens": 48,
         "local_hit_tokens": 0},
        err={"status": "PDKV_ERR_COVERAGE", "message_contains": ["48", "position 2"]})
    try:
        trim(cases[-1]["input"])
        sys.exit("oracle accepts " + cases[-1]["name"])
    except Coverage:
        pass
    t("bug2_ssm_nd2_lt_np3_all_mode",
      {"kind": "mamba", "cache_mode": "all", "local_blocks": [5, 6], "remote_blocks": [1, 2, 3],
       "local_tokens_per_block": 16, "remote_tokens_per_block": 16, "remote_computed_tokens": 48,
       "local_hit_tokens": 16},
      {"states": [{"local_block": 5, "remote_block": 2, "tokens": 32},
                  {"local_block": 6, "remote_block": 3, "tokens": 48}]})
    # Align-mode placeholders [0, 0, 14]: the nulls are skipped, the running state is paired.
    t("align_placeholders_0_0_14",
      {"kind": "mamba", "cache_mode": "align", "local_blocks": [42], "remote_blocks": [0, 0, 14],
       "remote_computed_tokens": 160, "local_hit_tokens": 0},
      {"states": [{"local_block": 42, "remote_block": 14, "tokens": 160}]})
    t("align_local_placeholders_and_stale_slot",
      {"kind": "mamba", "cache_mode": "align", "local_blocks": [0, 41, 42], "remote_blocks": [0, 0, 14],
       "remote_computed_tokens": 160, "local_hit_tokens": 0},
      {"states": [{"local_block": 42, "remote_block": 14, "tokens": 160}], "unfilled_states": [41]})
    # "all" mode positional pairing, both directions.
    t("all_mode_nd1_lt_np3_pairs_last_position",
      {"kind": "mamba", "cache_mode": "all", "local_blocks": [8], "remote_blocks": [1, 2, 3],
       "local_tokens_per_block": 16, "remote_tokens_per_block": 16, "remote_computed_tokens": 48,
       "local_hit_tokens": 32}, {"states": [{"local_block": 8, "remote_block": 3, "tokens": 48}]})
    t("all_mode_nd3_gt_np2_extra_position_recomputed",
      {"kind": "mamba", "cache_mode": "all", "local_blocks": [5, 6, 7], "remote_blocks": [1, 2],
       "local_tokens_per_block": 16, "remote_tokens_per_block": 16, "remote_computed_tokens": 32,
       "local_hit_tokens": 0},
      {"states": [{"local_block": 5, "remote_block": 1, "tokens": 16},
                  {"local_block": 6, "remote_block": 2, "tokens": 32}]})
    # nd 4 > np 2 with different Mamba block sizes: vLLM's decode[:2] pairs 5<-1, 6<-2 (wrong
    # token counts); pdkv pairs by token count and leaves D's odd checkpoints unfilled.
    t("all_mode_d16_p32_pairs_by_token_count",
      {"kind": "mamba", "cache_mode": "all", "local_blocks": [5, 6, 7, 8], "remote_blocks": [1, 2],
       "local_tokens_per_block": 16, "remote_tokens_per_block": 32, "remote_computed_tokens": 64,
       "local_hit_tokens": 0},
      {"states": [{"local_block": 6, "remote_block": 1, "tokens": 32},
                  {"local_block": 8, "remote_block": 2, "tokens": 64}], "unfilled_states": [5, 7]})
    # Bug 3: different blocks per logical with prefix caching. Kernel blocks of 16 tokens, D ppl 4
    # (logical 64), P ppl 2 (logical 32). D hit one logical block (64 tokens): D kernel ids of
    # logical [3, 4] start at block index 4; P kernel ids of logical [7..10]. N = 100.
    d_k = [b * 4 + j for b in [3, 4] for j in range(4)]
    p_k = [b * 2 + j for b in [7, 8, 9, 10] for j in range(2)]
    t("bug3_hetero_ppl_prefix_cache_token_aligned",
      {"kind": "attention", "local_blocks": d_k, "remote_blocks": p_k, "local_tokens_per_block": 16,
       "remote_tokens_per_block": 16, "remote_computed_tokens": 100, "local_hit_tokens": 64,
       "local_first_block": 4, "remote_first_block": 0},
      {"runs": [{"local_block": 12, "local_token_begin": 0, "remote_block": 18, "remote_token_begin": 0,
                 "num_tokens": 16},
                {"local_block": 13, "local_token_begin": 0, "remote_block": 19, "remote_token_begin": 0,
                 "num_tokens": 16},
                {"local_block": 14, "local_token_begin": 0, "remote_block": 20, "remote_token_begin": 0,
                 "num_tokens": 4}],
       "zero_ranges": [{"block": 14, "token_begin": 4, "token_end": 16}] +
                      [{"block": b, "token_begin": 0, "token_end": 16} for b in range(15, 20)]})
    # Kernel blocks that are not multiples: D 2096 tokens, P 1056 (Nemotron-3-Nano TP2 / TP4).
    t("kernel_blocks_2096_vs_1056",
      {"kind": "attention", "local_blocks": [1, 2, 3], "remote_blocks": [4, 5, 6, 7, 8],
       "local_tokens_per_block": 2096, "remote_tokens_per_block": 1056, "remote_computed_tokens": 5000},
      {"transferred_tokens": 5000,
       "zero_ranges": [{"block": 3, "token_begin": 5000 - 4192, "token_end": 2096}]})
    check(len(trim({"kind": "attention", "local_blocks": [1, 2, 3], "remote_blocks": [4, 5, 6, 7, 8],
                    "local_tokens_per_block": 2096, "remote_tokens_per_block": 1056,
                    "remote_computed_tokens": 5000})["runs"]), 7, "2096/1056 runs split at both boundaries")
    # Sliding window: only the last `window` tokens move; the clipped lists start at index 11.
    t("sliding_window_100_of_300",
      {"kind": "sliding_window", "local_blocks": list(range(111, 119)), "remote_blocks": list(range(211, 219)),
       "local_tokens_per_block": 16, "remote_tokens_per_block": 16, "remote_computed_tokens": 300,
       "sliding_window": 100, "local_first_block": 11, "remote_first_block": 11},
      {"transferred_tokens": 100})
    t("partial_hit_same_block_size",
      {"kind": "attention", "local_blocks": [6, 7, 8, 9], "remote_blocks": list(range(10)),
       "local_tokens_per_block": 16, "remote_tokens_per_block": 16, "remote_computed_tokens": 160,
       "local_hit_tokens": 96}, {"transferred_tokens": 64})
    t("partly_covered_tail_zeroed",
      {"kind": "attention", "local_blocks": [3, 4], "remote_blocks": [8, 9], "local_tokens_per_block": 32,
       "remote_tokens_per_block": 32, "remote_computed_tokens": 40},
      {"zero_ranges": [{"block": 4, "token_begin": 8, "token_end": 32}]})
    add("trim_group/coverage_local_list_too_short", "trim_group",
        {"kind": "attention", "local_blocks": [10], "remote_blocks": [20, 21, 22], "local_tokens_per_block": 16,
         "remote_tokens_per_block": 16, "remote_computed_tokens": 48},
        err={"status": "PDKV_ERR_COVERAGE", "message_contains": ["token 16"]})
    add("trim_group/coverage_null_final_state_all_mode", "trim_group",
        {"kind": "mamba", "cache_mode": "all", "local_blocks": [5], "remote_blocks": [1, 0],
         "local_tokens_per_block": 16, "remote_tokens_per_block": 16, "remote_computed_tokens": 32,
         "local_hit_tokens": 16},
        err={"status": "PDKV_ERR_COVERAGE", "message_contains": ["32"]})
    add("trim_group/coverage_only_null_remote_states", "trim_group",
        {"kind": "mamba", "cache_mode": "align", "local_blocks": [5], "remote_blocks": [0, 0],
         "remote_computed_tokens": 32},
        err={"status": "PDKV_ERR_COVERAGE", "message_contains": ["null"]})
    # Logical ids (kernel_blocks_per_id k > 1, the engine's block table as it is): the same
    # trimming as the kernel ids they stand for (D 4 and P 2 kernel blocks per logical block,
    # 8- and 16-token kernel blocks), a prefix hit inside a logical block, and a sliding window
    # whose out-of-window logical blocks are the null block 0: none of their kernel blocks is
    # read or zeroed.
    logical = {"kind": "attention", "local_blocks": [9, 10, 4], "remote_blocks": [3, 7, 8],
               "local_kernel_blocks_per_id": 4, "remote_kernel_blocks_per_id": 2,
               "local_tokens_per_block": 8, "remote_tokens_per_block": 16,
               "remote_computed_tokens": 90, "local_hit_tokens": 12, "local_first_block": 0}
    t("logical_ids_kernel_blocks_per_id", logical)
    kernel = dict(logical, local_blocks=expand_logical(logical["local_blocks"], 4),
                  remote_blocks=expand_logical(logical["remote_blocks"], 2))
    del kernel["local_kernel_blocks_per_id"], kernel["remote_kernel_blocks_per_id"]
    check(trim(kernel), trim(logical), "logical ids trim like their kernel ids")
    t("logical_ids_sliding_window_null_blocks",
      {"kind": "sliding_window", "local_blocks": [0, 0, 6, 7], "remote_blocks": [0, 5, 9, 2],
       "local_kernel_blocks_per_id": 3, "remote_kernel_blocks_per_id": 3, "local_tokens_per_block": 16,
       "remote_tokens_per_block": 16, "remote_computed_tokens": 180, "sliding_window": 60,
       "local_first_block": 0})
    add("trim_group/logical_ids_null_block_needed", "trim_group",
        {"kind": "attention", "local_blocks": [5, 0], "remote_blocks": [2, 3], "local_kernel_blocks_per_id": 2,
         "remote_kernel_blocks_per_id": 2, "local_tokens_per_block": 16, "remote_tokens_per_block": 16,
         "remote_computed_tokens": 50},
        err={"status": "PDKV_ERR_COVERAGE", "message_contains": ["block index 2", "null block"]})
    add("trim_group/logical_ids_for_mamba_refused", "trim_group",
        {"kind": "mamba", "cache_mode": "align", "local_blocks": [5], "remote_blocks": [6],
         "local_kernel_blocks_per_id": 4, "remote_computed_tokens": 32},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["local_kernel_blocks_per_id = 4"]})
    add("trim_group/logical_ids_overflow", "trim_group",
        {"kind": "attention", "local_blocks": [1], "remote_blocks": [7, (1 << 62)], "local_kernel_blocks_per_id": 2,
         "remote_kernel_blocks_per_id": 4, "local_tokens_per_block": 16, "remote_tokens_per_block": 16,
         "remote_computed_tokens": 8},
        err={"status": "PDKV_ERR_OVERFLOW", "message_contains": ["remote block id 4611686018427387904 at position 1"]})
    add("trim_group/zero_tokens_per_block", "trim_group",
        {"kind": "attention", "local_blocks": [1], "remote_blocks": [1], "remote_computed_tokens": 8},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": []})
    return cases


def scheduler_split_cases():
    cases = []
    add = lambda name, op, inp, out=None, err=None: cases.append(
        dict(name=name, op=op, input=inp, **({"output": out} if err is None else {"error": err})))
    base = {"num_external_computed_tokens": 40, "num_prompt_tokens": 100, "num_tokens": 100, "block_size": 16}
    for name, extra, want in [("floor_to_block", {"num_new_tokens": 50}, 48),
                              ("stop_at_last", {"num_new_tokens": 60}, 56),
                              ("eagle_keeps_block_back", {"num_new_tokens": 50, "use_eagle": True}, 40),
                              ("async_load_no_split", {"num_new_tokens": 50, "load_kv_async": True}, 50),
                              ("decode_step_unchanged", {"num_new_tokens": 1, "num_computed_tokens": 60}, 1)]:
        inp = dict(base, **extra)
        check(split_v0604(inp), want, "v0604 " + name)
        add("mamba_aligned_split_v0604/" + name, "mamba_aligned_split_v0604", inp, {"num_new_tokens": want})
    add("mamba_aligned_split_v0604/zero_block_size", "mamba_aligned_split_v0604",
        dict(base, num_new_tokens=5, block_size=0), err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": []})

    def chain(name, inp0, proposals, want):
        start, got = 0, []
        for k, prop in enumerate(proposals):
            # The scheduler never proposes more than the prompt's remaining tokens.
            inp = dict(inp0, start=start, num_new_tokens=min(prop, inp0["num_prompt_tokens"] - start))
            n = split_main(inp)
            add(f"mamba_aligned_split/{name}_step{k}", "mamba_aligned_split", inp, {"num_new_tokens": n})
            got.append(n)
            start += n
        check(got, want, "§8 " + name)

    # §8 vectors: partial tail 0 -> 8192 -> 9728 -> 9984 -> 10000 (bs 512, tail hash 256, budget 8192).
    chain("partial_tail", {"num_prompt_tokens": 10000, "num_tokens": 10000, "block_size": 512,
                           "tail_hash_block_size": 256, "max_num_scheduled_tokens": 8192},
          [8192, 1808, 272, 16], [8192, 1536, 256, 16])
    # Budget [8192, 3200, 8192, 3200, 7216] (bs 16 divides every chunk end and the prompt).
    chain("budget", {"num_prompt_tokens": 30000, "num_tokens": 30000, "block_size": 16},
          [8192, 3200, 8192, 3200, 7216], [8192, 3200, 8192, 3200, 7216])
    # Long-prefill threshold 400 with bs 512 > threshold: floor to 128, then the block boundary.
    chain("long_prefill_threshold", {"num_prompt_tokens": 1300, "num_tokens": 1300, "block_size": 512,
                                     "floor_unit": 128, "long_prefill_token_threshold": 400},
          [400, 400, 400, 400, 400], [384, 128, 384, 128, 276])
    inp = {"num_prompt_tokens": 100, "num_tokens": 100, "block_size": 32, "shared_prefix_tokens": 48,
           "num_new_tokens": 100}
    check(split_main(inp), 32, "shared prefix 48 -> 32")
    add("mamba_aligned_split/shared_prefix_48_to_32", "mamba_aligned_split", inp, {"num_new_tokens": 32})
    # Issue 12 item 5: a Mamba block (8704) wider than the budget (8192) still progresses, as in
    # vLLM main: 8192, then the rest of the block, block by block; every boundary is a chunk end.
    chain("oversized_block_progresses", {"num_prompt_tokens": 20000, "num_tokens": 20000, "block_size": 8704,
                                         "max_num_scheduled_tokens": 8192},
          [8192, 8192, 8192, 8192, 8192], [8192, 512, 8192, 512, 2592])
    inp = {"num_prompt_tokens": 1300, "num_tokens": 1300, "block_size": 512, "long_prefill_token_threshold": 400,
           "num_new_tokens": 400}
    check(split_main(inp), 400, "oversized block, threshold 400: unfloored")
    add("mamba_aligned_split/oversized_block_unfloored_by_default", "mamba_aligned_split", inp,
        {"num_new_tokens": 400})
    check(split_main(dict(inp, defer_oversized_block=True)), 0, "oversized block, deferral asked for")
    add("mamba_aligned_split/oversized_block_deferred_when_asked", "mamba_aligned_split",
        dict(inp, defer_oversized_block=True), {"num_new_tokens": 0})
    check(split_main(dict(inp, num_new_tokens=100, floor_unit=128)), 100, "floor unit leaves nothing: unfloored")
    add("mamba_aligned_split/oversized_block_floor_unit_leaves_nothing", "mamba_aligned_split",
        dict(inp, num_new_tokens=100, floor_unit=128), {"num_new_tokens": 100})
    check(split_main(dict(inp, num_new_tokens=100, floor_unit=128, defer_oversized_block=True)), 0,
          "floor unit leaves nothing, deferral asked for")
    add("mamba_aligned_split/oversized_block_floor_unit_deferred_when_asked", "mamba_aligned_split",
        dict(inp, num_new_tokens=100, floor_unit=128, defer_oversized_block=True), {"num_new_tokens": 0})
    fits = {"num_prompt_tokens": 1300, "num_tokens": 1300, "block_size": 512, "max_num_scheduled_tokens": 8192,
            "num_new_tokens": 400}
    check(split_main(fits), 0, "a block that fits in a chunk waits for more budget")
    add("mamba_aligned_split/block_fits_waits_for_budget", "mamba_aligned_split", fits, {"num_new_tokens": 0})
    add("mamba_aligned_split/async_load_unchanged", "mamba_aligned_split", dict(inp, load_kv_async=True),
        {"num_new_tokens": 400})
    add("mamba_aligned_split/unaligned_resume_stops_at_boundary", "mamba_aligned_split",
        {"start": 40, "num_new_tokens": 100, "num_prompt_tokens": 300, "num_tokens": 300, "block_size": 32},
        {"num_new_tokens": split_main({"start": 40, "num_new_tokens": 100, "num_prompt_tokens": 300,
                                       "num_tokens": 300, "block_size": 32})})
    add("mamba_aligned_split/zero_block_size", "mamba_aligned_split",
        {"num_new_tokens": 4, "num_prompt_tokens": 10, "num_tokens": 10, "block_size": 0},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": []})

    # §8 P side of the N-1 rule (idempotent).
    for name, n, mx, tr, mamba in [("mamba_truncates", 100, 50, False, True),
                                   ("mamba_idempotent", 99, 1, True, True),
                                   ("attention_max_tokens_only", 100, 50, False, False),
                                   ("mamba_single_token_prompt", 1, 8, False, True)]:
        out_n = n - 1 if mamba and not tr and n > 1 else n
        add("truncate_for_remote_decode/" + name, "truncate_for_remote_decode",
            {"num_prompt_tokens": n, "max_tokens": mx, "truncated": tr, "has_mamba": mamba},
            # The flag records that the (idempotent) Mamba step ran, also when N == 1 left N as is.
            {"num_prompt_tokens": out_n, "max_tokens": 1, "truncated": mamba})

    # §6.4 receive zeroing.
    for name, blocks, tpb, bsr, rl in [("bsr4_half_block", [11, 12, 13], 64, 4, 6),
                                       ("fully_covered", [11, 12], 64, 4, 8),
                                       ("bsr1_short_remote", [5, 6, 7], 16, 1, 1),
                                       ("nemotron_2096_bsr1", [3, 4], 2096, 1, 2)]:
        add("receive_zero_ranges/" + name, "receive_zero_ranges",
            {"local_blocks": blocks, "tokens_per_block": tpb, "block_size_ratio": bsr, "remote_kernel_len": rl},
            {"zero_ranges": receive_zero(blocks, tpb, bsr, rl)})
    check(receive_zero([11, 12, 13], 64, 4, 6), [{"block": 12, "token_begin": 32, "token_end": 64},
                                                 {"block": 13, "token_begin": 0, "token_end": 64}], "bsr4")
    add("receive_zero_ranges/tokens_not_divisible", "receive_zero_ranges",
        {"local_blocks": [1], "tokens_per_block": 30, "block_size_ratio": 4, "remote_kernel_len": 1},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["30"]})
    for name, blocks, first, tpb, held, written in [("written_run", [5, 6, 7], 2, 16, 32, [(32, 70)]),
                                                    ("held_only", [5, 6], 2, 16, 40, []),
                                                    ("gap_and_null", [5, 0, 7], 0, 8, 0, [(2, 4), (20, 22)])]:
        add("uncovered_token_ranges/" + name, "uncovered_token_ranges",
            {"local_blocks": blocks, "first_block_index": first, "tokens_per_block": tpb, "held_tokens": held,
             "written": [{"begin": a, "end": b} for a, b in written]},
            {"zero_ranges": uncovered(blocks, first, tpb, held, written)})
    check(uncovered([5, 6, 7], 2, 16, 32, [(32, 70)]), [{"block": 7, "token_begin": 6, "token_end": 16}], "uncov")

    # Mamba descriptor ids (§3 region-major Mamba list).
    for name, ids, nl, nr, dpr, first in [("two_regions_4_descs", [1, 2], 100, 2, 4, 200),
                                          ("jamba_2_descs", [0, 9], 10, 1, 2, 0)]:
        want = [first + (r * dpr + kk) * nl + b for r in range(nr) for kk in range(dpr) for b in ids]
        add("mamba_descriptor_ids/" + name, "mamba_descriptor_ids",
            {"ids": ids, "num_logical_blocks": nl, "num_regions": nr, "descs_per_region": dpr, "first_id": first},
            {"ids": want})
    add("mamba_descriptor_ids/block_out_of_range", "mamba_descriptor_ids",
        {"ids": [10], "num_logical_blocks": 10, "num_regions": 1, "descs_per_region": 2, "first_id": 0},
        err={"status": "PDKV_ERR_OUT_OF_BOUNDS", "message_contains": ["10"]})
    return cases



def metadata_cases():
    cases = []
    add = lambda name, op, inp, out=None, err=None: cases.append(
        dict(name=name, op=op, input=inp, **({"output": out} if err is None else {"error": err})))
    check(crc32c_py(b"123456789"), 0xE3069283, "crc32c check value")
    for name, data in [("check_value_123456789", b"123456789"), ("empty", b""), ("zeros_32", bytes(32))]:
        add("crc32c/" + name, "crc32c", {"hex": data.hex()}, {"crc32c": crc32c_py(data)})
    check(crc32c_py(bytes(32)), 0x8A9136AA, "crc32c 32 zero bytes (RFC 3720)")

    encodings = {}
    for name, eng, lay in [
            ("nemotron3_nano_d_tp2_rank1", {"tp_size": 2}, {"tp_rank": 1, "engine_id": "decode"}),
            ("nemotron3_nano_p_tp4_align_two_regions",
             {"tp_size": 4, "mamba_cache_mode": "align"},
             {"tp_rank": 3, "engine_id": "prefill-0", "num_logical_blocks": 8, "num_regions": 2,
              "region_bases": [1 << 32, 1 << 36], "kv_layout": "NHD"}),
            ("nemotron3_nano_tp1_prefix_caching_forced", {"tp_size": 1},
             {"num_logical_blocks": 3, "prefix_caching": 1})]:
        md = metadata("nemotron-3-nano-30b", eng, lay)
        b = encode(md)
        out = dict(md, encoded_length=len(b), payload_crc32c=crc32c_py(b[16:]), hex=b.hex())
        encodings[name] = b
        add("metadata_roundtrip/" + name, "metadata_roundtrip",
            {"model": "nemotron-3-nano-30b", "engine": eng, "layout": lay}, out)
        dec = dict(out)
        del dec["hex"]
        add("metadata_decode/" + name, "metadata_decode", {"hex": b.hex()}, dec)
    g = geometry("nemotron-3-nano-30b", {"tp_size": 2})
    check((g["kernel_block_size"], g["physical_per_logical"]), (2096, 1), "Nano TP2 block 2096")
    b = encodings["nemotron3_nano_d_tp2_rank1"]
    err = lambda name, data, status, contains: add("metadata_decode/" + name, "metadata_decode", {"hex": data.hex()},
                                                   err={"status": status, "message_contains": contains})
    err("truncated_header", b[:10], "PDKV_ERR_PARSE", ["header"])
    err("truncated_payload", b[:16] + b[16:40], "PDKV_ERR_PARSE", ["payload"])
    err("bad_magic", b"XDKV" + b[4:], "PDKV_ERR_PARSE", ["magic"])
    bad = bytearray(b)
    bad[12] ^= 0xFF
    err("bad_checksum", bytes(bad), "PDKV_ERR_CHECKSUM", ["checksum"])
    bad = bytearray(b)
    bad[-1] ^= 0x01  # last byte: regions[0].layer high byte... flips the payload, checksum stale
    err("payload_flipped_checksum_stale", bytes(bad), "PDKV_ERR_CHECKSUM", [])
    # A resealed out-of-range field: kv_layout = 7 with a fresh checksum names the field.
    p = bytearray(b[16:])
    off = 2 + len("decode") + 4 + 4
    p[off] = 7
    resealed = b[:12] + crc32c_py(bytes(p)).to_bytes(4, "little") + bytes(p)
    err("resealed_bad_kv_layout", resealed, "PDKV_ERR_PARSE", ["kv_layout"])
    err("unknown_major_version", b[:4] + (9).to_bytes(2, "little") + b[6:], "PDKV_ERR_PARSE", ["9"])
    return cases


FORMAT_FIELDS = ("model_format", "kv_cache_format", "conv_state_format", "ssm_state_format")


def formats(model, engine):
    """The element formats an engine advertises (metadata 1.3), resolved by the documented "auto"
    rules (model.hpp resolved_formats): a named format; else, for a size left auto, the format it
    falls back to (KV cache and conv state: model_format; SSM state: the conv state's when the
    model has no default SSM dtype of its own, here one that differs from the model dtype); else
    "unknown". Names are canonical ("fp8" is fp8_e4m3)."""
    canon = lambda n: {"fp8": "fp8_e4m3", "bf16": "bfloat16", "fp16": "float16", "auto": "unknown"}.get(n, n)
    named = {f: canon(engine.get(f, "unknown")) for f in FORMAT_FIELDS}
    mm = MODELS[model]
    out = {"model_format": named["model_format"]}
    kv_auto = not any(engine.get(k) for k in ("kv_cache_dtype_bytes", "kv_cache_element_bits",
                                              "kv_cache_head_extra_bytes"))
    out["kv_cache_format"] = named["kv_cache_format"] if named["kv_cache_format"] != "unknown" else (
        named["model_format"] if kv_auto else "unknown")
    conv = named["conv_state_format"] if named["conv_state_format"] != "unknown" else (
        named["model_format"] if not engine.get("conv_state_dtype_bytes") else "unknown")
    out["conv_state_format"] = conv
    own_ssm_default = mm["ssm_dt"] != mm["dt"]
    out["ssm_state_format"] = named["ssm_state_format"] if named["ssm_state_format"] != "unknown" else (
        conv if not engine.get("ssm_state_dtype_bytes") and not own_ssm_default else "unknown")
    return out


def validate(l, r):
    """The documented handshake rules (handshake.hpp) on two metadata dicts, in report order."""
    items = []
    add = lambda s, f: items.append({"status": s, "field": f})
    inc = "PDKV_ERR_INCOMPATIBLE"
    if l["engine_id"] == r["engine_id"]:
        add(inc, "engine_id")
    if l["model_fingerprint"] != r["model_fingerprint"]:
        add(inc, "model_fingerprint")
    if l["use_mla"] != r["use_mla"]:
        add(inc, "use_mla")
    if l["total_kv_heads"] != r["total_kv_heads"]:
        add(inc, "total_kv_heads")
    if l["mamba_type"] != r["mamba_type"]:
        add(inc, "mamba_type")
    # Element formats known on both sides must be equal (equal sizes do not make equal formats);
    # "unknown" (sizes only, or a peer before metadata 1.3) is compatible with anything.
    for f in FORMAT_FIELDS:
        a, b = l.get(f, "unknown"), r.get(f, "unknown")
        if "unknown" not in (a, b) and a != b:
            add(inc, f)
    a, b = l["tp_size"], r["tp_size"]
    if a % b and b % a:
        add("PDKV_ERR_TP_NOT_DIVISIBLE", "tp_size")
    hpr = lambda m: max(1, m["total_kv_heads"] // m["tp_size"])
    # Layouts may differ (the reader permutes received blocks); heads split by TP need HND on
    # at least one side (the side read from: the plan checks which).
    if hpr(l) != hpr(r) and l["kv_layout"] != "HND" and r["kv_layout"] != "HND":
        add("PDKV_ERR_UNSUPPORTED_LAYOUT", "kv_layout")
    # Pipeline stages: windows that share no layer; regions are compared by index only between
    # stages holding the same window (otherwise the plan pairs them by layer).
    end = lambda m: m["layer_end"] or 1 << 32
    if max(l["layer_begin"], r["layer_begin"]) >= min(end(l), end(r)):
        add(inc, "layer_begin")
    if (l["layer_begin"], l["layer_end"]) != (r["layer_begin"], r["layer_end"]):
        pass
    elif len(l["regions"]) != len(r["regions"]):
        add(inc, "regions")
    else:
        kinds = [i for i, (a, b) in enumerate(zip(l["regions"], r["regions"])) if a["kind"] != b["kind"]]
        if kinds:
            add(inc, "regions[%d].kind" % kinds[0])
        # Each MLA region holds its whole latent on every rank: bytes per token independent of TP.
        per_token = lambda m, i: m["regions"][i]["block_len"] // m["kernel_block_size"]
        scaled = [i for i, (a, b) in enumerate(zip(l["regions"], r["regions"]))
                  if a["kind"] == b["kind"] == "mla" and per_token(l, i) != per_token(r, i)]
        if scaled:
            add(inc, "regions[%d].block_len" % scaled[0])
    # Equal attention bytes per token per KV head (vLLM #45879 block_len rule, handshake.cpp):
    # local_a * remote_heads_per_rank == remote_a * local_heads_per_rank, for every model kind.
    if l["use_mla"] == r["use_mla"] and l["total_kv_heads"] == r["total_kv_heads"]:
        hpr_mla = lambda m: 1 if m["use_mla"] else hpr(m)
        if l["attention_bytes_per_token"] * hpr_mla(r) != r["attention_bytes_per_token"] * hpr_mla(l):
            add(inc, "attention_bytes_per_token")
    if l["mamba_type"] == r["mamba_type"] != "none":
        if l["ssm_bytes"] * l["tp_size"] != r["ssm_bytes"] * r["tp_size"]:
            add(inc, "ssm_bytes")
        a, b = l["conv_projection_bytes"][0], r["conv_projection_bytes"][0]
        if a * l["tp_size"] != b * r["tp_size"]:
            add(inc, "conv_projection_bytes[0]")
    # Hybrids must cache Mamba state the same way: the mode picks which state block moves.
    if l["mamba_type"] == r["mamba_type"] != "none" and l["cache_mode"] != r["cache_mode"]:
        add(inc, "cache_mode")
    return items


def handshake_cases():
    cases = []

    def h(name, local, remote, expect=None):
        side = lambda x: dict(metadata(x["model"], x["engine"], x.get("layout")), **formats(x["model"], x["engine"]))
        items = validate(side(local), side(remote))
        if expect is not None:
            check(items, expect, "handshake " + name)
        cases.append({"name": "handshake_validate/" + name, "op": "handshake_validate",
                      "input": {"local": local, "remote": remote},
                      "output": {"items": items, "compatible": not items}})

    nano = "nemotron-3-nano-30b"
    # Several problems at once: same engine id, region counts, and a different SSM dtype on P
    # (ssm bytes no longer scale with TP); NHD vs HND at one KV head per rank is served (D
    # permutes received blocks), so it is not among them.
    h("several_incompatibilities",
      {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "engine"}},
      {"model": nano, "engine": {"tp_size": 4, "ssm_state_dtype_bytes": 2},
       "layout": {"engine_id": "engine", "kv_layout": "NHD", "num_regions": 2}},
      [{"status": "PDKV_ERR_INCOMPATIBLE", "field": "engine_id"},
       {"status": "PDKV_ERR_INCOMPATIBLE", "field": "regions"},
       {"status": "PDKV_ERR_INCOMPATIBLE", "field": "ssm_bytes"}])
    h("different_speculative_rows",
      {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "d"}},
      {"model": nano, "engine": {"tp_size": 2, "num_speculative_tokens": 2}, "layout": {"engine_id": "p"}},
      [{"status": "PDKV_ERR_INCOMPATIBLE", "field": "conv_projection_bytes[0]"}])
    # pdkv accepts, vLLM rejects: different ppl with prefix caching (FlashInfer kernels 16/32/64
    # give different blocks per logical at TP2 and TP4), and kernel blocks 2096 vs 1056.
    gd = geometry(nano, {"tp_size": 2, "backend": "flashinfer", "mamba_cache_mode": "align"})
    gp = geometry(nano, {"tp_size": 4, "backend": "flashinfer", "mamba_cache_mode": "align"})
    check(gd["physical_per_logical"] != gp["physical_per_logical"], True, "hetero ppl")
    h("hetero_ppl_with_prefix_caching_accepted",
      {"model": nano, "engine": {"tp_size": 2, "backend": "flashinfer", "mamba_cache_mode": "align"},
       "layout": {"engine_id": "d"}},
      {"model": nano, "engine": {"tp_size": 4, "backend": "flashinfer", "mamba_cache_mode": "align"},
       "layout": {"engine_id": "p"}}, [])
    check(geometry(nano, {"tp_size": 4})["kernel_block_size"], 1056, "Nano TP4 block 1056")
    h("kernel_blocks_2096_vs_1056_accepted",
      {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "d"}},
      {"model": nano, "engine": {"tp_size": 4}, "layout": {"engine_id": "p"}}, [])
    # pdkv refuses, vLLM does not compare: a hybrid pair caching Mamba state in different modes
    # (the mode decides which state block moves).
    h("different_mamba_cache_modes",
      {"model": nano, "engine": {"tp_size": 2, "mamba_cache_mode": "align"}, "layout": {"engine_id": "d"}},
      {"model": nano, "engine": {"tp_size": 2, "mamba_cache_mode": "all"}, "layout": {"engine_id": "p"}},
      [{"status": "PDKV_ERR_INCOMPATIBLE", "field": "cache_mode"}])
    # Element formats (metadata 1.3): equal sizes, different formats are refused by name; an
    # engine that names no format (sizes only) is compatible with any.
    e4m3 = {"kv_cache_dtype_bytes": 1, "kv_cache_format": "fp8"}
    e5m2 = {"kv_cache_dtype_bytes": 1, "kv_cache_format": "fp8_e5m2"}
    h("kv_format_fp8_e5m2_vs_fp8_e4m3",
      {"model": nano, "engine": dict(e5m2, tp_size=2), "layout": {"engine_id": "d"}},
      {"model": nano, "engine": dict(e4m3, tp_size=4), "layout": {"engine_id": "p"}},
      [{"status": "PDKV_ERR_INCOMPATIBLE", "field": "kv_cache_format"}])
    h("kv_format_unknown_vs_fp8_e4m3_accepted",
      {"model": nano, "engine": {"tp_size": 2, "kv_cache_dtype_bytes": 1}, "layout": {"engine_id": "d"}},
      {"model": nano, "engine": dict(e4m3, tp_size=4), "layout": {"engine_id": "p"}}, [])
    # The model dtype named alone: the auto KV cache and conv state take it, the SSM state keeps
    # the model's own float32 default (unknown), so three fields differ.
    h("model_format_float16_vs_bfloat16",
      {"model": nano, "engine": {"tp_size": 2, "model_format": "float16"}, "layout": {"engine_id": "d"}},
      {"model": nano, "engine": {"tp_size": 2, "model_format": "bf16"}, "layout": {"engine_id": "p"}},
      [{"status": "PDKV_ERR_INCOMPATIBLE", "field": "model_format"},
       {"status": "PDKV_ERR_INCOMPATIBLE", "field": "kv_cache_format"},
       {"status": "PDKV_ERR_INCOMPATIBLE", "field": "conv_state_format"}])
    h("ssm_format_named_on_both_sides_equal_accepted",
      {"model": nano, "engine": {"tp_size": 2, "ssm_state_format": "float32"}, "layout": {"engine_id": "d"}},
      {"model": nano, "engine": {"tp_size": 4, "ssm_state_format": "float32", "model_format": "bfloat16"},
       "layout": {"engine_id": "p"}}, [])
    return cases


def plan_cases():
    cases = []
    nano = "nemotron-3-nano-30b"

    def p(name, p_eng, d_eng, d_tp_rank, groups, p_layout=None, d_layout=None, expect=None):
        out = plan(nano, p_eng, d_eng, d_tp_rank, groups, p_layout, d_layout)
        for key, val in (expect or {}).items():
            check(out[key], val, "plan " + name + "." + key)
        inp = {"model": nano, "prefill": {"engine": p_eng}, "decode": {"engine": d_eng}, "decode_rank": d_tp_rank,
               "groups": groups}
        if p_layout:
            inp["prefill"]["layout"] = p_layout
        if d_layout:
            inp["decode"]["layout"] = d_layout
        cases.append({"name": "transfer_plan/" + name, "op": "transfer_plan", "input": inp, "output": out})

    L2 = 2096 * 512  # Nano TP2 kernel page: 2096 tokens x 512 B (1 head x (128+128) x bf16)
    # Homogeneous TP2, rank 1, two regions: one whole block + 10 tokens coalesce to one read
    # per region (one head per rank, so the head slice is the whole block).
    p("homogeneous_tp2_rank1", {"tp_size": 2}, {"tp_size": 2}, 1,
      [{"kind": "attention", "local_blocks": [3, 4], "remote_blocks": [7, 8],
        "remote_computed_tokens": 2096 + 10}],
      {"engine_id": "p", "num_regions": 2, "num_logical_blocks": 16},
      {"engine_id": "d", "num_regions": 2, "num_logical_blocks": 16},
      {"read_ranks": [1], "notify_ranks": [1],
       "reads": [[], [{"local_region": 0, "local_offset": 3 * L2, "remote_region": 0, "remote_offset": 7 * L2,
                       "length": L2 + 10 * 512},
                      {"local_region": 1, "local_offset": 3 * L2, "remote_region": 1, "remote_offset": 7 * L2,
                       "length": L2 + 10 * 512}]],
       "pieces_before_coalescing": 4, "pieces_after_coalescing": 2})
    # D TP2 > P TP1: D rank 1 reads head 1 of P's two-head blocks (P block 2 heads x 4192? no:
    # P TP1 has its own block size), token runs cut at both block boundaries, plus the Mamba
    # state (x/B/C/ssm halves of P's page) for the running state.
    p("d_tp2_from_p_tp1_rank1_attention_and_mamba", {"tp_size": 1}, {"tp_size": 2}, 1,
      [{"kind": "attention", "local_blocks": [1, 2], "remote_blocks": [5, 6],
        "remote_computed_tokens": 3000},
       {"kind": "mamba", "local_blocks": [6], "remote_blocks": [4], "remote_computed_tokens": 3000}],
      {"engine_id": "p", "num_logical_blocks": 8}, {"engine_id": "d", "num_logical_blocks": 8},
      {"read_ranks": [0], "notify_ranks": [0], "notifications_per_p_rank": 2})
    # Nemotron-3-Nano P TP4 -> D TP2, D rank 0, consecutive block ids: attention heads replicated
    # on P (rank 0 supplies head 0), one coalesced read; Mamba shards from P ranks 0 and 1.
    p("nano_p_tp4_d_tp2_rank0_consecutive_ids", {"tp_size": 4}, {"tp_size": 2}, 0,
      [{"kind": "attention", "local_blocks": [1, 2, 3], "remote_blocks": [1, 2, 3, 4, 5],
        "remote_computed_tokens": 5000},
       {"kind": "mamba", "local_blocks": [7], "remote_blocks": [0, 0, 6], "cache_mode": "none",
        "remote_computed_tokens": 5000}],
      {"engine_id": "p", "num_logical_blocks": 8}, {"engine_id": "d", "num_logical_blocks": 8},
      {"read_ranks": [0, 1], "notify_ranks": [0, 1], "notifications_per_p_rank": 1,
       "groups": [{"kind": "attention", "regions": [0],
                   "zero_ranges": [{"block": 3, "token_begin": 5000 - 4192, "token_end": 2096}],
                   "unfilled_states": [], "permute_blocks": [], "permute_regions": []},
                  {"kind": "mamba", "regions": [0], "zero_ranges": [], "unfilled_states": [],
                   "permute_blocks": [], "permute_regions": []}]})
    # The pair vLLM serves with FlashInfer (D TP2: 16-token kernel blocks, 131 per 2096-token
    # logical block; P TP4: 32-token kernel blocks, 33 per 1056-token block), block ids passed as
    # the block tables hold them (logical, with kernel_blocks_per_id): the plan of the kernel ids
    # they stand for, without expanding them. Fragmented ids, a prefix hit of one D block.
    fi = {"backend": "flashinfer"}
    logical_groups = [
        {"kind": "attention", "local_blocks": [9, 4], "remote_blocks": [6, 2, 11, 5, 1],
         "local_kernel_blocks_per_id": 131, "remote_kernel_blocks_per_id": 33, "local_first_block": 131,
         "remote_computed_tokens": 5000, "local_hit_tokens": 2096},
        {"kind": "mamba", "local_blocks": [7], "remote_blocks": [0, 0, 6], "cache_mode": "none",
         "remote_computed_tokens": 5000, "local_hit_tokens": 2096}]
    expanded_groups = [dict(logical_groups[0], local_blocks=expand_logical([9, 4], 131),
                            remote_blocks=expand_logical([6, 2, 11, 5, 1], 33)), logical_groups[1]]
    for key in ("local_kernel_blocks_per_id", "remote_kernel_blocks_per_id"):
        del expanded_groups[0][key]
    check(plan(nano, dict(fi, tp_size=4), dict(fi, tp_size=2), 0, expanded_groups, {"num_logical_blocks": 16},
               {"num_logical_blocks": 16}),
          plan(nano, dict(fi, tp_size=4), dict(fi, tp_size=2), 0, logical_groups, {"num_logical_blocks": 16},
               {"num_logical_blocks": 16}), "logical ids plan like their kernel ids")
    p("nano_flashinfer_logical_ids_fragmented_prefix_hit", dict(fi, tp_size=4), dict(fi, tp_size=2), 0,
      logical_groups, {"engine_id": "p", "num_logical_blocks": 16}, {"engine_id": "d", "num_logical_blocks": 16},
      {"read_ranks": [0, 1], "notify_ranks": [0, 1]})
    # vLLM's pairing of this model (both engines at 2096-token blocks: P started with --block-size
    # 2096), fragmented ids on both sides, six regions: every id its own run, so the C API plans
    # the attention group block-indexed (CompileOptions::indexed_reads; one read per id and
    # region); the reads it writes out must be the oracle's in every language.
    bs2096 = {"user_block_size": 2096}
    frag_d = [41, 7, 23, 15, 3, 36, 29, 11, 44, 19, 5, 31, 27, 9, 38, 13, 21, 33]
    frag_p = [12, 40, 6, 28, 17, 2, 35, 24, 10, 45, 30, 8, 22, 14, 39, 4, 26, 18]
    n_frag = 18 * 2096 - 100
    p("nano_same_block_size_fragmented_ids_block_indexed", dict(bs2096, tp_size=4), dict(bs2096, tp_size=2), 0,
      [{"kind": "attention", "local_blocks": frag_d, "remote_blocks": frag_p, "remote_computed_tokens": n_frag}],
      {"engine_id": "p", "num_regions": 6, "num_logical_blocks": 48},
      {"engine_id": "d", "num_regions": 6, "num_logical_blocks": 48},
      {"read_ranks": [0], "notify_ranks": [0, 1], "pieces_after_coalescing": 6 * 18})
    # A full prefix hit on every group: nothing to read, P ranks are still notified.
    p("full_hit_notify_only", {"tp_size": 4}, {"tp_size": 2}, 1,
      [{"kind": "attention", "local_blocks": [], "remote_blocks": [1, 2], "remote_computed_tokens": 2000,
        "local_hit_tokens": 2000}],
      {"engine_id": "p", "num_logical_blocks": 8}, {"engine_id": "d", "num_logical_blocks": 8},
      {"empty": True, "read_ranks": [], "notify_ranks": [2, 3], "bytes": 0})
    cases.append({"name": "transfer_plan/coverage_error", "op": "transfer_plan",
                  "input": {"model": nano, "prefill": {"engine": {"tp_size": 2}}, "decode": {"engine": {"tp_size": 2}},
                            "decode_rank": 0,
                            "groups": [{"kind": "attention", "local_blocks": [1], "remote_blocks": [1, 2],
                                        "remote_computed_tokens": 3000}]},
                  "error": {"status": "PDKV_ERR_COVERAGE", "message_contains": ["2096"]}})
    return cases



def plan_modes_layouts_errors_cases():
    """Transfer plans of file plans_modes_layouts_errors.json: Mamba align / all modes, a sliding window with
    a prefix hit, D and P kernel blocks of different sizes, head-sharded GQA, MLA, and the errors
    compile must raise. Geometry is kept small enough to check by hand (numbers in comments)."""
    cases = []
    nano, jamba = "nemotron-3-nano-30b", "jamba-v0.1"

    def p(name, model, p_eng, d_eng, d_tp_rank, groups, p_layout=None, d_layout=None, expect=None,
          p_ranks=None, error=None):
        inp = {"model": model, "prefill": {"engine": p_eng}, "decode": {"engine": d_eng}, "decode_rank": d_tp_rank,
               "groups": groups}
        if model in ATTN_MODELS:
            inp = {"hf_config": ATTN_MODELS[model]["hf_config"], **{k: v for k, v in inp.items() if k != "model"}}
        if p_layout:
            inp["prefill"]["layout"] = p_layout
        if d_layout:
            inp["decode"]["layout"] = d_layout
        if p_ranks is not None:
            inp["prefill"]["ranks"] = p_ranks
        try:
            out = plan(model, p_eng, d_eng, d_tp_rank, groups, p_layout, d_layout, p_ranks)
        except PlanError as e:
            check((e.status, e.contains), error, "plan error " + name)
            cases.append({"name": "transfer_plan/" + name, "op": "transfer_plan", "input": inp,
                          "error": {"status": e.status, "message_contains": e.contains}})
            return
        except Coverage as e:  # "<side> token <t>": the message names the side and the token
            contains = str(e).split(" token ")
            check(("PDKV_ERR_COVERAGE", contains), error, "plan error " + name)
            cases.append({"name": "transfer_plan/" + name, "op": "transfer_plan", "input": inp,
                          "error": {"status": "PDKV_ERR_COVERAGE", "message_contains": contains}})
            return
        assert error is None, name + " was expected to fail"
        for key, val in (expect or {}).items():
            check(out[key], no_permute_defaults(key, val), "plan " + name + "." + key)
        cases.append({"name": "transfer_plan/" + name, "op": "transfer_plan", "input": inp, "output": out})

    # Nemotron-3-Nano at TP2 (flash_attn): logical = kernel block of 2096 tokens, 512 B per token
    # (one KV head x (128 + 128) x bf16), page L2 = 2096 * 512 = 1073152 B; Mamba state 18432 conv +
    # 1048576 SSM = 1067008 B at the start of its page.
    L2, A2 = 2096 * 512, 512
    M2 = 18432 + 1048576
    lay = {"engine_id": "p", "num_logical_blocks": 16}, {"engine_id": "d", "num_logical_blocks": 16}

    # Mamba "align" mode, TP2 -> TP2 rank 0, prefix hit of one block (2096 of 5000 tokens).
    # Attention: D positions 1, 2 = [4, 5]; position 1 is whole (2096 tokens), position 2 holds
    # 4192..4999 (808 tokens), zero [808, 2096). Mamba: the hit slots are null placeholders, D's
    # last real slot 7 takes P's running state 5 after 5000 tokens, slot 6 stays unfilled.
    align = {"tp_size": 2, "mamba_cache_mode": "align"}
    p("align_mode_placeholders_partial_hit", nano, align, align, 0,
      [{"kind": "attention", "local_blocks": [4, 5], "remote_blocks": [1, 2, 3], "remote_computed_tokens": 5000,
        "local_hit_tokens": 2096},
       {"kind": "mamba", "cache_mode": "align", "local_blocks": [0, 6, 7], "remote_blocks": [0, 0, 5],
        "remote_computed_tokens": 5000, "local_hit_tokens": 2096}], *lay,
      expect={"reads": [[{"local_region": 0, "local_offset": 4 * L2, "remote_region": 0, "remote_offset": 2 * L2,
                          "length": L2 + 808 * A2},
                         {"local_region": 0, "local_offset": 7 * L2, "remote_region": 0, "remote_offset": 5 * L2,
                          "length": M2}], []],
              "groups": [{"kind": "attention", "regions": [0],
                          "zero_ranges": [{"block": 5, "token_begin": 808, "token_end": 2096}], "unfilled_states": []},
                         {"kind": "mamba", "regions": [0], "zero_ranges": [], "unfilled_states": [6]}],
              "attention_bytes": (2096 + 808) * A2, "mamba_bytes": M2})

    # Mamba "all" mode: D TP2 blocks of 2176 tokens (lcm(chunk 128, 16) x ceil(1067008 / 512 /
    # 128)); P TP4 (533504 B state, 512 B / token) would pick 1152, so it runs with
    # --mamba-block-size 2176 (lcm(2176, 16) x ceil(1042 / 2176) = 2176) and both sides checkpoint
    # at the same token counts. P TP4 -> D TP2 rank 1. Positions end at 2176, 4352 and 5000 tokens: position 0's P
    # checkpoint is null (D slot 3 unfilled), 4 <- 6 after 4352, 5 <- 7 after 5000; each state
    # comes in halves from P ranks 2 and 3. Attention (head 1) comes from P rank 2 alone.
    p("all_mode_positional_pairing_p4_d2_rank1", nano,
      {"tp_size": 4, "mamba_cache_mode": "all", "user_mamba_block_size": 2176},
      {"tp_size": 2, "mamba_cache_mode": "all"}, 1,
      [{"kind": "attention", "local_blocks": [1, 2, 8], "remote_blocks": [1, 2, 8], "remote_computed_tokens": 5000},
       {"kind": "mamba", "cache_mode": "all", "local_blocks": [3, 4, 5], "remote_blocks": [0, 6, 7],
        "remote_computed_tokens": 5000}], *lay,
      expect={"read_ranks": [2, 3], "notify_ranks": [2, 3],
              "groups": [{"kind": "attention", "regions": [0],
                          "zero_ranges": [{"block": 8, "token_begin": 5000 - 4352, "token_end": 2176}],
                          "unfilled_states": []},
                         {"kind": "mamba", "regions": [0], "zero_ranges": [], "unfilled_states": [3]}]})

    # Sliding window 500 with a prefix hit of one block, TP2 -> TP2 rank 1, two regions: full
    # attention on region 0 (as above), the window group on region 1. Only tokens 4500..4999
    # move (position 2, in-block 308..807); position 1 is a null placeholder on both sides.
    # Zeroed: block 9's tokens [0, 308) (outside the window, not held) and [808, 2096).
    two = {"engine_id": "p", "num_logical_blocks": 16, "num_regions": 2}, \
          {"engine_id": "d", "num_logical_blocks": 16, "num_regions": 2}
    p("sliding_window_500_prefix_hit_two_regions", nano, {"tp_size": 2}, {"tp_size": 2}, 1,
      [{"kind": "attention", "local_blocks": [4, 5], "remote_blocks": [1, 2, 3], "remote_computed_tokens": 5000,
        "local_hit_tokens": 2096, "regions": [0]},
       {"kind": "sliding_window", "local_blocks": [0, 9], "remote_blocks": [0, 0, 7], "remote_computed_tokens": 5000,
        "local_hit_tokens": 2096, "sliding_window": 500, "regions": [1]}], *two,
      expect={"reads": [[], [{"local_region": 0, "local_offset": 4 * L2, "remote_region": 0, "remote_offset": 2 * L2,
                              "length": L2 + 808 * A2},
                             {"local_region": 1, "local_offset": 9 * L2 + 308 * A2, "remote_region": 1,
                              "remote_offset": 7 * L2 + 308 * A2, "length": 500 * A2}]],
              "groups": [{"kind": "attention", "regions": [0],
                          "zero_ranges": [{"block": 5, "token_begin": 808, "token_end": 2096}], "unfilled_states": []},
                         {"kind": "sliding_window", "regions": [1],
                          "zero_ranges": [{"block": 9, "token_begin": 0, "token_end": 308},
                                          {"block": 9, "token_begin": 808, "token_end": 2096}],
                          "unfilled_states": []}]})

    # D flashinfer: kernel blocks of 16 tokens, 131 per logical block (8192 B pages); P flash_attn:
    # one 2096-token kernel block per logical. Hit 40 tokens (mid D kernel block 2), 100 computed:
    # D kernel blocks at positions 2..6 = [20, 21, 30, 31, 32], runs 8 + 16 + 16 + 16 + 4 tokens
    # from P block 5; 20-21 and 30-32 are contiguous on both sides (2 reads); block 32 zeroes
    # [4, 16). The Mamba state of logical page 3 (stride 131 * 8192 = L2) comes from P page 4.
    p("d_kernel_16_ppl_131_vs_p_kernel_2096_mid_block_hit", nano, {"tp_size": 2},
      {"tp_size": 2, "backend": "flashinfer"}, 0,
      [{"kind": "attention", "local_blocks": [20, 21, 30, 31, 32], "remote_blocks": [5],
        "remote_computed_tokens": 100, "local_hit_tokens": 40},
       {"kind": "mamba", "local_blocks": [3], "remote_blocks": [4], "remote_computed_tokens": 100,
        "local_hit_tokens": 40}], {"engine_id": "p", "num_logical_blocks": 8}, {"engine_id": "d", "num_logical_blocks": 8},
      expect={"reads": [[{"local_region": 0, "local_offset": 20 * 8192 + 8 * A2, "remote_region": 0,
                          "remote_offset": 5 * L2 + 40 * A2, "length": 24 * A2},
                         {"local_region": 0, "local_offset": 30 * 8192, "remote_region": 0,
                          "remote_offset": 5 * L2 + 64 * A2, "length": 36 * A2},
                         {"local_region": 0, "local_offset": 3 * L2, "remote_region": 0, "remote_offset": 4 * L2,
                          "length": M2}], []],
              "groups": [{"kind": "attention", "regions": [0],
                          "zero_ranges": [{"block": 32, "token_begin": 4, "token_end": 16}], "unfilled_states": []},
                         {"kind": "mamba", "regions": [0], "zero_ranges": [], "unfilled_states": []}],
              "pieces_before_coalescing": 5 + 4})

    # Jamba (GQA, K = 8 KV heads of 128 + 128, bf16): P TP4 holds 2 heads (1024 B / token), D TP2
    # holds 4 (2048 B / token); both have 80-token blocks (Mamba1 page 77824 B at TP4 <= 80 * 1024;
    # 155648 B at TP2 <= 80 * 2048). D rank 1 = heads 4..7: heads 4, 5 from P rank 2, heads 6, 7
    # from P rank 3. Hit 80 of 200 tokens: position 1 is a whole block (one 2-head slice of
    # 2 * 80 * 512 = 81920 B per P rank), position 2 holds 40 tokens: one piece per head.
    jl = {"engine_id": "p", "num_logical_blocks": 16}, {"engine_id": "d", "num_logical_blocks": 16}
    Lj4, Lj2, hj = 80 * 1024, 80 * 2048, 80 * 512
    p("gqa8_head_sharded_p_tp4_d_tp2_rank1", jamba, {"tp_size": 4}, {"tp_size": 2}, 1,
      [{"kind": "attention", "local_blocks": [4, 5], "remote_blocks": [6, 7, 8], "remote_computed_tokens": 200,
        "local_hit_tokens": 80}], *jl,
      expect={"read_ranks": [2, 3], "notify_ranks": [2, 3], "notifications_per_p_rank": 1,
              "reads": [[], [],
                        [{"local_region": 0, "local_offset": 4 * Lj2, "remote_region": 0, "remote_offset": 7 * Lj4,
                          "length": 2 * hj},
                         {"local_region": 0, "local_offset": 5 * Lj2, "remote_region": 0, "remote_offset": 8 * Lj4,
                          "length": 40 * 512},
                         {"local_region": 0, "local_offset": 5 * Lj2 + hj, "remote_region": 0,
                          "remote_offset": 8 * Lj4 + hj, "length": 40 * 512}],
                        [{"local_region": 0, "local_offset": 4 * Lj2 + 2 * hj, "remote_region": 0,
                          "remote_offset": 7 * Lj4, "length": 2 * hj},
                         {"local_region": 0, "local_offset": 5 * Lj2 + 2 * hj, "remote_region": 0,
                          "remote_offset": 8 * Lj4, "length": 40 * 512},
                         {"local_region": 0, "local_offset": 5 * Lj2 + 3 * hj, "remote_region": 0,
                          "remote_offset": 8 * Lj4 + hj, "length": 40 * 512}]],
              "groups": [{"kind": "attention", "regions": [0],
                          "zero_ranges": [{"block": 5, "token_begin": 40, "token_end": 80}], "unfilled_states": []}]})

    # MLA (DeepSeek-V3-like config.json: latent 512 + rope 64 = 576 x bf16 = 1152 B per token on
    # every rank). flashmla: 64-token blocks (73728 B). P TP4 -> D TP2 rank 1 reads the whole
    # latent from P rank 2 and notifies ranks 2 and 3. Hit 64 of 150 tokens: D [2, 3] <- P [5, 6]
    # (64 + 22 tokens, contiguous on both sides: one read); block 3 zeroes [22, 64).
    mla, LM = "mla-576", 64 * 1152
    p("mla_p_tp4_d_tp2_rank1_flashmla", mla, {"tp_size": 4, "backend": "flashmla"},
      {"tp_size": 2, "backend": "flashmla"}, 1,
      [{"kind": "attention", "local_blocks": [2, 3], "remote_blocks": [4, 5, 6], "remote_computed_tokens": 150,
        "local_hit_tokens": 64}], *jl,
      expect={"read_ranks": [2], "notify_ranks": [2, 3], "notifications_per_p_rank": 1,
              "reads": [[], [], [{"local_region": 0, "local_offset": 2 * LM, "remote_region": 0,
                                  "remote_offset": 5 * LM, "length": 86 * 1152}], []],
              "groups": [{"kind": "attention", "regions": [0],
                          "zero_ranges": [{"block": 3, "token_begin": 22, "token_end": 64}], "unfilled_states": []}]})
    # MLA, P TP2 flashmla (64-token blocks) -> D TP4 flashinfer_mla (32-token blocks), D rank 3:
    # the latent from P rank 1; D blocks [1, 2, 3, 4] take P [7, 8] in 32-token halves (100
    # tokens: 32 + 32 + 32 + 4), one read; P rank 1 waits for 2 notifications.
    p("mla_p_tp2_kernel_64_d_tp4_kernel_32_rank3", mla, {"tp_size": 2, "backend": "flashmla"},
      {"tp_size": 4, "backend": "flashinfer_mla"}, 3,
      [{"kind": "attention", "local_blocks": [1, 2, 3, 4], "remote_blocks": [7, 8], "remote_computed_tokens": 100}],
      *jl,
      expect={"read_ranks": [1], "notify_ranks": [1], "notifications_per_p_rank": 2,
              "reads": [[], [{"local_region": 0, "local_offset": 32 * 1152, "remote_region": 0,
                              "remote_offset": 7 * LM, "length": 100 * 1152}]],
              "pieces_before_coalescing": 4, "pieces_after_coalescing": 1,
              "groups": [{"kind": "attention", "regions": [0],
                          "zero_ranges": [{"block": 4, "token_begin": 4, "token_end": 32}], "unfilled_states": []}]})

    # NHD KV layout (tokens x heads) on both sides, Jamba TP2 -> TP2 rank 0 (4 heads, 2048 B per
    # token, 80-token blocks of 163840 B): each token run is one piece over all heads (HND would
    # cut the 40-token tail into 4 head pieces); [1, 2, 3] <- [4, 5, 6] is contiguous on both
    # sides, one read of 200 tokens.
    nl = lambda eid: {"engine_id": eid, "num_logical_blocks": 16, "kv_layout": "NHD"}
    p("nhd_jamba_tp2_rank0_token_runs", jamba, {"tp_size": 2}, {"tp_size": 2}, 0,
      [{"kind": "attention", "local_blocks": [1, 2, 3], "remote_blocks": [4, 5, 6], "remote_computed_tokens": 200}],
      nl("p"), nl("d"),
      expect={"reads": [[{"local_region": 0, "local_offset": Lj2, "remote_region": 0, "remote_offset": 4 * Lj2,
                          "length": 200 * 2048}], []],
              "pieces_before_coalescing": 3, "pieces_after_coalescing": 1})
    # NHD with K = 2 replicated on P TP4 (1 head) and D TP2 (1 head): heads per rank agree, so
    # D rank 1 reads whole tokens from P rank 2. P blocks are 1056 tokens, D's 2096: the runs
    # [0, 1056), [1056, 2096), [2096, 2112), [2112, 3000) are 4 pieces, contiguous on both sides.
    p("nhd_nano_p_tp4_d_tp2_rank1_replicated_heads", nano, {"tp_size": 4}, {"tp_size": 2}, 1,
      [{"kind": "attention", "local_blocks": [1, 2], "remote_blocks": [3, 4, 5, 6], "remote_computed_tokens": 3000}],
      {"engine_id": "p", "num_logical_blocks": 8, "kv_layout": "NHD"},
      {"engine_id": "d", "num_logical_blocks": 8, "kv_layout": "NHD"},
      expect={"read_ranks": [2], "pieces_before_coalescing": 4})
    # NHD with 4 (D TP2) vs 2 (P TP4) heads per rank: a head subset of every token is not
    # contiguous; and layouts that differ between D and P.
    p("nhd_heads_per_rank_differ_unsupported", jamba, {"tp_size": 4}, {"tp_size": 2}, 1,
      [{"kind": "attention", "local_blocks": [1], "remote_blocks": [1], "remote_computed_tokens": 50}],
      nl("p"), nl("d"), error=("PDKV_ERR_UNSUPPORTED_LAYOUT", ["NHD", "4 (D)", "2 (P)",
                                                               "HND KV cache layout on the prefill engine"]))
    # Layouts that differ need the plan context's permute_on_receive (kv_layouts.json plans them).
    p("kv_layouts_differ_unsupported", jamba, {"tp_size": 2}, {"tp_size": 2}, 0,
      [{"kind": "attention", "local_blocks": [1], "remote_blocks": [1], "remote_computed_tokens": 50}],
      {"engine_id": "p", "num_logical_blocks": 16}, nl("d"),
      error=("PDKV_ERR_UNSUPPORTED_LAYOUT", ["D NHD, P HND", "permute_on_receive"]))

    # Errors. P registers 8 blocks of L2 = 8585216 B; P block 8 lies past the region.
    p("out_of_bounds_remote_block_past_region", nano, {"tp_size": 2}, {"tp_size": 2}, 0,
      [{"kind": "attention", "local_blocks": [1], "remote_blocks": [8], "remote_computed_tokens": 100}],
      {"engine_id": "p", "num_logical_blocks": 8}, {"engine_id": "d", "num_logical_blocks": 8},
      error=("PDKV_ERR_OUT_OF_BOUNDS", ["offset 8585216", "length 51200", "8585216 bytes"]))
    # P's list holds one block (tokens 0..2095) of the 3000 computed tokens.
    p("coverage_remote_list_too_short", nano, {"tp_size": 2}, {"tp_size": 2}, 0,
      [{"kind": "attention", "local_blocks": [1, 2], "remote_blocks": [1], "remote_computed_tokens": 3000}],
      error=("PDKV_ERR_COVERAGE", ["remote", "2096"]))
    # P TP4 -> D TP2 rank 0: attention (head 0) from P rank 0, the Mamba state from P ranks 0
    # and 1, but the context holds metadata of P rank 0 only.
    p("not_found_missing_p_rank_metadata", nano, {"tp_size": 4}, {"tp_size": 2}, 0,
      [{"kind": "attention", "local_blocks": [1], "remote_blocks": [1], "remote_computed_tokens": 100},
       {"kind": "mamba", "local_blocks": [2], "remote_blocks": [2], "remote_computed_tokens": 100}],
      {"engine_id": "p", "num_logical_blocks": 8}, {"engine_id": "d", "num_logical_blocks": 8},
      p_ranks=[0], error=("PDKV_ERR_NOT_FOUND", ["P rank 1"]))
    return cases


# ---------------------------------------------------------------------------------------------
# Issue #4 surface: descriptor builders (docs/semantics.md §3), vLLM conv-offset helpers (§4),
# model description (published config.json, docs/hybrid-geometry.md), engine-rank validation,
# plan JSON dump.
# ---------------------------------------------------------------------------------------------

def fa_local(regions, bsr):
    """§3 _build_fa_local: region i, block b < num_blocks*bsr -> (base + b*L/bsr, L/bsr)."""
    out = []
    for r in regions:
        ln = r["block_len"] // bsr
        out += [{"addr": r["base"] + b * ln, "len": ln} for b in range(r["num_blocks"] * bsr)]
    return out


def fa_remote(local_regions, remote_regions, mp, mla, bsr):
    """§3 _build_fa_remote: per region and remote block, (rbase + off + b*Lr_block, (L/bsr)/n)."""
    n = 1 if mla else len(mp["attention_source_ranks"])
    out = []
    for lr, rr in zip(local_regions, remote_regions):
        unit = lr["block_len"] // bsr
        off = 0 if mla else mp["rank_offset_factor"] * unit
        out += [{"addr": rr["base"] + off + b * rr["block_len"], "len": unit // n}
                for b in range(rr["num_blocks"])]
    return out


def fa_split(local_descs, mp, mla, p_tp_rank):
    """§3 local split handles: descriptor j cut to len/fa_splits at addr + slot(p)*chunk."""
    if mla:
        return list(local_descs)
    n = len(mp["attention_source_ranks"])
    slot = mp["attention_slots"][mp["all_source_ranks"].index(p_tp_rank)]
    return [{"addr": d["addr"] + slot * (d["len"] // n), "len": d["len"] // n} for d in local_descs]


def mamba_local(model, engine, regions, ppl):
    """§3 _build_mamba_local: region-major; per projection then ssm, every logical block."""
    g = geometry(model, engine)
    pieces = [(p["offset"], p["bytes"]) for p in g["projections"]] + [(g["conv_bytes"], g["ssm_bytes"])]
    out = []
    for r in regions:
        stride = r["block_len"] * ppl
        for off, size in pieces:
            out += [{"addr": r["base"] + b * stride + off, "len": size} for b in range(r["num_blocks"] // ppl)]
    return out


def mamba_split(regions, ppl, reads, p_tp_rank, side):
    """Per region, per read of p_tp_rank (list order), every logical block at the read's offset."""
    out = []
    for r in regions:
        stride = r["block_len"] * ppl
        for rd in reads:
            if rd["p_tp_rank"] != p_tp_rank:
                continue
            out += [{"addr": r["base"] + b * stride + rd[side + "_offset"], "len": rd["length"]}
                    for b in range(r["num_blocks"] // ppl)]
    return out


def local_conv_offsets(model, engine):
    return [{"offset": p["offset"], "size": p["bytes"]} for p in geometry(model, engine)["projections"]]


def remote_conv_offsets(model, engine, local_tp_rank, ratio):
    """§4 remote_conv_offsets on main (reproduces #55208 for replicated Mamba2 groups)."""
    sizes = [p["bytes"] for p in geometry(model, engine)["projections"]]
    out, base = [], 0
    if ratio >= 1:
        lo = local_tp_rank % ratio
        for s in sizes:
            out.append({"offset": base + lo * s, "size": s})
            base += s * ratio
        return out
    for s in sizes:
        out.append({"offset": base, "size": s // -ratio})
        base += s // -ratio
    return out


def ssm_read_range(model, engine, rconv, rssm, local_tp_rank, ratio):
    """§4 SSM temporal read: tp_ratio >= 1 local ssm at rconv + lo*ssm; < 0 the whole remote ssm."""
    if ratio >= 1:
        s = geometry(model, engine)["ssm_bytes"]
        return {"offset": rconv + (local_tp_rank % ratio) * s, "size": s}
    return {"offset": rconv, "size": rssm}


def descriptor_cases():
    cases = []
    add = lambda name, op, inp, out=None, err=None: cases.append(
        dict(name=name, op=op, input=inp, **({"output": out} if err is None else {"error": err})))
    E = "PDKV_ERR_"

    def mapping(l, rank, r, k, mla=False, mamba=False):
        return {"local_tp_size": l, "local_tp_rank": rank, "remote_tp_size": r, "total_kv_heads": k, "use_mla": mla,
                "has_mamba": mamba}

    def tm(m):
        return tp_mapping(m["local_tp_size"], m["local_tp_rank"], m["remote_tp_size"], m["total_kv_heads"], m["use_mla"],
                          m["has_mamba"])

    M1 = 1 << 20
    two = [{"base": 65536, "block_len": 4096, "num_blocks": 3}, {"base": M1, "block_len": 4096, "num_blocks": 2}]
    got = fa_local(two, 1)
    check([d["addr"] for d in got], [65536, 69632, 73728, M1, M1 + 4096], "fa local bsr1")
    add("attention_local_descriptors/two_regions_bsr1", "attention_local_descriptors",
        {"regions": two, "block_size_ratio": 1}, {"descriptors": got})
    got = fa_local(two, 4)
    check((len(got), got[1]), (20, {"addr": 65536 + 1024, "len": 1024}), "fa local bsr4")
    add("attention_local_descriptors/two_regions_bsr4", "attention_local_descriptors",
        {"regions": two, "block_size_ratio": 4}, {"descriptors": got})
    add("attention_local_descriptors/empty", "attention_local_descriptors",
        {"regions": [], "block_size_ratio": 1}, {"descriptors": []})
    add("attention_local_descriptors/bsr_zero", "attention_local_descriptors",
        {"regions": two, "block_size_ratio": 0},
        err={"status": E + "INVALID_ARGUMENT", "message_contains": ["block_size_ratio"]})

    def remote(name, lreg, rreg, m, bsr, mla=False, expect=None):
        got = fa_remote(lreg, rreg, tm(m), mla, bsr)
        if expect is not None:
            check(got, expect, name)
        add("attention_remote_descriptors/" + name, "attention_remote_descriptors",
            {"local_regions": lreg, "remote_regions": rreg, "mapping": m, "block_size_ratio": bsr},
            {"descriptors": got})

    # K=8, D rank 3 of TP4 <- P TP2: D holds 2 heads (1024 B/block), P 4 heads (2048 B); offset
    # factor 1, so D reads the second half of each P block.
    remote("k8_d4_rank3_from_p2_offset_factor_1", [{"base": 0, "block_len": 1024, "num_blocks": 5}],
           [{"base": M1, "block_len": 2048, "num_blocks": 3}], mapping(4, 3, 2, 8), 1,
           expect=[{"addr": M1 + 1024, "len": 1024}, {"addr": M1 + 3072, "len": 1024},
                   {"addr": M1 + 5120, "len": 1024}])
    # K=2 hybrid, D TP1 <- P TP4: attention sources [0, 2], each whole 512-B P block is half of D's.
    remote("k2_d1_from_p4_hybrid_two_reads", [{"base": 0, "block_len": 1024, "num_blocks": 2}],
           [{"base": M1, "block_len": 512, "num_blocks": 2}], mapping(1, 0, 4, 2, mamba=True), 1,
           expect=[{"addr": M1, "len": 512}, {"addr": M1 + 512, "len": 512}])
    # MLA: one replicated latent head, whole block, offset 0.
    remote("mla_d2_rank1_from_p1", [{"base": 0, "block_len": 1152, "num_blocks": 2}],
           [{"base": M1, "block_len": 1152, "num_blocks": 2}], mapping(2, 1, 1, 1, mla=True), 1, mla=True,
           expect=[{"addr": M1, "len": 1152}, {"addr": M1 + 1152, "len": 1152}])
    # D rank 1 of TP2 <- P TP1, K=2, bsr 2: D block 2048 (1 head), P block 2048 (2 heads x 1024/2).
    remote("k2_d2_rank1_from_p1_bsr2", [{"base": 0, "block_len": 2048, "num_blocks": 2},
                                        {"base": 4096, "block_len": 2048, "num_blocks": 2}],
           [{"base": M1, "block_len": 2048, "num_blocks": 4}, {"base": 2 * M1, "block_len": 2048, "num_blocks": 4}],
           mapping(2, 1, 1, 2), 2,
           expect=[{"addr": M1 + 1024 + b * 2048, "len": 1024} for b in range(4)] +
                  [{"addr": 2 * M1 + 1024 + b * 2048, "len": 1024} for b in range(4)])
    remote("two_regions_homogeneous", two, [{"base": 1 << 30, "block_len": 4096, "num_blocks": 2},
                                            {"base": 1 << 31, "block_len": 4096, "num_blocks": 1}],
           mapping(2, 1, 2, 8), 1)
    add("attention_remote_descriptors/region_count_mismatch", "attention_remote_descriptors",
        {"local_regions": two, "remote_regions": two[:1], "mapping": mapping(2, 0, 2, 8), "block_size_ratio": 1},
        err={"status": E + "INCOMPATIBLE", "message_contains": ["2", "1"]})
    add("attention_remote_descriptors/block_len_not_head_ratio", "attention_remote_descriptors",
        {"local_regions": [{"base": 0, "block_len": 1024, "num_blocks": 1}],
         "remote_regions": [{"base": M1, "block_len": 1024, "num_blocks": 1}], "mapping": mapping(4, 3, 2, 8),
         "block_size_ratio": 1},
        err={"status": E + "INCOMPATIBLE", "message_contains": ["1024", "2048"]})
    add("attention_remote_descriptors/head_sharded_with_bsr", "attention_remote_descriptors",
        {"local_regions": [{"base": 0, "block_len": 2048, "num_blocks": 1}],
         "remote_regions": [{"base": M1, "block_len": 512, "num_blocks": 2}],
         "mapping": mapping(1, 0, 4, 2, mamba=True), "block_size_ratio": 2},
        err={"status": E + "INCOMPATIBLE", "message_contains": ["block_size_ratio 2"]})

    def split(name, regions, m, bsr, p_tp_rank, mla=False, expect=None):
        got = fa_split(fa_local(regions, bsr), tm(m), mla, p_tp_rank)
        if expect is not None:
            check(got, expect, name)
        add("attention_split_descriptors/" + name, "attention_split_descriptors",
            {"regions": regions, "mapping": m, "block_size_ratio": bsr, "p_tp_rank": p_tp_rank}, {"descriptors": got})

    one = [{"base": M1, "block_len": 1024, "num_blocks": 2}]
    # K=2 hybrid D TP1 <- P TP4: slots {0:0, 1:0, 2:1, 3:1}; P ranks 1 and 3 are duplicate heads.
    split("k2_d1_from_p4_rank0_slot0", one, mapping(1, 0, 4, 2, mamba=True), 1, 0,
          expect=[{"addr": M1, "len": 512}, {"addr": M1 + 1024, "len": 512}])
    split("k2_d1_from_p4_rank3_twin_slot1", one, mapping(1, 0, 4, 2, mamba=True), 1, 3,
          expect=[{"addr": M1 + 512, "len": 512}, {"addr": M1 + 1536, "len": 512}])
    split("k8_d2_rank1_from_p8_rank6_slot2", [{"base": 0, "block_len": 4096, "num_blocks": 2}],
          mapping(2, 1, 8, 8), 1, 6, expect=[{"addr": 2048, "len": 1024}, {"addr": 6144, "len": 1024}])
    split("mla_d1_from_p4_whole", [{"base": 0, "block_len": 1152, "num_blocks": 2}],
          mapping(1, 0, 4, 1, mla=True, mamba=True), 1, 2, mla=True)
    add("attention_split_descriptors/not_a_source_rank", "attention_split_descriptors",
        {"regions": one, "mapping": mapping(2, 1, 8, 8), "block_size_ratio": 1, "p_tp_rank": 1},
        err={"status": E + "INVALID_ARGUMENT", "message_contains": ["1"]})
    add("attention_split_descriptors/positive_tp_ratio", "attention_split_descriptors",
        {"regions": one, "mapping": mapping(4, 3, 2, 8), "block_size_ratio": 1, "p_tp_rank": 1},
        err={"status": E + "INVALID_ARGUMENT", "message_contains": ["4", "2"]})

    # ---- Mamba descriptors -------------------------------------------------------------------
    nano = "nemotron-3-nano-30b"
    G4 = 1 << 32
    g2 = geometry(nano, {"tp_size": 2})
    check((g2["kernel_page_bytes"], g2["physical_per_logical"]), (1073152, 1), "Nano TP2 kernel page")

    def ml(name, model, engine, regions, ppl, expect_first=None):
        got = mamba_local(model, engine, regions, ppl)
        if expect_first is not None:
            check(got[:len(expect_first)], expect_first, name)
        add("mamba_local_descriptors/" + name, "mamba_local_descriptors",
            {"model": model, "engine": engine, "regions": regions, "ppl": ppl}, {"descriptors": got})

    # x (12288 B) of both logical blocks, then B (3072), C (3072), then ssm (1048576 at 18432).
    ml("nano_tp2_one_region_two_blocks", nano, {"tp_size": 2},
       [{"base": G4, "block_len": 1073152, "num_blocks": 2}], 1,
       [{"addr": G4, "len": 12288}, {"addr": G4 + 1073152, "len": 12288}, {"addr": G4 + 12288, "len": 3072},
        {"addr": G4 + 1073152 + 12288, "len": 3072}, {"addr": G4 + 15360, "len": 3072},
        {"addr": G4 + 1073152 + 15360, "len": 3072}, {"addr": G4 + 18432, "len": 1048576},
        {"addr": G4 + 1073152 + 18432, "len": 1048576}])
    gf = geometry(nano, {"tp_size": 2, "backend": "flashinfer"})
    ml("nano_tp2_flashinfer_ppl131", nano, {"tp_size": 2, "backend": "flashinfer"},
       [{"base": G4, "block_len": gf["kernel_page_bytes"], "num_blocks": 2 * 131}], 131)
    gj = geometry("jamba-v0.1", {"tp_size": 1})
    ml("jamba_tp1_two_regions", "jamba-v0.1", {"tp_size": 1},
       [{"base": G4, "block_len": gj["kernel_page_bytes"], "num_blocks": 2},
        {"base": 2 * G4, "block_len": gj["kernel_page_bytes"], "num_blocks": 1}], 1)
    add("mamba_local_descriptors/num_blocks_not_multiple_of_ppl", "mamba_local_descriptors",
        {"model": nano, "engine": {"tp_size": 2, "backend": "flashinfer"},
         "regions": [{"base": G4, "block_len": gf["kernel_page_bytes"], "num_blocks": 200}], "ppl": 131},
        err={"status": E + "INVALID_ARGUMENT", "message_contains": ["200", "131"]})
    add("mamba_local_descriptors/ppl_zero", "mamba_local_descriptors",
        {"model": nano, "engine": {"tp_size": 2}, "regions": [{"base": G4, "block_len": 1073152, "num_blocks": 2}],
         "ppl": 0}, err={"status": E + "INVALID_ARGUMENT", "message_contains": ["0"]})
    add("mamba_local_descriptors/state_does_not_fit", "mamba_local_descriptors",
        {"model": nano, "engine": {"tp_size": 2}, "regions": [{"base": G4, "block_len": 1048576, "num_blocks": 2}],
         "ppl": 1}, err={"status": E + "OUT_OF_BOUNDS", "message_contains": [str(g2["mamba_page_bytes"]), "1048576"]})

    def msplit(op, name, model, p_tp_size, d_tp_size, d_tp_rank, rule, regions, ppl, p_tp_rank, expect=None):
        reads = mamba_reads(model, p_tp_size, d_tp_size, d_tp_rank, rule)["reads"]
        side = "remote" if op == "mamba_remote_descriptors" else "local"
        got = mamba_split(regions, ppl, reads, p_tp_rank, side)
        if expect is not None:
            check(got, expect, op + " " + name)
        rk, pk = ("p_regions", "p_ppl") if side == "remote" else ("d_regions", "d_ppl")
        add(op + "/" + name, op,
            {"model": model, "prefill": {"tp_size": p_tp_size}, "decode": {"tp_size": d_tp_size}, "decode_rank": d_tp_rank,
             "rule": rule, rk: regions, pk: ppl, "p_tp_rank": p_tp_rank}, {"descriptors": got})

    g4 = geometry(nano, {"tp_size": 4})
    P = [{"base": 2 * G4, "block_len": g4["kernel_page_bytes"], "num_blocks": 2}]
    D = [{"base": G4, "block_len": 1073152, "num_blocks": 2}]
    pp = g4["kernel_page_bytes"]
    check(pp, 1056 * 512, "Nano TP4 kernel page")
    # Nano P TP4 -> D TP2 rank 0: P rank 1 supplies the second half of x, B, C and ssm.
    msplit("mamba_remote_descriptors", "nano_p4_d2_rank0_from_p1", nano, 4, 2, 0, "pdkv", P, 1, 1,
           [{"addr": 2 * G4 + b * pp + o, "len": n} for o, n in [(0, 6144), (6144, 1536), (7680, 1536),
                                                                  (9216, 524288)] for b in range(2)])
    msplit("mamba_local_split_descriptors", "nano_p4_d2_rank0_from_p1", nano, 4, 2, 0, "pdkv", D, 1, 1,
           [{"addr": G4 + b * 1073152 + o, "len": n} for o, n in [(6144, 6144), (13824, 1536), (16896, 1536),
                                                                   (542720, 524288)] for b in range(2)])
    msplit("mamba_remote_descriptors", "nano_p4_d2_rank0_p2_supplies_nothing", nano, 4, 2, 0, "pdkv", P, 1, 2, [])
    msplit("mamba_local_split_descriptors", "nano_p4_d2_rank1_from_p2", nano, 4, 2, 1, "pdkv", D, 1, 2)
    gfa1 = geometry("falcon-h1-0.5b", {"tp_size": 1})
    gfa2 = geometry("falcon-h1-0.5b", {"tp_size": 2})
    FP = [{"base": 2 * G4, "block_len": gfa1["kernel_page_bytes"], "num_blocks": 1}]
    FD = [{"base": G4, "block_len": gfa2["kernel_page_bytes"], "num_blocks": 1}]
    # Falcon-H1 P TP1 -> D TP2 rank 1: pdkv reads the replicated B/C at 9216/9984; vLLM (#55208)
    # reads P's C as B and the ssm head as C.
    msplit("mamba_remote_descriptors", "falcon_h1_p1_d2_rank1_pdkv", "falcon-h1-0.5b", 1, 2, 1, "pdkv", FP, 1, 0,
           [{"addr": 2 * G4 + 4608, "len": 4608}, {"addr": 2 * G4 + 9216, "len": 768},
            {"addr": 2 * G4 + 9984, "len": 768}, {"addr": 2 * G4 + 10752 + 196608, "len": 196608}])
    msplit("mamba_remote_descriptors", "falcon_h1_p1_d2_rank1_vllm_55208", "falcon-h1-0.5b", 1, 2, 1, "vllm", FP, 1, 0,
           [{"addr": 2 * G4 + 4608, "len": 4608}, {"addr": 2 * G4 + 9984, "len": 768},
            {"addr": 2 * G4 + 11520, "len": 768}, {"addr": 2 * G4 + 10752 + 196608, "len": 196608}])
    msplit("mamba_local_split_descriptors", "falcon_h1_p1_d2_rank1_pdkv", "falcon-h1-0.5b", 1, 2, 1, "pdkv", FD, 1, 0,
           [{"addr": G4, "len": 4608}, {"addr": G4 + 4608, "len": 768}, {"addr": G4 + 5376, "len": 768},
            {"addr": G4 + 6144, "len": 196608}])
    gj2 = geometry("jamba-v0.1", {"tp_size": 2})
    msplit("mamba_remote_descriptors", "jamba_p2_d1_from_p1", "jamba-v0.1", 2, 1, 0, "pdkv",
           [{"base": G4, "block_len": gj2["kernel_page_bytes"], "num_blocks": 2}], 1, 1)
    msplit("mamba_local_split_descriptors", "jamba_p2_d1_from_p1", "jamba-v0.1", 2, 1, 0, "pdkv",
           [{"base": G4, "block_len": gj["kernel_page_bytes"], "num_blocks": 2}], 1, 1)
    add("mamba_remote_descriptors/read_leaves_page", "mamba_remote_descriptors",
        {"model": nano, "prefill": {"tp_size": 4}, "decode": {"tp_size": 2}, "decode_rank": 0, "rule": "pdkv",
         "p_regions": [{"base": G4, "block_len": 1024, "num_blocks": 2}], "p_ppl": 1, "p_tp_rank": 0},
        err={"status": E + "OUT_OF_BOUNDS", "message_contains": []})

    # ---- vLLM conv-offset helpers (§4) -------------------------------------------------------
    def co(name, model, engine, expect=None):
        got = local_conv_offsets(model, engine)
        if expect is not None:
            check(got, expect, name)
        add("mamba_local_conv_offsets/" + name, "mamba_local_conv_offsets", {"model": model, "engine": engine},
            {"ranges": got})

    co("nano_tp2", nano, {"tp_size": 2}, [{"offset": 0, "size": 12288}, {"offset": 12288, "size": 3072},
                                          {"offset": 15360, "size": 3072}])
    co("nano_tp2_spec2", nano, {"tp_size": 2, "num_speculative_tokens": 2})
    co("qwen3_next_tp2", "qwen3-next-80b", {"tp_size": 2})
    co("jamba_tp1", "jamba-v0.1", {"tp_size": 1}, [{"offset": 0, "size": 49152}])
    co("falcon_h1_tp2_replicated_bc", "falcon-h1-0.5b", {"tp_size": 2},
       [{"offset": 0, "size": 4608}, {"offset": 4608, "size": 768}, {"offset": 5376, "size": 768}])

    def rco(name, model, engine, rank, ratio, expect=None):
        got = remote_conv_offsets(model, engine, rank, ratio)
        if expect is not None:
            check(got, expect, name)
        add("mamba_remote_conv_offsets/" + name, "mamba_remote_conv_offsets",
            {"model": model, "engine": engine, "local_tp_rank": rank, "tp_ratio": ratio}, {"ranges": got})

    rco("nano_d2_rank1_from_p1_ratio2", nano, {"tp_size": 2}, 1, 2,
        [{"offset": 12288, "size": 12288}, {"offset": 24576 + 3072, "size": 3072},
         {"offset": 24576 + 6144 + 3072, "size": 3072}])
    rco("nano_d2_rank0_from_p4_ratio_minus2", nano, {"tp_size": 2}, 0, -2,
        [{"offset": 0, "size": 6144}, {"offset": 6144, "size": 1536}, {"offset": 7680, "size": 1536}])
    # #55208: Falcon-H1 D TP2 rank 1 reads P TP1's C as B (9984) and the ssm as C (11520 > 10752).
    rco("falcon_h1_d2_rank1_ratio2_55208", "falcon-h1-0.5b", {"tp_size": 2}, 1, 2,
        [{"offset": 4608, "size": 4608}, {"offset": 9984, "size": 768}, {"offset": 11520, "size": 768}])
    rco("qwen3_next_d2_rank1_ratio2", "qwen3-next-80b", {"tp_size": 2}, 1, 2)
    rco("jamba_d1_ratio_minus2", "jamba-v0.1", {"tp_size": 1}, 0, -2, [{"offset": 0, "size": 24576}])
    rco("nano_d4_rank3_ratio4", nano, {"tp_size": 4}, 3, 4)
    add("mamba_remote_conv_offsets/tp_ratio_zero", "mamba_remote_conv_offsets",
        {"model": nano, "engine": {"tp_size": 2}, "local_tp_rank": 0, "tp_ratio": 0},
        err={"status": E + "INVALID_ARGUMENT", "message_contains": ["0"]})

    def ssm(name, model, engine, rconv, rssm, rank, ratio, expect=None):
        got = ssm_read_range(model, engine, rconv, rssm, rank, ratio)
        if expect is not None:
            check(got, expect, name)
        add("mamba_ssm_read_range/" + name, "mamba_ssm_read_range",
            {"model": model, "engine": engine, "remote_conv_bytes": rconv, "remote_ssm_bytes": rssm,
             "local_tp_rank": rank, "tp_ratio": ratio}, got)

    ssm("nano_d2_rank1_from_p1", nano, {"tp_size": 2}, 36864, 2097152, 1, 2,
        {"offset": 36864 + 1048576, "size": 1048576})
    ssm("nano_d2_rank0_from_p1", nano, {"tp_size": 2}, 36864, 2097152, 0, 2, {"offset": 36864, "size": 1048576})
    ssm("nano_d2_from_p4_whole_remote", nano, {"tp_size": 2}, 9216, 524288, 1, -2, {"offset": 9216, "size": 524288})
    ssm("nano_homogeneous_tp2", nano, {"tp_size": 2}, 18432, 1048576, 1, 1, {"offset": 18432, "size": 1048576})
    add("mamba_ssm_read_range/tp_ratio_zero", "mamba_ssm_read_range",
        {"model": nano, "engine": {"tp_size": 2}, "remote_conv_bytes": 1, "remote_ssm_bytes": 1, "local_tp_rank": 0,
         "tp_ratio": 0}, err={"status": E + "INVALID_ARGUMENT", "message_contains": ["0"]})
    return cases


# Model descriptions (published config.json / the tests/data/hf_configs files): the fields
# pdkv_model_describe reports. Unset config values stay 0 (chunk 0 = 2048, default SSM dtype
# 0 = conv dtype).
NANO_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME".replace("E", "-")
MODEL_DESCS = {
    "nemotron-3-nano-30b": dict(name="nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", k=2, head=128, head_v=128,
                                mla=0, swa=0, type=2, heads=64, head_dim=64, d_state=128, groups=8, d_inner=0,
                                d_conv=4, chunk=128, spec=1, dt=2, ssm_dt=4, pattern=NANO_PATTERN),
    "falcon-h1-0.5b": dict(name="tiiuae/Falcon-H1-0.5B-Instruct", k=2, head=64, head_v=64, mla=0, swa=0, type=2,
                           heads=24, head_dim=64, d_state=128, groups=1, d_inner=0, d_conv=4, chunk=0, spec=0, dt=2,
                           ssm_dt=0, pattern="P" * 36),
    "jamba-v0.1": dict(name="ai21labs/Jamba-v0.1", k=8, head=128, head_v=128, mla=0, swa=0, type=1, heads=0,
                       head_dim=0, d_state=16, groups=0, d_inner=8192, d_conv=4, chunk=0, spec=0, dt=2, ssm_dt=0,
                       pattern="".join("*" if i % 8 == 4 else "M" for i in range(32))),
    "qwen3-next-80b": dict(name="Qwen/Qwen3-Next-80B-A3B-Instruct", k=2, head=256, head_v=256, mla=0, swa=0,
                           type=3, heads=32, head_dim=128, d_state=128, groups=16, d_inner=0, d_conv=4, chunk=0,
                           spec=1, dt=2, ssm_dt=0, pattern="".join("*" if (i + 1) % 4 == 0 else "M" for i in range(48))),
}
TYPE_NAMES = {0: "none", 1: "mamba1", 2: "mamba2", 3: "gdn"}


def fingerprint_of(d):
    """FNV-1a 64 over the canonical field encoding (fingerprint.hpp), from a description dict."""
    h = 0xcbf29ce484222325
    buf = bytearray()
    le = lambda v, n: buf.extend(v.to_bytes(n, "little"))
    le(1, 4)
    for f in ("k", "head", "head_v"):
        le(d[f], 4)
    le(d["mla"], 1)
    le(d["swa"], 4)
    for f in ("type", "heads", "head_dim", "d_state", "groups"):
        le(d[f], 4)
    le(d["d_inner"], 8)
    le(d["d_conv"], 4)
    le(d["chunk"], 4)
    le(d["spec"], 1)
    le(d["dt"], 4)
    le(d["ssm_dt"], 4)
    le(len(d["pattern"]), 4)
    buf.extend(d["pattern"].encode())
    for b in buf:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def model_fields(d, name=None):
    """The model keys of docs/conformance.md for one description."""
    p = d["pattern"]
    return {"name": d["name"] if name is None else name, "num_kv_heads": d["k"], "head_size": d["head"],
            "head_size_v": d["head_v"], "use_mla": bool(d["mla"]), "sliding_window": d["swa"],
            "mamba_type": TYPE_NAMES[d["type"]], "mamba_num_heads": d["heads"], "mamba_head_dim": d["head_dim"],
            "mamba_d_state": d["d_state"], "mamba_n_groups": d["groups"], "mamba_d_inner": d["d_inner"],
            "mamba_conv_kernel": d["d_conv"], "mamba_chunk_size": d["chunk"],
            "mamba_conv_rows_include_spec": bool(d["spec"]), "dtype_bytes": d["dt"],
            "default_ssm_dtype_bytes": d["ssm_dt"], "layer_pattern": p,
            "num_attention_layers": p.count("*") + p.count("P"), "num_mamba_layers": p.count("M") + p.count("P"),
            "model_fingerprint": "%016x" % fingerprint_of(d)}


def hf_text(file, **extra):
    """A tests/data/hf_configs file as one compact JSON string (plus extra keys, None deletes)."""
    with open(os.path.join(HERE, "..", "data", "hf_configs", file)) as f:
        cfg = json.load(f)
    for k, v in extra.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    text = json.dumps(cfg, separators=(",", ":"))
    assert text.isascii() and "\\" not in text, "config text needs escapes the vector subset lacks"
    return text


def model_cases():
    cases = []
    add = lambda name, op, inp, out=None, err=None: cases.append(
        dict(name=name, op=op, input=inp, **({"output": out} if err is None else {"error": err})))
    check(fingerprint_of(MODEL_DESCS["nemotron-3-nano-30b"]), fingerprint("nemotron-3-nano-30b"), "fingerprint")
    for preset, d in MODEL_DESCS.items():
        add("model_preset/" + preset, "model_preset", {"model": preset}, model_fields(d))
    check(model_fields(MODEL_DESCS["jamba-v0.1"])["num_attention_layers"], 4, "Jamba 4 attention layers")
    check(model_fields(MODEL_DESCS["qwen3-next-80b"])["num_mamba_layers"], 36, "Qwen3-Next 36 GDN layers")
    check(model_fields(MODEL_DESCS["nemotron-3-nano-30b"])["num_attention_layers"], 6, "Nano 6 attention layers")
    check(model_fields(MODEL_DESCS["nemotron-3-nano-30b"])["num_mamba_layers"], 23, "Nano 23 Mamba layers")
    add("model_preset/by_hf_repo_id_case_insensitive", "model_preset", {"model": "TIIUAE/falcon-h1-0.5b-instruct"},
        model_fields(MODEL_DESCS["falcon-h1-0.5b"]))
    add("model_preset/unknown", "model_preset", {"model": "no-such-model"},
        err={"status": "PDKV_ERR_NOT_FOUND", "message_contains": ["no-such-model"]})

    # config.json text -> the same fields as the preset (same fingerprint: same geometry).
    for file, preset in [("Falcon-H1-0.5B-Instruct.json", "falcon-h1-0.5b"), ("Jamba-v0.1.json", "jamba-v0.1"),
                         ("Qwen3-Next-80B-A3B-Instruct.json", "qwen3-next-80b"),
                         ("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json", "nemotron-3-nano-30b")]:
        add("model_hf_config/" + preset + "_named", "model_hf_config", {"json": hf_text(file), "name": "my-model"},
            model_fields(MODEL_DESCS[preset], "my-model"))
    add("model_hf_config/falcon-h1-0.5b_name_or_path", "model_hf_config",
        {"json": hf_text("Falcon-H1-0.5B-Instruct.json", _name_or_path="tiiuae/Falcon-H1-0.5B-Instruct")},
        model_fields(MODEL_DESCS["falcon-h1-0.5b"]))
    # A smaller Jamba: d_inner = mamba_expand * hidden_size and head size = hidden / heads follow the config.
    jd = dict(MODEL_DESCS["jamba-v0.1"], d_inner=2 * 2048, head=64, head_v=64, pattern="".join("*" if i % 8 == 4 else "M" for i in range(16)))
    add("model_hf_config/jamba_smaller", "model_hf_config",
        {"json": hf_text("Jamba-v0.1.json", hidden_size=2048, num_hidden_layers=16), "name": "small-jamba"},
        model_fields(jd, "small-jamba"))
    add("model_hf_config/bad_json", "model_hf_config", {"json": "{\"model_type\": \"jamba\",", "name": "x"},
        err={"status": "PDKV_ERR_PARSE", "message_contains": ["JSON"]})
    add("model_hf_config/not_an_object", "model_hf_config", {"json": "[1,2]", "name": "x"},
        err={"status": "PDKV_ERR_PARSE", "message_contains": ["object"]})
    add("model_hf_config/falcon_missing_mamba_d_state", "model_hf_config",
        {"json": hf_text("Falcon-H1-0.5B-Instruct.json", mamba_d_state=None), "name": "x"},
        err={"status": "PDKV_ERR_NOT_FOUND", "message_contains": ["mamba_d_state"]})
    add("model_hf_config/jamba_missing_attn_layer_period", "model_hf_config",
        {"json": hf_text("Jamba-v0.1.json", attn_layer_period=None), "name": "x"},
        err={"status": "PDKV_ERR_NOT_FOUND", "message_contains": ["attn_layer_period"]})
    add("model_hf_config/nano_missing_model_type", "model_hf_config",
        {"json": hf_text("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json", model_type=None), "name": "x"},
        err={"status": "PDKV_ERR_NOT_FOUND", "message_contains": ["model_type"]})
    # An unknown model_type is pure attention only without SSM keys; with them it is rejected.
    add("model_hf_config/unknown_hybrid_model_type", "model_hf_config",
        {"json": hf_text("Falcon-H1-0.5B-Instruct.json", model_type="bamba"), "name": "x"},
        err={"status": "PDKV_ERR_UNSUPPORTED_MAMBA_TYPE", "message_contains": ["bamba"]})
    llama = dict(name="x", k=8, head=128, head_v=128, mla=0, swa=0, type=0, heads=0, head_dim=0, d_state=0,
                 groups=0, d_inner=0, d_conv=0, chunk=0, spec=0, dt=2, ssm_dt=0, pattern="****")
    add("model_hf_config/unknown_type_pure_attention", "model_hf_config",
        {"json": json.dumps({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 4096,
                             "num_attention_heads": 32, "num_key_value_heads": 8, "torch_dtype": "bfloat16"},
                            separators=(",", ":")), "name": "x"}, model_fields(llama))
    return cases


for _k, _v in MODEL_DESCS.items():
    DESCS.setdefault(_k, _v)


def engine_ranks(mds):
    """validate_engine_ranks: per entry, a repeated tp_rank, then fields differing from entry 0."""
    items, seen = [], set()
    for i, b in enumerate(mds):
        if b["tp_rank"] in seen:
            items.append({"status": "PDKV_ERR_INCOMPATIBLE", "field": "tp_rank"})
        seen.add(b["tp_rank"])
        if i == 0:
            continue
        a = mds[0]
        for f, va, vb in [("engine_id", a["engine_id"], b["engine_id"]), ("tp_size", a["tp_size"], b["tp_size"]),
                          ("num_kernel_blocks", a["num_kernel_blocks"], b["num_kernel_blocks"]),
                          ("regions", len(a["regions"]), len(b["regions"])),
                          ("physical_blocks_per_logical", a["physical_blocks_per_logical"],
                           b["physical_blocks_per_logical"]),
                          ("model_fingerprint", a["model_fingerprint"], b["model_fingerprint"]),
                          ("pp_rank", (a["pp_size"], a["pp_rank"]), (b["pp_size"], b["pp_rank"])),
                          ("layer_begin", (a["layer_begin"], a["layer_end"]), (b["layer_begin"], b["layer_end"]))]:
            if va != vb:
                items.append({"status": "PDKV_ERR_INCOMPATIBLE", "field": f})
    return items


def handshake_message_cases():
    """Incompatible pairs with the values named in each item's message, and engine-rank checks."""
    cases = []
    nano, falcon, jamba = "nemotron-3-nano-30b", "falcon-h1-0.5b", "jamba-v0.1"
    md = lambda side: metadata(side["model"], side["engine"], side.get("layout"))
    fp = lambda model: "0x%016x" % fingerprint(model)

    def h(name, local, remote, expect, contains):
        items = validate(md(local), md(remote))
        check(items, expect, "handshake " + name)
        cases.append({"name": "handshake_validate/" + name, "op": "handshake_validate",
                      "input": {"local": local, "remote": remote, "item_messages_contain": contains},
                      "output": {"items": items, "compatible": not items}})

    I, T, U = "PDKV_ERR_INCOMPATIBLE", "PDKV_ERR_TP_NOT_DIVISIBLE", "PDKV_ERR_UNSUPPORTED_LAYOUT"
    h("several_incompatibilities_messages",
      {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "engine"}},
      {"model": nano, "engine": {"tp_size": 4, "ssm_state_dtype_bytes": 2},
       "layout": {"engine_id": "engine", "kv_layout": "NHD", "num_regions": 2}},
      [{"status": I, "field": "engine_id"}, {"status": I, "field": "regions"}, {"status": I, "field": "ssm_bytes"}],
      [["'engine'"], ["1 vs 2"], ["1048576", "262144", "2", "4"]])
    h("tp_not_dividing_4_vs_6", {"model": falcon, "engine": {"tp_size": 4}, "layout": {"engine_id": "d"}},
      {"model": falcon, "engine": {"tp_size": 6}, "layout": {"engine_id": "p"}}, [{"status": T, "field": "tp_size"}],
      [["4", "6"]])
    # Different models with the same K and Mamba type: fingerprint, then the TP-invariant sizes
    # (attention bytes per token per KV head: Nano 512, Falcon-H1-0.5B 256).
    h("fingerprint_mismatch_nano_vs_falcon", {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "d"}},
      {"model": falcon, "engine": {"tp_size": 2}, "layout": {"engine_id": "p"}},
      [{"status": I, "field": "model_fingerprint"}, {"status": I, "field": "attention_bytes_per_token"},
       {"status": I, "field": "ssm_bytes"}, {"status": I, "field": "conv_projection_bytes[0]"}],
      [[fp(nano), fp(falcon)], ["512", "256"], ["1048576", "196608"], ["12288", "4608"]])
    # Different layouts are served: the reader permutes received blocks into its own layout.
    h("kv_layout_hnd_vs_nhd_accepted", {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "d"}},
      {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "p", "kv_layout": "NHD"}}, [], [])
    h("nhd_both_with_heads_split", {"model": nano, "engine": {"tp_size": 1}, "layout": {"engine_id": "d", "kv_layout": "NHD"}},
      {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "p", "kv_layout": "NHD"}},
      [{"status": U, "field": "kv_layout"}], [["2 vs 1"]])
    h("nhd_both_homogeneous_accepted", {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "d", "kv_layout": "NHD"}},
      {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "p", "kv_layout": "NHD"}}, [], [])
    h("different_heads_and_mamba_type", {"model": jamba, "engine": {"tp_size": 2}, "layout": {"engine_id": "d"}},
      {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "p"}},
      [{"status": I, "field": "model_fingerprint"}, {"status": I, "field": "total_kv_heads"},
       {"status": I, "field": "mamba_type"}],
      [[fp(jamba), fp(nano)], ["8 vs 2"], ["mamba1 vs mamba2"]])

    def er(name, ranks, contains):
        items = engine_ranks([md(r) for r in ranks])
        inp = {"ranks": ranks}
        if contains is not None:
            inp["item_messages_contain"] = contains
        cases.append({"name": "handshake_validate_engine_ranks/" + name, "op": "handshake_validate_engine_ranks",
                      "input": inp, "output": {"items": items}})
        return items

    p4 = lambda rank, **kw: {"model": kw.pop("model", nano), "engine": dict({"tp_size": 4}, **kw.pop("engine", {})),
                             "layout": dict({"engine_id": "p", "tp_rank": rank}, **kw)}
    check(er("consistent_four_ranks", [p4(r) for r in range(4)], []), [], "consistent ranks")
    er("empty", [], [])
    er("repeated_tp_rank", [p4(0), p4(1), p4(1)], [["1"]])
    check(er("engine_id_blocks_regions", [p4(0), p4(1, engine_id="q", num_logical_blocks=32, num_regions=2)],
             [["p vs q"], ["64 vs 32"], ["1 vs 2"]]),
          [{"status": "PDKV_ERR_INCOMPATIBLE", "field": f} for f in ("engine_id", "num_kernel_blocks", "regions")],
          "engine ranks fields")
    er("tp_size_differs", [p4(0), {"model": nano, "engine": {"tp_size": 2}, "layout": {"engine_id": "p", "tp_rank": 1}}],
       [["4 vs 2"]])
    g = geometry(nano, {"tp_size": 4, "backend": "flashinfer"})
    check(g["physical_per_logical"], 33, "Nano TP4 FlashInfer ppl 33")
    er("ppl_differs", [p4(0), p4(1, engine={"backend": "flashinfer"})], [["64", str(64 * 33)], ["1 vs 33"]])
    er("fingerprint_differs", [p4(0), p4(1, model=falcon)], [[fp(nano), fp(falcon)]])
    return cases


def mixed_fingerprint(mm):
    """fingerprint.hpp for a pure-attention model with MLA-typed layers: the canonical fields,
    then the latent width (appended only when non-zero)."""
    d = dict(k=mm["k"], head=mm["head"], head_v=mm["head_v"], mla=0, swa=0, type=0, heads=0, head_dim=0,
             d_state=0, groups=0, d_inner=0, d_conv=0, chunk=0, spec=0, dt=mm["dt"], ssm_dt=0,
             pattern=mm["pattern"])
    h = fingerprint_of(d)
    # Continue FNV-1a over the appended u32 (the hash state is the running value).
    for b in mm["mla_head"].to_bytes(4, "little"):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def mixed_metadata(model, engine, layout=None):
    """metadata_from_geometry for a MIXED_MODELS model: GQA regions at kernel * attention bytes
    per token, MLA regions at kernel * latent bytes per token, kinds and layers from the layer
    pattern (attention layers in order, repeated) unless the layout gives the kinds."""
    mm = MIXED_MODELS[model]
    l = layout_defaults(layout)
    g = attn_geometry(mm, engine)
    nkb = l["num_logical_blocks"] * g["physical_per_logical"]
    kinds = region_kinds(mm, l["num_regions"], l)
    attn_layers = [i for i, c in enumerate(mm["pattern"]) if c in "*PL"]
    layers = list(range(l["num_regions"])) if l.get("region_kinds") else \
        [attn_layers[i % len(attn_layers)] for i in range(l["num_regions"])]
    ma = mm["mla_head"] * (engine.get("kv_cache_element_bits", 0) or
                           8 * (engine.get("kv_cache_dtype_bytes", 0) or mm["dt"])) // 8
    lens = [g["kernel_block_size"] * ma if kd == "mla" else g["kernel_page_bytes"] for kd in kinds]
    bases, b = [], l["base"]
    for n in lens:
        bases.append(b)
        b += nkb * n
    bases = l.get("region_bases") or bases
    return {
        "engine_id": l["engine_id"], "tp_size": engine["tp_size"], "tp_rank": l["tp_rank"],
        "kv_layout": l["kv_layout"], "conv_layout": "DS", "logical_block_size": g["block_size"],
        "kernel_block_size": g["kernel_block_size"], "physical_blocks_per_logical": g["physical_per_logical"],
        "num_kernel_blocks": nkb,
        "regions": [{"base": bases[i], "block_len": lens[i], "num_blocks": nkb, "kind": kinds[i], "layer": layers[i]}
                    for i in range(l["num_regions"])],
        "mamba_type": "none", "conv_bytes": 0, "ssm_bytes": 0, "conv_projection_bytes": [],
        "attention_bytes_per_token": g["attn_bytes_per_token"], "use_mla": False, "total_kv_heads": mm["k"],
        "prefix_caching": bool(l["prefix_caching"] == 1), "cache_mode": "none",
        "model_fingerprint": "%016x" % mixed_fingerprint(mm),
        "pp_size": 1, "pp_rank": 0, "layer_begin": 0, "layer_end": 0,
    }


def mixed_mla_cases():
    """GQA models with MLA-typed layers (issue 12 item 4): metadata with mla regions (format
    1.1), the handshake checking each region by its kind, and plans reading the latent whole
    from one P rank beside head-split GQA regions."""
    cases = []
    name = "mixed-gqa-mla"
    mm = MIXED_MODELS[name]
    desc = mm["desc"]
    add = lambda n, op, inp, out=None, err=None: cases.append(
        dict(name=n, op=op, input=inp, **({"output": out} if err is None else {"error": err})))
    eng = {"tp_size": 2, "user_block_size": 16}
    # Hand check of the oracle: GQA 2 heads x 32 B at TP2 (1024 B pages), latent 48 B (768 B).
    md = mixed_metadata(name, eng, {"num_regions": 3, "num_logical_blocks": 8, "engine_id": "d", "tp_rank": 1})
    check([(r["kind"], r["block_len"], r["layer"]) for r in md["regions"]],
          [("attention", 1024, 0), ("mla", 768, 1), ("attention", 1024, 0)], "mixed regions")
    for n, e, lay in [("mixed_gqa_mla_tp2_three_regions", eng,
                       {"num_regions": 3, "num_logical_blocks": 8, "engine_id": "d", "tp_rank": 1}),
                      ("mixed_gqa_mla_tp4_explicit_kinds", {"tp_size": 4, "user_block_size": 16},
                       {"num_regions": 2, "num_logical_blocks": 4, "engine_id": "p",
                        "region_kinds": ["mla", "attention"]})]:
        m = mixed_metadata(name, e, lay)
        b = encode(m)
        check(b[6], 1, "an mla region labels the encoding 1.1")
        out = dict(m, encoded_length=len(b), payload_crc32c=crc32c_py(b[16:]), hex=b.hex())
        add("metadata_roundtrip/" + n, "metadata_roundtrip", {"model": desc, "engine": e, "layout": lay}, out)
        if n.endswith("three_regions"):
            dec = dict(out)
            del dec["hex"]
            add("metadata_decode/" + n, "metadata_decode", {"hex": b.hex()}, dec)
            # The same bytes labelled 1.0: format 1.0 has no mla kind.
            add("metadata_decode/mla_region_under_1_0_label", "metadata_decode",
                {"hex": (b[:6] + (0).to_bytes(2, "little") + b[8:]).hex()},
                err={"status": "PDKV_ERR_PARSE", "message_contains": ["regions[1].kind", "1.1"]})
    add("metadata_roundtrip/mla_kind_without_mla_layers", "metadata_roundtrip",
        {"model": dict(desc, name="gqa", layer_pattern="**", mla_head_size=0), "engine": eng,
         "layout": {"num_regions": 2, "region_kinds": ["attention", "mla"]}},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["region_kinds[1]", "no MLA-typed layers"]})

    def h(n, local, remote, expect, contains):
        side = lambda x: mixed_metadata(x["model_key"], x["engine"], x.get("layout"))
        items = validate(side(local), side(remote))
        check(items, expect, "handshake " + n)
        strip = lambda x: {k: v for k, v in x.items() if k != "model_key"}
        cases.append({"name": "handshake_validate/" + n, "op": "handshake_validate",
                      "input": {"local": strip(local), "remote": strip(remote), "item_messages_contain": contains},
                      "output": {"items": items, "compatible": not items}})

    I = "PDKV_ERR_INCOMPATIBLE"
    d2 = {"model": desc, "model_key": name, "engine": eng, "layout": {"engine_id": "d", "num_regions": 2}}
    p4 = {"model": desc, "model_key": name, "engine": {"tp_size": 4, "user_block_size": 16},
          "layout": {"engine_id": "p", "num_regions": 2}}
    h("mixed_mla_d_tp2_p_tp4_accepted", d2, p4, [], [])
    h("mixed_mla_region_kind_differs", d2, dict(p4, layout={"engine_id": "p", "num_regions": 2,
                                                            "region_kinds": ["attention", "attention"]}),
      [{"status": I, "field": "regions[1].kind"}], [["1 regions differ in kind", "index 1"]])
    # P's latent registered at half the width (24 B per token at TP4 vs 48 at TP2): a different
    # model, and the MLA region named with both sizes.
    half = dict(mm, mla_head=12, desc=dict(desc, mla_head_size=12))
    MIXED_MODELS["mixed-gqa-mla-half"] = half
    h("mixed_mla_region_scaled_by_tp", d2,
      dict(p4, model=half["desc"], model_key="mixed-gqa-mla-half"),
      [{"status": I, "field": "model_fingerprint"}, {"status": I, "field": "regions[1].block_len"}],
      [["0x%016x" % mixed_fingerprint(mm), "0x%016x" % mixed_fingerprint(half)],
       ["MLA region 1", "48 bytes per token", "24 on the remote", "tp_size 4"]])

    def pl(n, p_eng, d_eng, d_tp_rank, groups, p_layout, d_layout, expect=None):
        out = plan(name, p_eng, d_eng, d_tp_rank, groups, p_layout, d_layout)
        for key, val in (expect or {}).items():
            check(out[key], no_permute_defaults(key, val), "plan " + n + "." + key)
        inp = {"model": desc, "prefill": {"engine": p_eng, "layout": p_layout},
               "decode": {"engine": d_eng, "layout": d_layout}, "decode_rank": d_tp_rank, "groups": groups}
        cases.append({"name": "transfer_plan/" + n, "op": "transfer_plan", "input": inp, "output": out})

    lay = lambda eid: {"engine_id": eid, "num_regions": 2, "num_logical_blocks": 8}
    one = [{"kind": "attention", "local_blocks": [3], "remote_blocks": [5], "remote_computed_tokens": 16}]
    # D TP2 rank 1 <- P TP1: heads 2..3 of P block 5 (2048 B pages) into D block 3 (1024 B), and
    # the whole 768 B latent block.
    pl("mixed_mla_d_tp2_from_p_tp1_rank1", {"tp_size": 1, "user_block_size": 16}, eng, 1, one, lay("p"), lay("d"),
       {"read_ranks": [0], "reads": [[{"local_region": 0, "local_offset": 3072, "remote_region": 0,
                                        "remote_offset": 5 * 2048 + 1024, "length": 1024},
                                       {"local_region": 1, "local_offset": 2304, "remote_region": 1,
                                        "remote_offset": 3840, "length": 768}]]})
    # D TP2 rank 1 <- P TP4: heads from P ranks 2 and 3, the latent from P rank 2 only.
    pl("mixed_mla_d_tp2_from_p_tp4_rank1", {"tp_size": 4, "user_block_size": 16}, eng, 1, one, lay("p"), lay("d"),
       {"read_ranks": [2, 3], "notify_ranks": [2, 3],
        "reads": [[], [], [{"local_region": 0, "local_offset": 3072, "remote_region": 0, "remote_offset": 2560,
                            "length": 512},
                           {"local_region": 1, "local_offset": 2304, "remote_region": 1, "remote_offset": 3840,
                            "length": 768}],
                  [{"local_region": 0, "local_offset": 3584, "remote_region": 0, "remote_offset": 2560,
                    "length": 512}]]})
    # D TP4 rank 3 <- P TP2 with a prefix hit and block sizes 32 vs 16: GQA head 3 of P rank 1
    # per token run, the latent from P rank 1 in runs that cross both sides' block boundaries.
    pl("mixed_mla_d_tp4_bs32_from_p_tp2_bs16_hit", {"tp_size": 2, "user_block_size": 16},
       {"tp_size": 4, "user_block_size": 32}, 3,
       [{"kind": "attention", "local_blocks": [2, 6], "remote_blocks": [1, 4, 3, 7], "remote_computed_tokens": 60,
         "local_hit_tokens": 0}],
       lay("p"), lay("d"), {"read_ranks": [1], "notify_ranks": [1]})
    return cases


KV_FORMATS = {  # vLLM --kv-cache-dtype -> engine keys (docs/hybrid-geometry.md §2)
    "int8_per_token_head": {"kv_cache_element_bits": 8, "kv_cache_head_extra_bytes": 8},
    "fp8_per_token_head": {"kv_cache_element_bits": 8, "kv_cache_head_extra_bytes": 8},
    "int4_per_token_head": {"kv_cache_element_bits": 4, "kv_cache_head_extra_bytes": 8},
}


def kv_format_cases():
    """Quantized KV caches with per-head scales (issue 12 item 2): geometry (the 864-token block
    of Qwen3.5-27B with int8 per-token-head KV), engine errors, plans whose head slices carry each
    head's scales, and the handshake refusing different formats on the two sides."""
    cases = []
    q = "qwen3.5-27b"
    i8 = KV_FORMATS["int8_per_token_head"]

    def g(name, engine, expect=None):
        out = geometry(q, engine)
        for key, val in (expect or {}).items():
            check(out[key], val, f"{name}.{key}")
        cases.append({"name": f"geometry/{name}", "op": "geometry", "input": {"model": q, "engine": engine},
                      "output": out})
        return out

    # The real case: TP1, int8 per-token-head KV, bf16 SSM state, 7 speculative tokens (Triton):
    # 520 B per head (256 + 256 + 8), 2080 B per token; Mamba page 204800 + 1572864 = 1777664;
    # B = 16 * ceil(1777664 / 33280) = 864; padding 19456 / 1777664 = 1.09%.
    real = dict(i8, tp_size=1, backend="triton", ssm_state_dtype_bytes=2, num_speculative_tokens=7)
    o = g("qwen35_27b_tp1_int8_per_token_head_bf16_ssm_spec7", real,
          {"kv_head_bytes_per_token": 520, "attn_bytes_per_token": 2080, "mamba_page_bytes": 1777664,
           "block_size": 864, "padding_ppm": 10944})
    check(o["log_lines"], ["Setting attention block size to 864 tokens to ensure that attention page size is >= "
                           "mamba page size.",
                           "Padding mamba page size by 1.09% to ensure that mamba page size and attention page size "
                           "are exactly equal."], "the 864 / 1.09% log lines")
    g("qwen35_27b_tp2_int8_per_token_head_bf16_ssm_spec7", dict(real, tp_size=2), {"block_size": 864})
    g("qwen35_27b_tp1_int4_per_token_head", dict(KV_FORMATS["int4_per_token_head"], tp_size=1),
      {"kv_head_bytes_per_token": 264})
    g("qwen35_27b_tp4_fp8_per_token_head_flashinfer",
      dict(KV_FORMATS["fp8_per_token_head"], tp_size=4, backend="flashinfer"))
    g("qwen35_27b_tp2_bf16", {"tp_size": 2}, {"kv_head_bytes_per_token": 1024})
    g("qwen35_27b_tp2_element_bits_and_dtype_agree", {"tp_size": 2, "kv_cache_element_bits": 8,
                                                      "kv_cache_dtype_bytes": 1}, {"kv_head_bytes_per_token": 512})

    def e(name, engine, status, contains):
        cases.append({"name": f"geometry/{name}", "op": "geometry", "input": {"model": q, "engine": engine},
                      "error": {"status": status, "message_contains": contains}})

    e("kv_element_bits_12", {"tp_size": 1, "kv_cache_element_bits": 12}, "PDKV_ERR_INVALID_ARGUMENT",
      ["kv_cache_element_bits = 12"])
    e("kv_element_bits_disagree_with_dtype", {"tp_size": 1, "kv_cache_element_bits": 8, "kv_cache_dtype_bytes": 2},
      "PDKV_ERR_INVALID_ARGUMENT", ["kv_cache_element_bits = 8", "kv_cache_dtype_bytes = 2"])
    e("kv_head_extra_bytes_over_bound", {"tp_size": 1, "kv_cache_head_extra_bytes": 4097},
      "PDKV_ERR_INVALID_ARGUMENT", ["kv_cache_head_extra_bytes = 4097"])

    def pl(name, p_eng, d_eng, d_tp_rank, groups, expect):
        out = plan(q, p_eng, d_eng, d_tp_rank, groups, {"engine_id": "p", "num_logical_blocks": 8},
                   {"engine_id": "d", "num_logical_blocks": 8})
        for key, val in expect.items():
            check(out[key], no_permute_defaults(key, val), "plan " + name + "." + key)
        cases.append({"name": "transfer_plan/" + name, "op": "transfer_plan",
                      "input": {"model": q, "prefill": {"engine": p_eng, "layout": {"engine_id": "p", "num_logical_blocks": 8}},
                                "decode": {"engine": d_eng, "layout": {"engine_id": "d", "num_logical_blocks": 8}},
                                "decode_rank": d_tp_rank, "groups": groups},
                      "output": out})

    # D TP2 rank 1 (heads 2, 3) <- P TP1, int8 per-token-head, block 1552 on both sides (fp32 SSM):
    # a 10-token run is one piece per head of 10 whole 520-byte entries (data and scales), at the
    # head's own offset on each side; the Mamba state follows in its own pieces.
    e1 = dict(i8, tp_size=1)
    e2 = dict(i8, tp_size=2)
    check((geometry(q, e1)["block_size"], geometry(q, e2)["block_size"]), (1552, 1552), "int8 pth blocks")
    L1, L2 = 1552 * 2080, 1552 * 1040
    pl("qwen35_27b_int8_per_token_head_d_tp2_from_p_tp1_rank1", e1, e2, 1,
       [{"kind": "attention", "local_blocks": [3], "remote_blocks": [5], "remote_computed_tokens": 10},
        {"kind": "mamba", "local_blocks": [6], "remote_blocks": [4], "remote_computed_tokens": 10}],
       {"read_ranks": [0],
        "reads": [[{"local_region": 0, "local_offset": 3 * L2, "remote_region": 0,
                    "remote_offset": 5 * L1 + 2 * 1552 * 520, "length": 10 * 520},
                   {"local_region": 0, "local_offset": 3 * L2 + 1552 * 520, "remote_region": 0,
                    "remote_offset": 5 * L1 + 3 * 1552 * 520, "length": 10 * 520}]
                  + [r for r in plan(q, e1, e2, 1, [{"kind": "mamba", "local_blocks": [6], "remote_blocks": [4],
                                                     "remote_computed_tokens": 10}],
                                     {"engine_id": "p", "num_logical_blocks": 8},
                                     {"engine_id": "d", "num_logical_blocks": 8})["reads"][0]]]})
    # P TP4 (one head per rank) -> D TP2 rank 0, int4 per-token-head: heads 0 and 1 from P ranks
    # 0 and 1, whole blocks of 264-byte entries placed at their head slots.
    e4 = dict(KV_FORMATS["int4_per_token_head"], tp_size=4)
    e2b = dict(KV_FORMATS["int4_per_token_head"], tp_size=2)
    b4, b2 = geometry(q, e4)["block_size"], geometry(q, e2b)["block_size"]
    pl("qwen35_27b_int4_per_token_head_d_tp2_from_p_tp4_rank0", e4, e2b, 0,
       [{"kind": "attention", "local_blocks": [1, 2], "remote_blocks": [1, 2, 3, 4, 5, 6, 7],
         "remote_computed_tokens": 2 * b2}],
       {"read_ranks": [0, 1], "notify_ranks": [0, 1]})

    # The handshake compares a head's bytes per token: int8 per-token-head (520) on P and bf16
    # (1024) on D is refused, naming both.
    items = validate(metadata(q, {"tp_size": 2}, {"engine_id": "d"}), metadata(q, e1, {"engine_id": "p"}))
    check(items, [{"status": "PDKV_ERR_INCOMPATIBLE", "field": "attention_bytes_per_token"}], "format mismatch")
    cases.append({"name": "handshake_validate/qwen35_27b_bf16_vs_int8_per_token_head", "op": "handshake_validate",
                  "input": {"local": {"model": q, "engine": {"tp_size": 2}, "layout": {"engine_id": "d"}},
                            "remote": {"model": q, "engine": e1, "layout": {"engine_id": "p"}},
                            "item_messages_contain": [["local 1024, remote 520"]]},
                  "output": {"items": items, "compatible": False}})
    return cases


def plan_json_lines(model, p_eng, d_eng, d_tp_rank, groups, p_layout=None, d_layout=None, permute_on_receive=False,
                    issue_order=False):
    """plan_to_json: the plan oracle as nlohmann dump(2) (ordered keys, reads in issue order; the
    cases below are chosen so that issue order is (local_region, local_offset) order, or pass
    issue_order to list them in the oracle's production order)."""
    out = plan(model, p_eng, d_eng, d_tp_rank, groups, p_layout, d_layout, permute_on_receive=permute_on_receive,
               issue_order=issue_order)
    permuted = out["permute"]["from"] != out["permute"]["to"]
    doc = {"p_tp_size": out["p_tp_size"], "d_tp_size": out["d_tp_size"], "d_tp_rank": d_tp_rank,
           "notify_ranks": out["notify_ranks"], "notifications_per_p_rank": out["notifications_per_p_rank"]}
    if out["d_pp_size"] > 1 or out["p_pp_size"] > 1:  # only a plan between pipeline stages says so
        doc["pipeline"] = {k: out[k] for k in ("p_pp_size", "p_pp_rank", "d_pp_size", "d_pp_rank",
                                                "layer_begin", "layer_end")}
    doc.update({"ranks": [{"p_tp_rank": p, "bytes": out["rank_bytes"][p], "reads": out["reads"][p]}
                     for p in out["read_ranks"]],
           "zero": [dict({"group": i, "kind": g["kind"], "regions": g["regions"], "zero": g["zero_ranges"],
                          "unfilled_states": g["unfilled_states"]},
                         **({"permute_blocks": g["permute_blocks"], "permute_regions": g["permute_regions"]}
                            if permuted else {}))
                    for i, g in enumerate(out["groups"])]})
    if permuted:  # only a plan whose blocks D permutes says so
        doc["permute"] = out["permute"]
    doc["stats"] = {k: out[k] for k in ("pieces_before_coalescing", "pieces_after_coalescing", "bytes",
                                        "attention_bytes", "mamba_bytes")}
    return json.dumps(doc, indent=2).split("\n")


def plan_json_cases():
    cases = []
    nano = "nemotron-3-nano-30b"

    def pj(name, p_eng, d_eng, d_tp_rank, groups, p_layout, d_layout):
        lines = plan_json_lines(nano, p_eng, d_eng, d_tp_rank, groups, p_layout, d_layout)
        inp = {"model": nano, "prefill": {"engine": p_eng, "layout": p_layout},
               "decode": {"engine": d_eng, "layout": d_layout}, "decode_rank": d_tp_rank, "groups": groups}
        cases.append({"name": "transfer_plan_json/" + name, "op": "transfer_plan_json", "input": inp,
                      "output": {"lines": lines}})
        return lines

    lines = pj("homogeneous_tp2_rank1_one_read", {"tp_size": 2}, {"tp_size": 2}, 1,
               [{"kind": "attention", "local_blocks": [3, 4], "remote_blocks": [7, 8], "remote_computed_tokens": 2106}],
               {"engine_id": "p", "num_logical_blocks": 16}, {"engine_id": "d", "num_logical_blocks": 16})
    check(lines[:4], ["{", '  "p_tp_size": 2,', '  "d_tp_size": 2,', '  "d_tp_rank": 1,'], "plan json head")
    pj("nano_p4_d2_rank0_attention_and_mamba", {"tp_size": 4}, {"tp_size": 2}, 0,
       [{"kind": "attention", "local_blocks": [1, 2], "remote_blocks": [1, 2, 3, 4], "remote_computed_tokens": 3000},
        {"kind": "mamba", "local_blocks": [0, 5], "remote_blocks": [0, 0, 6], "cache_mode": "none",
         "remote_computed_tokens": 3000}],
       {"engine_id": "p", "num_logical_blocks": 8}, {"engine_id": "d", "num_logical_blocks": 8})
    pj("full_hit_notify_only", {"tp_size": 4}, {"tp_size": 2}, 1,
       [{"kind": "attention", "local_blocks": [], "remote_blocks": [1, 2], "remote_computed_tokens": 2000,
         "local_hit_tokens": 2000}],
       {"engine_id": "p", "num_logical_blocks": 8}, {"engine_id": "d", "num_logical_blocks": 8})

    # The request of the engine examples (examples/engine/*) and of the install check
    # (scripts/check-install.sh): Nemotron-3-Nano built from its config.json, prefill TP4 ->
    # decode TP2 rank 0, Mamba "align" mode (prefix caching) on both. P computed all 5000 prompt
    # tokens (1056-token blocks 1..5; its Mamba state after 5000 tokens in block 8); D holds the
    # first 2096 tokens from its prefix cache (one 2096-token block), so it reads tokens
    # 2096..4999 into its blocks 4 and 5 (the last 808 tokens; 1288 tokens zeroed) and P's
    # running state into its last real Mamba slot 7 (slot 6 stays unfilled).
    assert geometry(nano, {"tp_size": 4, "mamba_cache_mode": "align"})["block_size"] == 1056
    assert geometry(nano, {"tp_size": 2, "mamba_cache_mode": "align"})["block_size"] == 2096
    p_eng, d_eng = {"tp_size": 4, "mamba_cache_mode": "align"}, {"tp_size": 2, "mamba_cache_mode": "align"}
    groups = [{"kind": "attention", "local_blocks": [4, 5], "remote_blocks": [1, 2, 3, 4, 5],
               "remote_computed_tokens": 5000, "local_hit_tokens": 2096},
              {"kind": "mamba", "cache_mode": "align", "local_blocks": [0, 6, 7], "remote_blocks": [0, 0, 0, 0, 8],
               "remote_computed_tokens": 5000, "local_hit_tokens": 2096}]
    p_lay, d_lay = {"engine_id": "prefill", "num_logical_blocks": 16}, {"engine_id": "decode", "num_logical_blocks": 16}
    out = plan(nano, p_eng, d_eng, 0, groups, p_lay, d_lay)
    check(out["groups"][0]["zero_ranges"], [{"block": 5, "token_begin": 808, "token_end": 2096}], "engine zero")
    check(out["groups"][1]["unfilled_states"], [6], "engine unfilled")
    check(out["attention_bytes"] > 0 and out["mamba_bytes"] > 0, True, "engine reads both kinds")
    lines = plan_json_lines(nano, p_eng, d_eng, 0, groups, p_lay, d_lay)
    cases.append({"name": "transfer_plan_json/engine_example_nano_config_json_p4_d2_align_prefix_hit",
                  "op": "transfer_plan_json",
                  "input": {"hf_config": hf_text("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"),
                            "prefill": {"engine": p_eng, "layout": p_lay}, "decode": {"engine": d_eng, "layout": d_lay},
                            "decode_rank": 0, "groups": groups},
                  "output": {"lines": lines}})
    return cases



# ---------------------------------------------------------------------------------------------
# Engine-level API (pdkv/engine.h, file engine.json): an engine described once, a request given as
# its schedulers hold it. The oracle re-derives the KV-cache groups from the layer pattern, the
# N-1 rule, each side's kernel ids and the Mamba slots of each cache mode, then plans the groups
# with the plan oracle above.
# ---------------------------------------------------------------------------------------------

def kv_cache_groups(pattern):
    """vLLM's hybrid-manager grouping, re-derived: per kind ('*'/'P' attention, 'M'/'P' Mamba) its
    layers; group size = the largest count if it is below 1.25x the smallest, else the smallest;
    each kind dealt round-robin into ceil(count / size) groups; kinds in order of first appearance."""
    layers = {"attention": [], "mamba": []}
    order = []
    for i, c in enumerate(pattern):
        for kind, chars in (("attention", "*P"), ("mamba", "MP")):
            if c in chars:
                layers[kind].append(i)
                if kind not in order:
                    order.append(kind)
    counts = [len(layers[k]) for k in order]
    size = max(counts) if max(counts) * 4 < min(counts) * 5 else min(counts)
    out = []
    for kind in order:
        n = -(-len(layers[kind]) // size)
        for g in range(n):
            out.append({"kind": kind, "layers": layers[kind][g::n]})
    return out


def engine_request_groups(model, p_eng, d_eng, request):
    """The plan oracle's groups of one engine-level request."""
    groups = kv_cache_groups(MODEL_DESCS[model]["pattern"])
    dg, pg = geometry(model, d_eng), geometry(model, p_eng)
    n, hit = request["num_prompt_tokens"], request["num_local_computed_tokens"]
    computed = n - 1 if n > 1 else n  # every preset here is hybrid: P computes N-1 tokens
    bs = dg["block_size"]
    first = hit // bs
    mode = d_eng.get("mamba_cache_mode", "none")
    spec = d_eng.get("num_speculative_tokens", 0)
    out = []
    for g, ids in zip(groups, request["groups"]):
        loc, rem = ids["local"], ids["remote"]
        grp = {"kind": g["kind"], "remote_computed_tokens": computed, "local_hit_tokens": hit,
               "regions": list(range(len(g["layers"])))}
        if g["kind"] == "attention":
            lp, rp = dg["physical_per_logical"], pg["physical_per_logical"]
            grp["local_blocks"] = [b * lp + k for b in loc[first:] for k in range(lp)]
            grp["remote_blocks"] = [b * rp + k for b in rem for k in range(rp)]
            grp["local_first_block"] = first * lp
        else:
            positions = loc[first:len(loc) - spec]
            grp["cache_mode"] = mode
            grp["remote_blocks"] = list(rem)
            if mode == "all":
                grp["local_blocks"] = positions
                grp["local_first_block"] = first
            else:
                grp["local_blocks"] = positions[-1:]
        out.append(grp)
    return groups, out


def engine_tables(model, p_eng, d_eng, prompt, hit, d_blocks, p_blocks):
    """Block tables as schedulers hold them (ids from one pool per engine, from 1 up):
    attention one logical id per block; Mamba align: the hit positions' cached states, nulls, the
    running state last; all: a state per position; none: the running state; D's speculative
    scratch slots last. P's Mamba lists as P exports them (exchange-clipped)."""
    groups = kv_cache_groups(MODEL_DESCS[model]["pattern"])
    dg, pg = geometry(model, d_eng), geometry(model, p_eng)
    mode = d_eng.get("mamba_cache_mode", "none")
    spec = d_eng.get("num_speculative_tokens", 0)
    computed = prompt - 1 if prompt > 1 else prompt
    dpos, ppos = -(-prompt // dg["block_size"]), -(-computed // pg["block_size"])
    dn, pn = [1], [1]  # ascending, so that pdkv's issue order is the oracle's local order

    def take(pool):
        pool[0] += 1
        assert pool[0] <= min(d_blocks, p_blocks)
        return pool[0] - 1
    out = []
    for g in groups:
        if g["kind"] == "attention":
            loc = [take(dn) for _ in range(dpos)]
            rem = [take(pn) for _ in range(ppos)]
        elif mode == "all":
            loc = [take(dn) for _ in range(dpos + spec)]
            rem = [take(pn) for _ in range(ppos)]
        elif mode == "align":
            hp = hit // dg["block_size"]
            loc = [take(dn) if i < hp or i + 1 == dpos else 0 for i in range(dpos)] + [take(dn) for _ in range(spec)]
            rem = [take(pn)]
        else:
            loc = [take(dn) for _ in range(1 + spec)]
            rem = [take(pn)]
        out.append({"local": loc, "remote": rem})
    return out


def engine_cases():
    cases = []
    E = "PDKV_ERR_"

    def inp_of(model, p_eng, d_eng, d_tp_rank, request, blocks, hf=None):
        inp = {"prefill": {"engine": p_eng, "layout": {"engine_id": "prefill", "num_logical_blocks": blocks}},
               "decode": {"engine": d_eng, "layout": {"engine_id": "decode", "num_logical_blocks": blocks}},
               "decode_rank": d_tp_rank, "request": request}
        if hf:
            inp["hf_config"] = hf
        else:
            inp["model"] = model
        return inp

    def ep(name, model, p_eng, d_eng, d_tp_rank, prompt, hit, blocks=64, tables=None, hf=None):
        tables = tables or engine_tables(model, p_eng, d_eng, prompt, hit, blocks, blocks)
        request = {"num_prompt_tokens": prompt, "num_local_computed_tokens": hit, "groups": tables}
        groups, pgroups = engine_request_groups(model, p_eng, d_eng, request)
        nreg = max(len(g["layers"]) for g in groups)
        lay = lambda eid: {"engine_id": eid, "num_logical_blocks": blocks, "num_regions": nreg}
        lines = plan_json_lines(model, p_eng, d_eng, d_tp_rank, copy.deepcopy(pgroups), lay("prefill"), lay("decode"),
                                issue_order=True)
        cases.append({"name": "engine_plan/" + name, "op": "engine_plan",
                      "input": inp_of(model, p_eng, d_eng, d_tp_rank, request, blocks, hf),
                      "output": {"groups": groups, "num_regions": nreg, "lines": lines}})
        return lines

    def ee(name, model, p_eng, d_eng, d_tp_rank, request, status, contains, blocks=64):
        cases.append({"name": "engine_plan/" + name, "op": "engine_plan",
                      "input": inp_of(model, p_eng, d_eng, d_tp_rank, request, blocks),
                      "error": {"status": E + status, "message_contains": contains}})

    nano = "nemotron-3-nano-30b"
    align = lambda tp, **kw: dict({"tp_size": tp, "mamba_cache_mode": "align"}, **kw)
    # The request of the engine examples (examples/engine/*) and of the install check
    # (scripts/check-install.sh): Nemotron-3-Nano from its config.json, P TP4 -> D TP2 rank 0,
    # align mode; a 5001-token prompt (P computes 5000: the N-1 rule) of which D's prefix cache
    # holds the first 2096 tokens (one block). Groups: four Mamba groups, then the attention group.
    example = [{"local": [10, 0, 6], "remote": [6]}, {"local": [11, 0, 7], "remote": [7]},
               {"local": [12, 0, 13], "remote": [8]}, {"local": [14, 0, 15], "remote": [9]},
               {"local": [9, 4, 5], "remote": [1, 2, 3, 4, 5]}]
    check([g["kind"] for g in kv_cache_groups(MODEL_DESCS[nano]["pattern"])],
          ["mamba"] * 4 + ["attention"], "nano groups")
    ep("example_nano_config_json_p4_d2_align_prefix_hit", nano, align(4), align(2), 0, 5001, 2096, 16,
       example, hf_text("NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"))
    bs = geometry(nano, align(2))["block_size"]
    ep("nano_p4_d2_rank1_align_no_hit", nano, align(4), align(2), 1, 3 * bs + 17, 0)
    ep("nano_p4_d2_rank1_align_full_hit", nano, align(4), align(2), 1, 2 * bs + 1, 2 * bs)
    fi = lambda tp, mode, **kw: dict({"tp_size": tp, "mamba_cache_mode": mode, "backend": "flashinfer"}, **kw)
    bsf = geometry(nano, fi(2, "align", num_speculative_tokens=1))["block_size"]
    assert geometry(nano, fi(2, "align", num_speculative_tokens=1))["physical_per_logical"] > 1
    ep("nano_flashinfer_spec1_p2_d2_rank1_align_hit", nano, fi(2, "align", num_speculative_tokens=1),
       fi(2, "align", num_speculative_tokens=1), 1, 3 * bsf + 17, bsf)
    bsa = geometry(nano, {"tp_size": 2, "mamba_cache_mode": "all"})["block_size"]
    ep("nano_p4_d2_rank1_all_hit_two_blocks", nano, {"tp_size": 4, "mamba_cache_mode": "all"},
       {"tp_size": 2, "mamba_cache_mode": "all"}, 1, 4 * bsa + 5, 2 * bsa)
    ep("nano_p2_d4_rank3_none", nano, {"tp_size": 2}, {"tp_size": 4}, 3, 3000, 0)
    ep("jamba_p2_d2_align_hit", "jamba-v0.1", align(2), align(2), 0,
       2 * geometry("jamba-v0.1", align(2))["block_size"] + 9, geometry("jamba-v0.1", align(2))["block_size"])
    ep("falcon_h1_parallel_layers_p1_d1_align_hit", "falcon-h1-0.5b", align(1), align(1), 0,
       3 * geometry("falcon-h1-0.5b", align(1))["block_size"] + 1, geometry("falcon-h1-0.5b", align(1))["block_size"])
    ep("qwen3_next_gdn_p2_d1_align", "qwen3-next-80b", align(2), align(1), 0,
       2 * geometry("qwen3-next-80b", align(1))["block_size"] + 3, 0)

    # Requests that do not fit the engine.
    t = engine_tables(nano, {"tp_size": 2}, {"tp_size": 2}, 3 * bs, 0, 64, 64)
    ee("hit_with_prefix_caching_off", nano, {"tp_size": 2}, {"tp_size": 2}, 0,
       {"num_prompt_tokens": 3 * bs, "num_local_computed_tokens": bs, "groups": t},
       "INVALID_ARGUMENT", ["num_local_computed_tokens = %d" % bs, "prefix caching is off", "pass 0"])
    t = engine_tables(nano, fi(2, "align"), fi(2, "align"), 2 * bsf + 1, bsf, 64, 64)
    ppl = geometry(nano, fi(2, "align"))["physical_per_logical"]
    kernel = [b * ppl + k for b in t[4]["local"] for k in range(ppl)]
    t[4] = {"local": kernel, "remote": t[4]["remote"]}
    ee("kernel_ids_where_logical_ids_belong", nano, fi(2, "align"), fi(2, "align"), 0,
       {"num_prompt_tokens": 2 * bsf + 1, "num_local_computed_tokens": bsf, "groups": t}, "INVALID_ARGUMENT",
       ["groups[4].local_block_ids[0] (attention group) = %d" % kernel[0], "64 logical blocks",
        "kernel id %d is logical block %d" % (kernel[0], kernel[0] // ppl)])
    t = engine_tables(nano, align(4), align(2), 3000, 0, 64, 64)[:4]
    ee("group_count", nano, align(4), align(2), 0, {"num_prompt_tokens": 3000, "num_local_computed_tokens": 0,
                                                    "groups": t},
       "INVALID_ARGUMENT", ["4 groups", "5 KV-cache groups"])
    return cases


def pp_window(num_layers, pp_rank, pp_size):
    """vLLM's default pipeline split (get_pp_indices without VLLM_PP_LAYER_PARTITION), re-derived:
    num_layers // pp_size each; the remainder adds one layer to each of the stages just before the
    last one (the last stage keeps the LM head)."""
    base, extra = divmod(num_layers, pp_size)
    sizes = [base] * pp_size
    for i in range(2, extra + 2):
        sizes[-i] += 1
    begin = sum(sizes[:pp_rank])
    return begin, begin + sizes[pp_rank]


def hma_groups(pattern):
    """vLLM's hybrid KV cache groups over the whole model (uniform page size): layers of one kind
    in layer order, the kinds in order of first appearance; every kind's layers cut into groups
    of group_size = the smallest kind's layer count (the largest when all counts are within 25%
    of it). Returns [(kind, [layers])]."""
    kinds = {}
    for l, c in enumerate(pattern):
        if c == "*":
            kinds.setdefault("attention", []).append(l)
        elif c == "M":
            kinds.setdefault("mamba", []).append(l)
        else:
            assert c == "-", "pattern letter %r not handled by this oracle" % c
    counts = [len(v) for v in kinds.values()]
    size = max(counts) if max(counts) < min(counts) * 1.25 else min(counts)
    return [(k, v[i:i + size]) for k, v in kinds.items() for i in range(0, len(v), size)]


def stage_regions(groups, begin, end):
    """Regions a stage holding layers [begin, end) registers: one per position of the groups'
    layers inside the window, shared by the layers at that position."""
    return max(sum(1 for l in layers if begin <= l < end) for _, layers in groups)


def stage_pairs(d_windows, p_windows):
    """Overlapping (D stage, P stage) pairs: [(d, p, begin, end)], end 0 when both are open."""
    out = []
    for d, (db, de) in d_windows:
        for p, (pb, pe) in enumerate(p_windows):
            b, e = max(db, pb), min(de or 1 << 32, pe or 1 << 32)
            if b < e:
                out.append({"p_pp_rank": p, "d_pp_rank": d, "layer_begin": b, "layer_end": 0 if e == 1 << 32 else e})
    return out


def pipeline_cases():
    """Pipeline parallelism on either side (issue 12 item 1, file pipeline.json): vLLM's default
    layer split, stage metadata (format 1.2), the handshake between stages, stage pairing with the
    notifications a P stage waits for, and plans between stages with heterogeneous TP whose
    groups name their layers (Nemotron-3-Nano: 52 layers; at PP2 the boundary falls between the
    Mamba layer 25 and the attention layer 26)."""
    cases = []
    add = lambda name, op, inp, out=None, err=None: cases.append(
        dict(name=name, op=op, input=inp, **({"output": out} if err is None else {"error": err})))
    # vLLM's own cases (tests/distributed/test_pipeline_partition.py, uneven auto partition).
    for n, pp, r, want in [(2, 2, 0, (0, 1)), (2, 2, 1, (1, 2)), (3, 2, 0, (0, 2)), (3, 2, 1, (2, 3)),
                           (4, 3, 0, (0, 1)), (4, 3, 1, (1, 3)), (4, 3, 2, (3, 4)), (5, 3, 0, (0, 2)),
                           (5, 3, 1, (2, 4)), (5, 3, 2, (4, 5)), (52, 2, 1, (26, 52)), (52, 3, 1, (17, 35))]:
        check(pp_window(n, r, pp), want, "vLLM pipeline split")
        add("pipeline_layer_window/%d_layers_pp%d_rank%d" % (n, pp, r), "pipeline_layer_window",
            {"num_layers": n, "pp_size": pp, "pp_rank": r}, {"begin": want[0], "end": want[1]})
    add("pipeline_layer_window/more_stages_than_layers", "pipeline_layer_window",
        {"num_layers": 2, "pp_size": 3, "pp_rank": 0},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["pp_size 3", "2 layers"]})

    nano = "nemotron-3-nano-30b"
    pattern = DESCS[nano]["pattern"]
    n = len(pattern)
    check(n, 52, "Nano layers")
    groups = hma_groups(pattern)
    check([(k, len(v)) for k, v in groups], [("mamba", 6), ("mamba", 6), ("mamba", 6), ("mamba", 5), ("attention", 6)],
          "Nano HMA groups")
    check((pattern[25], pattern[26]), ("M", "*"), "Nano PP2 boundary between Mamba and attention")
    check(stage_regions(groups, 0, n), 6, "Nano PP1 regions")

    def stage_layout(engine_id, rank, pp, s, window, num_logical_blocks=8):
        b, e = window
        lay = {"engine_id": engine_id, "tp_rank": rank, "num_logical_blocks": num_logical_blocks,
               "num_regions": stage_regions(groups, b, e)}
        if pp > 1:
            lay.update({"pp_size": pp, "pp_rank": s, "layer_begin": b, "layer_end": e})
        return lay

    # Metadata of stage 1 of 2 (TP2 rank 1): labelled 1.2, regions' layers from 26.
    lay = stage_layout("prefill", 1, 2, 1, pp_window(n, 1, 2))
    md = metadata(nano, {"tp_size": 2}, lay)
    b = encode(md)
    check(b[6], 2, "stage metadata labelled 1.2")
    out = dict(md, encoded_length=len(b), payload_crc32c=crc32c_py(b[16:]), hex=b.hex())
    add("metadata_roundtrip/nano_pp2_stage1_tp2_rank1", "metadata_roundtrip",
        {"model": nano, "engine": {"tp_size": 2}, "layout": lay}, out)
    dec = dict(out)
    del dec["hex"]
    add("metadata_decode/nano_pp2_stage1_tp2_rank1", "metadata_decode", {"hex": b.hex()}, dec)
    # The same bytes labelled 1.1 (resealed): a reader that does not know the stage fields would
    # have refused the flag bit; this one refuses the bit under the older label.
    old = bytearray(b)
    old[6] = 1
    old[12:16] = crc32c_py(bytes(old[16:])).to_bytes(4, "little")
    add("metadata_decode/pipeline_bit_under_1_1_label", "metadata_decode", {"hex": bytes(old).hex()},
        err={"status": "PDKV_ERR_PARSE", "message_contains": ["pipeline bit", "needs 1.2"]})
    add("metadata_roundtrip/stage_rank_past_pp_size", "metadata_roundtrip",
        {"model": nano, "engine": {"tp_size": 2},
         "layout": {"pp_size": 2, "pp_rank": 2, "layer_begin": 26, "layer_end": 52, "num_regions": 6}},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["pp_rank", "= 2", "pp_size 2"]})
    add("metadata_roundtrip/single_stage_with_a_window", "metadata_roundtrip",
        {"model": nano, "engine": {"tp_size": 2}, "layout": {"layer_begin": 0, "layer_end": 26}},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["[0, 26)", "pp_size is 1"]})

    # Handshake: a single-stage D and a P stage (different windows and region counts) are
    # compatible; stages sharing no layer are not.
    def hs(name, local, remote, contains):
        items = validate(metadata(nano, local["engine"], local["layout"]),
                         metadata(nano, remote["engine"], remote["layout"]))
        cases.append({"name": "handshake_validate/" + name, "op": "handshake_validate",
                      "input": {"model": None, "local": dict(local, model=nano), "remote": dict(remote, model=nano),
                                "item_messages_contain": contains},
                      "output": {"items": items, "compatible": not items}})
        del cases[-1]["input"]["model"]
        return items

    check(hs("d_pp1_vs_p_stage1", {"engine": {"tp_size": 2}, "layout": stage_layout("d", 0, 1, 0, (0, n))},
             {"engine": {"tp_size": 4}, "layout": stage_layout("p", 0, 2, 1, pp_window(n, 1, 2))}, []), [],
          "D PP1 and a P stage are compatible")
    check(hs("stages_sharing_no_layer", {"engine": {"tp_size": 2}, "layout": stage_layout("d", 0, 2, 0, pp_window(n, 0, 2))},
             {"engine": {"tp_size": 4}, "layout": stage_layout("p", 0, 2, 1, pp_window(n, 1, 2))},
             [["pp_rank 0 of 2 [0, 26)", "pp_rank 1 of 2 [26, 52)", "do not overlap"]]),
          [{"status": "PDKV_ERR_INCOMPATIBLE", "field": "layer_begin"}], "disjoint stages")
    ranks = [{"model": nano, "engine": {"tp_size": 2}, "layout": stage_layout("p", r, 2, s, pp_window(n, s, 2))}
             for r, s in ((0, 0), (1, 1))]
    items = engine_ranks([metadata(nano, x["engine"], x["layout"]) for x in ranks])
    check(items, [{"status": "PDKV_ERR_INCOMPATIBLE", "field": "pp_rank"},
                  {"status": "PDKV_ERR_INCOMPATIBLE", "field": "layer_begin"}], "ranks of two stages")
    add("handshake_validate_engine_ranks/tp_ranks_of_two_stages", "handshake_validate_engine_ranks",
        {"ranks": ranks, "item_messages_contain": [["0 of 2", "1 of 2"], ["[0, 26)", "[26, 52)"]]}, {"items": items})

    # Stage pairing (D stages given: all of D's; P: every stage) and the notifications a P stage
    # waits for: its pairs times the TP rule.
    def pairs_case(name, p_tp_size, d_tp_size, p_windows, d_windows, d_given=None):
        pp, dp = len(p_windows), len(d_windows)
        d_given = list(range(dp)) if d_given is None else d_given
        pstages = [stage_layout("p", 0, pp, s, w) for s, w in enumerate(p_windows)]
        dstages = [stage_layout("d", 0, dp, s, d_windows[s]) for s in d_given]
        pairs = stage_pairs([(s, (d_windows[s][0], 0 if dp == 1 else d_windows[s][1])) for s in d_given],
                            [(w[0], 0 if pp == 1 else w[1]) for w in p_windows])
        per = notifications(p_tp_size, d_tp_size)
        notes = [per * sum(1 for x in pairs if x["p_pp_rank"] == s) for s in range(pp)]
        add("pipeline_stage_pairs/" + name, "pipeline_stage_pairs",
            {"model": nano, "prefill": {"engine": {"tp_size": p_tp_size}, "stages": pstages},
             "decode": {"engine": {"tp_size": d_tp_size}, "stages": dstages}}, {"pairs": pairs, "notifications": notes})
        return pairs, notes

    w2 = [pp_window(n, s, 2) for s in range(2)]
    w3 = [pp_window(n, s, 3) for s in range(3)]
    check(pairs_case("pp2_to_pp1_p_tp4_d_tp2", 4, 2, w2, [(0, n)])[1], [1, 1], "PP 2->1 notifications")
    check(pairs_case("pp1_to_pp2_p_tp2_d_tp4", 2, 4, [(0, n)], w2)[1], [4], "PP 1->2 notifications")
    pairs, notes = pairs_case("pp2_to_pp3_p_tp2_d_tp4", 2, 4, w2, w3)
    check([(x["d_pp_rank"], x["p_pp_rank"], x["layer_begin"], x["layer_end"]) for x in pairs],
          [(0, 0, 0, 17), (1, 0, 17, 26), (1, 1, 26, 35), (2, 1, 35, 52)], "PP 2->3 pairs")
    check(notes, [4, 4], "PP 2->3 notifications")
    pairs_case("pp2_to_pp3_only_d_stage1", 2, 4, w2, w3, d_given=[1])
    add("pipeline_stage_pairs/p_stage_missing", "pipeline_stage_pairs",
        {"model": nano, "prefill": {"engine": {"tp_size": 2}, "stages": [stage_layout("p", 0, 2, 1, w2[1])]},
         "decode": {"engine": {"tp_size": 2}, "stages": [stage_layout("d", 0, 1, 0, (0, n))]}},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["P stage 0 of 2", "missing"]})

    # Plans between stages: one attention block (1000 tokens: a partial block on both sides) and
    # one running Mamba state per Mamba group, every group naming its layers.
    def request():
        out = []
        for g, (kind, layers) in enumerate(groups):
            if kind == "attention":
                out.append({"kind": "attention", "local_blocks": [6], "remote_blocks": [7],
                            "remote_computed_tokens": 1000, "layers": layers})
            else:  # block ids distinct from the attention group's (one pool, as vLLM allocates)
                out.append({"kind": "mamba", "local_blocks": [1 + g], "remote_blocks": [2 + g],
                            "remote_computed_tokens": 1000, "layers": layers})
        return out

    def plan_case(name, p_tp_size, d_tp_size, d_tp_rank, p_lay, d_lay, json_too=False, expect=None):
        p_eng, d_eng = {"tp_size": p_tp_size}, {"tp_size": d_tp_size}
        gs = request()
        out = plan(nano, p_eng, d_eng, d_tp_rank, gs, p_lay, d_lay)
        for k, v in (expect or {}).items():
            check(out[k], v, name + "." + k)
        inp = {"model": nano, "prefill": {"engine": p_eng, "layout": p_lay}, "decode": {"engine": d_eng, "layout": d_lay},
               "decode_rank": d_tp_rank, "groups": gs}
        add("transfer_plan/" + name, "transfer_plan", inp, out)
        if json_too:  # the attention group alone: its reads are issued in (region, offset) order
            gj = [g for g in gs if g["kind"] == "attention"]
            add("transfer_plan_json/" + name + "_attention", "transfer_plan_json", dict(inp, groups=gj),
                {"lines": plan_json_lines(nano, p_eng, d_eng, d_tp_rank, gj, p_lay, d_lay)})
        return out

    # PP 2 -> 1, P TP4 -> D TP2, D rank 1: each P stage's plan reads its 26 layers.
    for s in range(2):
        out = plan_case("pp2_to_pp1_p_tp4_d_tp2_rank1_from_p_stage%d" % s, 4, 2, 1,
                        stage_layout("p", 0, 2, s, w2[s]), stage_layout("d", 0, 1, 0, (0, n)), json_too=s == 1,
                        expect={"p_pp_size": 2, "p_pp_rank": s, "layer_begin": w2[s][0], "layer_end": w2[s][1]})
        # Region pairs: P stage 1's attention layer 26 is its region 0 but D's region 3.
        if s == 1:
            check(out["groups"][4]["regions"], [3, 4, 5], "D regions of stage 1's attention layers")
    # PP 1 -> 2, P TP2 -> D TP4, D stage 1 (layers 26..51, starting with the attention layer 26).
    plan_case("pp1_to_pp2_p_tp2_d_tp4_stage1_rank3", 2, 4, 3, stage_layout("p", 0, 1, 0, (0, n)),
              stage_layout("d", 0, 2, 1, w2[1]), expect={"d_pp_size": 2, "d_pp_rank": 1, "layer_begin": 26, "layer_end": 52})
    # PP 2 -> 2 with different splits (D: a custom partition [0,33) [33,52)), P TP4 -> D TP2:
    # D stage 0 reads [0,26) from P stage 0 and [26,33) from P stage 1.
    for s, want in ((0, (0, 26)), (1, (26, 33))):
        plan_case("pp2_to_pp2_p_tp4_d_tp2_d_stage0_rank0_from_p_stage%d" % s, 4, 2, 0,
                  stage_layout("p", 0, 2, s, w2[s]), stage_layout("d", 0, 2, 0, (0, 33)),
                  expect={"layer_begin": want[0], "layer_end": want[1]})
    # Stages holding different windows need the groups' layers.
    bad = [dict(g) for g in request()]
    for g in bad:
        del g["layers"]
    add("transfer_plan/pipeline_group_without_layers", "transfer_plan",
        {"model": nano, "prefill": {"engine": {"tp_size": 4}, "layout": stage_layout("p", 0, 2, 1, w2[1])},
         "decode": {"engine": {"tp_size": 2}, "layout": stage_layout("d", 0, 1, 0, (0, n))}, "decode_rank": 0,
         "groups": bad},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["names no layers", "[0, open)", "[26, 52)"]})
    return cases


def permute_block(data, frm, to, heads, tokens, hb):
    """One KV block from layout `frm` to `to` (HND: heads x tokens x hb, NHD: tokens x heads x hb)."""
    at = lambda lay, h, t: ((h * tokens + t) if lay == "HND" else (t * heads + h)) * hb
    out = bytearray(len(data))
    for h in range(heads):
        for t in range(tokens):
            out[at(to, h, t):at(to, h, t) + hb] = data[at(frm, h, t):at(frm, h, t) + hb]
    return bytes(out)


def kv_layout_cases():
    """Different KV layouts on the two sides (issue 12 item 3, file kv_layouts.json): the block
    permutation, plans in which D writes its blocks in P's layout and permutes them after receipt
    (Jamba-v0.1: 8 KV heads, so D and P hold several heads per rank), and the refusals."""
    cases = []
    add = lambda name, op, inp, out=None, err=None: cases.append(
        dict(name=name, op=op, input=inp, **({"output": out} if err is None else {"error": err})))
    block = bytes(100 * h + 10 * t + j for h in range(2) for t in range(3) for j in range(2))
    nhd = permute_block(block, "HND", "NHD", 2, 3, 2)
    check(list(nhd), [0, 1, 100, 101, 10, 11, 110, 111, 20, 21, 120, 121], "hand-worked transpose")
    check(permute_block(nhd, "NHD", "HND", 2, 3, 2), block, "transpose back")
    shape = {"heads": 2, "tokens": 3, "head_bytes": 2}
    add("permute_kv_block/hnd_to_nhd_2x3x2", "permute_kv_block", dict(hex=block.hex(), **{"from": "HND", "to": "NHD"}, **shape),
        {"hex": nhd.hex()})
    add("permute_kv_block/nhd_to_hnd_2x3x2", "permute_kv_block", dict(hex=nhd.hex(), **{"from": "NHD", "to": "HND"}, **shape),
        {"hex": block.hex()})
    add("permute_kv_block/same_layout_untouched", "permute_kv_block", dict(hex=block.hex(), **{"from": "NHD", "to": "NHD"}, **shape),
        {"hex": block.hex()})
    add("permute_kv_block/size_not_the_shape", "permute_kv_block", dict(hex=block[:10].hex(), **{"from": "HND", "to": "NHD"}, **shape),
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["10 bytes", "= 12"]})

    jamba = "jamba-v0.1"

    def p(name, p_tp_size, d_tp_size, d_tp_rank, p_kv, d_kv, groups, flag=True, json_too=False, err=None):
        p_eng, d_eng = {"tp_size": p_tp_size}, {"tp_size": d_tp_size}
        pl = {"engine_id": "p", "num_logical_blocks": 8, "kv_layout": p_kv}
        dl = {"engine_id": "d", "num_logical_blocks": 8, "kv_layout": d_kv}
        inp = {"model": jamba, "prefill": {"engine": p_eng, "layout": pl}, "decode": {"engine": d_eng, "layout": dl},
               "decode_rank": d_tp_rank, "groups": groups, "permute_on_receive": flag}
        try:
            out = plan(jamba, p_eng, d_eng, d_tp_rank, groups, pl, dl, permute_on_receive=flag)
        except PlanError as e:
            check((e.status, err is not None), (e.status, True), "kv layouts " + name + " refused")
            add("transfer_plan/" + name, "transfer_plan", inp,
                err={"status": e.status, "message_contains": e.contains})
            return None
        check(err, None, "kv layouts " + name + " planned")
        add("transfer_plan/" + name, "transfer_plan", inp, out)
        if json_too:
            add("transfer_plan_json/" + name, "transfer_plan_json", inp,
                {"lines": plan_json_lines(jamba, p_eng, d_eng, d_tp_rank, groups, pl, dl, permute_on_receive=flag)})
        return out

    gd = geometry(jamba, {"tp_size": 2})
    bs = gd["kernel_block_size"]
    check(gd["kv_heads_per_rank"], 4, "Jamba TP2 holds 4 KV heads")
    attn = lambda local, remote, tokens, hit=0: {"kind": "attention", "local_blocks": local, "remote_blocks": remote,
                                                 "remote_computed_tokens": tokens, "local_hit_tokens": hit}
    mamba = {"kind": "mamba", "local_blocks": [6], "remote_blocks": [5], "remote_computed_tokens": bs + 7}
    # D NHD TP2 rank 1 (heads 4..7) <- P HND TP4 (P ranks 2 and 3 hold them): head slices of P's
    # blocks into D's blocks as HND, then D blocks 1 and 3 permuted HND -> NHD (4 heads).
    out = p("d_nhd_tp2_rank1_from_p_hnd_tp4_permuted", 4, 2, 1, "HND", "NHD",
            [attn([1, 3], [2, 4], bs + 7), mamba], json_too=False)
    check((out["permute"]["from"], out["permute"]["to"], out["permute"]["heads"]), ("HND", "NHD", 4), "D NHD permute")
    check(out["groups"][0]["permute_blocks"], [1, 3], "received D blocks")
    check(out["groups"][1]["permute_blocks"], [], "Mamba pages are not permuted")
    p("d_nhd_tp2_rank1_from_p_hnd_tp4_attention_only", 4, 2, 1, "HND", "NHD", [attn([1, 3], [2, 4], bs + 7)], json_too=True)
    # D HND <- P NHD at the same heads per rank (TP2 both): whole tokens into D as NHD, permuted.
    out = p("d_hnd_from_p_nhd_tp2_permuted", 2, 2, 0, "NHD", "HND", [attn([4, 6], [1, 3], bs + 3)])
    check((out["permute"]["from"], out["permute"]["to"]), ("NHD", "HND"), "D HND permute")
    # Refusals, each naming the fix.
    p("layouts_differ_without_permute_on_receive", 4, 2, 1, "HND", "NHD", [attn([1, 3], [2, 4], bs + 7)], flag=False,
      err=True)
    p("p_nhd_read_by_head_subsets", 4, 2, 1, "NHD", "HND", [attn([1, 3], [2, 4], bs + 7)], err=True)
    p("permuted_block_holds_a_prefix_hit", 2, 2, 0, "HND", "NHD", [attn([2, 3], [1, 2], bs + bs // 2 + 1, bs // 2)],
      err=True)
    return cases



# pdkv_attention_backend_t values (capi/include/pdkv/geometry.h), in the order of BACKENDS.
BACKEND_VALUES = {"flash_attn": 0, "triton": 1, "flashinfer": 2, "flashmla": 3, "cutlass_mla": 4,
                  "flashinfer_mla": 5}


def kernel_block_size(backend, block):
    """vLLM's select_common_block_size for one backend: the block itself when the backend's
    kernels take it (any multiple of 16, or one of its listed sizes), else the largest listed
    size dividing it; None when nothing fits."""
    kernels = BACKENDS[backend][1]
    if kernels is None:
        return block if block % 16 == 0 else None
    if block in kernels:
        return block
    fits = [k for k in kernels if block % k == 0]
    return max(fits) if fits else None


def plain_cases():
    """Cases of the plain functions' generic ops (op = the C function, inputs = its parameters,
    output = its output parameter); every binding runs them through its generated wrapper."""
    cases = []

    def add(name, op, inp, out=None, err=None):
        c = {"name": name, "op": op, "input": inp}
        if err is None:
            c["output"] = out
        else:
            c["error"] = err
        cases.append(c)

    # pdkv_backend_kernel_block_size: every backend over block sizes around its kernel sizes.
    for backend, value in BACKEND_VALUES.items():
        for block in (16, 32, 48, 64, 96, 128, 256, 528, 1056, 2096):
            k = kernel_block_size(backend, block)
            inp = {"backend": value, "block_size": block}
            if k is None:
                add(f"backend_kernel_block_size/{backend}_{block}_none", "pdkv_backend_kernel_block_size", inp,
                    err={"status": "PDKV_ERR_INCOMPATIBLE", "message_contains": [f"block size {block}"]})
            else:
                assert block % k == 0
                add(f"backend_kernel_block_size/{backend}_{block}", "pdkv_backend_kernel_block_size", inp,
                    {"out": k})
    add("backend_kernel_block_size/block_0", "pdkv_backend_kernel_block_size", {"backend": 0, "block_size": 0},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": ["block size 0"]})
    for bad in (100, 6, -1):
        add(f"backend_kernel_block_size/backend_{bad}", "pdkv_backend_kernel_block_size",
            {"backend": bad, "block_size": 16},
            err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": [f"backend {bad}"]})

    # The other plain functions through their generic op (their named ops keep the rest).
    add("plain/tp_ratio_d_larger", "pdkv_tp_ratio", {"local_tp_size": 2, "remote_tp_size": 8}, {"out": -4})
    add("plain/tp_ratio_zero", "pdkv_tp_ratio", {"local_tp_size": 0, "remote_tp_size": 8},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": []})
    add("plain/handshake_target_ranks", "pdkv_handshake_target_ranks",
        {"local_tp_size": 2, "local_tp_rank": 1, "remote_tp_size": 8}, {"out": [4, 5, 6, 7]})
    add("plain/notifications_expected_per_request", "pdkv_notifications_expected_per_request",
        {"p_tp_size": 2, "d_tp_size": 8}, {"out": 4})
    add("plain/block_size_ratio", "pdkv_block_size_ratio",
        {"local_kernel_block_size": 64, "remote_kernel_block_size": 16}, {"out": 4})
    add("plain/physical_blocks_per_logical", "pdkv_physical_blocks_per_logical",
        {"conv_bytes": 36864, "ssm_bytes": 2097152, "block_len": 8192}, {"out": -(-(36864 + 2097152) // 8192)})
    add("plain/sliding_window_blocks_to_keep", "pdkv_sliding_window_blocks_to_keep",
        {"window": 100, "block_size": 16}, {"out": -(-100 // 16) + 1})
    add("plain/d_num_new_matched_tokens_mamba", "pdkv_d_num_new_matched_tokens",
        {"num_prompt_tokens": 100, "num_computed_tokens": 32, "has_mamba": True}, {"out": 99 - 32})
    add("plain/d_num_new_matched_tokens_attention", "pdkv_d_num_new_matched_tokens",
        {"num_prompt_tokens": 100, "num_computed_tokens": 32, "has_mamba": False}, {"out": 100 - 32})
    for layers, size in ((32, 4), (61, 4), (7, 7)):
        for rank in range(size):
            b, e = pp_window(layers, rank, size)
            add(f"plain/pipeline_layer_window_{layers}_{size}_{rank}", "pdkv_pipeline_layer_window",
                {"num_layers": layers, "pp_size": size, "pp_rank": rank}, {"begin": b, "end": e})
    add("plain/pipeline_layer_window_more_stages_than_layers", "pdkv_pipeline_layer_window",
        {"num_layers": 3, "pp_size": 4, "pp_rank": 0},
        err={"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": []})
    return cases


# Ops of plain functions (docs/conformance.md): their cases run through the op named after the C
# function, whose output keys are its output parameters. Named op -> (C function, key renames).
PLAIN_OF_NAMED = {
    "tp_ratio": ("pdkv_tp_ratio", {"tp_ratio": "out"}),
    "handshake_target_ranks": ("pdkv_handshake_target_ranks", {"ranks": "out"}),
    "notifications_expected": ("pdkv_notifications_expected_per_request", {"count": "out"}),
    "physical_blocks_per_logical": ("pdkv_physical_blocks_per_logical", {"ppl": "out"}),
    "block_size_ratio": ("pdkv_block_size_ratio", {"ratio": "out"}),
    "sliding_window_blocks_to_keep": ("pdkv_sliding_window_blocks_to_keep", {"blocks": "out"}),
    "d_num_new_matched_tokens": ("pdkv_d_num_new_matched_tokens", {"tokens": "out"}),
    "pipeline_layer_window": ("pdkv_pipeline_layer_window", {}),
    "physical_head_range": ("pdkv_physical_head_range", {}),
}


def as_plain(case):
    """A case of a plain function, written with its generic op."""
    if case["op"] not in PLAIN_OF_NAMED:
        return case
    op, keys = PLAIN_OF_NAMED[case["op"]]
    c = dict(case, op=op)
    if "output" in c:
        c["output"] = {keys.get(k, k): v for k, v in c["output"].items()}
    return c


def write(name, cases):
    cases = [as_plain(c) for c in cases]
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
    write("trim", trim_cases())
    write("scheduler_split", scheduler_split_cases())
    write("metadata", metadata_cases())
    write("handshake", handshake_cases())
    write("plans", plan_cases())
    write("plans_modes_layouts_errors", plan_modes_layouts_errors_cases())
    write("descriptors", descriptor_cases())
    write("models", model_cases())
    write("handshake_messages", handshake_message_cases())
    write("plans_json", plan_json_cases())
    write("mixed_mla", mixed_mla_cases())
    write("kv_formats", kv_format_cases())
    write("pipeline", pipeline_cases())
    write("kv_layouts", kv_layout_cases())
    write("engine", engine_cases())
    write("plain", plain_cases())
