"""Where the program finds the stack files: the cluster stacks read the hub's and their siblings' files,
and an add-ons stack its cluster's. Pulumi's ``stackConfigDir`` (Pulumi.yaml), or wherever
``agk plan --stacks-dir`` points (it sets ``AGK_STACKS_DIR``)."""

from __future__ import annotations

import os
from pathlib import Path

ENV = "AGK_STACKS_DIR"
DEFAULT_STACKS_DIR = Path(__file__).resolve().parents[2] / "stacks"


def stacks_dir() -> Path:
    return Path(os.environ.get(ENV) or DEFAULT_STACKS_DIR)
