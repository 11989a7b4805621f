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
