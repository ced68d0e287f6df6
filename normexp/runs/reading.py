"""Runs as data: read every run folder under a path into pandas DataFrames.

    >>> from normexp import runs
    >>> df = runs.load("runs/multirun/2026-11-23/19-00-00")     # one row per run
    >>> df.groupby(["placement.name", "lr"])["final_val_loss"].mean()
    >>> curves = runs.scalars("runs/multirun/...", ["val/loss", "grad_norm/layer_*"])

`read_runs` is the one reader: `load`, `scalars` and `normexp report` all go through it.
It reads the run-folder contract (runs/__init__.py) and nothing else:

    summary.json            status and final numbers
    .hydra/config.yaml      the hyperparameters (flattened: placement.name, norm.eps, lr, ...)
    .hydra/overrides.yaml   the overrides the sweep gave the run
    events.out.tfevents.*   TensorBoard scalars (val/loss, train/loss, per-layer instruments)

A run still going (status "running"; "killed" if its process is gone from this host) has
no final numbers in summary.json: its values come from its event file, as far as flushed.
A summary.json that is not a JSON object of the expected types (hand-edited, written by
another tool) makes the run "malformed": its numbers are not read, and `problem` (the
frame's `error`) names the file and what is wrong; the other runs are read as usual.
"""

from __future__ import annotations

import fnmatch
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..config.run_config import effective_warmup
from . import safe_files
from .process import process_alive as _process_alive
from .schema import NUMERIC_FIELDS, OUTCOME_FIELDS, STATUSES, TOKENS_PER_SECOND, TRAIN_LOSS, VAL_LOSS
from .schema import Status
from .settings import flat_settings

# summary.json fields that load() puts in its frame besides the status (the hyperparameters come from the config)
FRAME_FIELDS = tuple(f for f in OUTCOME_FIELDS if f not in ("status", "requeues"))


def walk_folders(root: Path):
    """(folder, file names) of every folder under root, root included. Symlinked folders are
    followed, each real folder once (a link back up the tree, or a second link to a folder
    already found, adds nothing), so nothing is missed or counted twice."""
    seen = set()
    for folder, subfolders, files in os.walk(Path(root), followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:  # reached again through a link: a cycle or a duplicate
            subfolders[:] = []
            continue
        seen.add(real)
        yield Path(folder), files


def find_runs(root: Path) -> list[Path]:
    """Every run folder under root (a folder with .hydra/config.yaml), sorted by path; symlinked
    folders followed as walk_folders does."""
    return sorted(folder.parent for folder, files in walk_folders(root)
                  if folder.name == ".hydra" and "config.yaml" in files)


def relative_name(folder: Path, root: Path) -> str:
    """A folder found under root as committed files name it: relative to root ("." for root
    itself), never this machine's absolute path."""
    return str(folder.relative_to(root)) if folder != root else "."


def find_files(root: Path, name: str) -> list[Path]:
    """Every file called `name` under root, sorted, found the way find_runs finds runs (so a
    report sees a linked sweep's tables as it sees its runs)."""
    return sorted(folder / name for folder, files in walk_folders(root) if name in files)


@dataclass
class Run:
    path: Path
    rel: str                       # path relative to the root it was read from
    config: dict                   # flattened .hydra/config.yaml
    overrides: list[str]
    summary: dict                  # {} if there is no summary.json yet
    scalars: dict = field(default_factory=dict)  # tag -> [(step, value)], sorted by step
    index: int = 0
    problem: str | None = None     # why summary.json or the config could not be used ("malformed"), else None

    @property
    def status(self) -> str:
        """summary.json's status, except "killed" for a run that says "running" but whose
        process is gone (SIGKILL, out of memory, a lost node): checked when the run was
        started on this host; elsewhere there is no telling, and it stays "running".
        "malformed": summary.json is there but not readable as a summary (see `problem`)."""
        if self.problem:
            return Status.MALFORMED
        status = self.summary.get("status") or Status.UNKNOWN
        if status == Status.RUNNING and not process_alive(self.summary):
            return Status.KILLED
        return status

    @property
    def unfinished(self) -> bool:
        """Started but without final numbers: still running, killed mid-run, or waiting in
        SLURM's queue after a preemption."""
        return self.status in (Status.RUNNING, Status.KILLED, Status.REQUEUED)

    def last(self, tag: str) -> float | None:
        points = self.scalars.get(tag)
        return points[-1][1] if points else None

    def metrics(self) -> dict:
        """Summary values; for a run without final numbers yet (running, or no summary),
        the latest values in its event file."""
        s = dict(self.summary)
        if self.problem:
            s["error"] = self.problem
        if self.unfinished or self.status == Status.UNKNOWN:
            val = [v for _, v in self.scalars.get(VAL_LOSS, [])]
            steps = [st + 1 for st, _ in self.scalars.get(TRAIN_LOSS, [])]
            steps += [st for st, _ in self.scalars.get(VAL_LOSS, [])]
            s.setdefault("final_val_loss", None)
            if s.get("final_val_loss") is None and val:
                s["final_val_loss"] = val[-1]
            if s.get("best_val_loss") is None and val:
                s["best_val_loss"] = min(val)
            if s.get("final_train_loss") is None:
                s["final_train_loss"] = self.last(TRAIN_LOSS)
            if s.get("tokens_per_second") is None:
                s["tokens_per_second"] = self.last(TOKENS_PER_SECOND)
            if steps:
                s["steps_completed"] = max(steps)
        return s


def process_alive(summary: dict) -> bool:
    """False only when the run's process is known to be gone (runs.process.process_alive: same
    host, and no such pid, or the pid's process is not the run's, or the machine restarted)."""
    return _process_alive(summary) is not False


def summary_problem(summary) -> str | None:
    """What makes a parsed summary.json unusable, or None: not an object, an unknown status,
    or a number field holding something else (a string loss, a list)."""
    if not isinstance(summary, dict):
        return f"holds a JSON {type(summary).__name__}, not an object"
    status = summary.get("status")
    if status is not None and status not in STATUSES:
        return f"status {status!r} is not one of {', '.join(STATUSES)}"
    for key in NUMERIC_FIELDS:
        v = summary.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))):
            return f"{key} is {json.dumps(v)[:40]}, not a number"
    return None


