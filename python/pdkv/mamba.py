"""Byte-exact Mamba state reads between a P engine and a D rank."""

from __future__ import annotations

import dataclasses
from ctypes import POINTER, byref, c_size_t, c_uint32
from typing import Iterator, Tuple, Union

from . import _ffi
from ._base import Handle, array_copy, call, decode, enum_value, handle_arg, u32
from .enums import MambaReadsRule
from .geometry import Geometry


@dataclasses.dataclass(frozen=True)
class MambaRead:
    """One contiguous copy from a P rank's Mamba page into the D rank's page."""

    p_tp_rank: int  #: Remote (P) rank.
    part: str  #: "x", "B", "C", "Q", "K", "V" or "ssm".
    remote_offset: int  #: Offset in the P rank's page.
    local_offset: int  #: Offset in the D rank's page.
    length: int  #: Bytes.


class MambaReadList(Handle):
    """The Mamba reads of one D rank (``pdkv_mamba_read_list_t``). Immutable; thread-safe."""

    _free_name = "pdkv_mamba_read_list_free"

    def __init__(
        self,
        p_geometry: Geometry,
        d_geometry: Geometry,
        d_tp_rank: int,
        rule: Union[MambaReadsRule, int, str] = MambaReadsRule.PDKV,
    ) -> None:
        """Reads of D rank ``d_tp_rank`` from the P and D geometries of one model. Raises
        :class:`IncompatibleError` (different models), :class:`TpNotDivisibleError`, ..."""
        pg = handle_arg("p_geometry", p_geometry, Geometry)
        dg = handle_arg("d_geometry", d_geometry, Geometry)
        r = enum_value("rule", MambaReadsRule, rule)
        out = POINTER(_ffi.MambaReadListT)()
        call("pdkv_mamba_reads_new", pg, dg, u32("d_tp_rank", d_tp_rank), int(r), byref(out))
        self._adopt(out)

    def items(self) -> Tuple[MambaRead, ...]:
        """The reads, in page order (ssm last)."""
        ptr = POINTER(_ffi.MambaReadC)()
        n = c_size_t()
        call("pdkv_mamba_read_list_items", self._p(), byref(ptr), byref(n))
        return array_copy(
            ptr, n.value, lambda r: MambaRead(r.p_tp_rank, decode(r.part), r.remote_offset, r.local_offset, r.length)
        )

    def source_ranks(self) -> Tuple[int, ...]:
        """The distinct P ranks the reads touch, ascending."""
        ptr = POINTER(c_uint32)()
        n = c_size_t()
        call("pdkv_mamba_read_list_source_ranks", self._p(), byref(ptr), byref(n))
        return array_copy(ptr, n.value, int)

    def __len__(self) -> int:
        return len(self.items())

    def __iter__(self) -> Iterator[MambaRead]:
        return iter(self.items())
