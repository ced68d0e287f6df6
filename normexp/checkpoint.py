"""Checkpoints: atomic writes, keep-last-k, and RNG capture for exact resume."""

from __future__ import annotations

import io
import logging
import random
from pathlib import Path

import numpy as np
import torch

from .runfolder import atomic_write_bytes

log = logging.getLogger("normexp")


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint files, oldest first (the step is zero-padded in the name)."""
    return sorted(checkpoint_dir(run_dir).glob("step_*.pt"))


def capture_rng() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(run_dir: Path, state: dict, keep: int = 2) -> Path:
    """Write step_XXXXXXXX.pt atomically, then delete all but the newest `keep`."""
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{state['step']:08d}.pt"
    buffer = io.BytesIO()
    torch.save(state, buffer)
    atomic_write_bytes(path, buffer.getvalue())
    for old in list_checkpoints(run_dir)[: -max(1, keep)]:
        old.unlink(missing_ok=True)
    return path


def load_latest(run_dir: Path, map_location=None) -> dict | None:
    """The newest checkpoint that loads; a damaged newest one falls back to the one before."""
    for path in reversed(list_checkpoints(run_dir)):
        try:
            # our own files: they hold numpy/python RNG states, which weights_only refuses
            return torch.load(path, map_location=map_location, weights_only=False)
        except Exception as e:  # noqa: BLE001 - a truncated or corrupt file
            log.warning("checkpoint %s does not load (%s); trying an older one", path.name, e)
    return None
