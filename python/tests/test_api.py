"""Per-area tests of the Pythonic API: error paths (status + message naming the values),
closed handles, bad inputs (never a crash), and worked numbers."""

from __future__ import annotations

import dataclasses
import gc
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator, Type

import pytest

from conftest import HF_CONFIGS, REPO_ROOT

import pdkv

NANO = "nemotron-3-nano-30b"


@pytest.fixture()
def nano() -> Iterator[pdkv.Model]:
    with pdkv.Model.from_preset(NANO) as m:
        yield m


# ---- errors ---------------------------------------------------------------------------------


def test_tp_not_divisible_names_both_sizes() -> None:
    with pytest.raises(pdkv.TpNotDivisibleError) as info:
        pdkv.tp_ratio(2, 3)
    e = info.value
    assert e.status == pdkv.Status.TP_NOT_DIVISIBLE and isinstance(e, pdkv.PdkvError)
    assert "2" in e.message and "3" in e.message
    assert isinstance(e.status, pdkv.Status)
    assert pdkv.status_name(e.status) == "PDKV_ERR_TP_NOT_DIVISIBLE" == e.status.c_name


def test_tp_mapping_bad_sizes() -> None:
    with pytest.raises(pdkv.TpNotDivisibleError, match="6") as info:
        pdkv.TpMapping(4, 0, 6, 8)
    assert "4" in info.value.message
    with pytest.raises(pdkv.InvalidArgumentError):
        pdkv.TpMapping(2, 2, 4, 8)  # rank >= TP
    with pytest.raises(pdkv.HeadsNotDivisibleError):
        pdkv.physical_head_range(3, 0, 4)


def test_every_status_has_a_class_and_library_name() -> None:
    for st in pdkv.Status:
        assert pdkv.status_name(st) == st.c_name
        if st is not pdkv.Status.OK:
            exc = pdkv.errors.error_for(st, "m")
            assert exc.status is st and type(exc) is pdkv.errors.ERROR_CLASSES[st]
    assert type(pdkv.errors.error_for(999, "m")) is pdkv.PdkvError


def test_geometry_and_mamba_errors(nano: pdkv.Model) -> None:
    with pytest.raises(pdkv.UnsupportedLayoutError):
        pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=2, conv_layout="SD"))
    with pytest.raises(pdkv.InvalidArgumentError):
        pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=0))
    with pytest.raises(pdkv.HeadsNotDivisibleError) as info:
        pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=3))
    assert "3" in info.value.message and "2" in info.value.message
    with pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=4)) as p, pdkv.Model.from_preset("nemotron-h-8b") as other:
        with pdkv.Geometry(other, pdkv.EngineConfig(tp_size=2)) as d:
            with pytest.raises(pdkv.IncompatibleError):
                pdkv.MambaReadList(p, d, 0)
    with pytest.raises(pdkv.IncompatibleError, match="32"):
        pdkv.block_size_ratio(16, 32)


def test_model_errors(tmp_path: Path) -> None:
    with pytest.raises(pdkv.NotFoundError, match="no-such-model"):
        pdkv.Model.from_preset("no-such-model")
    missing = tmp_path / "config.json"
    with pytest.raises(pdkv.PdkvIOError, match="config.json"):
        pdkv.Model.from_hf_config_file(missing)
    with pytest.raises(pdkv.ParseError):
        pdkv.Model.from_hf_config_json("{not json")
    with pytest.raises(pdkv.InvalidArgumentError):
        pdkv.Model.new(pdkv.ModelDesc(name="x", num_kv_heads=0, head_size=128))
    with pytest.raises(pdkv.OutOfBoundsError):
        pdkv.preset_at(pdkv.preset_count())
    with pytest.raises(pdkv.NotFoundError, match="nope"):
        pdkv.backend_from_name("nope")


# ---- models, presets, geometry worked numbers ------------------------------------------------


def test_presets_and_hf_config(nano: pdkv.Model) -> None:
    names = [p.name for p in pdkv.presets()]
    assert NANO in names and len(names) == pdkv.preset_count()
    d = nano.describe()
    assert (d.num_kv_heads, d.head_size, d.mamba_type, d.mamba_n_groups) == (2, 128, pdkv.MambaType.MAMBA2, 8)
    assert nano.layer_counts() == (6, 23)
    path = HF_CONFIGS / "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json"
    with pdkv.Model.from_hf_config_file(path, name="n3") as m:
        got = m.describe()
        assert got.name == "n3"
        assert dataclasses.replace(got, name=d.name, source=d.source) == d
        assert pdkv.model_fingerprint(m) == pdkv.model_fingerprint(nano)
    with pdkv.Model.from_hf_config_json(path.read_bytes()) as m:
        assert m.layer_counts() == (6, 23)
    with pdkv.Model.new(d) as m:
        assert m.describe() == d
    assert pdkv.backend_from_name("FLASH_ATTN") is pdkv.AttentionBackend.FLASH_ATTN
    assert pdkv.backend_name(pdkv.AttentionBackend.FLASHINFER) == "flashinfer"
    assert pdkv.mamba_type_name(pdkv.MambaType.GDN) == "gdn"


