"""Checkpoints: atomic writes, keep-last-k, and RNG capture for exact resume.

A checkpoint is `<run>/checkpoints/step_XXXXXXXX.pt`. It is first written to a hidden temp
file in the same folder (`.step_XXXXXXXX.pt.*.tmp`, which the `step_*.pt` pattern never
matches), fsynced, and then renamed over the final name; the folder is fsynced after the
rename. A process killed at any moment therefore leaves either the complete new checkpoint
or none at all, and the previous checkpoints untouched. Old checkpoints are deleted only
after the new one is in place.

Loading never runs code. A checkpoint is a pickle, and run folders are shared (a results
folder, a cluster's scratch space), so `torch.load(weights_only=True)` reads it: tensors,
numbers, strings and containers only. What normexp stores is kept to those (the numpy RNG
state as a tensor, statuses as their text); checkpoints written before that (format 1) also
hold numpy arrays and the Status enum, which `_LEGACY_GLOBALS` allows by name. A file that
names any other global is refused before it is unpickled (`unsafe_globals`).

Format 2 also fixed the optimizer's step count: format-1 checkpoints after a run's first
save kept the Adam step of that first save (FlatAdamW.state_dict, issue 38).
`reconcile_optimizer_steps` repairs those from the checkpoint's own step and refuses a
format-2 checkpoint whose count disagrees with it.
"""

from __future__ import annotations

import io
import logging
import os
import pickle
import random
import shlex
import time
from enum import Enum
from pathlib import Path

import numpy as np
import torch

from ..config.checks import ConfigError
from ..config.keys import hydra_quoted, override_key
from ..config.run_config import effective_warmup
from ..data.files import atomic_write_bytes
from .settings import canonical_value
from .schema import HPARAMS, Status

log = logging.getLogger("normexp")

# TEST HOOK, not a setting: NORMEXP_TEST_CHECKPOINT_STALL="SECONDS" or "SECONDS@STEP" makes
# `save` sleep for SECONDS after writing the first half of the temp file (for every
# checkpoint, or only the one of STEP), so a test can kill the process mid-write.
STALL_ENV = "NORMEXP_TEST_CHECKPOINT_STALL"

# 1: before issue 38 (numpy arrays and enums inside, a frozen Adam step count possible);
# 2: plain values only, the optimizer's step count equal to the training step.
FORMAT = 2


def _legacy_globals() -> list:
    """The non-tensor types a format-1 checkpoint holds: numpy's array reconstruction (the
    numpy RNG state) and the Status enum (in its summary). Nothing else is ever allowed."""
    try:  # why here: the module's name depends on numpy's version, and only old checkpoints need it
        from numpy._core.multiarray import _reconstruct  # numpy 2
    except ImportError:  # numpy 1
        from numpy.core.multiarray import _reconstruct

    return [_reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32)), Status]


def _global_name(obj) -> str:
    return f"{obj.__module__}.{obj.__qualname__}"


def checkpoint_dir(run_dir: Path) -> Path:
    return Path(run_dir) / "checkpoints"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Checkpoint files, oldest first (the step is zero-padded in the name)."""
    return sorted(checkpoint_dir(run_dir).glob("step_*.pt"))


def capture_rng() -> dict:
    """Every generator's state, in types a weights-only load reads (numpy's keys as a tensor)."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "numpy": (kind, torch.from_numpy(keys.astype(np.int64)), int(pos),
                                                      int(has_gauss), float(cached)),
             "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict) -> None:
    """capture_rng's state, or a format-1 checkpoint's (numpy's keys as an ndarray)."""
    torch.set_rng_state(state["torch"])
    kind, keys, *rest = state["numpy"]
    np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), *rest))
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
    if folder.is_symlink():  # the pre-flight refuses such a folder; never write or prune where a link points
        from .safe_files import FolderFileRefused, link_target
        raise FolderFileRefused(folder, f"is a symbolic link (to {link_target(folder)}); checkpoints are written and "
                                "pruned only inside the run folder", "replace it with a folder, then resume")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"step_{state['step']:08d}.pt"
    # plain values beside the tensors, so that load_latest reads it weights-only
    state = {key: value if key in ("model", "optimizer") else _plain(value) for key, value in state.items()}
    state["format"] = FORMAT
    buffer = io.BytesIO()
    torch.save(state, buffer)
    _write_atomically(path, buffer.getbuffer(), stall=_test_stall_seconds(state["step"]))
    for old in list_checkpoints(run_dir)[: -max(1, keep)]:
        old.unlink(missing_ok=True)
    for stale in folder.glob(".step_*.pt.*.tmp"):  # only one process writes into a run folder
        stale.unlink(missing_ok=True)
    return path


def _plain(value):
    """`value` with enums as their values and numpy scalars as Python numbers (containers kept)."""
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return type(value)((k, _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v) for v in value)
    return value


def unsafe_globals(path: Path) -> list[str]:
    """The globals a checkpoint's pickle names beyond what a weights-only load allows and
    normexp stores (read from its opcodes: nothing in it runs)."""
    allowed = {_global_name(g) for g in _legacy_globals()}
    return [g for g in torch.serialization.get_unsafe_globals_in_checkpoint(path) if g not in allowed]


def refuse_unsafe(path: Path, names: list[str]) -> None:
    raise ConfigError("resume", "true", f"{path} is not a checkpoint normexp wrote: loading it would call "
                      f"{', '.join(names[:3])}{' ...' if len(names) > 3 else ''}, so it was not loaded; "
                      "remove it (resume then continues from the checkpoint before it)")


