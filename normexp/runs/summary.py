"""A run's summary record, <run>/summary.json: its status and final numbers (fields:
schema.py). summary_record makes it, write_summary is its one writer, set_status a status
transition, read_summary reads it back; the HParams row and the learned-or-stalled verdict
(beat_baseline) come from it."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path

from ..config.run_config import effective_warmup
from ..data.files import atomic_write_bytes
from .schema import (EXECUTION_FACTS, HPARAMS, LOSS_TRAJECTORY, OUTCOME_FIELDS, SETTINGS_FIELDS, STATUSES, Status,
                     check_status_change)


def data_label(cfg) -> str:
    """A readable corpus name: the Hub config or path for Hub presets, else the group name."""
    return str(cfg.data.get("config") or cfg.data.get("path") or cfg.data.name)


def hyperparameters(cfg) -> dict:
    """The HPARAMS of a composed config as the summary records them: a config group by its
    option's name, the warmup as run (at most `steps`), the corpus by `data_label`."""
    row = {k: cfg[k].name if isinstance(cfg[k], Mapping) else cfg[k] for k in HPARAMS}
    if isinstance(cfg.warmup, int) and isinstance(cfg.steps, int):
        row["warmup"] = effective_warmup(cfg.warmup, cfg.steps)
    row["data"] = data_label(cfg)
    return row


def summary_record(cfg, **facts) -> dict:
    """The one summary record: summary.json, the TensorBoard HParams row and the report all
    read it (its fields: schema.py). Starts from the config's hyperparameters; `facts` add or
    replace fields (the model's resolved settings, where it ran, the outcome)."""
    record = {**dict.fromkeys(OUTCOME_FIELDS), "status": Status.RUNNING, "steps_completed": 0, "requeues": 0,
              "stall_margin": cfg.stall_margin,
              "learned_margin": cfg.outcome.learned_margin, LOSS_TRAJECTORY: {"train": [], "val": []},
              # null until the loss-spike rule first judges (train/run_log.RunLog.check_spike)
              "loss_spikes": None, "loss_spikes_judged_from": "never", "loss_spike_steps": [],
              **dict.fromkeys(EXECUTION_FACTS), **hyperparameters(cfg),
              **{f: {} for f in SETTINGS_FIELDS.values()}}
    record.update(facts)
    return record


def beat_baseline(final_val_loss, baseline_loss, margin: float) -> bool:
    """Did a run learn beyond the unigram baseline: final_val_loss <= (1 - margin) * baseline?
    Without a baseline (an old run) a finite loss counts as learned. Decides "completed"
    against "stalled" when a run ends."""
    if final_val_loss is None or not math.isfinite(final_val_loss):
        return False
    return baseline_loss is None or final_val_loss <= (1 - margin) * baseline_loss


def _as_declared(key: str, value):
    """A whole number given for a setting whose shipped default is a float (`z_loss=0`, `lr=1`)
    as that float: the HParams table writes ints as text (logbook.write_hparams), so an explicit
    0 would read '0' beside the default's 0.0 in one column."""
    from ..config.defaults import shipped

    default = shipped("train").get(key)
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def hparams_row(summary: dict) -> dict:
    """The HParams row of a run: HPARAMS in order, then the variant settings the run used
    (a placement without settings adds none, rather than a 0 that reads as a value)."""
    row = {k: _as_declared(k, summary.get(k)) for k in HPARAMS}
    for group, field in SETTINGS_FIELDS.items():
        row.update({f"{group}.{k}": v for k, v in (summary.get(field) or {}).items()})
    return row


def write_summary(run_dir: Path, summary: dict) -> None:
    """The one writer of summary.json, and so the one owner of a run's status: training
    (running, then how it ended) and the launch layer (interrupted, requeued, failed;
    `set_status`) both write through here. A status that summary.json may not hold (not in
    STATUSES), or a change from the status on disk that schema.TRANSITIONS does not allow
    (a finished run made "running" again), is a bug: refused (StatusChangeRefused)."""
    if summary.get("status") is not None and summary["status"] not in STATUSES:
        raise ValueError(f"status {summary['status']!r} is not one summary.json may hold ({', '.join(STATUSES)})")
    if summary.get("status") is not None:
        on_disk = read_summary(run_dir) or {}
        check_status_change(on_disk.get("status") if on_disk.get("status") in STATUSES else None, summary["status"])
    atomic_write_bytes(Path(run_dir) / "summary.json", (json.dumps(summary, indent=2) + "\n").encode())


def set_status(run_dir: Path, status: Status, base: dict | None = None, **facts) -> dict:
    """A status transition: summary.json as it is (or `base` under it, where it is missing a
    field), with `status` and `facts` set; returns what was written."""
    summary = {**(base or {}), **(read_summary(run_dir) or {}), "status": Status(status), **facts}
    write_summary(run_dir, summary)
    return summary


def read_summary(run_dir: Path) -> dict | None:
    """summary.json as a dict; None if there is none, or it is no JSON object (damaged or
    hand-edited: a list, a string), which the pre-flight refuses by name (resume.py)."""
    from .safe_files import read_json  # no link followed, a regular file, bounded (a shared folder's file)

    try:
        summary = read_json(run_dir, "summary.json")
    except (OSError, ValueError):  # FolderFileRefused is a ValueError
        return None
    return summary if isinstance(summary, dict) else None