def test_nano_geometry_worked_numbers(nano: pdkv.Model) -> None:
    with pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=4)) as g:
        i = g.info()
        assert (i.block_size, i.attn_bytes_per_token, i.conv_bytes, i.ssm_bytes) == (1056, 512, 9216, 524288)
        assert [p.name for p in g.projections()] == ["x", "B", "C"]
        assert g.temporal_shape() == (16, 64, 128)
        assert len(g.log_lines()) == i.num_log_lines == 2
        assert g.mamba_local_conv_offsets()[1] == pdkv.ByteRange(6144, 1536)
    with pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=2)) as g:
        assert g.info().block_size == 2096


def test_custom_backend_kernel_sizes(nano: pdkv.Model) -> None:
    cfg = pdkv.EngineConfig(tp_size=2, backend="custom", preferred_block_size=16, kernel_block_sizes=(16, 32))
    with pdkv.Geometry(nano, cfg) as g:
        assert g.info().kernel_block_size in (16, 32)


# ---- topology, mamba reads, descriptors --------------------------------------------------------


def test_tp_mapping_and_reads(nano: pdkv.Model) -> None:
    assert pdkv.tp_ratio(2, 4) == -2 and pdkv.tp_ratio(4, 2) == 2
    assert pdkv.handshake_target_ranks(1, 0, 16) == tuple(range(16))  # grows past the first buffer
    with pdkv.TpMapping(2, 1, 4, 2, has_mamba=True) as m:
        assert m.handshake_targets == (2, 3) and m.mamba_sources == (2, 3) and m.attention_sources == (2,)
        assert m.ranks("notify_targets") == (2, 3)
        with pytest.raises(pdkv.InvalidArgumentError):
            m.attention_slot(0)
    with pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=4)) as p, pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=2)) as d:
        reads = pdkv.MambaReadList(p, d, 0)
        assert sum(r.length for r in reads) == d.info().mamba_page_bytes
        assert reads.source_ranks() == (0, 1)
        regions = [pdkv.Region(1 << 30, 540672, 8)]
        dregions = [pdkv.Region(1 << 32, d.info().kernel_page_bytes, 8)]
        remote = pdkv.mamba_remote_descriptors(regions, 1, p, reads, 1)
        local = pdkv.mamba_local_split_descriptors(dregions, 1, d, reads, 1)
        assert len(remote) == len(local) > 0
        assert [x.len for x in remote] == [x.len for x in local]
        full = pdkv.mamba_local_descriptors(dregions, 1, d)
        assert len(full) > 0


def test_attention_descriptors() -> None:
    local = pdkv.attention_local_descriptors([pdkv.Region(0x1000, 64, 3)], 1)
    assert local.items() == (pdkv.Descriptor(0x1000, 64), pdkv.Descriptor(0x1040, 64), pdkv.Descriptor(0x1080, 64))
    with pdkv.TpMapping(1, 0, 2, 2) as m:
        split = pdkv.attention_split_descriptors(local, m, 1, 1)
        assert [d.len for d in split] == [32, 32, 32] and split.items()[0].addr == 0x1020
        remote = pdkv.attention_remote_descriptors([pdkv.Region(0x1000, 64, 3)], [pdkv.Region(0x9000, 32, 3)], m, 1)
        assert remote.items()[0] == pdkv.Descriptor(0x9000, 32)


# ---- closed handles ------------------------------------------------------------------------------


def test_closed_handles_raise_and_close_is_idempotent(nano: pdkv.Model) -> None:
    m = pdkv.Model.from_preset(NANO)
    m.close()
    m.close()
    assert m.closed and "closed" in repr(m)
    with pytest.raises(pdkv.ClosedError):
        m.describe()
    with pytest.raises(pdkv.ClosedError):
        pdkv.Geometry(m)
    with pytest.raises(pdkv.ClosedError):
        with m:
            pass
    g = pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=2))
    with g:
        pass
    with pytest.raises(pdkv.ClosedError):
        g.info()
    with pytest.raises(pdkv.ClosedError):
        pdkv.MambaReadList(g, g, 0)
    t = pdkv.TpMapping(2, 0, 4, 2)
    t.close()
    with pytest.raises(pdkv.ClosedError):
        t.info()
    d = pdkv.attention_local_descriptors([pdkv.Region(0, 64, 1)])
    d.close()
    with pytest.raises(pdkv.ClosedError):
        d.items()
    assert isinstance(pdkv.ClosedError("x"), ValueError)


