"""Conformance runner: every case of every tests/vectors/*.json file through the Pythonic API
(docs/conformance.md). A case fails on an unknown op, an unknown or unused input key, a
missing or extra output key, both/neither of output/error, a wrong status name, a message
missing an expected substring, or any differing value. Nothing is skipped."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Set, Tuple

import pytest

from conftest import VECTORS_DIR

import pdkv


class VectorError(Exception):
    """A malformed vector: always a failure."""


class Input:
    """A case's input object that records which keys were read."""

    def __init__(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise VectorError("input must be an object")
        self.obj = obj
        self.used: Set[str] = set()

    def raw(self, key: str) -> Any:
        if key not in self.obj:
            raise VectorError(f"missing input key {key!r}")
        self.used.add(key)
        return self.obj[key]

    def int(self, key: str, default: Any = None) -> int:
        if default is not None and key not in self.obj:
            return default
        v = self.raw(key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise VectorError(f"input {key!r} must be an integer")
        return v

    def bool(self, key: str, default: Any = None) -> bool:
        if default is not None and key not in self.obj:
            return default
        v = self.raw(key)
        if not isinstance(v, bool):
            raise VectorError(f"input {key!r} must be a boolean")
        return v

    def str(self, key: str, default: Any = None) -> str:
        if default is not None and key not in self.obj:
            return default
        v = self.raw(key)
        if not isinstance(v, str):
            raise VectorError(f"input {key!r} must be a string")
        return v

    def ints(self, key: str) -> List[int]:
        v = self.raw(key)
        if not isinstance(v, list) or any(isinstance(e, bool) or not isinstance(e, int) for e in v):
            raise VectorError(f"input {key!r} must be an array of integers")
        return v

    def obj_list(self, key: str) -> List["Input"]:
        v = self.raw(key)
        if not isinstance(v, list):
            raise VectorError(f"input {key!r} must be an array")
        return [Input(e) for e in v]

    def sub(self, key: str) -> "Input":
        return Input(self.raw(key))

    def check_all_used(self) -> None:
        extra = sorted(set(self.obj) - self.used)
        if extra:
            raise VectorError(f"unknown input key(s) {extra}")


def engine(e: Input) -> pdkv.EngineConfig:
    """docs/conformance.md "Shared input shapes": an engine object."""
    cfg = pdkv.EngineConfig(
        tp_size=e.int("tp_size"),
        kv_cache_dtype_bytes=e.int("kv_cache_dtype_bytes", 0),
        conv_state_dtype_bytes=e.int("conv_state_dtype_bytes", 0),
        ssm_state_dtype_bytes=e.int("ssm_state_dtype_bytes", 0),
        num_speculative_tokens=e.int("num_speculative_tokens", 0),
        user_block_size=e.int("user_block_size", 0),
        user_mamba_block_size=e.int("user_mamba_block_size", 0),
        backend=pdkv.backend_from_name(e.str("backend", "flash_attn")),
        mamba_cache_mode=_choice("mamba_cache_mode", e.str("mamba_cache_mode", "none"), ("none", "align", "all")),
        conv_layout=_choice("conv_layout", e.str("conv_layout", "DS"), ("DS", "SD")),
    )
    e.check_all_used()
    return cfg


def _choice(what: str, value: str, allowed: Tuple[str, ...]) -> str:
    if value not in allowed:
        raise VectorError(f"unknown {what} {value!r}")
    return value


def _kind(name: str) -> pdkv.GroupKind:
    if name not in ("attention", "sliding_window", "mamba"):
        raise VectorError(f"unknown group kind {name!r}")
    return pdkv.GroupKind[name.upper()]


# ---- ops ----------------------------------------------------------------------------------


def op_tp_ratio(i: Input) -> Dict[str, Any]:
    return {"tp_ratio": pdkv.tp_ratio(i.int("local_tp"), i.int("remote_tp"))}


def op_handshake_target_ranks(i: Input) -> Dict[str, Any]:
    return {"ranks": list(pdkv.handshake_target_ranks(i.int("local_tp"), i.int("local_rank"), i.int("remote_tp")))}


def op_physical_head_range(i: Input) -> Dict[str, Any]:
    b, e = pdkv.physical_head_range(i.int("tp"), i.int("total_kv_heads"), i.int("rank"))
    return {"begin": b, "end": e}


def op_notifications_expected(i: Input) -> Dict[str, Any]:
    return {"count": pdkv.notifications_expected_per_request(i.int("p_tp"), i.int("d_tp"))}


def op_tp_mapping(i: Input) -> Dict[str, Any]:
    with pdkv.TpMapping(
        i.int("local_tp"),
        i.int("local_rank"),
        i.int("remote_tp"),
        i.int("total_kv_heads"),
        use_mla=i.bool("use_mla"),
        has_mamba=i.bool("has_mamba"),
    ) as m:
        info = m.info()
        all_sources, slots = m.all_sources, m.attention_slots
        if tuple(m.attention_slot(r) for r in all_sources) != slots:
            raise VectorError("TpMapping.attention_slot disagrees with attention_slots")
        if info.num_attention_reads != len(m.attention_sources):
            raise VectorError("num_attention_reads disagrees with attention_sources")
        return {
            "tp_ratio": info.tp_ratio,
            "handshake_targets": list(m.handshake_targets),
            "attention_source_ranks": list(m.attention_sources),
            "mamba_source_ranks": list(m.mamba_sources),
            "all_source_ranks": list(all_sources),
            "attention_slots": list(slots),
            "notify_ranks": list(m.notify_targets),
            "rank_offset_factor": info.rank_offset_factor,
            "local_replicated": info.local_replicated,
            "remote_replicated": info.remote_replicated,
            "local_physical_heads": info.local_physical_heads,
            "remote_physical_heads": info.remote_physical_heads,
        }


def op_physical_blocks_per_logical(i: Input) -> Dict[str, Any]:
    return {"ppl": pdkv.physical_blocks_per_logical(i.int("conv_bytes"), i.int("ssm_bytes"), i.int("block_len"))}


def op_block_size_ratio(i: Input) -> Dict[str, Any]:
    return {"ratio": pdkv.block_size_ratio(i.int("local_kernel_block_size"), i.int("remote_kernel_block_size"))}


def op_geometry(i: Input) -> Dict[str, Any]:
    name = i.str("model")
    cfg = engine(i.sub("engine"))
    with pdkv.Model.from_preset(name) as model, pdkv.Geometry(model, cfg) as g:
        info = g.info()
        return {
            "kv_heads_per_rank": info.kv_heads_per_rank,
            "attn_bytes_per_token": info.attn_bytes_per_token,
            "conv_bytes": info.conv_bytes,
            "ssm_bytes": info.ssm_bytes,
            "mamba_page_bytes": info.mamba_page_bytes,
            "block_size": info.block_size,
            "mamba_block_size": info.mamba_block_size,
            "attn_page_bytes": info.attn_page_bytes,
            "padding_ppm": info.padding_ppm,
            "kernel_block_size": info.kernel_block_size,
            "physical_per_logical": info.physical_per_logical,
            "kernel_page_bytes": info.kernel_page_bytes,
            "projections": [
                {"name": p.name, "dim_local": p.dim_local, "bytes": p.bytes, "offset": p.offset, "replicated": p.replicated}
                for p in g.projections()
            ],
            "log_lines": list(g.log_lines()),
        }


def op_mamba_reads(i: Input) -> Dict[str, Any]:
    name = i.str("model")
    p_cfg = engine(i.sub("prefill"))
    d_cfg = engine(i.sub("decode"))
    d_rank = i.int("decode_rank")
    rule = {"pdkv": pdkv.MambaReadsRule.PDKV, "vllm": pdkv.MambaReadsRule.VLLM}.get(i.str("rule"))
    if rule is None:
        raise VectorError(f"unknown rule {i.obj['rule']!r}")
    with pdkv.Model.from_preset(name) as model, pdkv.Geometry(model, p_cfg) as pg, pdkv.Geometry(model, d_cfg) as dg:
        with pdkv.MambaReadList(pg, dg, d_rank, rule) as reads:
            return {
                "reads": [dataclass_dict(r) for r in reads.items()],
                "source_ranks": list(reads.source_ranks()),
            }


def dataclass_dict(obj: Any) -> Dict[str, Any]:
    import dataclasses

    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


def op_clip_exchange_blocks(i: Input) -> Dict[str, Any]:
    ids = i.ints("ids")
    return {
        "ids": list(
            pdkv.clip_exchange_blocks(
                ids,
                _kind(i.str("kind")),
                hma_enabled=i.bool("hma_enabled", True),
                sliding_window=i.int("sliding_window", 0),
                block_size=i.int("block_size", 0),
                cache_mode=_choice("cache_mode", i.str("cache_mode", "none"), ("none", "align", "all")),
                num_speculative_blocks=i.int("num_speculative_blocks", 0),
            )
        )
    }


def op_sliding_window_blocks_to_keep(i: Input) -> Dict[str, Any]:
    return {"blocks": pdkv.sliding_window_blocks_to_keep(i.int("window"), i.int("block_size"))}


def op_descriptor_ids(i: Input) -> Dict[str, Any]:
    groups = []
    for g in i.obj_list("groups"):
        groups.append(pdkv.GroupBlockIds(_kind(g.str("kind")), tuple(g.ints("ids"))))
        g.check_all_used()
    layout = pdkv.DescriptorLayout(
        num_blocks=i.int("num_blocks"),
        block_size_ratio=i.int("block_size_ratio"),
        blocks_per_logical=i.int("blocks_per_logical"),
        num_attention_regions=i.int("num_attention_regions"),
        num_mamba_regions=i.int("num_mamba_regions"),
    )
    return {"ids": list(pdkv.descriptor_ids(groups, layout))}


def op_logical_to_kernel_block_ids(i: Input) -> Dict[str, Any]:
    return {
        "ids": list(pdkv.logical_to_kernel_block_ids(i.ints("ids"), _kind(i.str("kind")), i.int("blocks_per_logical")))
    }


def op_map_block_ids_for_block_size_ratio(i: Input) -> Dict[str, Any]:
    return {
        "ids": list(
            pdkv.map_block_ids_for_block_size_ratio(
                i.ints("ids"), _kind(i.str("kind")), i.int("block_size_ratio"), i.int("remote_len")
            )
        )
    }


def op_derive_offload_geometry(i: Input) -> Dict[str, Any]:
    layers = []
    for layer in i.obj_list("layers"):
        layers.append(pdkv.OffloadLayer(layer.int("tensor_bytes"), layer.int("page_bytes")))
        layer.check_all_used()
    g = pdkv.derive_offload_geometry(
        i.int("config_num_blocks"), i.int("gpu_block_size"), i.int("hash_block_size"), layers
    )
    return {"num_blocks": g.num_blocks, "hash_blocks_per_block": g.hash_blocks_per_block}


def op_d_num_new_matched_tokens(i: Input) -> Dict[str, Any]:
    return {
        "tokens": pdkv.d_num_new_matched_tokens(
            i.int("num_prompt_tokens"), i.int("num_computed_tokens"), i.bool("has_mamba")
        )
    }


def op_plan_remote_decode_prefill(i: Input) -> Dict[str, Any]:
    plan = pdkv.plan_remote_decode_prefill(
        i.int("num_prompt_tokens"), i.int("local_hit_tokens"), i.int("block_size"), i.bool("has_mamba")
    )
    return dataclass_dict(plan)


#: op -> (handler, full output key set).
OPS: Dict[str, Tuple[Callable[[Input], Dict[str, Any]], Set[str]]] = {
    "tp_ratio": (op_tp_ratio, {"tp_ratio"}),
    "handshake_target_ranks": (op_handshake_target_ranks, {"ranks"}),
    "physical_head_range": (op_physical_head_range, {"begin", "end"}),
    "notifications_expected": (op_notifications_expected, {"count"}),
    "tp_mapping": (
        op_tp_mapping,
        {
            "tp_ratio",
            "handshake_targets",
            "attention_source_ranks",
            "mamba_source_ranks",
            "all_source_ranks",
            "attention_slots",
            "notify_ranks",
            "rank_offset_factor",
            "local_replicated",
            "remote_replicated",
            "local_physical_heads",
            "remote_physical_heads",
        },
    ),
    "physical_blocks_per_logical": (op_physical_blocks_per_logical, {"ppl"}),
    "block_size_ratio": (op_block_size_ratio, {"ratio"}),
    "geometry": (
        op_geometry,
        {
            "kv_heads_per_rank",
            "attn_bytes_per_token",
            "conv_bytes",
            "ssm_bytes",
            "mamba_page_bytes",
            "block_size",
            "mamba_block_size",
            "attn_page_bytes",
            "padding_ppm",
            "kernel_block_size",
            "physical_per_logical",
            "kernel_page_bytes",
            "projections",
            "log_lines",
        },
    ),
    "mamba_reads": (op_mamba_reads, {"reads", "source_ranks"}),
    "clip_exchange_blocks": (op_clip_exchange_blocks, {"ids"}),
    "sliding_window_blocks_to_keep": (op_sliding_window_blocks_to_keep, {"blocks"}),
    "descriptor_ids": (op_descriptor_ids, {"ids"}),
    "logical_to_kernel_block_ids": (op_logical_to_kernel_block_ids, {"ids"}),
    "map_block_ids_for_block_size_ratio": (op_map_block_ids_for_block_size_ratio, {"ids"}),
    "derive_offload_geometry": (op_derive_offload_geometry, {"num_blocks", "hash_blocks_per_block"}),
    "d_num_new_matched_tokens": (op_d_num_new_matched_tokens, {"tokens"}),
    "plan_remote_decode_prefill": (
        op_plan_remote_decode_prefill,
        {"num_prompt_tokens", "computed_tokens", "new_tokens"},
    ),
}


# ---- comparison ---------------------------------------------------------------------------


def compare(expected: Any, actual: Any, path: str = "output") -> None:
    """Exact, type-strict equality (bool is not int); raises AssertionError naming the path."""
    if isinstance(expected, bool) or isinstance(actual, bool):
        assert type(expected) is type(actual) and expected == actual, f"{path}: expected {expected!r}, got {actual!r}"
    elif isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected an object, got {actual!r}"
        assert set(expected) == set(actual), f"{path}: keys {sorted(expected)} != {sorted(actual)}"
        for k in expected:
            compare(expected[k], actual[k], f"{path}.{k}")
    elif isinstance(expected, list):
        assert isinstance(actual, (list, tuple)), f"{path}: expected an array, got {actual!r}"
        assert len(expected) == len(actual), f"{path}: {len(expected)} elements expected, got {len(actual)}: {actual!r}"
        for n, (e, a) in enumerate(zip(expected, actual)):
            compare(e, a, f"{path}[{n}]")
    else:
        assert type(expected) is type(actual) and expected == actual, f"{path}: expected {expected!r}, got {actual!r}"


def run_case(case: Dict[str, Any]) -> None:
    """Runs one case; raises on any failure."""
    if not isinstance(case, dict):
        raise VectorError("case is not an object")
    unknown = set(case) - {"name", "op", "input", "output", "error"}
    if unknown:
        raise VectorError(f"unknown case keys {sorted(unknown)}")
    if ("output" in case) == ("error" in case):
        raise VectorError("a case needs exactly one of output / error")
    op = case.get("op")
    if op not in OPS:
        raise VectorError(f"unknown op {op!r}: the Python runner cannot execute it")
    handler, keys = OPS[op]
    inp = Input(case.get("input"))
    if "output" in case:
        expected = case["output"]
        if not isinstance(expected, dict) or set(expected) != keys:
            raise VectorError(f"output keys {sorted(expected) if isinstance(expected, dict) else expected!r} != {sorted(keys)}")
        actual = handler(inp)
        inp.check_all_used()
        assert set(actual) == keys, f"runner produced {sorted(actual)}"
        compare(expected, actual)
    else:
        err = case["error"]
        if not isinstance(err, dict) or set(err) != {"status", "message_contains"}:
            raise VectorError("error must be {status, message_contains}")
        with pytest.raises(pdkv.PdkvError) as info:
            handler(inp)
        inp.check_all_used()
        exc = info.value
        got = pdkv.status_name(exc.status)
        assert got == err["status"], f"status {got}, expected {err['status']}: {exc.message}"
        assert isinstance(exc, pdkv.errors.ERROR_CLASSES[exc.status]), f"{type(exc).__name__} for {got}"
        for s in err["message_contains"]:
            assert s in exc.message, f"message {exc.message!r} lacks {s!r}"


def _check_subset(v: Any, where: str) -> None:
    if v is None or isinstance(v, float):
        raise VectorError(f"{where}: nulls and floats are not allowed")
    if isinstance(v, list):
        for n, e in enumerate(v):
            _check_subset(e, f"{where}[{n}]")
    if isinstance(v, dict):
        for k, e in v.items():
            _check_subset(e, f"{where}.{k}")


def load_cases() -> List[Tuple[str, Any]]:
    """(id, case) for every case of every vector file, in file order."""
    out: List[Tuple[str, Any]] = []
    for path in sorted(VECTORS_DIR.glob("*.json")):
        doc = json.loads(path.read_text())
        if not isinstance(doc, dict) or doc.get("format") != 1 or not isinstance(doc.get("cases"), list):
            out.append((f"{path.name}::<file>", {"__bad_file__": str(path)}))
            continue
        for n, case in enumerate(doc["cases"]):
            name = case.get("name", f"#{n}") if isinstance(case, dict) else f"#{n}"
            out.append((f"{path.name}::{name}", case))
    return out


CASES = load_cases()


def test_vector_files_exist() -> None:
    assert list(VECTORS_DIR.glob("*.json")), f"no conformance vectors in {VECTORS_DIR}"
    assert CASES


def test_case_names_are_unique() -> None:
    ids = [i for i, _ in CASES]
    assert len(ids) == len(set(ids)), "duplicate case names"


@pytest.mark.parametrize("case", [c for _, c in CASES], ids=[i for i, _ in CASES])
def test_vector(case: Any) -> None:
    if isinstance(case, dict) and "__bad_file__" in case:
        raise VectorError(f"{case['__bad_file__']} is not a format-1 vector file")
    _check_subset(case, case.get("name", "case") if isinstance(case, dict) else "case")
    run_case(case)


# ---- the runner itself must be able to fail ----------------------------------------------


def test_runner_fails_on_unknown_op() -> None:
    with pytest.raises(VectorError, match="unknown op"):
        run_case({"name": "x", "op": "no_such_op", "input": {}, "output": {}})


def test_runner_fails_on_wrong_value() -> None:
    with pytest.raises(AssertionError):
        run_case({"name": "x", "op": "tp_ratio", "input": {"local_tp": 2, "remote_tp": 4}, "output": {"tp_ratio": 2}})


def test_runner_fails_on_unknown_input_key() -> None:
    with pytest.raises(VectorError, match="unknown input"):
        run_case(
            {"name": "x", "op": "tp_ratio", "input": {"local_tp": 2, "remote_tp": 4, "typo": 1}, "output": {"tp_ratio": -2}}
        )


def test_runner_fails_on_missing_output_key() -> None:
    with pytest.raises(VectorError, match="output keys"):
        run_case({"name": "x", "op": "physical_head_range", "input": {"tp": 2, "total_kv_heads": 4, "rank": 1}, "output": {"begin": 2}})


def test_runner_fails_on_wrong_status_or_message() -> None:
    case = {"name": "x", "op": "tp_ratio", "input": {"local_tp": 2, "remote_tp": 3}}
    with pytest.raises(AssertionError):
        run_case({**case, "error": {"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": []}})
    with pytest.raises(AssertionError):
        run_case({**case, "error": {"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["17"]}})
    run_case({**case, "error": {"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["2", "3"]}})


def test_runner_fails_when_an_error_case_succeeds() -> None:
    with pytest.raises(BaseException):
        run_case(
            {"name": "x", "op": "tp_ratio", "input": {"local_tp": 2, "remote_tp": 4}, "error": {"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": []}}
        )


def test_compare_is_type_strict() -> None:
    with pytest.raises(AssertionError):
        compare(True, 1)
    with pytest.raises(AssertionError):
        compare([1, 2], [1, 2, 3])
    with pytest.raises(AssertionError):
        compare({"a": 1}, {"a": 1, "b": 2})
