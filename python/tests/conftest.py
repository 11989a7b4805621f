"""pytest setup: makes ``python/`` importable from the repo root or from ``python/``."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pytest

if TYPE_CHECKING:
    import pdkv

PYTHON_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = PYTHON_DIR.parent
HEADER = REPO_ROOT / "capi" / "include" / "pdkv.h"
VECTORS_DIR = REPO_ROOT / "tests" / "vectors"
HF_CONFIGS = REPO_ROOT / "tests" / "data" / "hf_configs"

if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

# PDKV_TEST_WITHOUT_NUMPY=1: run as on a machine without numpy (pdkv never needs it), whether or
# not it is installed: every ``import numpy`` raises ImportError (scripts/test-all.sh runs both).
WITHOUT_NUMPY = bool(os.environ.get("PDKV_TEST_WITHOUT_NUMPY"))
if WITHOUT_NUMPY:
    sys.modules["numpy"] = None  # type: ignore[assignment]


@pytest.fixture(scope="module")
def ctx() -> Iterator[pdkv.PlanContext]:
    """A PlanContext for NVIDIA-Nemotron-3-Nano-30B-A3B, P TP4 -> D TP2 rank 0, both engines at
    2096-token blocks with FlashInfer kernel blocks (131 per block), 64 blocks and 6 regions per
    rank: the request shape of docs/benchmarks.md's planning section."""
    import pdkv  # after sys.path is set up above

    with pdkv.Model.from_preset("nemotron-3-nano-30b") as m:
        cfg = {tp: pdkv.EngineConfig(tp_size=tp, user_block_size=2096, backend="flashinfer") for tp in (2, 4)}
        p = [pdkv.EngineMetadata.from_model(m, cfg[4], pdkv.EngineLayout("p", r, 64, 6)) for r in range(4)]
        d = pdkv.EngineMetadata.from_model(m, cfg[2], pdkv.EngineLayout("d", 0, 64, 6))
        dg, pg = pdkv.Geometry(m, cfg[2]), pdkv.Geometry(m, cfg[4])
        with pdkv.PlanContext(d, p, local_geometry=dg, remote_geometry=pg) as c:
            yield c