def test_closed_error_is_a_null_pointer_error_naming_the_type(nano: pdkv.Model) -> None:
    """As Go's closed errors: status NULL_POINTER, caught by ``except NullPointerError``, the
    message "pdkv.<Type> is closed" (for a method and for a handle argument)."""
    g = pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=2))
    g.close()
    t = pdkv.TpMapping(2, 0, 4, 2)
    t.close()
    for call, type_name in [
        (g.info, "Geometry"),
        (lambda: pdkv.MambaReadList(g, g, 0), "Geometry"),
        (t.info, "TpMapping"),
    ]:
        with pytest.raises(pdkv.NullPointerError) as info:
            call()
        e = info.value
        assert isinstance(e, pdkv.ClosedError) and isinstance(e, ValueError)
        assert e.status == pdkv.Status.NULL_POINTER
        assert e.message == f"pdkv.{type_name} is closed"
        assert str(e) == f"PDKV_ERR_NULL_POINTER: pdkv.{type_name} is closed"
    # A NULL_POINTER reported by the library is a NullPointerError but not a ClosedError.
    assert not isinstance(pdkv.NullPointerError(pdkv.Status.NULL_POINTER, "x"), pdkv.ClosedError)


def test_finalizer_frees_unclosed_handles() -> None:
    m = pdkv.Model.from_preset(NANO)
    fin = m._finalizer
    del m
    gc.collect()
    assert not fin.alive


def test_handles_cannot_be_built_directly() -> None:
    for cls in (pdkv.Model, pdkv.DescriptorList, pdkv.EngineMetadata, pdkv.TransferPlan, pdkv.HandshakeReport):
        with pytest.raises(TypeError):
            cls()


# ---- bad inputs ------------------------------------------------------------------------------------


# The wrong types below are passed on purpose (hence the type: ignore comments): the binding
# must refuse them at run time, whatever a type checker would have said.
@pytest.mark.parametrize(
    "call, exc",
    [
        (lambda: pdkv.tp_ratio(None, 2), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.tp_ratio("2", 2), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.tp_ratio(2.0, 2), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.tp_ratio(True, 2), TypeError),
        (lambda: pdkv.tp_ratio(-1, 2), ValueError),
        (lambda: pdkv.tp_ratio(1 << 32, 2), ValueError),
        (lambda: pdkv.tp_ratio(10**100, 2), ValueError),
        (lambda: pdkv.physical_head_range(2, 4, -1), ValueError),
        (lambda: pdkv.block_size_ratio(1 << 64, 1), ValueError),
        (lambda: pdkv.Model.from_preset(None), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.Model.from_preset(b"nemotron"), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.Model.from_preset("a\0b"), ValueError),
        (lambda: pdkv.Model.from_hf_config_json(None), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.Model.new(None), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.Geometry(None), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.Geometry("nemotron"), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.TpMapping(2, 0, 4, 2, use_mla=2), ValueError),  # type: ignore[arg-type]
        (lambda: pdkv.EngineConfig(tp_size=2, mamba_cache_mode="bogus")._to_c(), ValueError),
        (lambda: pdkv.EngineConfig(tp_size=-2)._to_c(), ValueError),
        (lambda: pdkv.attention_local_descriptors(None), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.attention_local_descriptors([(0, 64, 1)]), TypeError),  # type: ignore[list-item]
        (lambda: pdkv.attention_local_descriptors([pdkv.Region(-1, 64, 1)]), ValueError),
        (lambda: pdkv.attention_split_descriptors(None, None, 1, 0), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.MambaReadList(None, None, 0), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.clip_exchange_blocks([1, -2], "attention"), ValueError),
        (lambda: pdkv.clip_exchange_blocks("12", "attention"), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.clip_exchange_blocks([1], "bogus_kind"), ValueError),
        (lambda: pdkv.EngineMetadata.decode("text"), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.crc32c(None), TypeError),  # type: ignore[arg-type]
        (lambda: pdkv.TpMapping(2, 0, 4, 2).ranks(99), ValueError),
    ],
)
def test_bad_inputs_raise_python_exceptions(call: Callable[[], object], exc: Type[Exception]) -> None:
    with pytest.raises(exc) as info:
        call()
    if exc is ValueError:  # every bad value is an InvalidArgumentError (and still a ValueError)
        assert isinstance(info.value, pdkv.InvalidArgumentError)
        assert info.value.status == pdkv.Status.INVALID_ARGUMENT
    else:  # a wrong Python type stays a plain TypeError
        assert not isinstance(info.value, pdkv.PdkvError)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: pdkv.tp_ratio(-1, 2), "= -1 is out of range [0, 4294967295]"),
        (lambda: pdkv.tp_ratio(1 << 32, 2), "= 4294967296 is out of range [0, 4294967295]"),
        (lambda: pdkv.block_size_ratio(1 << 64, 1), "= 18446744073709551616 is out of range"),
        (lambda: pdkv.EngineConfig(tp_size=-2)._to_c(), "tp_size = -2 is out of range"),
        (lambda: pdkv.attention_local_descriptors([pdkv.Region(-1, 64, 1)]), "= -1 is out of range"),
        (lambda: pdkv.clip_exchange_blocks([1, -2], "attention"), "[1] = -2 is out of range"),
        (lambda: pdkv.TpMapping(2, 0, 4, 2, use_mla=2), "use_mla = 2 is out of range [0, 1]"),  # type: ignore[arg-type]
        (lambda: pdkv.Model.from_preset("a\0b"), "contains a NUL byte"),
        (lambda: pdkv.clip_exchange_blocks([1], "bogus_kind"), "'bogus_kind' is not a GroupKind"),
        (lambda: pdkv.TpMapping(2, 0, 4, 2).ranks(99), "= 99 is not a TpMappingList value"),
    ],
)
def test_bad_values_are_invalid_argument_errors_naming_the_value(call: Callable[[], object], message: str) -> None:
    with pytest.raises(pdkv.InvalidArgumentError) as info:
        call()
    e = info.value
    assert isinstance(e, ValueError) and isinstance(e, pdkv.PdkvError)
    assert e.status == pdkv.Status.INVALID_ARGUMENT
    assert message in e.message and str(e).startswith("PDKV_ERR_INVALID_ARGUMENT: ")


