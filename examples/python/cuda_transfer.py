#!/usr/bin/env python3
"""Moves one request's KV cache between a P and a D rank whose regions are CUDA device memory
(torch tensors on the GPU), both ranks in this process, and checks every byte.

The setup is xfer_setup.py's (the model, the pattern, the request), with each region a uint8
tensor whose ``data_ptr()`` is the metadata's region base, registered with
``memory_type=pdkv.MemoryType.CUDA``. pdkv stages device bytes through host memory over the tcp
data connection (the agents choose tcp for a pair holding device memory, on one host too).

Usage: cuda_transfer.py [--p-memory cuda|host] [--d-memory cuda|host] [--op read|write]
                        [--key HEX] [--timeout SECONDS]

Prints "VERIFIED <bytes>" and exits 0; exits 0 with "SKIPPED: <why>" where torch or a CUDA
device is missing; any failure prints the error and exits 1.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, List

import xfer_setup as xfer
from xfer_setup import pdkv


class Rank:
    """One rank: its regions as tensors (GPU or host), metadata, agent and registrations."""

    def __init__(self, torch: Any, m: pdkv.Model, prefill: bool, on_gpu: bool, **options: Any) -> None:
        engine_id = xfer.P_ENGINE if prefill else xfer.D_ENGINE

        def layout(bases: Any) -> pdkv.EngineLayout:
            return pdkv.EngineLayout(
                engine_id=engine_id, num_regions=xfer.NUM_REGIONS, num_logical_blocks=xfer.NUM_BLOCKS, region_bases=bases
            )

        with pdkv.EngineMetadata.from_model(m, pdkv.EngineConfig(), layout(None)) as probe:
            sizes = [r.block_len * r.num_blocks for r in probe.regions()]
        self.tensors: List[Any] = []
        for r, size in enumerate(sizes):
            data = xfer.pattern_bytes(r, size) if prefill else bytes([xfer.D_FILL]) * size
            t = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            self.tensors.append(t.to("cuda") if on_gpu else t.clone())
        self.metadata = pdkv.EngineMetadata.from_model(
            m, pdkv.EngineConfig(), layout(tuple(t.data_ptr() for t in self.tensors))
        )
        self.agent = pdkv.Agent(self.metadata, listen_address="127.0.0.1:0", **options)
        kind = pdkv.MemoryType.CUDA if on_gpu else pdkv.MemoryType.HOST
        self.memory = [
            self.agent.register_address(
                r, t.data_ptr(), t.numel(), memory_type=kind, device=t.device.index if on_gpu else 0
            )
            for r, t in enumerate(self.tensors)
        ]

    def contents(self) -> List[bytes]:
        """Each region's bytes, copied to the host."""
        return [bytes(t.cpu().numpy().tobytes()) for t in self.tensors]

    def close(self) -> None:
        self.agent.close()
        for mem in self.memory:
            mem.close()
        self.metadata.close()


def main(argv: List[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p-memory", choices=["cuda", "host"], default="cuda")
    ap.add_argument("--d-memory", choices=["cuda", "host"], default="cuda")
    ap.add_argument("--op", choices=["read", "write"], default="read")
    ap.add_argument("--key", help="a pre-shared key (hex): the data connection is then sealed")
    ap.add_argument("--timeout", type=float, default=20.0)
    a = ap.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("SKIPPED: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("SKIPPED: torch sees no CUDA device")
        return 0
    options: dict = dict(default_timeout=a.timeout, heartbeat_interval=0.1, heartbeat_timeout=3.0)
    if a.key:
        options["preshared_key"] = bytes.fromhex(a.key)
    m = xfer.model()
    p = Rank(torch, m, True, a.p_memory == "cuda", **options)
    d = Rank(torch, m, False, a.d_memory == "cuda", **options)
    try:
        with d.agent.connect(p.agent.address, timeout=a.timeout) as peer:
            transport = pdkv.Transport(peer.info().transport).name
        with xfer.plan(d.metadata, p.metadata) as plan:
            if a.op == "read":
                t = d.agent.read(plan, xfer.P_ENGINE, "cuda-req", timeout=a.timeout)
            else:
                p.agent.find_peer(xfer.D_ENGINE).close()
                t = p.agent.write(plan, xfer.D_ENGINE, "cuda-req", timeout=a.timeout)
            with t:
                t.wait()
                info = t.info()
            torch.cuda.synchronize()
            n = xfer.verify(plan, d.contents())
        print(
            f"P {a.p_memory}, D {a.d_memory}, {a.op} over {transport}: {info.bytes_done} bytes in "
            f"{info.elapsed * 1e6:.0f} us"
        )
        print(f"VERIFIED {n}")
        return 0
    finally:
        d.close()
        p.close()


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (pdkv.PdkvError, OSError, RuntimeError, AssertionError) as e:
        print(f"cuda_transfer: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