def load_latest(run_dir: Path, map_location=None) -> dict | None:
    """The newest checkpoint that loads; a damaged newest one falls back to the one before.
    A checkpoint that would run code (a pickle naming globals normexp never stores) is refused
    with a ConfigError, never loaded and never skipped in silence."""
    for path in reversed(list_checkpoints(run_dir)):
        try:
            names = unsafe_globals(path)
        except pickle.UnpicklingError as e:
            if not str(e).startswith("Unsupported operand"):
                log.warning("checkpoint %s does not load (%s); trying an older one", path.name, e)
                continue
            # an intact pickle built with an opcode torch.save never writes (STACK_GLOBAL, memoized
            # names): its globals cannot be read without running it, so it is refused, not skipped
            raise ConfigError("resume", "true", f"{path} is not a checkpoint normexp wrote: its pickle uses an opcode "
                              f"torch.save never writes ({e}), which can call code, so it was not loaded; remove it "
                              "(resume then continues from the checkpoint before it)") from None
        except Exception as e:  # noqa: BLE001 - a truncated or corrupt file
            log.warning("checkpoint %s does not load (%s); trying an older one", path.name, e)
            continue
        if names:
            refuse_unsafe(path, names)
        try:
            with torch.serialization.safe_globals(_legacy_globals()):
                state = torch.load(path, map_location=map_location, weights_only=True)
        except Exception as e:  # noqa: BLE001 - a truncated or corrupt file
            log.warning("checkpoint %s does not load (%s); trying an older one", path.name,
                        " ".join(str(e).split())[:200])
            continue
        if isinstance(state, dict) and "step" in state and "model" in state:
            return state
        log.warning("checkpoint %s is not a normexp checkpoint; trying an older one", path.name)
    return None


def reconcile_optimizer_steps(state: dict, name: str, run_dir: Path) -> str | None:
    """Check that the optimizer's step count (Adam's bias correction) is the checkpoint's
    training step: one optimizer update per step. A format-1 checkpoint may hold the count of
    its run's first save (issue 38): repaired in place, and the returned line says so. A
    format-2 checkpoint that disagrees is refused (ConfigError): training on it would not
    continue the run."""
    step = state["step"]
    per_param = [s for s in (state.get("optimizer") or {}).get("state", {}).values() if "step" in s]
    counts = {float(s["step"]) for s in per_param}
    if not counts or max(counts) == step:  # (no state: saved before the first update)
        return None
    if state.get("format", 1) < 2 and len(counts) == 1:
        for s in per_param:
            s["step"] = torch.full_like(s["step"], step)
        return (f"{name} was written with a frozen Adam step count ({min(counts):g} instead of {step}, a bug of "
                f"checkpoints before format {FORMAT}): resuming with the count repaired to {step}")
    raise ConfigError("resume", "true", f"{name} in {run_dir} holds an optimizer that took {max(counts):g} "
                      f"steps, but the run {step}: it would not continue this run; remove it (resume then "
                      "continues from the checkpoint before it) or train in a new folder")


def check_settings(state: dict, settings: dict, path: str, run_dir: Path) -> None:
    """Refuse (ConfigError, one line) a checkpoint trained with other settings than the run
    resuming it (e.g. copied in from another run's folder). `settings`: the resuming run's
    runs.settings.result_settings; the checkpoint's own are its "settings" (checkpoints written
    before they were kept: the hyperparameters of its summary)."""
    saved = state.get("settings")
    if saved is None:  # an older checkpoint: its summary's hyperparameters are what it holds
        summary = state.get("summary") or {}
        saved = {k: canonical_value(summary[k]) for k in HPARAMS if k in summary and k in settings}
        mine = {k: settings[k] for k in saved}
        if "warmup" in saved and "steps" in settings:  # the summary keeps the warmup as run: both sides as run
            steps = settings["steps"]
            saved["warmup"], mine["warmup"] = effective_warmup(saved["warmup"], steps), effective_warmup(mine["warmup"], steps)
    else:
        mine = settings
    for key in sorted(set(saved) | set(mine)):
        if saved.get(key) != mine.get(key):
            raise ConfigError(key, mine.get(key, "<unset>"), f"differs from the checkpoint {path} in {run_dir} "
                              f"({key}={saved.get(key, '<unset>')}): it was trained with other settings; resume "
                              "with the checkpoint's own run, or remove that checkpoint")


def resume_folder_command(run_dir: Path) -> str:
    """`normexp resume FOLDER`, shell-quoted, for a stopped run: its sweep's folder when the run
    is a sweep's job (the folder above holds Hydra's multirun.yaml: the sweep continues its
    unfinished jobs), else its own. Short, and it replays the settings the folder recorded."""
    folder = Path(run_dir).resolve()
    if (folder.parent / "multirun.yaml").is_file():
        folder = folder.parent
    return shlex.join(["normexp", "resume", str(folder)])


def resume_command(run_dir: Path, overrides: list[str] = (), sweep_dir: Path | None = None) -> str:
    """The command that continues this run, shell-quoted so it can be pasted: the job's own
    `overrides` plus resume=true and its folder (quoted for Hydra too: a default folder's name
    holds `=` and `,`). Inside a sweep (`sweep_dir`; `overrides` then
    the sweep's own), the sweep's command with resume=true and its folder instead (finished
    jobs are skipped, the others continue). launch/hydra_state.py reads both from Hydra."""
    # absolute folders: the command is pasted from wherever the user is (a report, a log)
    folder_key, folder, flags = "hydra.run.dir", str(Path(run_dir).resolve()), []
    if sweep_dir is not None:
        folder_key, folder, flags = "hydra.sweep.dir", str(Path(sweep_dir).resolve()), ["-m"]
    keep = [o for o in overrides if override_key(o) not in ("resume", "hydra.run.dir", "hydra.sweep.dir")]
    return shlex.join(["normexp", "train", *flags, *keep, "resume=true", f"{folder_key}={hydra_quoted(folder)}"])