def test_library_invalid_argument_is_a_value_error() -> None:
    """INVALID_ARGUMENT from C is the same class: one ``except`` catches both sources."""
    with pytest.raises(ValueError) as info:
        pdkv.TpMapping(2, 0, 4, 2).attention_slot(3)
    assert isinstance(info.value, pdkv.InvalidArgumentError)


def test_negative_index_is_out_of_bounds(nano: pdkv.Model) -> None:
    """A negative index is OUT_OF_BOUNDS (as an index past the end, and as in Go); a non-int
    index is a TypeError."""
    with pytest.raises(pdkv.OutOfBoundsError, match="index -1 is negative") as info:
        pdkv.preset_at(-1)
    assert info.value.status == pdkv.Status.OUT_OF_BOUNDS
    with pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=2)) as g:
        with pytest.raises(pdkv.OutOfBoundsError, match="-3"):
            g.projection(-3)
        with pytest.raises(pdkv.OutOfBoundsError, match="does not fit in size_t"):
            g.log_line(1 << 64)
        with pytest.raises(TypeError):
            g.projection(1.0)  # type: ignore[arg-type]


def test_library_rejects_unknown_enum_values() -> None:
    with pytest.raises(pdkv.InvalidArgumentError):
        pdkv.clip_exchange_blocks([1], 7)
    assert pdkv.group_kind_name(7) == "unknown"


# ---- blocks, trimming, scheduler ----------------------------------------------------------------


def test_blocks_and_zeroing() -> None:
    assert pdkv.logical_to_kernel_block_ids([2, 5], "attention", 4) == (8, 9, 10, 11, 20, 21, 22, 23)
    assert pdkv.logical_to_kernel_block_ids([], pdkv.GroupKind.MAMBA, 4) == ()
    assert pdkv.map_block_ids_for_block_size_ratio([3, 7], "attention", 4, 6) == (12, 13, 14, 15, 28, 29)
    assert pdkv.sliding_window_blocks_to_keep(2048, 16) == 129
    assert pdkv.mamba_descriptor_ids([1, 2], 10, 2, 1, 100) == (101, 102, 111, 112)
    layout = pdkv.DescriptorLayout(100, 1, 1, 1, 0)
    with pytest.raises(pdkv.OutOfBoundsError, match="100"):
        pdkv.descriptor_ids([pdkv.GroupBlockIds("attention", (100,))], layout)
    zr = pdkv.receive_zero_ranges([5, 6], 16, 1, 1)
    assert zr == (pdkv.ZeroRange(6, 0, 16),)
    un = pdkv.uncovered_token_ranges([5, 6], 0, 16, 0, [pdkv.TokenInterval(0, 20)])
    assert un == (pdkv.ZeroRange(6, 4, 16),)


