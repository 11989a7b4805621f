"""Conformance runner: every case of every tests/vectors/*.json file through the Pythonic API
(docs/conformance.md). A case fails on an unknown op, an unknown or unused input key, a
missing or extra output key, both/neither of output/error, a wrong status name, a message
missing an expected substring, or any differing value. Nothing is skipped."""

from __future__ import annotations

import array
import builtins
import contextlib
import dataclasses
import json
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

import pytest

from conftest import VECTORS_DIR

import pdkv
from pdkv._plain import PLAIN_OPS


class VectorError(Exception):
    """A malformed vector: always a failure."""


class Input:
    """A case's input object that records which keys were read."""

    def __init__(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            raise VectorError("input must be an object")
        self.obj = obj
        self.used: Set[builtins.str] = set()

    def raw(self, key: builtins.str) -> Any:
        if key not in self.obj:
            raise VectorError(f"missing input key {key!r}")
        self.used.add(key)
        return self.obj[key]

    def int(self, key: builtins.str, default: Optional[builtins.int] = None) -> builtins.int:
        if default is not None and key not in self.obj:
            return default
        v = self.raw(key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise VectorError(f"input {key!r} must be an integer")
        return v

    def bool(self, key: builtins.str, default: Optional[builtins.bool] = None) -> builtins.bool:
        if default is not None and key not in self.obj:
            return default
        v = self.raw(key)
        if not isinstance(v, bool):
            raise VectorError(f"input {key!r} must be a boolean")
        return v

    def str(self, key: builtins.str, default: Optional[builtins.str] = None) -> builtins.str:
        if default is not None and key not in self.obj:
            return default
        v = self.raw(key)
        if not isinstance(v, str):
            raise VectorError(f"input {key!r} must be a string")
        return v

    def ints(self, key: builtins.str) -> List[builtins.int]:
        v = self.raw(key)
        if not isinstance(v, list) or any(isinstance(e, bool) or not isinstance(e, int) for e in v):
            raise VectorError(f"input {key!r} must be an array of integers")
        return v

    def obj_list(self, key: builtins.str) -> List["Input"]:
        v = self.raw(key)
        if not isinstance(v, list):
            raise VectorError(f"input {key!r} must be an array")
        return [Input(e) for e in v]

    def sub(self, key: builtins.str) -> "Input":
        return Input(self.raw(key))

    def check_all_used(self) -> None:
        extra = sorted(set(self.obj) - self.used)
        if extra:
            raise VectorError(f"unknown input key(s) {extra}")


def _opt(i: Input, key: str) -> Optional[int]:
    """An optional field: the vector's value, or None (unset) when the vector does not name it."""
    return i.int(key) if key in i.obj else None


def engine(e: Input) -> pdkv.EngineConfig:
    """docs/conformance.md "Shared input shapes": an engine object."""
    cfg = pdkv.EngineConfig(
        tp_size=e.int("tp_size"),
        kv_cache_dtype_bytes=_opt(e, "kv_cache_dtype_bytes"),
        conv_state_dtype_bytes=_opt(e, "conv_state_dtype_bytes"),
        ssm_state_dtype_bytes=_opt(e, "ssm_state_dtype_bytes"),
        num_speculative_tokens=e.int("num_speculative_tokens", 0),
        user_block_size=_opt(e, "user_block_size"),
        user_mamba_block_size=_opt(e, "user_mamba_block_size"),
        kv_cache_element_bits=_opt(e, "kv_cache_element_bits"),
        kv_cache_head_extra_bytes=e.int("kv_cache_head_extra_bytes", 0),
        backend=pdkv.backend_from_name(e.str("backend", "flash_attn")),
        mamba_cache_mode=_choice("mamba_cache_mode", e.str("mamba_cache_mode", "none"), ("none", "align", "all")),
        conv_layout=_choice("conv_layout", e.str("conv_layout", "DS"), ("DS", "SD")),
        model_format=e.str("model_format", "auto"),
        kv_cache_format=e.str("kv_cache_format", "auto"),
        conv_state_format=e.str("conv_state_format", "auto"),
        ssm_state_format=e.str("ssm_state_format", "auto"),
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


def op_tp_mapping(i: Input) -> Dict[str, Any]:
    with pdkv.TpMapping(
        i.int("local_tp_size"),
        i.int("local_tp_rank"),
        i.int("remote_tp_size"),
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


def op_geometry(i: Input) -> Dict[str, Any]:
    name = i.str("model")
    cfg = engine(i.sub("engine"))
    with pdkv.Model.from_preset(name) as model, pdkv.Geometry(model, cfg) as g:
        info = g.info()
        return {
            "kv_heads_per_rank": info.kv_heads_per_rank,
            "kv_head_bytes_per_token": info.kv_head_bytes_per_token,
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
    d_tp_rank = i.int("decode_rank")
    rule = {"pdkv": pdkv.MambaReadsRule.PDKV, "vllm": pdkv.MambaReadsRule.VLLM}.get(i.str("rule"))
    if rule is None:
        raise VectorError(f"unknown rule {i.obj['rule']!r}")
    with pdkv.Model.from_preset(name) as model, pdkv.Geometry(model, p_cfg) as pg, pdkv.Geometry(model, d_cfg) as dg:
        with pdkv.MambaReadList(pg, dg, d_tp_rank, rule) as reads:
            return {
                "reads": [dataclass_dict(r) for r in reads.items()],
                "source_ranks": list(reads.source_ranks()),
            }


def dataclass_dict(obj: Any) -> Dict[str, Any]:
    """A dataclass result as a dict of its fields (the vector's object shape)."""
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


def op_plan_remote_decode_prefill(i: Input) -> Dict[str, Any]:
    plan = pdkv.plan_remote_decode_prefill(
        i.int("num_prompt_tokens"), i.int("local_hit_tokens"), i.int("block_size"), i.bool("has_mamba")
    )
    return dataclass_dict(plan)


# ---- planning ops: trimming, scheduler helpers, zero ranges, metadata, handshake, plans -----


_CACHE_MODES = ("none", "align", "all")


def _zero_ranges(ranges: Any) -> List[Dict[str, Any]]:
    return [{"block": z.block, "token_begin": z.token_begin, "token_end": z.token_end} for z in ranges]


def trim_input(i: Input) -> pdkv.GroupTrimInput:
    """The ``trim_group`` input keys (shared with ``transfer_plan`` groups) as a GroupTrimInput."""
    return pdkv.GroupTrimInput(
        kind=_kind(i.str("kind")),
        cache_mode=_choice("cache_mode", i.str("cache_mode", "none"), _CACHE_MODES),
        local_blocks=tuple(i.ints("local_blocks")),
        remote_blocks=tuple(i.ints("remote_blocks")),
        local_tokens_per_block=_opt(i, "local_tokens_per_block"),
        remote_tokens_per_block=_opt(i, "remote_tokens_per_block"),
        remote_computed_tokens=i.int("remote_computed_tokens", 0),
        local_hit_tokens=i.int("local_hit_tokens", 0),
        sliding_window=i.int("sliding_window", 0),
        local_first_block=i.int("local_first_block") if "local_first_block" in i.obj else None,
        remote_first_block=i.int("remote_first_block", 0),
        local_kernel_blocks_per_id=i.int("local_kernel_blocks_per_id", 1),
        remote_kernel_blocks_per_id=i.int("remote_kernel_blocks_per_id", 1),
    )


def op_trim_group(i: Input) -> Dict[str, Any]:
    with pdkv.GroupTrim(trim_input(i)) as t:
        kind, tokens = t.summary()
        if (t.kind, t.transferred_tokens) != (kind, tokens):
            raise VectorError("GroupTrim.kind / transferred_tokens disagree with summary()")
        return {
            "kind": pdkv.group_kind_name(kind),
            "transferred_tokens": tokens,
            "runs": [dataclass_dict(r) for r in t.runs()],
            "states": [dataclass_dict(s) for s in t.states()],
            "zero_ranges": _zero_ranges(t.zero_ranges()),
            "unfilled_states": list(t.unfilled_states()),
        }


def op_mamba_aligned_split_v0604(i: Input) -> Dict[str, Any]:
    split = pdkv.AlignedSplitV0604Input(
        num_computed_tokens=i.int("num_computed_tokens", 0),
        num_new_local_computed_tokens=i.int("num_new_local_computed_tokens", 0),
        num_external_computed_tokens=i.int("num_external_computed_tokens", 0),
        num_new_tokens=i.int("num_new_tokens", 0),
        num_prompt_tokens=i.int("num_prompt_tokens", 0),
        num_tokens=i.int("num_tokens", 0),
        block_size=i.int("block_size", 0),
        use_eagle=i.bool("use_eagle", False),
        load_kv_async=i.bool("load_kv_async", False),
    )
    return {"num_new_tokens": pdkv.mamba_aligned_split_v0604(split)}


def op_mamba_aligned_split(i: Input) -> Dict[str, Any]:
    split = pdkv.AlignedSplitInput(
        start=i.int("start", 0),
        num_new_tokens=i.int("num_new_tokens", 0),
        num_prompt_tokens=i.int("num_prompt_tokens", 0),
        num_tokens=i.int("num_tokens", 0),
        block_size=i.int("block_size", 0),
        floor_unit=_opt(i, "floor_unit"),
        tail_hash_block_size=_opt(i, "tail_hash_block_size"),
        shared_prefix_tokens=i.int("shared_prefix_tokens", 0),
        max_num_scheduled_tokens=_opt(i, "max_num_scheduled_tokens"),
        long_prefill_token_threshold=_opt(i, "long_prefill_token_threshold"),
        use_eagle=i.bool("use_eagle", False),
        load_kv_async=i.bool("load_kv_async", False),
        defer_oversized_block=i.bool("defer_oversized_block", False),
    )
    return {"num_new_tokens": pdkv.mamba_aligned_split(split)}


def op_truncate_for_remote_decode(i: Input) -> Dict[str, Any]:
    request = pdkv.RemoteDecodePrefill(
        num_prompt_tokens=i.int("num_prompt_tokens"),
        max_tokens=i.int("max_tokens"),
        truncated=i.bool("truncated", False),
    )
    has_mamba = i.bool("has_mamba")
    out = pdkv.truncate_for_remote_decode(request, has_mamba)
    # The C API documents the truncation as applied once: running it again changes nothing.
    if pdkv.truncate_for_remote_decode(out, has_mamba) != out:
        raise VectorError("truncate_for_remote_decode is not idempotent")
    return dataclass_dict(out)


def op_receive_zero_ranges(i: Input) -> Dict[str, Any]:
    ranges = pdkv.receive_zero_ranges(
        i.ints("local_blocks"), i.int("tokens_per_block"), i.int("block_size_ratio"), i.int("remote_kernel_len")
    )
    return {"zero_ranges": _zero_ranges(ranges)}


def op_uncovered_token_ranges(i: Input) -> Dict[str, Any]:
    blocks = i.ints("local_blocks")
    first, tpb, held = i.int("first_block_index"), i.int("tokens_per_block"), i.int("held_tokens")
    written = []
    for w in i.obj_list("written"):
        written.append(pdkv.TokenInterval(w.int("begin"), w.int("end")))
        w.check_all_used()
    return {"zero_ranges": _zero_ranges(pdkv.uncovered_token_ranges(blocks, first, tpb, held, written))}


def op_mamba_descriptor_ids(i: Input) -> Dict[str, Any]:
    ids = pdkv.mamba_descriptor_ids(
        i.ints("ids"), i.int("num_logical_blocks"), i.int("num_regions"), i.int("descs_per_region"), i.int("first_id")
    )
    return {"ids": list(ids)}


def bytes_of_hex(text: str) -> bytes:
    """Bytes of a lower-case hex string (the vector format; no separators, no upper case)."""
    if len(text) % 2 or any(ch not in "0123456789abcdef" for ch in text):
        raise VectorError(f"hex must be lower-case hex digits of even length, got {text[:40]!r}")
    return bytes.fromhex(text)


def op_crc32c(i: Input) -> Dict[str, Any]:
    return {"crc32c": pdkv.crc32c(bytes_of_hex(i.str("hex")))}


_REGION_KINDS = ("attention", "mamba", "mla")  # vector spelling, pdkv_region_kind_t order


def model_of(i: Input) -> pdkv.Model:
    """The ``model`` input: a preset name, or a pure-attention model described field by field
    (docs/conformance.md)."""
    v = i.raw("model")
    if isinstance(v, str):
        return pdkv.Model.from_preset(v)
    if not isinstance(v, dict):
        raise VectorError("model must be a preset name or an object")
    d = Input(v)
    desc = pdkv.ModelDesc(
        name=d.str("name"),
        num_kv_heads=d.int("num_kv_heads"),
        head_size=d.int("head_size"),
        head_size_v=d.int("head_size_v"),
        use_mla=d.bool("use_mla"),
        dtype_bytes=d.int("dtype_bytes"),
        layer_pattern=d.str("layer_pattern"),
        mla_head_size=d.int("mla_head_size"),
    )
    d.check_all_used()
    return pdkv.Model.new(desc)


def layout(i: Optional[Input]) -> pdkv.EngineLayout:
    """docs/conformance.md ``layout`` object (absent: pdkv_engine_layout_init defaults)."""
    if i is None:
        return pdkv.EngineLayout()
    d = pdkv.EngineLayout()
    bases = i.ints("region_bases") if "region_bases" in i.obj else None
    prefix = _opt(i, "prefix_caching")
    out = pdkv.EngineLayout(
        engine_id=i.str("engine_id", d.engine_id),
        tp_rank=i.int("tp_rank", d.tp_rank),
        num_logical_blocks=i.int("num_logical_blocks", d.num_logical_blocks),
        num_regions=i.int("num_regions", d.num_regions),
        base=i.int("base", d.base),
        region_bases=tuple(bases) if bases is not None else None,
        kv_layout=_choice("kv_layout", i.str("kv_layout", "HND"), ("HND", "NHD")),
        prefix_caching=None if prefix is None else {0: False, 1: True}.get(prefix, prefix),  # type: ignore[arg-type]
        region_kinds=(
            tuple(_choice("region_kinds", k, _REGION_KINDS) for k in i.raw("region_kinds"))
            if "region_kinds" in i.obj
            else None
        ),
        pp_size=i.int("pp_size", d.pp_size),
        pp_rank=i.int("pp_rank", d.pp_rank),
        layer_begin=i.int("layer_begin", d.layer_begin),
        layer_end=_opt(i, "layer_end"),
    )
    i.check_all_used()
    return out


def _optional_layout(i: Input) -> pdkv.EngineLayout:
    return layout(i.sub("layout") if "layout" in i.obj else None)


def _enum_name(value: Any, what: str) -> str:
    """Lower-case name of a known enum member; an unknown raw int is a contract violation."""
    if not hasattr(value, "name"):
        raise VectorError(f"unknown {what} {value!r}")
    name: str = value.name
    return name


def metadata_fields(md: pdkv.EngineMetadata, encoded: bytes) -> Dict[str, Any]:
    """The ``metadata_decode`` output keys of ``md`` whose wire encoding is ``encoded``."""
    info = md.info()
    regions = md.regions()
    if len(regions) != info.num_regions:
        raise VectorError("metadata num_regions disagrees with the region list")
    proj = md.conv_projection_bytes()
    if len(proj) != info.num_conv_projections:
        raise VectorError("num_conv_projections disagrees with the projection list")
    if len(encoded) < 16:
        raise VectorError("encoded metadata shorter than its 16-byte header")
    return {
        "engine_id": info.engine_id,
        "tp_size": info.tp_size,
        "tp_rank": info.tp_rank,
        "kv_layout": _enum_name(info.kv_layout, "kv_layout"),
        "conv_layout": _enum_name(info.conv_layout, "conv_layout"),
        "logical_block_size": info.logical_block_size,
        "kernel_block_size": info.kernel_block_size,
        "physical_blocks_per_logical": info.physical_blocks_per_logical,
        "num_kernel_blocks": info.num_kernel_blocks,
        "regions": [
            {
                "base": r.base,
                "block_len": r.block_len,
                "num_blocks": r.num_blocks,
                "kind": _REGION_KINDS[int(r.kind)],
                "layer": r.layer,
            }
            for r in regions
        ],
        "mamba_type": pdkv.mamba_type_name(info.mamba_type),
        "conv_bytes": info.conv_bytes,
        "ssm_bytes": info.ssm_bytes,
        "conv_projection_bytes": list(proj),
        "attention_bytes_per_token": info.attention_bytes_per_token,
        "use_mla": info.use_mla,
        "total_kv_heads": info.total_kv_heads,
        "prefix_caching": info.prefix_caching,
        "cache_mode": _enum_name(info.cache_mode, "cache_mode").lower(),
        "model_fingerprint": f"{info.model_fingerprint:016x}",
        "pp_size": info.pp_size,
        "pp_rank": info.pp_rank,
        "layer_begin": info.layer_begin,
        "layer_end": info.layer_end,
        "encoded_length": len(encoded),
        "payload_crc32c": pdkv.crc32c(encoded[16:]),
    }


def op_metadata_roundtrip(i: Input) -> Dict[str, Any]:
    cfg = engine(i.sub("engine"))
    lay = _optional_layout(i)
    with model_of(i) as model, pdkv.EngineMetadata.from_model(model, cfg, lay) as md:
        if md.info().model_fingerprint != pdkv.model_fingerprint(model):
            raise VectorError("metadata fingerprint differs from pdkv.model_fingerprint(model)")
        encoded = md.encode()
        # The caller-buffer form gives the same bytes.
        if md.encoded_size() != len(encoded):
            raise VectorError("encoded_size() disagrees with encode()")
        buf = bytearray(len(encoded))
        if md.encode_into(buf) != len(encoded) or bytes(buf) != encoded:
            raise VectorError("encode_into() bytes differ from encode()")
        with pdkv.EngineMetadata.decode(encoded) as decoded:
            if not (decoded == md and md.equals(decoded)):
                raise VectorError("decoded metadata differs from the encoded one")
            out = metadata_fields(decoded, encoded)
            if metadata_fields(md, encoded) != out:
                raise VectorError("metadata fields differ before and after the round trip")
    out["hex"] = encoded.hex()
    return out


def op_metadata_decode(i: Input) -> Dict[str, Any]:
    data = bytes_of_hex(i.str("hex"))
    with pdkv.EngineMetadata.decode(data) as md:
        return metadata_fields(md, data)


def _side_metadata(side: Input) -> pdkv.EngineMetadata:
    cfg = engine(side.sub("engine"))
    lay = _optional_layout(side)
    with model_of(side) as model:
        side.check_all_used()
        return pdkv.EngineMetadata.from_model(model, cfg, lay)


def _report_items(report: pdkv.HandshakeReport, i: Input) -> List[Dict[str, Any]]:
    """A report's items as ``{status, field}``; checks the optional ``item_messages_contain``
    input (one array of substrings per item, a different length fails the case)."""
    items = report.items()
    if len(items) != len(report):
        raise VectorError("HandshakeReport.items() length differs from len(report)")
    if "item_messages_contain" in i.obj:
        want = i.raw("item_messages_contain")
        if not isinstance(want, list):
            raise VectorError("item_messages_contain must be an array")
        if len(want) != len(items):
            raise VectorError(f"item_messages_contain has {len(want)} entries for {len(items)} items")
        for n, (subs, item) in enumerate(zip(want, items)):
            if not isinstance(subs, list) or any(not isinstance(x, str) for x in subs):
                raise VectorError("item_messages_contain entries must be arrays of strings")
            for sub in subs:
                assert sub in item.message, f"item {n} message {item.message!r} lacks {sub!r}"
    return [{"status": pdkv.status_name(it.status), "field": it.field} for it in items]


def op_handshake_validate(i: Input) -> Dict[str, Any]:
    with _side_metadata(i.sub("local")) as local, _side_metadata(i.sub("remote")) as remote:
        with pdkv.handshake_validate(local, remote) as report:
            items = _report_items(report, i)
            report_compatible = report.compatible
        try:
            pdkv.handshake_require_compatible(local, remote)
            compatible = True
        except pdkv.IncompatibleError:
            compatible = False
        if compatible != report_compatible or compatible != (not items):
            raise VectorError("handshake_require_compatible disagrees with the report")
        return {"items": items, "compatible": compatible}


def _compiled_plan(i: Input, stack: contextlib.ExitStack) -> pdkv.TransferPlan:
    """The plan of a ``transfer_plan`` / ``transfer_plan_json`` case: the model (a preset
    ``model`` or config.json text ``hf_config``, exactly one), P and D metadata (each P rank of
    ``prefill.ranks`` -- default ``0..P_TP-1`` -- in that order with its own ``tp_rank``, D with
    ``decode_rank``), both geometries, a plan context with the mapping derived from the metadata;
    compiled and re-validated. Handles live on ``stack``."""
    if ("model" in i.obj) == ("hf_config" in i.obj):
        raise VectorError("transfer_plan needs exactly one of model / hf_config")
    hf_config = i.str("hf_config") if "hf_config" in i.obj else None
    p_in, d_in = i.sub("prefill"), i.sub("decode")
    d_tp_rank = i.int("decode_rank")
    permute = i.bool("permute_on_receive", False)
    p_cfg, d_cfg = engine(p_in.sub("engine")), engine(d_in.sub("engine"))
    p_layout, d_layout = _optional_layout(p_in), _optional_layout(d_in)
    p_ranks = p_in.ints("ranks") if "ranks" in p_in.obj else list(range(p_cfg.tp_size))
    if any(not 0 <= p < 2**32 for p in p_ranks):
        raise VectorError(f"prefill.ranks {p_ranks} holds a value outside uint32")
    p_in.check_all_used()
    d_in.check_all_used()
    groups = []
    for g in i.obj_list("groups"):
        regions = tuple(g.ints("regions")) if "regions" in g.obj else ()
        layers = tuple(g.ints("layers")) if "layers" in g.obj else ()
        groups.append(pdkv.PlanGroup(trim_input(g), regions, layers))
        g.check_all_used()
    if hf_config is None:  # then the vector names a model (exactly one of the two, checked above)
        model = stack.enter_context(model_of(i))
    else:
        model = stack.enter_context(pdkv.Model.from_hf_config_json(hf_config))
    local = stack.enter_context(
        pdkv.EngineMetadata.from_model(model, d_cfg, dataclasses.replace(d_layout, tp_rank=d_tp_rank))
    )
    remote = [
        stack.enter_context(pdkv.EngineMetadata.from_model(model, p_cfg, dataclasses.replace(p_layout, tp_rank=p)))
        for p in p_ranks
    ]
    dg = stack.enter_context(pdkv.Geometry(model, d_cfg))
    pg = stack.enter_context(pdkv.Geometry(model, p_cfg))
    ctx = stack.enter_context(
        pdkv.PlanContext(local, remote, local_geometry=dg, remote_geometry=pg, permute_on_receive=permute)
    )
    plan = stack.enter_context(ctx.compile(groups))
    plan.validate(ctx, groups)
    return plan


def op_transfer_plan(i: Input) -> Dict[str, Any]:
    with contextlib.ExitStack() as stack:
        plan = _compiled_plan(i, stack)
        info = plan.info()
        read_ranks, notify_ranks = plan.read_ranks(), plan.notify_ranks()
        if (len(read_ranks), len(notify_ranks)) != (info.num_read_ranks, info.num_notify_ranks):
            raise VectorError("plan info counts disagree with the rank lists")
        reads, rank_bytes = [], []
        for p in range(info.p_tp_size):
            rank_reads = sorted(plan.rank_reads(p), key=lambda r: (r.local_region, r.local_offset))
            total = plan.rank_bytes(p)
            if sum(r.length for r in rank_reads) != total:
                raise VectorError(f"rank_bytes({p}) differs from the sum of its read lengths")
            reads.append([dataclass_dict(r) for r in rank_reads])
            rank_bytes.append(total)
        if sum(rank_bytes) != info.bytes:
            raise VectorError("plan bytes differ from the per-rank sums")
        zeros = plan.group_zeros()
        if len(zeros) != info.num_groups:
            raise VectorError("group_zeros() length differs from num_groups")
        out = {
            "d_tp_size": info.d_tp_size,
            "p_tp_size": info.p_tp_size,
            "read_ranks": list(read_ranks),
            "notify_ranks": list(notify_ranks),
            "notifications_per_p_rank": info.notifications_per_p_rank,
            "reads": reads,
            "rank_bytes": rank_bytes,
            "groups": [
                {
                    "kind": pdkv.group_kind_name(z.kind),
                    "regions": list(z.regions),
                    "zero_ranges": _zero_ranges(z.zero),
                    "unfilled_states": list(z.unfilled_states),
                    "permute_blocks": list(z.permute_blocks),
                    "permute_regions": list(z.permute_regions),
                }
                for z in zeros
            ],
            "pieces_before_coalescing": info.pieces_before_coalescing,
            "pieces_after_coalescing": info.pieces_after_coalescing,
            "bytes": info.bytes,
            "attention_bytes": info.attention_bytes,
            "mamba_bytes": info.mamba_bytes,
            "empty": info.empty,
            "d_pp_size": info.d_pp_size,
            "d_pp_rank": info.d_pp_rank,
            "p_pp_size": info.p_pp_size,
            "p_pp_rank": info.p_pp_rank,
            "layer_begin": info.layer_begin,
            "layer_end": info.layer_end,
            "permute": {
                "from": _enum_name(info.permute.from_layout, "kv_layout"),
                "to": _enum_name(info.permute.to_layout, "kv_layout"),
                "heads": info.permute.heads,
                "tokens": info.permute.tokens,
                "head_bytes": info.permute.head_bytes,
            },
        }
    return out  # after the with (here and below): to mypy an ExitStack may swallow an exception


def op_permute_kv_block(i: Input) -> Dict[str, Any]:
    block = bytearray(bytes_of_hex(i.str("hex")))
    layouts = ("HND", "NHD")
    frm, to = _choice("from", i.str("from"), layouts), _choice("to", i.str("to"), layouts)
    pdkv.permute_kv_block(block, frm, to, i.int("heads"), i.int("tokens"), i.int("head_bytes"))
    return {"hex": bytes(block).hex()}


def op_pipeline_stage_pairs(i: Input) -> Dict[str, Any]:
    """Pairs the D stages with the P stages; per P stage, the notifications its ranks wait for."""
    p_in, d_in = i.sub("prefill"), i.sub("decode")
    p_cfg, d_cfg = engine(p_in.sub("engine")), engine(d_in.sub("engine"))
    p_layouts = [layout(x) for x in p_in.obj_list("stages")]
    d_layouts = [layout(x) for x in d_in.obj_list("stages")]
    p_in.check_all_used()
    d_in.check_all_used()
    with contextlib.ExitStack() as stack:
        model = stack.enter_context(model_of(i))
        p = [stack.enter_context(pdkv.EngineMetadata.from_model(model, p_cfg, x)) for x in p_layouts]
        d = [stack.enter_context(pdkv.EngineMetadata.from_model(model, d_cfg, x)) for x in d_layouts]
        pairs = pdkv.pipeline_stage_pairs(p, d)
        notes = [
            pdkv.pipeline_notifications_expected(pairs, s, p_cfg.tp_size, d_cfg.tp_size)
            for s in range(p[0].info().pp_size)
        ]
        out = {"pairs": [dataclass_dict(x) for x in pairs], "notifications": notes}
    return out


# ---- descriptor and model ops: descriptor builders, conv-offset helpers, model description,
# engine-rank validation, plan JSON ------------------------------------------------------------


def _regions(i: Input, key: str) -> List[pdkv.Region]:
    """An array of ``{base, block_len, num_blocks}`` (pdkv_region_t) as Regions."""
    out = []
    for r in i.obj_list(key):
        out.append(pdkv.Region(r.int("base"), r.int("block_len"), r.int("num_blocks")))
        r.check_all_used()
    return out


def _descriptors(lst: pdkv.DescriptorList) -> Dict[str, Any]:
    """The ``descriptors`` output of a descriptor list (closes it)."""
    with lst:
        items = lst.items()
        if len(lst) != len(items) or tuple(lst) != items:
            raise VectorError("DescriptorList len()/iteration disagree with items()")
        return {"descriptors": [{"addr": d.addr, "len": d.len} for d in items]}


def _mapping(m: Input) -> pdkv.TpMapping:
    """A TpMapping from an object with the ``tp_mapping`` input keys."""
    args: Dict[str, Any] = dict(
        local_tp_size=m.int("local_tp_size"),
        local_tp_rank=m.int("local_tp_rank"),
        remote_tp_size=m.int("remote_tp_size"),
        total_kv_heads=m.int("total_kv_heads"),
        use_mla=m.bool("use_mla"),
        has_mamba=m.bool("has_mamba"),
    )
    m.check_all_used()
    return pdkv.TpMapping(**args)


def op_attention_local_descriptors(i: Input) -> Dict[str, Any]:
    regions, bsr = _regions(i, "regions"), i.int("block_size_ratio")
    return _descriptors(pdkv.attention_local_descriptors(regions, bsr))


def op_attention_remote_descriptors(i: Input) -> Dict[str, Any]:
    local, remote = _regions(i, "local_regions"), _regions(i, "remote_regions")
    mapping_in, bsr = i.sub("mapping"), i.int("block_size_ratio")
    with _mapping(mapping_in) as m:
        return _descriptors(pdkv.attention_remote_descriptors(local, remote, m, bsr))


def op_attention_split_descriptors(i: Input) -> Dict[str, Any]:
    regions, mapping_in = _regions(i, "regions"), i.sub("mapping")
    bsr, p_tp_rank = i.int("block_size_ratio"), i.int("p_tp_rank")
    with _mapping(mapping_in) as m, pdkv.attention_local_descriptors(regions, bsr) as local:
        return _descriptors(pdkv.attention_split_descriptors(local, m, bsr, p_tp_rank))


def _model_engine(i: Input) -> Tuple[str, pdkv.EngineConfig]:
    """The ``model`` and ``engine`` keys of a case."""
    return i.str("model"), engine(i.sub("engine"))


def op_mamba_local_descriptors(i: Input) -> Dict[str, Any]:
    name, cfg = _model_engine(i)
    regions, ppl = _regions(i, "regions"), i.int("ppl")
    with pdkv.Model.from_preset(name) as model, pdkv.Geometry(model, cfg) as g:
        return _descriptors(pdkv.mamba_local_descriptors(regions, ppl, g))


def _mamba_reads_case(
    i: Input, regions_key: str, ppl_key: str, build: Callable[..., pdkv.DescriptorList], on_prefill: bool
) -> Dict[str, Any]:
    """``mamba_remote_descriptors`` (P's regions, ``on_prefill``) / ``mamba_local_split_descriptors``
    (D's regions): the reads of (model, prefill, decode, decode_rank, rule) for ``p_tp_rank``."""
    name = i.str("model")
    p_cfg, d_cfg = engine(i.sub("prefill")), engine(i.sub("decode"))
    d_tp_rank = i.int("decode_rank")
    rule = {"pdkv": pdkv.MambaReadsRule.PDKV, "vllm": pdkv.MambaReadsRule.VLLM}.get(i.str("rule"))
    if rule is None:
        raise VectorError(f"unknown rule {i.obj['rule']!r}")
    regions, ppl, p_tp_rank = _regions(i, regions_key), i.int(ppl_key), i.int("p_tp_rank")
    with pdkv.Model.from_preset(name) as model, pdkv.Geometry(model, p_cfg) as pg, pdkv.Geometry(model, d_cfg) as dg:
        with pdkv.MambaReadList(pg, dg, d_tp_rank, rule) as reads:
            return _descriptors(build(regions, ppl, pg if on_prefill else dg, reads, p_tp_rank))


def op_mamba_remote_descriptors(i: Input) -> Dict[str, Any]:
    return _mamba_reads_case(i, "p_regions", "p_ppl", pdkv.mamba_remote_descriptors, True)


def op_mamba_local_split_descriptors(i: Input) -> Dict[str, Any]:
    return _mamba_reads_case(i, "d_regions", "d_ppl", pdkv.mamba_local_split_descriptors, False)


def _ranges_out(ranges: Any) -> List[Dict[str, Any]]:
    return [{"offset": r.offset, "size": r.size} for r in ranges]


def op_mamba_local_conv_offsets(i: Input) -> Dict[str, Any]:
    name, cfg = _model_engine(i)
    with pdkv.Model.from_preset(name) as model, pdkv.Geometry(model, cfg) as g:
        return {"ranges": _ranges_out(g.mamba_local_conv_offsets())}


def op_mamba_remote_conv_offsets(i: Input) -> Dict[str, Any]:
    name, cfg = _model_engine(i)
    rank, ratio = i.int("local_tp_rank"), i.int("tp_ratio")
    with pdkv.Model.from_preset(name) as model, pdkv.Geometry(model, cfg) as g:
        return {"ranges": _ranges_out(g.mamba_remote_conv_offsets(rank, ratio))}


def op_mamba_ssm_read_range(i: Input) -> Dict[str, Any]:
    name, cfg = _model_engine(i)
    rc, rs = i.int("remote_conv_bytes"), i.int("remote_ssm_bytes")
    rank, ratio = i.int("local_tp_rank"), i.int("tp_ratio")
    with pdkv.Model.from_preset(name) as model, pdkv.Geometry(model, cfg) as g:
        r = g.mamba_ssm_read_range(rc, rs, rank, ratio)
        return {"offset": r.offset, "size": r.size}


def model_fields(model: pdkv.Model) -> Dict[str, Any]:
    """The model keys of docs/conformance.md: ``describe()`` + ``layer_counts()`` + fingerprint."""
    d = model.describe()
    if model.name != d.name:
        raise VectorError("Model.name disagrees with describe().name")
    attention, mamba = model.layer_counts()
    return {
        "name": d.name,
        "num_kv_heads": d.num_kv_heads,
        "head_size": d.head_size,
        "head_size_v": d.head_size_v,
        "use_mla": d.use_mla,
        "sliding_window": d.sliding_window,
        "mamba_type": pdkv.mamba_type_name(d.mamba_type),
        "mamba_num_heads": d.mamba_num_heads,
        "mamba_head_dim": d.mamba_head_dim,
        "mamba_d_state": d.mamba_d_state,
        "mamba_n_groups": d.mamba_n_groups,
        "mamba_d_inner": d.mamba_d_inner,
        "mamba_conv_kernel": d.mamba_conv_kernel,
        "mamba_chunk_size": d.mamba_chunk_size or 0,  # the vectors write an unset field as 0
        "mamba_conv_rows_include_spec": d.mamba_conv_rows_include_spec,
        "dtype_bytes": d.dtype_bytes,
        "default_ssm_dtype_bytes": d.default_ssm_dtype_bytes or 0,
        "layer_pattern": d.layer_pattern,
        "num_attention_layers": attention,
        "num_mamba_layers": mamba,
        "model_fingerprint": f"{pdkv.model_fingerprint(model):016x}",
    }


_MODEL_KEYS = {
    "name",
    "num_kv_heads",
    "head_size",
    "head_size_v",
    "use_mla",
    "sliding_window",
    "mamba_type",
    "mamba_num_heads",
    "mamba_head_dim",
    "mamba_d_state",
    "mamba_n_groups",
    "mamba_d_inner",
    "mamba_conv_kernel",
    "mamba_chunk_size",
    "mamba_conv_rows_include_spec",
    "dtype_bytes",
    "default_ssm_dtype_bytes",
    "layer_pattern",
    "num_attention_layers",
    "num_mamba_layers",
    "model_fingerprint",
}


def op_model_preset(i: Input) -> Dict[str, Any]:
    with pdkv.Model.from_preset(i.str("model")) as model:
        return model_fields(model)


def op_model_hf_config(i: Input) -> Dict[str, Any]:
    text = i.str("json")
    name = i.str("name") if "name" in i.obj else None
    with pdkv.Model.from_hf_config_json(text, name) as model:
        out = model_fields(model)
    # The bytes form of the same text gives the same model.
    with pdkv.Model.from_hf_config_json(text.encode("utf-8"), name) as again:
        if model_fields(again) != out:
            raise VectorError("from_hf_config_json(bytes) differs from the str form")
    return out


def op_handshake_validate_engine_ranks(i: Input) -> Dict[str, Any]:
    sides = i.obj_list("ranks")
    with contextlib.ExitStack() as stack:
        ranks = [stack.enter_context(_side_metadata(s)) for s in sides]
        with pdkv.handshake_validate_engine_ranks(ranks) as report:
            items = _report_items(report, i)
            if report.compatible != (not items):
                raise VectorError("HandshakeReport.compatible disagrees with its items")
            out = {"items": items}
    return out


def op_transfer_plan_json(i: Input) -> Dict[str, Any]:
    with contextlib.ExitStack() as stack:
        plan = _compiled_plan(i, stack)
        text = plan.to_json()
        # The caller-buffer form gives the same text, and to_dict() parses it.
        if plan.to_json_buffered() != text:
            raise VectorError("TransferPlan.to_json_buffered() differs from to_json()")
        if plan.to_dict() != json.loads(text):
            raise VectorError("TransferPlan.to_dict() differs from the parsed to_json()")
        out = {"lines": text.split("\n")}
    return out


def op_engine_plan(i: Input) -> Dict[str, Any]:
    """The engine-level API: D and every P rank described as pdkv.Engine; the P ranks' metadata
    from Engine.metadata(), the context from Engine.plan_context, the plan from
    Engine.plan_request with the request's block tables (as array('Q') buffers, the zero-copy
    path)."""
    if ("model" in i.obj) == ("hf_config" in i.obj):
        raise VectorError("engine_plan needs exactly one of model / hf_config")
    sides = {}
    for key in ("prefill", "decode"):
        s = i.sub(key)
        lay = s.sub("layout")
        sides[key] = (engine(s.sub("engine")), lay.str("engine_id"), lay.int("num_logical_blocks"))
        lay.check_all_used()
        s.check_all_used()
    d_tp_rank = i.int("decode_rank")
    rq = i.sub("request")
    groups = []
    for g in rq.obj_list("groups"):
        groups.append(pdkv.RequestGroup(array.array("Q", g.ints("local")), array.array("Q", g.ints("remote"))))
        g.check_all_used()
    prompt, hit = rq.int("num_prompt_tokens"), rq.int("num_local_computed_tokens")
    rq.check_all_used()
    with contextlib.ExitStack() as stack:
        if "model" in i.obj:
            model = stack.enter_context(model_of(i))
        else:
            model = stack.enter_context(pdkv.Model.from_hf_config_json(i.str("hf_config")))
        p_cfg, p_id, p_blocks = sides["prefill"]
        d_cfg, d_id, d_blocks = sides["decode"]
        d = stack.enter_context(pdkv.Engine(model, d_cfg, d_id, d_tp_rank, d_blocks))
        remote = []
        for r in range(p_cfg.tp_size):
            with pdkv.Engine(model, p_cfg, p_id, r, p_blocks) as p:
                remote.append(stack.enter_context(p.metadata()))
        ctx = stack.enter_context(d.plan_context(remote, p_cfg))
        planner = d.prepare(ctx)
        try:
            plan = stack.enter_context(d.plan_request(ctx, groups, prompt, hit))
        except pdkv.PdkvError as e:
            # The checked path and the prepared planner refuse the request with the same error.
            with pytest.raises(type(e)) as refused:
                d._plan_request_checked(ctx, groups, prompt, hit)
            assert str(refused.value) == str(e)
            with pytest.raises(type(e)) as refused:
                planner.plan(groups, prompt, hit)
            assert str(refused.value) == str(e)
            raise
        # The checked path (the request packed call by call) and the prepared planner
        # (Engine.prepare), into a new plan and a reused one: the same bytes.
        with d._plan_request_checked(ctx, groups, prompt, hit) as checked:
            assert checked.to_json() == plan.to_json()
        with planner.plan(groups, prompt, hit) as prepared:
            assert prepared.to_json() == plan.to_json()
        reused_by_planner = stack.enter_context(pdkv.TransferPlan.empty())
        assert planner.plan(groups, prompt, hit, reuse=reused_by_planner) is reused_by_planner
        assert reused_by_planner.to_json() == plan.to_json()
        # Planned into a reused plan (pdkv_engine_plan_request_into), the same bytes.
        reused = stack.enter_context(pdkv.TransferPlan.empty())
        assert d.plan_request(ctx, groups, prompt, hit, reuse=reused) is reused
        assert reused.to_json() == plan.to_json()
        info = d.info()
        out = {
            "groups": [{"kind": pdkv.group_kind_name(g.kind), "layers": list(g.layers)} for g in d.groups()],
            "num_regions": info.num_regions,
            "lines": plan.to_json().split("\n"),
        }
    return out


_METADATA_KEYS = {
    "engine_id",
    "tp_size",
    "tp_rank",
    "kv_layout",
    "conv_layout",
    "logical_block_size",
    "kernel_block_size",
    "physical_blocks_per_logical",
    "num_kernel_blocks",
    "regions",
    "mamba_type",
    "conv_bytes",
    "ssm_bytes",
    "conv_projection_bytes",
    "attention_bytes_per_token",
    "use_mla",
    "total_kv_heads",
    "prefix_caching",
    "cache_mode",
    "model_fingerprint",
    "pp_size",
    "pp_rank",
    "layer_begin",
    "layer_end",
    "encoded_length",
    "payload_crc32c",
}


#: op -> (handler, full output key set).
OPS: Dict[str, Tuple[Callable[[Input], Dict[str, Any]], Set[str]]] = {
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
    "geometry": (
        op_geometry,
        {
            "kv_heads_per_rank",
            "attn_bytes_per_token",
            "conv_bytes",
            "ssm_bytes",
            "mamba_page_bytes",
            "kv_head_bytes_per_token",
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
    "descriptor_ids": (op_descriptor_ids, {"ids"}),
    "logical_to_kernel_block_ids": (op_logical_to_kernel_block_ids, {"ids"}),
    "map_block_ids_for_block_size_ratio": (op_map_block_ids_for_block_size_ratio, {"ids"}),
    "derive_offload_geometry": (op_derive_offload_geometry, {"num_blocks", "hash_blocks_per_block"}),
    "plan_remote_decode_prefill": (
        op_plan_remote_decode_prefill,
        {"num_prompt_tokens", "computed_tokens", "new_tokens"},
    ),
    "trim_group": (
        op_trim_group,
        {"kind", "transferred_tokens", "runs", "states", "zero_ranges", "unfilled_states"},
    ),
    "mamba_aligned_split_v0604": (op_mamba_aligned_split_v0604, {"num_new_tokens"}),
    "mamba_aligned_split": (op_mamba_aligned_split, {"num_new_tokens"}),
    "truncate_for_remote_decode": (op_truncate_for_remote_decode, {"num_prompt_tokens", "max_tokens", "truncated"}),
    "receive_zero_ranges": (op_receive_zero_ranges, {"zero_ranges"}),
    "uncovered_token_ranges": (op_uncovered_token_ranges, {"zero_ranges"}),
    "mamba_descriptor_ids": (op_mamba_descriptor_ids, {"ids"}),
    "crc32c": (op_crc32c, {"crc32c"}),
    "metadata_roundtrip": (op_metadata_roundtrip, _METADATA_KEYS | {"hex"}),
    "metadata_decode": (op_metadata_decode, set(_METADATA_KEYS)),
    "handshake_validate": (op_handshake_validate, {"items", "compatible"}),
    "transfer_plan": (
        op_transfer_plan,
        {
            "d_tp_size",
            "p_tp_size",
            "read_ranks",
            "notify_ranks",
            "notifications_per_p_rank",
            "reads",
            "rank_bytes",
            "groups",
            "pieces_before_coalescing",
            "pieces_after_coalescing",
            "bytes",
            "attention_bytes",
            "mamba_bytes",
            "empty",
            "d_pp_size",
            "d_pp_rank",
            "p_pp_size",
            "p_pp_rank",
            "layer_begin",
            "layer_end",
            "permute",
        },
    ),
    "attention_local_descriptors": (op_attention_local_descriptors, {"descriptors"}),
    "attention_remote_descriptors": (op_attention_remote_descriptors, {"descriptors"}),
    "attention_split_descriptors": (op_attention_split_descriptors, {"descriptors"}),
    "mamba_local_descriptors": (op_mamba_local_descriptors, {"descriptors"}),
    "mamba_remote_descriptors": (op_mamba_remote_descriptors, {"descriptors"}),
    "mamba_local_split_descriptors": (op_mamba_local_split_descriptors, {"descriptors"}),
    "mamba_local_conv_offsets": (op_mamba_local_conv_offsets, {"ranges"}),
    "mamba_remote_conv_offsets": (op_mamba_remote_conv_offsets, {"ranges"}),
    "mamba_ssm_read_range": (op_mamba_ssm_read_range, {"offset", "size"}),
    "model_preset": (op_model_preset, set(_MODEL_KEYS)),
    "model_hf_config": (op_model_hf_config, set(_MODEL_KEYS)),
    "handshake_validate_engine_ranks": (op_handshake_validate_engine_ranks, {"items"}),
    "transfer_plan_json": (op_transfer_plan_json, {"lines"}),
    "engine_plan": (op_engine_plan, {"groups", "num_regions", "lines"}),
    "pipeline_stage_pairs": (op_pipeline_stage_pairs, {"pairs", "notifications"}),
    "permute_kv_block": (op_permute_kv_block, {"hex"}),
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


def _plain_handler(
    fn: Callable[..., Any], params: Tuple[Tuple[str, str], ...], keys: Tuple[str, ...]
) -> Callable[[Input], Dict[str, Any]]:
    """The op of one plain function: its C parameters as input keys, its outputs as ``keys``
    (one key: the returned value; several: the elements of the returned tuple)."""

    def run(i: Input) -> Dict[str, Any]:
        args = {name: (i.bool(name) if kind == "bool" else i.int(name)) for name, kind in params}
        result = fn(**args)
        return {keys[0]: result} if len(keys) == 1 else dict(zip(keys, result))

    return run


# The plain functions' ops (named after the C function; table generated from the header).
for _name, (_fn, _params, _keys) in PLAIN_OPS.items():
    OPS[_name] = (_plain_handler(_fn, _params, _keys), set(_keys))


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
        run_case({"name": "x", "op": "pdkv_tp_ratio", "input": {"local_tp_size": 2, "remote_tp_size": 4}, "output": {"out": 2}})


def test_runner_fails_on_unknown_input_key() -> None:
    with pytest.raises(VectorError, match="unknown input"):
        run_case(
            {"name": "x", "op": "pdkv_tp_ratio", "input": {"local_tp_size": 2, "remote_tp_size": 4, "typo": 1}, "output": {"out": -2}}
        )


def _first_case(op: str, pred: Callable[[Dict[str, Any]], bool]) -> Dict[str, Any]:
    """The first vector case of ``op`` satisfying ``pred`` (the self-tests below need one)."""
    case = next((c for _, c in CASES if isinstance(c, dict) and c.get("op") == op and pred(c)), None)
    assert case is not None, f"no {op} vector for this self-test"
    return case


@pytest.mark.parametrize("op", ["handshake_validate", "handshake_validate_engine_ranks"])
def test_runner_checks_item_messages_contain(op: str) -> None:
    """A substring missing from an item's message, or an entry count differing from the item
    count, fails the case; the unmodified case passes."""
    case = _first_case(op, lambda c: bool(c["input"].get("item_messages_contain")))
    run_case(case)
    want = case["input"]["item_messages_contain"]
    bad_sub = [list(w) for w in want]
    bad_sub[0] = bad_sub[0] + ["<not in any message>"]
    with pytest.raises(AssertionError, match="lacks"):
        run_case({**case, "input": {**case["input"], "item_messages_contain": bad_sub}})
    with pytest.raises(VectorError, match="entries for"):
        run_case({**case, "input": {**case["input"], "item_messages_contain": want + [[]]}})


def test_runner_fails_on_extra_output_key() -> None:
    case = _first_case("model_preset", lambda c: "output" in c)
    with pytest.raises(VectorError, match="output keys"):
        run_case({**case, "output": {**case["output"], "source": "x"}})


def test_runner_fails_on_unknown_nested_input_key() -> None:
    """A typo inside a region object or a mapping object is not silently ignored."""
    case = _first_case("attention_remote_descriptors", lambda c: "output" in c)
    regions = [dict(r) for r in case["input"]["local_regions"]]
    regions[0]["typo"] = 1
    with pytest.raises(VectorError, match="unknown input"):
        run_case({**case, "input": {**case["input"], "local_regions": regions}})
    with pytest.raises(VectorError, match="unknown input"):
        run_case({**case, "input": {**case["input"], "mapping": {**case["input"]["mapping"], "typo": 1}}})


def test_runner_fails_on_missing_output_key() -> None:
    with pytest.raises(VectorError, match="output keys"):
        run_case({"name": "x", "op": "pdkv_physical_head_range", "input": {"tp_size": 2, "tp_rank": 1, "total_kv_heads": 4}, "output": {"begin": 2}})


def test_runner_fails_on_wrong_status_or_message() -> None:
    case = {"name": "x", "op": "pdkv_tp_ratio", "input": {"local_tp_size": 2, "remote_tp_size": 3}}
    with pytest.raises(AssertionError):
        run_case({**case, "error": {"status": "PDKV_ERR_INVALID_ARGUMENT", "message_contains": []}})
    with pytest.raises(AssertionError):
        run_case({**case, "error": {"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["17"]}})
    run_case({**case, "error": {"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": ["2", "3"]}})


def test_runner_fails_when_an_error_case_succeeds() -> None:
    with pytest.raises(BaseException):
        run_case(
            {"name": "x", "op": "pdkv_tp_ratio", "input": {"local_tp_size": 2, "remote_tp_size": 4}, "error": {"status": "PDKV_ERR_TP_NOT_DIVISIBLE", "message_contains": []}}
        )


def test_compare_is_type_strict() -> None:
    with pytest.raises(AssertionError):
        compare(True, 1)
    with pytest.raises(AssertionError):
        compare([1, 2], [1, 2, 3])
    with pytest.raises(AssertionError):
        compare({"a": 1}, {"a": 1, "b": 2})


def test_every_op_has_a_vector() -> None:
    """Every op the runner implements is exercised by at least one vector case."""
    seen = {c.get("op") for _, c in CASES if isinstance(c, dict)}
    assert set(OPS) <= seen, f"ops without vectors: {sorted(set(OPS) - seen)}"


def test_runner_implements_every_documented_op() -> None:
    """The runner's ops are exactly the rows of the ops table of docs/conformance.md."""
    import re

    doc = (VECTORS_DIR.parent.parent / "docs" / "conformance.md").read_text()
    documented = set(re.findall(r"^\| `([a-z0-9_]+)` \|", doc, flags=re.M))
    assert documented, "no ops table found in docs/conformance.md"
    # The plain functions' ops are documented once, by their rule ("Ops of the plain functions").
    named = set(OPS) - set(PLAIN_OPS)
    assert documented == named, (
        f"documented but not implemented: {sorted(documented - named)}; "
        f"implemented but not documented: {sorted(named - documented)}"
    )
    assert all(name.startswith("pdkv_") and name in pdkv._ffi.FUNCTIONS for name in PLAIN_OPS)


def _perturbed(v: Any) -> Any:
    """A copy of ``v`` with its first scalar leaf changed (or an element added to an empty array)."""
    if isinstance(v, bool):
        return not v
    if isinstance(v, int):
        return v + 1
    if isinstance(v, str):
        return v + "x"
    if isinstance(v, list):
        return [_perturbed(v[0])] + v[1:] if v else [0]
    assert isinstance(v, dict) and v
    k = sorted(v)[0]
    return {**v, k: _perturbed(v[k])}


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_op_detects_a_changed_output(op: str) -> None:
    """For each op, its first success vector passes and fails once any output value changes."""
    case = next((c for _, c in CASES if isinstance(c, dict) and c.get("op") == op and "output" in c), None)
    assert case is not None, f"no success vector for {op}"
    run_case(case)
    for key in sorted(case["output"]):
        bad = {**case, "output": {**case["output"], key: _perturbed(case["output"][key])}}
        with pytest.raises(AssertionError):
            run_case(bad)


def _plan_case_with_hf_config() -> Dict[str, Any]:
    """The first ``transfer_plan`` success vector whose model is config.json text."""
    return _first_case("transfer_plan", lambda c: "output" in c and "hf_config" in c["input"])


def test_runner_needs_exactly_one_of_model_and_hf_config() -> None:
    """A plan case with both ``model`` and ``hf_config``, or neither, fails; the unmodified one
    passes."""
    case = _plan_case_with_hf_config()
    run_case(case)
    with pytest.raises(VectorError, match="exactly one"):
        run_case({**case, "input": {**case["input"], "model": "nemotron-3-nano-30b"}})
    without = {k: v for k, v in case["input"].items() if k != "hf_config"}
    with pytest.raises(VectorError, match="exactly one"):
        run_case({**case, "input": without})


def test_runner_honours_prefill_ranks() -> None:
    """``prefill.ranks`` decides which P ranks' metadata the plan context receives: every rank in
    reverse order plans the same, a list without a rank the plan reads from fails with
    NOT_FOUND naming it, a negative rank or a typo beside it is a malformed vector."""
    case = _first_case(
        "transfer_plan",
        # Two P ranks at least, so that leaving the read rank out still leaves a context.
        lambda c: "output" in c
        and "ranks" not in c["input"]["prefill"]
        and c["output"]["read_ranks"]
        and c["output"]["p_tp_size"] > 1,
    )
    p_tp_size = case["output"]["p_tp_size"]
    prefill = case["input"]["prefill"]

    def with_prefill(**extra: Any) -> Dict[str, Any]:
        return {**case, "input": {**case["input"], "prefill": {**prefill, **extra}}}

    run_case(with_prefill(ranks=list(range(p_tp_size))[::-1]))
    missing = case["output"]["read_ranks"][0]
    others = [p for p in range(p_tp_size) if p != missing]
    err = with_prefill(ranks=others)
    del err["output"]
    err["error"] = {"status": "PDKV_ERR_NOT_FOUND", "message_contains": [f"P rank {missing}"]}
    run_case(err)
    with pytest.raises(VectorError, match="uint32"):
        run_case(with_prefill(ranks=[-1]))
    with pytest.raises(VectorError, match="unknown input"):
        run_case(with_prefill(rank=[0]))
