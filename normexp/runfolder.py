"""The run-folder contract: what a training run leaves behind, and how to read it back.

    <run>/.hydra/config.yaml     the resolved config (Hydra)
    <run>/events.out.tfevents.*  TensorBoard scalars
    <run>/summary.json           status and final numbers (see SUMMARY_KEYS)
    <run>/checkpoints/step_XXXXXXXX.pt
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable

STATUSES = ("running", "completed", "diverged", "failed", "interrupted")

SUMMARY_KEYS = (
    "status", "steps_completed", "final_train_loss", "final_val_loss", "best_val_loss",
    "diverged_at_step", "tokens_per_second", "parameters", "wall_seconds", "norm", "placement",
    "layers", "d_model", "warmup", "lr", "seed", "deepnorm_alpha", "deepnorm_beta", "pid", "host",
)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    """Make a rename durable (a crash right after os.replace could otherwise lose it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open folders
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, mid_write: Callable[[], None] | None = None) -> None:
    """Write to a temp file in the same folder, fsync, rename over `path`, fsync the folder:
    a reader (or a kill at any moment) sees either the old file or the new one, never half
    of one. The file gets the permissions of a plain `open(path, "w")` (mkstemp's temp
    files are private, 0600), so others on a shared cluster can read a run's outputs.
    `mid_write`, if given, runs between the two halves of the data (a test hook)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            half = len(data) // 2 if mid_write else len(data)
            f.write(data[:half])
            if mid_write:
                f.flush()
                mid_write()
            f.write(data[half:])
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def write_summary(run_dir: Path, summary: dict) -> None:
    atomic_write_bytes(Path(run_dir) / "summary.json", (json.dumps(summary, indent=2) + "\n").encode())


def read_summary(run_dir: Path) -> dict | None:
    try:
        return json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return None


def find_runs(root: Path) -> list[Path]:
    """Every run folder under root (a folder with .hydra/config.yaml), sorted by path."""
    root = Path(root)
    return sorted(p.parent.parent for p in root.rglob(".hydra/config.yaml"))