def test_group_trim() -> None:
    t = pdkv.GroupTrim(
        pdkv.GroupTrimInput(
            "attention", (10, 12), (20, 25, 22), local_tokens_per_block=2096, remote_tokens_per_block=1056, remote_computed_tokens=3000
        )
    )
    kind, tokens = t.summary()
    assert kind is pdkv.GroupKind.ATTENTION and tokens == 3000 == t.transferred_tokens
    assert t.runs()[0] == pdkv.TokenRun(10, 0, 20, 0, 1056)
    assert sum(r.num_tokens for r in t.runs()) == 3000
    assert t.zero_ranges() == (pdkv.ZeroRange(12, 904, 2096),)
    m = pdkv.GroupTrim(pdkv.GroupTrimInput("mamba", (40,), (50,), remote_computed_tokens=3000))
    assert m.states() == (pdkv.StatePair(40, 50, 3000),) and m.unfilled_states() == ()
    with pytest.raises(pdkv.CoverageError):
        pdkv.GroupTrim(pdkv.GroupTrimInput("attention", (10,), (20,), 16, 16, remote_computed_tokens=64))


def test_scheduler_helpers() -> None:
    assert pdkv.d_num_new_matched_tokens(100, 0, True) == 99
    assert pdkv.plan_remote_decode_prefill(33, 32, 16, True) == pdkv.RemoteDecodePrefillPlan(32, 16, 16)
    r = pdkv.truncate_for_remote_decode(pdkv.RemoteDecodePrefill(100, 50), True)
    assert r == pdkv.RemoteDecodePrefill(99, 1, True)
    assert pdkv.truncate_for_remote_decode(r, True) == r
    n = pdkv.mamba_aligned_split(pdkv.AlignedSplitInput(0, 100, 100, 101, 16))
    assert 0 <= n <= 100
    n0604 = pdkv.mamba_aligned_split_v0604(pdkv.AlignedSplitV0604Input(0, 0, 0, 100, 100, 101, 16))
    assert 0 <= n0604 <= 100
    with pytest.raises(pdkv.InvalidArgumentError):
        pdkv.mamba_aligned_split(pdkv.AlignedSplitInput(0, 100, 100, 101, 0))
    g = pdkv.derive_offload_geometry(1000, 2096, 16, [pdkv.OffloadLayer(4096000, 4096)])
    assert g == pdkv.OffloadGeometry(1000, 131)
    with pytest.raises(pdkv.InvalidArgumentError, match="2096"):
        pdkv.derive_offload_geometry(1000, 2096, 64, [])


# ---- metadata, handshake, plans ------------------------------------------------------------------


def test_metadata_round_trip_and_handshake(nano: pdkv.Model) -> None:
    assert pdkv.crc32c(b"123456789") == 0xE3069283
    assert pdkv.metadata_wire_version()[0] >= 1
    cfg = pdkv.EngineConfig(tp_size=2)
    a = pdkv.EngineMetadata.from_model(nano, cfg, pdkv.EngineLayout("d", 0, num_regions=6))
    info = a.info()
    assert (info.engine_id, info.tp_size, info.kernel_block_size, info.num_regions) == ("d", 2, 2096, 6)
    assert len(a.regions()) == 6 and a.conv_projection_bytes() == (12288, 3072, 3072)
    wire = a.encode()
    assert a.encoded_size() == len(wire)
    buf = bytearray(len(wire))
    assert a.encode_into(buf) == len(wire) and bytes(buf) == wire
    with pytest.raises(pdkv.BufferTooSmallError):
        a.encode_into(bytearray(3))
    b = pdkv.EngineMetadata.decode(wire)
    assert a == b and b.info() == info
    bad = bytearray(wire)
    bad[-1] ^= 0xFF
    with pytest.raises((pdkv.ChecksumError, pdkv.ParseError)):
        pdkv.EngineMetadata.decode(bytes(bad))
    with pytest.raises(pdkv.ParseError):
        pdkv.EngineMetadata.decode(wire[:5])
    p = pdkv.EngineMetadata.from_model(nano, pdkv.EngineConfig(tp_size=4), pdkv.EngineLayout("p", 0, num_regions=6))
    assert pdkv.handshake_validate(a, p).compatible
    pdkv.handshake_require_compatible(a, p)
    nhd = pdkv.EngineMetadata.from_model(
        nano, pdkv.EngineConfig(tp_size=4), pdkv.EngineLayout("p", 0, num_regions=6, kv_layout="NHD")
    )
    # A different layout alone is served (D permutes on receive); NHD on both sides with heads
    # split by TP is not.
    assert pdkv.handshake_validate(a, nhd).compatible
    nhd_d = pdkv.EngineMetadata.from_model(
        nano, pdkv.EngineConfig(tp_size=1), pdkv.EngineLayout("d", 0, num_regions=6, kv_layout="NHD")
    )
    a = nhd_d
    report = pdkv.handshake_validate(a, nhd)
    assert len(report) >= 1 and report[0].text and report[-1] == report.items()[-1]
    with pytest.raises(pdkv.IncompatibleError):
        pdkv.handshake_require_compatible(a, nhd)
    same = pdkv.handshake_validate_engine_ranks([p, p])
    assert not same.compatible  # duplicate tp_rank
    with pytest.raises(pdkv.OutOfBoundsError):
        same.item(len(same))


