"""Pipeline parallelism: vLLM's default layer split, the pairing of D stages with P stages (each
(engine, PP rank) a separate peer) and the notifications a P stage waits for."""

from __future__ import annotations

import dataclasses
from ctypes import POINTER, byref, c_uint32
from typing import Any, Optional, Sequence, Tuple

from . import _ffi
from ._base import call, handle_arg, operation, take_list, u32
from .metadata import EngineMetadata


@dataclasses.dataclass(frozen=True)
class StagePair:
    """One overlapping (P stage, D stage) pair: D's ranks of stage ``d_pp_rank`` read the layers
    ``[layer_begin, layer_end)`` (``layer_end`` 0: through the model's last layer) from the
    ranks of P stage ``p_pp_rank``, a separate peer."""

    p_pp_rank: int  #: P's stage.
    d_pp_rank: int  #: D's stage.
    layer_begin: int  #: First layer both hold.
    layer_end: int  #: One past the last (0: through the model's last layer).


def _stages(name: str, stages: Sequence[EngineMetadata]) -> Tuple[Optional[Any], int]:
    if isinstance(stages, (str, bytes)) or not hasattr(stages, "__iter__"):
        raise TypeError(f"{name} must be a sequence of pdkv.EngineMetadata, got {type(stages).__name__}")
    items = list(stages)
    arr = (POINTER(_ffi.EngineMetadataT) * len(items))() if items else None
    for i, m in enumerate(items):
        assert arr is not None
        arr[i] = handle_arg(f"{name}[{i}]", m, EngineMetadata)
    return arr, len(items)


@operation
def pipeline_stage_pairs(p_stages: Sequence[EngineMetadata], d_stages: Sequence[EngineMetadata]) -> Tuple[StagePair, ...]:
    """Pairs P stages with D stages by their layer windows: ``p_stages`` one rank's metadata of
    EVERY P stage, ``d_stages`` one rank's metadata of each D stage to pair (any subset). Every
    overlapping pair, ordered by (D stage, P stage). Raises :class:`InvalidArgumentError` (an
    empty side, mixed engines, a stage twice, a P stage missing) or :class:`IncompatibleError`
    (P's stages not consecutive from layer 0, a D stage past P's last layer)."""
    p, np_ = _stages("p_stages", p_stages)
    d, nd = _stages("d_stages", d_stages)
    return take_list(
        "stage_pair",
        _ffi.StagePairC,
        lambda x: StagePair(x.p_pp_rank, x.d_pp_rank, x.layer_begin, x.layer_end),
        "pdkv_pipeline_stage_pairs",
        p,
        np_,
        d,
        nd,
    )


def pipeline_notifications_expected(pairs: Sequence[StagePair], p_pp_rank: int, p_tp_size: int, d_tp_size: int) -> int:
    """Notifications each rank of P stage ``p_pp_rank`` waits for per request: the pairs naming it
    (pairs over ALL of D's stages) times the TP rule for (p_tp_size, d_tp_size); 0 when no D stage reads it.
    Raises :class:`TpNotDivisibleError`."""
    items = list(pairs)
    arr = (_ffi.StagePairC * len(items))() if items else None
    for i, x in enumerate(items):
        if not isinstance(x, StagePair):
            raise TypeError(f"pairs[{i}] must be a pdkv.StagePair, got {type(x).__name__}")
        assert arr is not None
        arr[i] = _ffi.StagePairC(u32("p_pp_rank", x.p_pp_rank), u32("d_pp_rank", x.d_pp_rank),
                                 u32("layer_begin", x.layer_begin), u32("layer_end", x.layer_end))
    out = c_uint32()
    call("pdkv_pipeline_notifications_expected", arr, len(items), u32("p_pp_rank", p_pp_rank),
         u32("p_tp_size", p_tp_size), u32("d_tp_size", d_tp_size), byref(out))
    return out.value
