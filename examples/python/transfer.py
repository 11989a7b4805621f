#!/usr/bin/env python3
"""Moves one request's KV cache from a P (prefill) rank to a D (decode) rank with the transfer
executor and checks every byte (setup shared with every language: xfer_setup.py).

Usage: transfer.py [--role both|p|d] [--connect HOST:PORT] [--transport auto|shm|tcp]
                   [--request ID] [--timeout SECONDS]

* --role both (default): both ranks in this process;
* --role p: a P rank alone; prints "LISTEN <host:port>", waits (leased) until a D rank has read
  the request, exits 0;
* --role d --connect A: a D rank alone; connects, reads, verifies byte by byte, prints
  "VERIFIED <bytes>", exits 0.

Any failure prints the error and exits 1.
"""

from __future__ import annotations

import argparse
import sys

import xfer_setup as xfer
from xfer_setup import pdkv


def read(d: xfer.Node, request: str, timeout: float) -> int:
    """D: plan from the peer's metadata, read, verify."""
    # A D rank keeps P's lease of a request open until it reads it (a real engine does this
    # periodically for requests queued behind others, as vLLM's "HB:" notifications do).
    d.agent.keep_leases(xfer.P_ENGINE, [request])
    with xfer.plan_from_peer(d) as plan, d.agent.read(plan, xfer.P_ENGINE, request, timeout=timeout) as t:
        t.wait()
        i = t.info()
        print(f"D: read {i.bytes_done} bytes in {i.operations_done} operations ({i.elapsed * 1e6:.0f} us)")
        return xfer.verify(plan, d.buffers)


def main(argv: list) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--role", choices=["both", "p", "d"], default="both")
    ap.add_argument("--connect")
    ap.add_argument("--transport", choices=["auto", "shm", "tcp"], default="auto")
    ap.add_argument("--request", default="req-1")
    ap.add_argument("--timeout", type=float, default=20.0)
    a = ap.parse_args(argv)
    m = xfer.model()
    if a.role == "p":
        with xfer.node(m, True, transport=a.transport) as p:
            p.agent.lease(a.request, 1, a.timeout)
            print(f"LISTEN {p.agent.address}", flush=True)
            xfer.wait_complete(p.agent, a.request, a.timeout)
            print(f"P: request {a.request} read by D")
    elif a.role == "d":
        if not a.connect:
            ap.error("--role d needs --connect")
        with xfer.node(m, False, transport=a.transport) as d:
            d.agent.connect(a.connect, timeout=a.timeout).close()
            print(f"VERIFIED {read(d, a.request, a.timeout)}")
    else:
        with xfer.node(m, True, transport=a.transport) as p, xfer.node(m, False, transport=a.transport) as d:
            p.agent.lease(a.request, 1, a.timeout)
            with d.agent.connect(p.agent.address, timeout=a.timeout) as peer:
                info = peer.info()
                print(f"D connected to {info.address} over {pdkv.Transport(info.transport).name}")
            n = read(d, a.request, a.timeout)
            xfer.wait_complete(p.agent, a.request, a.timeout)
            print(f"VERIFIED {n}; P saw the request complete")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (pdkv.PdkvError, OSError, RuntimeError, AssertionError) as e:
        print(f"transfer: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)
