"""The setup every transfer example and test shares, in every language (Rust, Go, Python, C), so
that a P rank driven from one language and a D rank from another agree on every byte (the Rust
original: rust/pdkv/examples/xfer_setup/mod.rs):

* model "xfer-tiny": 2 KV heads of 16 (K and V), 2-byte dtype, 2 attention layers; TP 1;
* each rank: 2 regions of 8 blocks in page-aligned host memory (an anonymous mmap) whose
  addresses are the metadata's region bases; engine ids "xfer-prefill" and "xfer-decode";
* P fills region r, byte o with ``pattern(r, o)``; D fills its regions with 0xFF (never a
  pattern value);
* the request: one attention group, D blocks [1, 4, 6] receive P blocks [2, 3, 7], P computed
  3 full blocks of tokens;
* D verifies byte by byte: every byte a plan read names holds P's pattern at the read's remote
  offset, every other byte is still 0xFF.
"""

from __future__ import annotations

import dataclasses
import mmap
import sys
from array import array
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent / "python"))

import pdkv  # noqa: E402

P_ENGINE = "xfer-prefill"
D_ENGINE = "xfer-decode"
NUM_REGIONS = 2
NUM_BLOCKS = 8
D_FILL = 0xFF
P_BLOCKS = (2, 3, 7)
D_BLOCKS = (1, 4, 6)


def pattern(region: int, offset: int) -> int:
    """P's byte at ``offset`` of ``region``: distinct for every 256-byte chunk of a region (up to
    64 KiB), so a misplaced page or chunk is caught. Values are < 251."""
    return ((offset >> 8) * 131 + (offset & 255) * 7 + region * 29 + 1) % 251


def pattern_bytes(region: int, size: int) -> bytes:
    """The pattern of a whole region."""
    return bytes(pattern(region, o) for o in range(size))


def model() -> pdkv.Model:
    """The tiny pure-attention model."""
    return pdkv.Model.new(
        pdkv.ModelDesc(name="xfer-tiny", num_kv_heads=2, head_size=16, head_size_v=16, dtype_bytes=2, layer_pattern="**")
    )


def _layout(engine_id: str, bases: Optional[Sequence[int]]) -> pdkv.EngineLayout:
    return pdkv.EngineLayout(
        engine_id=engine_id,
        num_regions=NUM_REGIONS,
        num_logical_blocks=NUM_BLOCKS,
        region_bases=None if bases is None else tuple(bases),
    )


@dataclasses.dataclass
class Node:
    """A running rank: its agent, memory, registrations and metadata."""

    agent: pdkv.Agent
    buffers: List[mmap.mmap]
    memory: List[pdkv.Memory]
    metadata: pdkv.EngineMetadata

    def close(self) -> None:
        """Closes the agent, the registrations and the metadata (the buffers are released with
        the last registration)."""
        self.agent.close()
        for m in self.memory:
            m.close()
        self.metadata.close()

    def __enter__(self) -> "Node":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def node(m: pdkv.Model, prefill: bool, shared: bool = False, **agent_options: Any) -> Node:
    """Allocates a rank's regions (P: the pattern, D: 0xFF; ``shared``: each in a
    :class:`pdkv.SharedMemory`, which same-host peers map), builds its metadata at their
    addresses (the sizes come from a first metadata at the default base), creates its agent on
    127.0.0.1 (free port) with short heartbeats (``agent_options`` override) and registers
    every region."""
    engine_id = P_ENGINE if prefill else D_ENGINE
    with pdkv.EngineMetadata.from_model(m, pdkv.EngineConfig(), _layout(engine_id, None)) as probe:
        sizes = [r.block_len * r.num_blocks for r in probe.regions()]
    buffers = []
    for r, size in enumerate(sizes):
        b: Any = pdkv.SharedMemory(size).buffer if shared else mmap.mmap(-1, size)
        b[:] = pattern_bytes(r, size) if prefill else bytes([D_FILL]) * size
        buffers.append(b)
    md = pdkv.EngineMetadata.from_model(m, pdkv.EngineConfig(), _layout(engine_id, [pdkv.buffer_address(b) for b in buffers]))
    options: Dict[str, Any] = dict(
        listen_address="127.0.0.1:0", default_timeout=10, heartbeat_interval=0.1, heartbeat_timeout=1.5
    )
    options.update(agent_options)
    agent = pdkv.Agent(md, **options)
    memory = [agent.register_memory(r, b) for r, b in enumerate(buffers)]
    return Node(agent, buffers, memory, md)


def groups(block_tokens: int, ids: Any = array) -> List[pdkv.PlanGroup]:
    """The request's groups; block ids built by ``ids`` (default ``array('Q', ...)``, used in
    place by the library; ``tuple`` and ``memoryview`` work too)."""

    def make(values: Sequence[int]) -> Any:
        if ids is array:
            return array("Q", values)
        if ids is memoryview:
            return memoryview(array("Q", values))
        return ids(values)

    trim = pdkv.GroupTrimInput(
        kind=pdkv.GroupKind.ATTENTION,
        local_blocks=make(D_BLOCKS),
        remote_blocks=make(P_BLOCKS),
        remote_computed_tokens=3 * block_tokens,
    )
    return [pdkv.PlanGroup(trim)]


def plan(d: pdkv.EngineMetadata, p: pdkv.EngineMetadata, ids: Any = array) -> pdkv.TransferPlan:
    """The request's plan for D (``d``) reading from P (``p``); a P rank writing uses the same
    plan."""
    with pdkv.PlanContext(d, [p]) as ctx:
        return ctx.compile(groups(d.info().logical_block_size, ids))


def plan_from_peer(d: Node, ids: Any = array) -> pdkv.TransferPlan:
    """The plan on the D node, from the connected P rank's metadata."""
    with d.agent.find_peer(P_ENGINE, 0) as peer, peer.metadata() as pm:
        return plan(d.metadata, pm, ids)


def verify(p: pdkv.TransferPlan, buffers: Sequence[Any]) -> int:
    """Checks D's memory byte by byte against the plan; returns the bytes the plan moved, or
    raises AssertionError naming the first mismatch."""
    want = [bytearray([D_FILL]) * len(b) for b in buffers]
    reads = p.rank_reads(0)
    assert reads, "the plan has no reads"
    for rd in reads:
        want[rd.local_region][rd.local_offset : rd.local_offset + rd.length] = bytes(
            pattern(rd.remote_region, rd.remote_offset + i) for i in range(rd.length)
        )
    for r, b in enumerate(buffers):
        got = bytes(b)
        if got != want[r]:
            o = next(i for i in range(len(got)) if got[i] != want[r][i])
            raise AssertionError(f"D region {r} byte {o}: got {got[o]:#04x}, want {want[r][o]:#04x}")
    return sum(rd.length for rd in reads)


def wait_complete(agent: pdkv.Agent, request: str, timeout: float) -> None:
    """Waits for the P side's lease of ``request`` to complete; raises on expiry or timeout."""
    n = agent.wait_notification(
        lambda n: n.request_id == request
        and n.kind in (pdkv.NotificationKind.REQUEST_COMPLETE, pdkv.NotificationKind.LEASE_EXPIRED),
        timeout=timeout,
    )
    if n is None:
        raise TimeoutError(f"no notification for request {request} within {timeout} s")
    if n.kind != pdkv.NotificationKind.REQUEST_COMPLETE:
        raise RuntimeError(f"request {request}: lease expired after {n.count} of {n.expected} notifications")