def test_element_formats_refuse_a_pair_differing_only_in_the_kv_format(nano: pdkv.Model) -> None:
    # Nemotron-3-Nano with fp8 KV on both sides: same sizes, e4m3 on P and e5m2 on D.
    p_cfg = pdkv.EngineConfig(tp_size=4, kv_cache_dtype_bytes=1, kv_cache_format="fp8")
    d_cfg = pdkv.EngineConfig(tp_size=2, kv_cache_dtype_bytes=1, kv_cache_format=pdkv.ElementFormat.FP8_E5M2)
    p = pdkv.EngineMetadata.from_model(nano, p_cfg, pdkv.EngineLayout("p", 0, num_regions=6))
    d = pdkv.EngineMetadata.from_model(nano, d_cfg, pdkv.EngineLayout("d", 0, num_regions=6))
    assert p.info().kv_cache_format is pdkv.ElementFormat.FP8_E4M3
    assert p.info().model_format is pdkv.ElementFormat.UNKNOWN
    wire = pdkv.EngineMetadata.decode(p.encode())
    assert wire.info().kv_cache_format is pdkv.ElementFormat.FP8_E4M3
    report = pdkv.handshake_validate(d, wire)
    assert len(report) == 1
    item = report[0]
    assert (item.field, item.local_value, item.remote_value) == ("kv_cache_format", "fp8_e5m2", "fp8_e4m3")
    with pytest.raises(pdkv.IncompatibleError, match="kv_cache_format: fp8_e5m2 vs fp8_e4m3"):
        pdkv.handshake_require_compatible(d, wire)
    # Only sizes on one side (unknown format), or "auto": compatible.
    plain_cfg = pdkv.EngineConfig(tp_size=2, kv_cache_dtype_bytes=1, kv_cache_format="auto")
    plain = pdkv.EngineMetadata.from_model(nano, plain_cfg, pdkv.EngineLayout("d", 0, num_regions=6))
    assert plain.info().kv_cache_format is pdkv.ElementFormat.UNKNOWN
    assert pdkv.handshake_validate(plain, p).compatible
    # A format that disagrees with the sizes it labels, and names.
    with pytest.raises(pdkv.InvalidArgumentError, match="kv_cache_format = fp8_e5m2"):
        pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=2, kv_cache_format="fp8_e5m2"))
    with pytest.raises(pdkv.NotFoundError, match="nvfp4"):
        pdkv.EngineConfig(kv_cache_format="nvfp4")._to_c()
    assert pdkv.element_format_from_name("BF16") is pdkv.ElementFormat.BFLOAT16
    assert pdkv.element_format_name(pdkv.ElementFormat.INT8_PER_TOKEN_HEAD) == "int8_per_token_head"
    assert pdkv.element_format_name(99) == "unknown"


def test_nano_plan(nano: pdkv.Model) -> None:
    pcfg, dcfg = pdkv.EngineConfig(tp_size=4), pdkv.EngineConfig(tp_size=2)
    p_meta = [pdkv.EngineMetadata.from_model(nano, pcfg, pdkv.EngineLayout("p", r, num_regions=6)) for r in range(4)]
    d_meta = pdkv.EngineMetadata.from_model(nano, dcfg, pdkv.EngineLayout("d", 0, num_regions=6))
    groups = [pdkv.PlanGroup(pdkv.GroupTrimInput("attention", (10, 12), (20, 25, 22), remote_computed_tokens=3000))]
    with pdkv.PlanContext(d_meta, p_meta) as ctx:
        assert ctx.mapping().attention_sources == (0,)
        plan = ctx.compile(groups)
        plan.validate(ctx, groups)
        i = plan.info()
        assert (i.d_tp_rank, i.d_tp_size, i.p_tp_size, i.bytes, i.empty) == (0, 2, 4, 6 * 3000 * 512, False)
        assert plan.read_ranks() == (0,) and plan.notify_ranks() == (0, 1)
        ld, lp = 2096 * 512, 1056 * 512
        assert plan.rank_reads(0)[0] == pdkv.PlanRead(0, 10 * ld, 0, 20 * lp, 1056 * 512)
        assert plan.rank_reads(1) == () and plan.rank_bytes(0) == i.bytes
        assert plan.group_zero(0).zero == (pdkv.ZeroRange(12, 904, 2096),)
        assert plan.to_json() == plan.to_json_buffered() and isinstance(plan.to_dict(), dict)
        with pytest.raises(pdkv.InvalidArgumentError, match="4"):
            plan.rank_reads(4)
        with pytest.raises(pdkv.OutOfBoundsError):
            plan.group_zero(1)
        with pytest.raises(pdkv.CoverageError):
            ctx.compile([pdkv.PlanGroup(pdkv.GroupTrimInput("attention", (10,), (20, 25, 22), remote_computed_tokens=3000))])
    with pytest.raises(pdkv.InvalidArgumentError):
        pdkv.PlanContext(d_meta, [])
    plan.close()
    with pytest.raises(pdkv.ClosedError):
        plan.info()


