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


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write to a temp file in the same folder, fsync, then rename over `path`: a reader (or
    a kill mid-write) sees either the old file or the new one, never half of one. The file
    gets the permissions of a plain `open(path, "w")` (temp files are private, 0600), so
    others on a shared cluster can read the run's summary; the folder is fsynced too, so
    the rename itself survives a crash."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if hasattr(os, "fchmod"):  # POSIX
                os.fchmod(f.fileno(), 0o666 & ~_umask())
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if os.name == "posix":
        dir_fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


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
