"""Transfer descriptors (addr, len) for attention KV and Mamba state, local and remote."""

from __future__ import annotations

import dataclasses
from ctypes import POINTER, byref, c_size_t
from typing import Any, Iterable, Iterator, Tuple

from . import _ffi
from ._base import Handle, array_copy, call, handle_arg, operation, u32, u64
from .geometry import Geometry
from .mamba import MambaReadList
from .topology import TpMapping


@dataclasses.dataclass(frozen=True)
class Region:
    """One registered KV tensor: ``num_blocks`` kernel blocks of ``block_len`` bytes at ``base``."""

    base: int  #: Base address.
    block_len: int  #: Bytes per kernel block.
    num_blocks: int  #: Kernel blocks.


@dataclasses.dataclass(frozen=True)
class Descriptor:
    """One contiguous transfer unit."""

    addr: int  #: Address.
    len: int  #: Length in bytes.


def _regions(name: str, regions: Iterable[Region]) -> Tuple[Any, int]:
    """A C array of regions (or NULL when empty) and its length."""
    if isinstance(regions, (str, bytes)) or not isinstance(regions, Iterable):
        raise TypeError(f"{name} must be a sequence of pdkv.Region, got {type(regions).__name__}")
    items = list(regions)
    if not items:
        return None, 0
    arr = (_ffi.RegionC * len(items))()
    for i, r in enumerate(items):
        if not isinstance(r, Region):
            raise TypeError(f"{name}[{i}] must be a pdkv.Region, got {type(r).__name__}")
        arr[i].base = u64(f"{name}[{i}].base", r.base)
        arr[i].block_len = u64(f"{name}[{i}].block_len", r.block_len)
        arr[i].num_blocks = u64(f"{name}[{i}].num_blocks", r.num_blocks)
    return arr, len(items)


class DescriptorList(Handle):
    """An immutable list of descriptors (``pdkv_descriptor_list_t``), made by the builder
    functions of this module. Iterable and sized; thread-safe queries."""

    _free_name = "pdkv_descriptor_list_free"

    def __init__(self) -> None:
        raise TypeError("DescriptorList is made by the pdkv.*_descriptors functions")

    @classmethod
    def _make(cls, fn: str, *args: Any) -> "DescriptorList":
        out = POINTER(_ffi.DescriptorListT)()
        call(fn, *args, byref(out))
        self = object.__new__(cls)
        self._adopt(out)
        return self

    def items(self) -> Tuple[Descriptor, ...]:
        """The descriptors, copied."""
        ptr = POINTER(_ffi.DescriptorC)()
        n = c_size_t()
        call("pdkv_descriptor_list_items", self._p(), byref(ptr), byref(n))
        return array_copy(ptr, n.value, lambda d: Descriptor(d.addr, d.len))

    def __len__(self) -> int:
        return len(self.items())

    def __iter__(self) -> Iterator[Descriptor]:
        return iter(self.items())


def attention_local_descriptors(regions: Iterable[Region], block_size_ratio: int = 1) -> DescriptorList:
    """Local attention descriptors, region-major, each block cut into ``block_size_ratio``."""
    arr, n = _regions("regions", regions)
    return DescriptorList._make(
        "pdkv_attention_local_descriptors", arr, n, u32("block_size_ratio", block_size_ratio)
    )


@operation
def attention_remote_descriptors(
    local_regions: Iterable[Region],
    remote_regions: Iterable[Region],
    mapping: TpMapping,
    block_size_ratio: int = 1,
) -> DescriptorList:
    """Remote attention descriptors in one P rank's regions for the local rank of ``mapping``."""
    la, ln = _regions("local_regions", local_regions)
    ra, rn = _regions("remote_regions", remote_regions)
    m = handle_arg("mapping", mapping, TpMapping)
    return DescriptorList._make(
        "pdkv_attention_remote_descriptors", la, ln, ra, rn, m, u32("block_size_ratio", block_size_ratio)
    )


@operation
def attention_split_descriptors(
    local_attention: DescriptorList, mapping: TpMapping, block_size_ratio: int, p_tp_rank: int
) -> DescriptorList:
    """The local split handle for remote rank ``p_tp_rank`` (D_TP < P_TP)."""
    la = handle_arg("local_attention", local_attention, DescriptorList)
    m = handle_arg("mapping", mapping, TpMapping)
    return DescriptorList._make(
        "pdkv_attention_split_descriptors",
        la,
        m,
        u32("block_size_ratio", block_size_ratio),
        u32("p_tp_rank", p_tp_rank),
    )


@operation
def mamba_local_descriptors(regions: Iterable[Region], ppl: int, geometry: Geometry) -> DescriptorList:
    """The engine's full local Mamba descriptors as registered (``geometry`` is this engine's)."""
    arr, n = _regions("regions", regions)
    g = handle_arg("geometry", geometry, Geometry)
    return DescriptorList._make("pdkv_mamba_local_descriptors", arr, n, u64("ppl", ppl), g)


@operation
def mamba_remote_descriptors(
    p_regions: Iterable[Region], p_ppl: int, p_geometry: Geometry, reads: MambaReadList, p_tp_rank: int
) -> DescriptorList:
    """Descriptors in P rank ``p_tp_rank``'s Mamba regions for its reads in ``reads``."""
    arr, n = _regions("p_regions", p_regions)
    g = handle_arg("p_geometry", p_geometry, Geometry)
    r = handle_arg("reads", reads, MambaReadList)
    return DescriptorList._make(
        "pdkv_mamba_remote_descriptors", arr, n, u64("p_ppl", p_ppl), g, r, u32("p_tp_rank", p_tp_rank)
    )


@operation
def mamba_local_split_descriptors(
    d_regions: Iterable[Region], d_ppl: int, d_geometry: Geometry, reads: MambaReadList, p_tp_rank: int
) -> DescriptorList:
    """The D rank's local destinations matching :func:`mamba_remote_descriptors` one to one."""
    arr, n = _regions("d_regions", d_regions)
    g = handle_arg("d_geometry", d_geometry, Geometry)
    r = handle_arg("reads", reads, MambaReadList)
    return DescriptorList._make(
        "pdkv_mamba_local_split_descriptors", arr, n, u64("d_ppl", d_ppl), g, r, u32("p_tp_rank", p_tp_rank)
    )
