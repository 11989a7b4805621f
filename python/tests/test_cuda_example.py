"""GPU memory through the Python binding: ``examples/python/cuda_transfer.py`` (torch tensors on
the GPU registered by ``data_ptr()`` as ``MemoryType.CUDA``) in every mix of device and host
memory, READ and WRITE, clear and sealed, each byte checked by the example. Skipped, saying why,
where torch or a CUDA device is missing (CI); the example itself then reports SKIPPED and exits 0,
which is checked too."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT

EXAMPLE = REPO_ROOT / "examples" / "python" / "cuda_transfer.py"
KEY = "5a" * 32


def run_example(*args: str) -> "subprocess.CompletedProcess[str]":
    return subprocess.run(
        [sys.executable, str(EXAMPLE), *args],
        cwd=str(EXAMPLE.parent),
        env=dict(os.environ),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )


def test_the_example_says_why_it_skips_or_moves_device_memory() -> None:
    r = run_example()
    assert r.returncode == 0, r.stdout
    if "SKIPPED" in r.stdout:
        pytest.skip(r.stdout.strip())
    assert "VERIFIED" in r.stdout, r.stdout


@pytest.mark.parametrize("op", ["read", "write"])
@pytest.mark.parametrize("p_memory,d_memory", [("cuda", "cuda"), ("cuda", "host"), ("host", "cuda")])
@pytest.mark.parametrize("sealed", [False, True])
def test_device_memory_moves_byte_exact(op: str, p_memory: str, d_memory: str, sealed: bool) -> None:
    args = ["--op", op, "--p-memory", p_memory, "--d-memory", d_memory] + (["--key", KEY] if sealed else [])
    r = run_example(*args)
    assert r.returncode == 0, r.stdout
    if "SKIPPED" in r.stdout:
        pytest.skip(r.stdout.strip())
    assert "VERIFIED" in r.stdout and "over TCP" in r.stdout, r.stdout
