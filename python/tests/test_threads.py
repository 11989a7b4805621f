"""Handles under threads: close() racing calls on the same handle never frees memory a call is
using (ctypes releases the GIL during C calls). Every call either completes normally or raises
ClosedError, close() waits for calls in flight, and concurrent queries stay concurrent."""

from __future__ import annotations

import ctypes
import threading
import time
from typing import Any, Callable, List

import pytest

import pdkv
from pdkv import _base

NANO = "nemotron-3-nano-30b"


def _metadata(model: pdkv.Model) -> pdkv.EngineMetadata:
    return pdkv.EngineMetadata.from_model(model, pdkv.EngineConfig(tp_size=2))


def test_close_waits_for_a_call_in_flight_and_the_pointer_stays_valid() -> None:
    """Deterministic: an operation holds the model (as a C call in flight would); close() on
    another thread must not free it until the operation returns, and new calls meanwhile raise
    ClosedError. The held pointer is used for a real C query after close() has begun."""
    m = pdkv.Model.from_preset(NANO)
    holding = threading.Event()
    release = threading.Event()
    seen: List[Any] = []

    @_base.operation
    def in_flight() -> None:
        ptr = _base.handle_arg("model", m, pdkv.Model)
        holding.set()
        assert release.wait(10)
        a, b = ctypes.c_uint32(), ctypes.c_uint32()
        _base.call("pdkv_model_layer_counts", ptr, ctypes.byref(a), ctypes.byref(b))
        seen.append((a.value, b.value))

    user = threading.Thread(target=in_flight)
    user.start()
    assert holding.wait(10)
    closer = threading.Thread(target=m.close)
    closer.start()
    closer.join(0.3)
    assert closer.is_alive(), "close() freed the handle while a call was in flight"
    assert m.closed
    with pytest.raises(pdkv.ClosedError):
        m.layer_counts()  # a call that starts after close() began
    release.set()
    user.join(10)
    closer.join(10)
    assert not user.is_alive() and not closer.is_alive()
    assert seen == [(6, 23)]
    assert not m._finalizer.alive
    with pytest.raises(pdkv.ClosedError):
        m.describe()
    m.close()  # idempotent


def test_same_handle_twice_in_one_call_does_not_block_close() -> None:
    """md.equals(md) takes the same handle twice: counted once, released once, so a close()
    after it returns does not wait forever."""
    with pdkv.Model.from_preset(NANO) as m:
        md = _metadata(m)
    assert md.equals(md) and md == md
    done = threading.Thread(target=md.close)
    done.start()
    done.join(10)
    assert not done.is_alive() and md.closed


def test_concurrent_queries_overlap() -> None:
    """Two operations can hold the same handle at once (const queries stay concurrent)."""
    with pdkv.Model.from_preset(NANO) as m:
        both = threading.Barrier(2, timeout=10)

        @_base.operation
        def hold() -> None:
            _base.handle_arg("model", m, pdkv.Model)
            both.wait()  # both threads are in flight on m here, or this times out
            m.layer_counts()

        threads = [threading.Thread(target=hold) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert m._in_flight == 0


def test_hammering_queries_while_another_thread_closes() -> None:
    """Threads query one model / metadata pair (incl. same-handle-twice calls) in a loop while
    another closes them: no crash, and every call succeeds or raises ClosedError."""
    for round_ in range(25):
        m = pdkv.Model.from_preset(NANO)
        md = _metadata(m)
        other = _metadata(m)
        queries: List[Callable[[], Any]] = [
            m.describe,
            m.layer_counts,
            lambda: m.name,
            lambda: pdkv.model_fingerprint(m),
            lambda: md.equals(md),
            lambda: md.equals(other),
            lambda: other.equals(md),
            md.encode,
            md.info,
            lambda: pdkv.handshake_validate(md, md).compatible,
            lambda: list(pdkv.handshake_validate(other, md)),
            md.regions,
            lambda: _metadata(m),
        ]
        start = threading.Barrier(5, timeout=10)
        stop = threading.Event()
        unexpected: List[BaseException] = []
        counts = {"ok": 0, "closed": 0}
        lock = threading.Lock()

        def hammer(offset: int) -> None:
            start.wait()
            i = offset
            while not stop.is_set():
                try:
                    queries[i % len(queries)]()
                    with lock:
                        counts["ok"] += 1
                except pdkv.ClosedError:
                    with lock:
                        counts["closed"] += 1
                except BaseException as e:  # noqa: BLE001 - anything else is a failure
                    unexpected.append(e)
                    return
                i += 1

        threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        start.wait()
        time.sleep(0.001 * (round_ % 5))
        closers = [threading.Thread(target=h.close) for h in (md, m, other)]
        for c in closers:
            c.start()
        for c in closers:
            c.join(10)
        assert not any(c.is_alive() for c in closers), "close() hung"
        time.sleep(0.005)  # calls after close must raise ClosedError
        stop.set()
        for t in threads:
            t.join(10)
        assert not any(t.is_alive() for t in threads)
        assert not unexpected, unexpected
        assert counts["closed"] > 0
        assert m.closed and md.closed and other.closed
        assert m._in_flight == md._in_flight == other._in_flight == 0


def test_every_handle_method_and_handle_taking_function_is_an_operation() -> None:
    """Every code path that takes a handle's pointer runs inside an operation (else close()
    could free it mid-call); _p() outside one is an internal error, not a silent race."""
    import inspect

    import pdkv as pkg

    missing = []
    for modname in ("descriptors", "geometry", "mamba", "metadata", "model", "plan", "plan_request", "topology",
                    "trim"):
        mod = getattr(pkg, modname, None) or __import__(f"pdkv.{modname}", fromlist=["x"])
        for name, obj in vars(mod).items():
            if inspect.isfunction(obj) and obj.__module__ == mod.__name__:
                src = inspect.getsource(obj)
                # *_in_operation helpers run inside their caller's operation (_p() raises outside one).
                if ("handle_arg(" in src or "._p()" in src) and not getattr(obj, "__pdkv_operation__", False) \
                        and not name.endswith("_in_operation"):
                    missing.append(f"{modname}.{name}")
    assert not missing, missing
    with pdkv.Model.from_preset(NANO) as m:
        with pytest.raises(RuntimeError, match="outside an operation"):
            m._p()
