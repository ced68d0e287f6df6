"""The run-folder contract: what a training run leaves behind, and how to read it back.

    <run>/.hydra/config.yaml     the resolved config (Hydra)
    <run>/events.out.tfevents.*  TensorBoard scalars
    <run>/summary.json           status and final numbers (see summary_record)
    <run>/checkpoints/step_XXXXXXXX.pt
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Callable

from .names import FINISHED, HPARAMS, LOSS_TRAJECTORY, OUTCOME_FIELDS, RUN_FIELDS, SETTINGS_FIELDS, STATUSES  # noqa: F401 - re-exported

# Keys that say how to run, not what to compute: a resumed run may change them, the report
# never calls them "varied", and run names leave them out (train.yaml's exclude_keys holds
# them too, with the path keys; tests/test_cli.py checks the two agree).
RUN_SETTINGS = ("resume", "threads", "device", "compile", "log.progress", "checkpoint_every", "keep_checkpoints")


def cache_root() -> Path:
    """Where downloaded corpora and token caches live: $NORMEXP_CACHE, else
    $XDG_CACHE_HOME/normexp, else ~/.cache/normexp."""
    if os.environ.get("NORMEXP_CACHE"):
        return Path(os.environ["NORMEXP_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "normexp"
    return Path.home() / ".cache" / "normexp"


def data_label(cfg) -> str:
    """A readable corpus name: the Hub config or path for Hub presets, else the group name."""
    return str(cfg.data.get("config") or cfg.data.get("path") or cfg.data.name)


def hyperparameters(cfg) -> dict:
    """The HPARAMS of a composed config as the summary records them: a config group by its
    option's name, the warmup as run (at most `steps`), the corpus by `data_label`."""
    from collections.abc import Mapping

    row = {k: cfg[k].name if isinstance(cfg[k], Mapping) else cfg[k] for k in HPARAMS}
    if isinstance(cfg.warmup, int) and isinstance(cfg.steps, int):
        row["warmup"] = min(cfg.warmup, cfg.steps)
    row["data"] = data_label(cfg)
    return row


def summary_record(cfg, **facts) -> dict:
    """The one summary record: summary.json, the TensorBoard HParams row and the report all
    read it (its fields: names.py). Starts from the config's hyperparameters; `facts` add or
    replace fields (the model's resolved settings, where it ran, the outcome)."""
    record = {**dict.fromkeys(OUTCOME_FIELDS), "status": "running", "steps_completed": 0, "requeues": 0,
              "stall_margin": cfg.stall_margin,
              "learned_margin": cfg.outcome.learned_margin, LOSS_TRAJECTORY: {"train": [], "val": []},
              **dict.fromkeys(RUN_FIELDS), **hyperparameters(cfg),
              **{f: {} for f in SETTINGS_FIELDS.values()}}
    record.update(facts)
    return record


def beat_baseline(final_val_loss, baseline_loss, margin: float) -> bool:
    """Did a run learn beyond the unigram baseline: final_val_loss <= (1 - margin) * baseline?
    Without a baseline (an old run) a finite loss counts as learned. Decides "completed"
    against "stalled" when a run ends."""
    import math

    if final_val_loss is None or not math.isfinite(final_val_loss):
        return False
    return baseline_loss is None or final_val_loss <= (1 - margin) * baseline_loss



def hparams_row(summary: dict) -> dict:
    """The HParams row of a run: HPARAMS in order, then the variant settings the run used
    (a placement without settings adds none, rather than a 0 that reads as a value)."""
    row = {k: summary.get(k) for k in HPARAMS}
    for group, field in SETTINGS_FIELDS.items():
        row.update({f"{group}.{k}": v for k, v in (summary.get(field) or {}).items()})
    return row


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


# ------------------------------------------------------------- the run's own record
# Hydra rewrites <run>/.hydra/config.yaml when a job starts, before normexp sees it, so a
# resumed sweep job cannot compare against it. normexp keeps its own copy, written once when
# the run begins: the job config and overrides as Hydra wrote them, and the identity of the
# data files (data.files is left out of sweep folder names, so a changed corpus reuses the folder).
RECORD = "normexp_run.json"


def file_identity(path) -> dict:
    """{path (absolute), bytes, mtime_ns, sha256} of a data file."""
    import hashlib

    p = Path(str(path)).expanduser().resolve()
    digest = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    st = p.stat()
    return {"path": str(p), "bytes": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": digest.hexdigest()}


def same_file(recorded: dict) -> bool:
    """Does the file still hold what it held when recorded? (size and mtime unchanged: yes;
    else its hash decides, so a copy or a `touch` is not a change)."""
    p = Path(recorded["path"])
    try:
        st = p.stat()
    except OSError:
        return False
    if st.st_size != recorded["bytes"]:
        return False
    return st.st_mtime_ns == recorded["mtime_ns"] or file_identity(p)["sha256"] == recorded["sha256"]


def data_files(data) -> list[str]:
    """The local files a data config reads (its source's local_files: data=text's files and
    val_files, ...), as written."""
    from .corpora import source_for

    return source_for(data).local_files()


def write_record(run_dir: Path, data) -> None:
    """Keep the job config Hydra just wrote into <run>/.hydra, and the data files' identity."""
    hydra_dir = Path(run_dir) / ".hydra"
    record = {name: (hydra_dir / f"{name}.yaml").read_text() for name in ("config", "overrides")
              if (hydra_dir / f"{name}.yaml").is_file()}
    record["data_files"] = [file_identity(f) for f in data_files(data)]
    atomic_write_bytes(Path(run_dir) / RECORD, (json.dumps(record, indent=1) + "\n").encode())


def read_record(run_dir: Path) -> dict | None:
    try:
        record = json.loads((Path(run_dir) / RECORD).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("config"), str) else None


def restore_hydra_files(run_dir: Path) -> None:
    """Put back the run's own .hydra/config.yaml and overrides.yaml after Hydra rewrote them
    for a job that was then refused."""
    record = read_record(run_dir)
    if record is None:
        return
    (Path(run_dir) / ".hydra").mkdir(parents=True, exist_ok=True)
    for name in ("config", "overrides"):
        if isinstance(record.get(name), str):
            atomic_write_bytes(Path(run_dir) / ".hydra" / f"{name}.yaml", record[name].encode())


def trained_nothing(run_dir: Path, summary: dict | None) -> bool:
    """A run that failed before training began (no checkpoint, no TensorBoard events): its
    folder may be reused by the corrected command, as nothing in it would be lost."""
    run_dir = Path(run_dir)
    return (summary or {}).get("status") == "failed" and not any(run_dir.glob("checkpoints/step_*.pt")) \
        and not any(run_dir.glob("events.out.tfevents*"))