def read_summary_checked(run_dir: Path) -> tuple[dict, str | None]:
    """(summary, None), or ({}, the problem naming the file) if summary.json cannot be used;
    ({}, None) if there is none yet. Read as runs.safe_files reads a shared folder's records (no
    link followed, a regular file, bounded in size)."""
    path = Path(run_dir) / "summary.json"
    if not os.path.lexists(path):
        return {}, None
    try:
        data = safe_files.read_json(run_dir, "summary.json")
    except safe_files.FolderFileRefused as e:
        return {}, str(e)
    except OSError as e:
        return {}, f"{path}: cannot be read ({e.strerror})"
    except ValueError as e:  # written atomically by normexp, so never half a file: damaged
        return {}, f"{path}: not valid JSON ({e})"
    problem = summary_problem(data)
    if problem:
        return {}, f"{path}: {problem}"
    return data, None


def flatten(node, prefix: str = "") -> dict:
    """{"optim": {"lr": 1.0}} -> {"optim.lr": 1}: dotted keys, each value in its one canonical
    form (runs.settings.canonical_value: grad_clip=1 and grad_clip=1.0 are one value), lists as
    the string form of their canonical items ("[0.9, 0.98]")."""
    def shown(v):  # as str(list) writes it
        return "[" + ", ".join(map(shown, v)) + "]" if isinstance(v, tuple) else repr(v)

    return {k: shown(v) if isinstance(v, tuple) else v for k, v in flat_settings(node, prefix).items()}


def read_config(run_dir: Path) -> tuple[dict, str | None]:
    """(flattened .hydra/config.yaml, None), or (what could be read, the problem naming the file).

    Read as plain YAML, nothing resolved (runs.safe_files): a folder is shared, and OmegaConf would
    resolve a planted `lr: ${oc.env:SECRET}` to the environment's value as it loads, into every
    table and figure. normexp never records an interpolation (resume refuses one: runs.replay), so a
    run whose config holds one is reported with the `${...}` as written and its problem (the report
    leaves it out of every statistic; its settings hold None where the `${...}` was). A config that is no readable YAML makes the run anonymous
    ({}); one normexp will not read (a link, not a regular file, an alias) is a problem too."""
    path = Path(run_dir) / ".hydra" / "config.yaml"
    try:
        node = safe_files.read_yaml(run_dir, Path(".hydra") / "config.yaml")
    except safe_files.FolderFileRefused as e:
        return {}, str(e)
    except OSError:
        return {}, None
    if not isinstance(node, dict):
        return {}, None
    config = flatten(node)
    found = safe_files.interpolation_in(node)
    if found is None:
        return config, None
    # the value as written is in the problem (and so the run's error); the settings hold none, so no
    # table, figure or statistic sorts or pools a "${...}" beside numbers
    return ({k: None if isinstance(v, str) and "${" in v else v for k, v in config.items()},
            safe_files.printable(f"{path}: {found[0]} holds an interpolation ({found[1]}), which normexp never "
                                 "records and does not resolve (it would read another setting or the environment); "
                                 "fix or remove that file"))


def load_config(run_dir: Path) -> dict:
    """The flattened .hydra/config.yaml as written, nothing resolved (read_config); {} if unreadable."""
    return read_config(run_dir)[0]


def warmup_as_run(config: dict, overrides: list[str]) -> dict:
    """The flattened config with the warmup the run used: the default warmup cut to the run's
    steps (it warms up over all of them), as summary.json and HParams record it
    (runs.summary.hyperparameters). A warmup given above steps is refused before training
    (launch.validate), so such a run keeps the value it was refused for."""
    warmup, steps = config.get("warmup"), config.get("steps")
    given = any(o.lstrip("+~").split("=", 1)[0] == "warmup" for o in overrides)
    if isinstance(warmup, int) and isinstance(steps, int) and not given:
        return {**config, "warmup": effective_warmup(warmup, steps)}
    return config


