"""Checkpoints: atomic writes, keep-last-k, and RNG capture for exact resume.

A checkpoint is `<run>/checkpoints/step_XXXXXXXX.pt`. It is first written to a hidden temp
file in the same folder (`.step_XXXXXXXX.pt.*.tmp`, which the `step_*.pt` pattern never
matches), fsynced, and then renamed over the final name; the folder is fsynced after the
rename. A process killed at any moment therefore leaves either the complete new checkpoint
or none at all, and the previous checkpoints untouched. Old checkpoints are deleted only
after the new one is in place.
"""

from __future__ import annotations

import io
import logging
import os
import random
import shlex
import time
from pathlib import Path

import numpy as np
import torch

from ..config.keys import override_key
from ..data.files import atomic_write_bytes

log = logging.getLogger("normexp")

# TEST HOOK, not a setting: NORMEXP_TEST_CHECKPOINT_STALL="SECONDS" or "SECONDS@STEP" makes
# `save` sleep for SECONDS after writing the first half of the temp file (for every
# checkpoint, or only the one of STEP), so a test can kill the process mid-write.
STALL_ENV = "NORMEXP_TEST_CHECKPOINT_STALL"


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


def _test_stall_seconds(step: int) -> float:
    """Seconds the test hook asks `save` to sleep mid-write for this step (0 = no hook)."""
    spec = os.environ.get(STALL_ENV, "")
    if not spec:
        return 0.0
    seconds, _, only_step = spec.partition("@")
    if only_step and int(only_step) != step:
        return 0.0
    return float(seconds)


def _write_atomically(path: Path, data: bytes, stall: float = 0.0) -> None:
    """data.files.atomic_write_bytes; `stall` is the test hook's pause between the two halves
    of the temp file."""
    def pause():
        log.warning("%s: test hook stalls %.1f s mid-write of %s", STALL_ENV, stall, path.name)
        time.sleep(stall)

    atomic_write_bytes(path, data, mid_write=pause if stall else None)


def save(run_dir: Path, state: dict, keep: int = 2) -> Path:
    """Write step_XXXXXXXX.pt atomically, then delete all but the newest `keep` checkpoints
    and any temp file a killed process left behind."""
    folder = checkpoint_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{state['step']:08d}.pt"
    buffer = io.BytesIO()
    torch.save(state, buffer)
    _write_atomically(path, buffer.getbuffer(), stall=_test_stall_seconds(state["step"]))
    for old in list_checkpoints(run_dir)[: -max(1, keep)]:
        old.unlink(missing_ok=True)
    for stale in folder.glob(".step_*.pt.*.tmp"):  # only one process writes into a run folder
        stale.unlink(missing_ok=True)
    return path


def load_latest(run_dir: Path, map_location=None) -> dict | None:
    """The newest checkpoint that loads; a damaged newest one falls back to the one before."""
    for path in reversed(list_checkpoints(run_dir)):
        try:
            # our own files: they hold numpy/python RNG states, which weights_only refuses
            state = torch.load(path, map_location=map_location, weights_only=False)
        except Exception as e:  # noqa: BLE001 - a truncated or corrupt file
            log.warning("checkpoint %s does not load (%s); trying an older one", path.name, e)
            continue
        if isinstance(state, dict) and "step" in state and "model" in state:
            return state
        log.warning("checkpoint %s is not a normexp checkpoint; trying an older one", path.name)
    return None


def check_settings(state: dict, settings: dict, path: str, run_dir: Path) -> None:
    """Refuse (ConfigError, one line) a checkpoint trained with other settings than the run
    resuming it (e.g. copied in from another run's folder). `settings`: the resuming run's
    runfolder.result_settings; the checkpoint's own are its "settings" (checkpoints written
    before they were kept: the hyperparameters of its summary)."""
    from ..config.checks import ConfigError
    from .schema import HPARAMS
    from .folder import canonical_value

    saved = state.get("settings")
    if saved is None:  # an older checkpoint: its summary's hyperparameters are what it holds
        summary = state.get("summary") or {}
        # (warmup: the summary keeps the warmup as run, at most `steps`)
        saved = {k: canonical_value(summary[k]) for k in HPARAMS if k in summary and k in settings and k != "warmup"}
        mine = {k: settings[k] for k in saved}
    else:
        mine = settings
    for key in sorted(set(saved) | set(mine)):
        if saved.get(key) != mine.get(key):
            raise ConfigError(key, mine.get(key, "<unset>"), f"differs from the checkpoint {path} in {run_dir} "
                              f"({key}={saved.get(key, '<unset>')}): it was trained with other settings; resume "
                              "with the checkpoint's own run, or remove that checkpoint")


def resume_command(run_dir: Path, overrides: list[str] = (), sweep_dir: Path | None = None) -> str:
    """The command that continues this run, shell-quoted so it can be pasted: the job's own
    `overrides` plus resume=true and its folder. Inside a sweep (`sweep_dir`; `overrides` then
    the sweep's own), the sweep's command with resume=true and its folder instead (finished
    jobs are skipped, the others continue). launch/hydra_job.py reads both from Hydra."""
    # absolute folders: the command is pasted from wherever the user is (a report, a log)
    folder_key, folder, flags = "hydra.run.dir", str(Path(run_dir).resolve()), []
    if sweep_dir is not None:
        folder_key, folder, flags = "hydra.sweep.dir", str(Path(sweep_dir).resolve()), ["-m"]
    keep = [o for o in overrides if override_key(o) not in ("resume", "hydra.run.dir", "hydra.sweep.dir")]
    return shlex.join(["normexp", "train", *flags, *keep, "resume=true", f"{folder_key}={folder}"])