# ---- example ------------------------------------------------------------------------------------


def test_explain_example_runs() -> None:
    r = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "python" / "explain.py")], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "model nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16" in out
    assert "P (prefill) engine (TP4" in out and "D (decode) engine (TP2" in out
    assert "tp_ratio on D = -2" in out
    assert "Transfer plan for one 3000-token prompt" in out
    assert "D rank 1: reads from P [2, 3], notifies [2, 3]" in out
    assert "24541184 Mamba" in out  # 23 layers x (18432 conv + 1048576 ssm)


def test_explain_example_reports_errors() -> None:
    r = subprocess.run(
        [sys.executable, str(REPO_ROOT / "examples" / "python" / "explain.py"), "--p-tp", "3"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1 and "PDKV_ERR_" in r.stderr


def test_mixed_mla_model_fields_geometry_and_region_kinds() -> None:
    """A GQA model with MLA-typed layers: the latent width round-trips, the geometry reports the
    latent's bytes per token, regions follow the layer pattern or the layout's kinds."""
    desc = pdkv.ModelDesc(
        name="mixed", num_kv_heads=4, head_size=8, head_size_v=8, dtype_bytes=2, layer_pattern="*L", mla_head_size=24
    )
    with pdkv.Model.new(desc) as m:
        assert m.describe().mla_head_size == 24
        cfg = pdkv.EngineConfig(tp_size=2, user_block_size=16)
        with pdkv.Geometry(m, cfg) as g:
            info = g.info()
            assert (info.attn_bytes_per_token, info.mla_bytes_per_token, info.mla_kernel_page_bytes) == (64, 48, 768)
        with pdkv.EngineMetadata.from_model(m, cfg, pdkv.EngineLayout(num_regions=2)) as md:
            assert [(r.kind, r.block_len) for r in md.regions()] == [
                (pdkv.RegionKind.ATTENTION, 1024),
                (pdkv.RegionKind.MLA, 768),
            ]
            assert md.encode()[6] == 1  # format 1.1: an mla region
        explicit = pdkv.EngineLayout(num_regions=2, region_kinds=("mla", pdkv.RegionKind.ATTENTION))
        with pdkv.EngineMetadata.from_model(m, cfg, explicit) as md:
            assert [r.kind for r in md.regions()] == [pdkv.RegionKind.MLA, pdkv.RegionKind.ATTENTION]
        with pytest.raises(pdkv.InvalidArgumentError, match="region_kinds has 1 entries"):
            pdkv.EngineMetadata.from_model(m, cfg, pdkv.EngineLayout(num_regions=2, region_kinds=("mla",)))
    with pytest.raises(pdkv.InvalidArgumentError, match="mla_head_size = 0"):
        pdkv.Model.new(dataclasses.replace(desc, mla_head_size=0))


def test_pipeline_stages_pair_and_plan_by_layer(nano: pdkv.Model) -> None:
    """P PP2 TP4 -> D PP1 TP2 on Nemotron-3-Nano (52 layers, split 26/26): stage metadata is
    labelled 1.2, stages pair by their windows, and a plan against P stage 1 whose attention
    group names its layers reads layers 26, 33, 42 from P regions 0..2 into D regions 3..5."""
    assert pdkv.pipeline_layer_window(52, 2, 1) == (26, 52)
    with pytest.raises(pdkv.InvalidArgumentError, match="pp_size 3"):
        pdkv.pipeline_layer_window(2, 3, 0)
    p_cfg, d_cfg = pdkv.EngineConfig(tp_size=4), pdkv.EngineConfig(tp_size=2)

    def stage(s: int, r: int) -> pdkv.EngineLayout:
        return pdkv.EngineLayout(engine_id="p", tp_rank=r, num_logical_blocks=8, num_regions=6, pp_size=2,
                                 pp_rank=s, layer_begin=26 * s, layer_end=26 * s + 26)

    m = nano
    p = [pdkv.EngineMetadata.from_model(m, p_cfg, stage(1, r)) for r in range(4)]
    p0 = pdkv.EngineMetadata.from_model(m, p_cfg, stage(0, 0))
    d = pdkv.EngineMetadata.from_model(
        m, d_cfg, pdkv.EngineLayout(engine_id="d", tp_rank=1, num_logical_blocks=8, num_regions=6))
    info = p[0].info()
    assert (info.pp_size, info.pp_rank, info.layer_begin, info.layer_end) == (2, 1, 26, 52)
    assert p[0].encode()[6] == 2
    pairs = pdkv.pipeline_stage_pairs([p[0], p0], [d])
    assert pairs == (pdkv.StagePair(0, 0, 0, 26), pdkv.StagePair(1, 0, 26, 52))
    assert pairs[1] == pdkv.StagePair(p_pp_rank=1, d_pp_rank=0, layer_begin=26, layer_end=52)
    assert pdkv.pipeline_notifications_expected(pairs, 1, 4, 2) == 1
    with pytest.raises(pdkv.InvalidArgumentError, match="missing"):
        pdkv.pipeline_stage_pairs([p[0]], [d])
    attention = pdkv.PlanGroup(
        pdkv.GroupTrimInput(kind=pdkv.GroupKind.ATTENTION, local_blocks=[6], remote_blocks=[7],
                            remote_computed_tokens=1000),
        layers=(5, 12, 19, 26, 33, 42),
    )
    with pdkv.PlanContext(d, p) as ctx, ctx.compile([attention]) as plan:
        i = plan.info()
        assert (i.p_pp_size, i.p_pp_rank, i.layer_begin, i.layer_end) == (2, 1, 26, 52)
        assert plan.group_zeros()[0].regions == (3, 4, 5)
        reads = plan.rank_reads(plan.read_ranks()[0])
        assert [(r.local_region, r.remote_region) for r in reads] == [(3, 0), (4, 1), (5, 2)]
        with pytest.raises(pdkv.InvalidArgumentError, match="names no layers"):
            ctx.compile([dataclasses.replace(attention, layers=())])
    for x in p + [p0, d]:
        x.close()


def test_different_kv_layouts_permute_on_receive(nano: pdkv.Model) -> None:
    """D NHD TP1 (2 KV heads) <- P HND TP2 on Nemotron-3-Nano: refused without
    ``permute_on_receive`` (naming it); with it, the plan lists D's received blocks with the HND ->
    NHD permutation of 2 heads x 2096 tokens x 512 bytes."""
    d = pdkv.EngineMetadata.from_model(nano, pdkv.EngineConfig(tp_size=1),
                                       pdkv.EngineLayout(engine_id="d", num_logical_blocks=8, kv_layout="NHD"))
    p = [pdkv.EngineMetadata.from_model(nano, pdkv.EngineConfig(tp_size=2),
                                        pdkv.EngineLayout(engine_id="p", tp_rank=r, num_logical_blocks=8,
                                                          base=(2 + r) << 40)) for r in range(2)]
    group = pdkv.PlanGroup(pdkv.GroupTrimInput(kind=pdkv.GroupKind.ATTENTION, local_blocks=[3, 4],
                                               remote_blocks=[6, 7], remote_computed_tokens=3000))
    with pdkv.PlanContext(d, p) as plain:
        with pytest.raises(pdkv.UnsupportedLayoutError, match="permute_on_receive"):
            plain.compile([group])
    with pdkv.PlanContext(d, p, permute_on_receive=True) as ctx, ctx.compile([group]) as plan:
        pm = plan.info().permute
        assert pm == pdkv.BlockPermute(pdkv.KvLayout.HND, pdkv.KvLayout.NHD, 2, 2096, 512)
        assert pm.active
        z = plan.group_zero(0)
        assert (z.permute_blocks, z.permute_regions) == ((3, 4), (0,))
    block = bytearray(bytes(100 * h + 10 * t + j for h in range(2) for t in range(3) for j in range(2)))
    pdkv.BlockPermute(pdkv.KvLayout.HND, pdkv.KvLayout.NHD, 2, 3, 2).apply(block)
    assert list(block) == [0, 1, 100, 101, 10, 11, 110, 111, 20, 21, 120, 121]
    with pytest.raises(pdkv.InvalidArgumentError, match="= 12"):
        pdkv.permute_kv_block(block[:10], "HND", "NHD", 2, 3, 2)
    with pytest.raises(TypeError):
        pdkv.PlanContext(d, p, permute_on_receive=1)  # type: ignore[arg-type]
    for x in p + [d]:
        x.close()
