"""pytest setup: makes ``python/`` importable from the repo root or from ``python/``."""

from __future__ import annotations

import sys
from pathlib import Path

PYTHON_DIR = Path(__file__).resolve().parent.parent
REPO_ROOT = PYTHON_DIR.parent
HEADER = REPO_ROOT / "capi" / "include" / "pdkv.h"
VECTORS_DIR = REPO_ROOT / "tests" / "vectors"
HF_CONFIGS = REPO_ROOT / "tests" / "data" / "hf_configs"

if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))
