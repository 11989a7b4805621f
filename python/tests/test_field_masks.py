"""pdkv.h's growth rule through the Python API: an optional field left None is unset (the C
field_mask bit is clear and the library's default applies), a value sets it; no mask is visible."""

from __future__ import annotations

import pytest

import pdkv


@pytest.fixture(scope="module")
def nano() -> pdkv.Model:
    return pdkv.Model.from_preset("nemotron-3-nano-30b")


def test_engine_config_optional_fields(nano: pdkv.Model) -> None:
    derived = pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=2)).info().block_size
    assert derived != 4096
    assert pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=2, user_block_size=4096)).info().block_size == 4096
    # A set field is read and checked: 0 is no "auto" marker any more.
    with pytest.raises(pdkv.InvalidArgumentError, match="kv_cache_dtype_bytes = 0 with PDKV_CONFIG_FIELD_KV_CACHE_DTYPE"):
        pdkv.Geometry(nano, pdkv.EngineConfig(tp_size=2, kv_cache_dtype_bytes=0))


def test_engine_layout_optional_fields(nano: pdkv.Model) -> None:
    cfg = pdkv.EngineConfig(tp_size=1)
    unset = pdkv.EngineMetadata.from_model(nano, cfg, pdkv.EngineLayout()).info()
    assert unset.prefix_caching is False  # derived: cache mode none
    assert (unset.pp_size, unset.layer_end) == (1, 0)
    forced = pdkv.EngineMetadata.from_model(nano, cfg, pdkv.EngineLayout(prefix_caching=True)).info()
    assert forced.prefix_caching is True
    stage = pdkv.EngineLayout(pp_size=2, pp_rank=0, layer_begin=0, layer_end=26)
    info = pdkv.EngineMetadata.from_model(nano, cfg, stage).info()
    assert (info.pp_size, info.layer_end) == (2, 26)


def test_trim_optional_fields() -> None:
    base = dict(kind=pdkv.GroupKind.ATTENTION, local_blocks=(3, 4), remote_blocks=(8, 9),
                local_tokens_per_block=16, remote_tokens_per_block=16, remote_computed_tokens=32)
    assert pdkv.GroupTrim(pdkv.GroupTrimInput(**base)).transferred_tokens == 32  # type: ignore[arg-type]
    # D's list set to start at table index 2: tokens 0..31 have no slot.
    with pytest.raises(pdkv.CoverageError):
        pdkv.GroupTrim(pdkv.GroupTrimInput(**base, local_first_block=2))  # type: ignore[arg-type]
    # Tokens per block left unset where pdkv_group_trim_new needs them: refused naming the bit.
    del base["local_tokens_per_block"], base["remote_tokens_per_block"]
    with pytest.raises(pdkv.InvalidArgumentError, match="PDKV_TRIM_FIELD_TOKENS_PER_BLOCK"):
        pdkv.GroupTrim(pdkv.GroupTrimInput(**base))  # type: ignore[arg-type]


def test_model_desc_round_trip(nano: pdkv.Model) -> None:
    d = nano.describe()
    assert d.mamba_chunk_size is not None
    same = pdkv.Model.new(d).describe()
    assert same == d
    unset = pdkv.Model.new(pdkv.ModelDesc(name="tiny", num_kv_heads=2, head_size=16, head_size_v=16,
                                      dtype_bytes=2, layer_pattern="**")).describe()
    assert unset.mamba_chunk_size is None and unset.default_ssm_dtype_bytes is None