def load_overrides(run_dir: Path) -> list[str]:
    try:
        overrides = safe_files.read_yaml(run_dir, Path(".hydra") / "overrides.yaml")
    except (OSError, ValueError):  # optional file; a refused one (a link) is named by read_config's problem
        return []
    return [str(o) for o in overrides] if isinstance(overrides, list) else []


def load_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run's TensorBoard event files (none yet: {})."""
    if not any(run_dir.glob("events.out.tfevents.*")):
        return {}
    # why here: tensorboard takes ~0.5 s to import; the pre-flight imports this module (runs.resume)
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # 0 keeps every scalar point; the other kinds are not needed, so keep one of each.
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "histograms": 1, "images": 1,
                                                        "audio": 1, "tensors": 1, "compressedHistograms": 1})
    # a resumed run's events restart at its checkpoint (purge_step); TensorBoard's reader
    # warns "Purging ... expired events" for that, which is expected here, not news
    tb_log = logging.getLogger("tensorboard")
    level = tb_log.level
    tb_log.setLevel(logging.ERROR)
    try:
        acc.Reload()
    except Exception:  # noqa: BLE001 - a file being written can end mid-record
        pass
    finally:
        tb_log.setLevel(level)
    out = {}
    for tag in acc.Tags().get("scalars", []):
        by_step = {e.step: e.value for e in acc.Scalars(tag)}  # a resumed run may repeat steps
        out[tag] = sorted(by_step.items())
    return out


def read_runs(root: str | Path) -> list[Run]:
    """Every run folder under `root` (a folder holding .hydra/config.yaml; `root` itself may be
    one), with its config, overrides, summary and scalars, sorted by path. The one reader of
    run folders: `load`, `scalars` and `normexp report` use it."""
    root = Path(root)
    runs = []
    for run_dir in find_runs(root):
        rel = relative_name(run_dir, root)
        summary, problem = read_summary_checked(run_dir)
        config, config_problem = read_config(run_dir)
        overrides = load_overrides(run_dir)
        runs.append(Run(run_dir, rel, warmup_as_run(config, overrides), overrides, summary,
                        load_scalars(run_dir), problem=config_problem or problem))
    return runs


def frame(runs: list[Run]):
    """One row per run: `run` (its folder relative to the root), `path`, `status` (as the
    report sees it: "killed" for a run whose process is gone), the summary's numbers
    (FRAME_FIELDS; a running run's from its event file) and every flattened config key."""
    import pandas as pd  # why here: ~0.3 s; the pre-flight imports this module (runs.resume)

    rows = []
    for r in runs:
        m = r.metrics()
        row = {"run": r.rel, "path": str(r.path), "status": r.status}
        row.update({k: m.get(k) for k in FRAME_FIELDS})
        row.update({k: v for k, v in r.config.items() if k not in row})
        rows.append(row)
    return pd.DataFrame(rows)


def load(path: str | Path):
    """The runs under `path` as a pandas DataFrame, one row per run.

    Columns: `run` (folder relative to `path`), `path`, `status` (running, completed, stalled,
    diverged, failed, interrupted, requeued; "killed" for a run whose process is gone;
    "malformed" for an unusable summary.json, with `error` saying what is wrong), the summary's
    outcome (FRAME_FIELDS, described in names.OUTCOME_FIELDS: steps_completed, final_val_loss,
    best_val_loss, ..., error) and every config key, flattened with dots as in .hydra/config.yaml
    (placement.name, norm.name, layers, warmup, lr, seed, optim.weight_decay, ...).
    Raises FileNotFoundError if `path` does not exist."""
    if not Path(path).exists():
        raise FileNotFoundError(path)
    return frame(read_runs(path))


def scalars(path: str | Path, tags=None):
    """TensorBoard scalars of the runs under `path` as a long DataFrame with columns
    run, tag, step, value (run: the folder relative to `path`, as in `load`).

    `tags`: a tag ("val/loss"), a list of tags, or shell patterns ("grad_norm/layer_*");
    None gives every tag. Rows are sorted by run, tag and step; a run resumed from a
    checkpoint has each step once (the later value)."""
    import pandas as pd  # why here: ~0.3 s; the pre-flight imports this module (runs.resume)

    if not Path(path).exists():
        raise FileNotFoundError(path)
    patterns = [tags] if isinstance(tags, str) else (None if tags is None else list(tags))
    rows = []
    for r in read_runs(path):
        for tag, points in sorted(r.scalars.items()):
            if patterns is None or any(fnmatch.fnmatchcase(tag, p) for p in patterns):
                rows += [(r.rel, tag, step, value) for step, value in points]
    return pd.DataFrame(rows, columns=["run", "tag", "step", "value"])


__all__ = ["Run", "load", "scalars", "read_runs", "frame"]
