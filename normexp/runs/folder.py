"""The run-folder contract: what a training run leaves behind, and how to read it back.

    <run>/.hydra/config.yaml     the resolved config (Hydra)
    <run>/events.out.tfevents.*  TensorBoard scalars
    <run>/summary.json           status and final numbers (see summary_record)
    <run>/checkpoints/step_XXXXXXXX.pt
    <run>/.normexp_claim         which process owns the folder (see claim_folder)
    <run>/normexp_run.json       normexp's own record of the settings and data (see write_record)
"""

from __future__ import annotations

import json
import math
import os
import socket
import time
import uuid
from collections.abc import Mapping
from pathlib import Path

import psutil
from omegaconf import DictConfig, OmegaConf

from .schema import (EXECUTION_FACTS, FINISHED, HPARAMS, LOSS_TRAJECTORY, OUTCOME_FIELDS, SETTINGS_FIELDS,  # noqa: F401
                     STATUSES, Status, is_execution_setting)  # (some re-exported)
from ..config.keys import dotted, override_key
from ..config.run_config import effective_warmup
from ..data.files import atomic_write_bytes, content_id

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
              "loss_spikes": 0, "loss_spike_steps": [],
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



def hparams_row(summary: dict) -> dict:
    """The HParams row of a run: HPARAMS in order, then the variant settings the run used
    (a placement without settings adds none, rather than a 0 that reads as a value)."""
    row = {k: summary.get(k) for k in HPARAMS}
    for group, field in SETTINGS_FIELDS.items():
        row.update({f"{group}.{k}": v for k, v in (summary.get(field) or {}).items()})
    return row


def canonical_value(value):
    """One form per value, whatever its spelling: a whole-number float is that int (1.0 and 1,
    2e3 and 2000), other numbers stay floats (1e-3 and 0.001 are one float), lists become
    tuples of canonical values, mappings sorted dicts. bool stays bool (True is not 1 here)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        value = float(value) if isinstance(value, float) else int(value)
        if isinstance(value, float) and value.is_integer() and abs(value) < 2 ** 53:
            return int(value)
        return value
    if isinstance(value, Mapping):
        return {str(k): canonical_value(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return tuple(canonical_value(v) for v in value)
    return value


def flat_settings(node, prefix: str = "") -> dict:
    """{"optim": {"eps": 1e-8}} -> {"optim.eps": 1e-08}: every leaf by its dotted key, canonical."""
    return {k: canonical_value(v) for k, v in dotted(node, prefix).items()}


def result_settings(cfg) -> dict:
    """The settings that decide what a run computes, canonical (see canonical_value): the job
    config flattened, EXECUTION_SETTINGS and the hydra node left out. The one identity of a setting:
    duplicate seeds in the report, a checkpoint against the run resuming it, and a resumed job
    against its folder's run all compare this form. `cfg`: a DictConfig or a plain dict."""
    if isinstance(cfg, DictConfig):
        try:
            cfg = OmegaConf.to_container(cfg, resolve=True)
        except Exception:  # noqa: BLE001 - interpolations that need Hydra's resolvers
            cfg = OmegaConf.to_container(cfg, resolve=False)
    return {k: v for k, v in flat_settings({k: v for k, v in cfg.items() if k != "hydra"}).items()
            if not is_execution_setting(k)}


def write_summary(run_dir: Path, summary: dict) -> None:
    """The one writer of summary.json, and so of a run's status: training (running, then how
    it ended) and the launch layer (interrupted, requeued, failed; `set_status`) both write
    through here. A status that summary.json may not hold (not in STATUSES) is a bug: refused."""
    if summary.get("status") is not None and summary["status"] not in STATUSES:
        raise ValueError(f"status {summary['status']!r} is not one summary.json may hold ({', '.join(STATUSES)})")
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
    try:
        summary = json.loads((Path(run_dir) / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if isinstance(summary, dict) else None


def find_runs(root: Path) -> list[Path]:
    """Every run folder under root (a folder with .hydra/config.yaml), sorted by path. Symlinked
    folders are followed, each real folder once (a link back up the tree, or a second link to
    a folder already found, adds nothing), so a run is never missed or counted twice."""
    root = Path(root)
    found, seen = [], set()
    for folder, subfolders, files in os.walk(root, followlinks=True):
        real = os.path.realpath(folder)
        if real in seen:  # reached again through a link: a cycle or a duplicate
            subfolders[:] = []
            continue
        seen.add(real)
        if os.path.basename(folder) == ".hydra" and "config.yaml" in files:
            found.append(Path(folder).parent)
    return sorted(found)


# ------------------------------------------------------------- the run's own record
# Hydra rewrites <run>/.hydra/config.yaml when a job starts, before normexp sees it, so a
# resumed sweep job cannot compare against it. normexp keeps its own copy, written once when
# the run begins: the job config and overrides as Hydra wrote them, and the identity of the
# data files (data.files is left out of sweep folder names, so a changed corpus reuses the folder).
RECORD = "normexp_run.json"


def file_identity(path) -> dict:
    """{path (absolute), bytes, mtime_ns, sha256} of a data file (data.files.content_id of its bytes,
    the identity the token cache keys them by)."""
    p = Path(str(path)).expanduser().resolve()
    mtime_ns = p.stat().st_mtime_ns
    return {"path": str(p), **content_id(p.read_bytes()), "mtime_ns": mtime_ns}


def changed_data_file(recorded: list[dict], given: list[str]) -> tuple[str, str] | None:
    """(file as given, why) for the first data file that is not what the run began on, or None.
    Compares the contents (sha256) of the files the job names *now*, resolved from the working
    folder now and through symlinks as they point now: not the recorded path, which may name
    the same text while the job reads another (a relative path from another folder, a
    retargeted link), nor size and mtime, which an in-place edit can keep."""
    if len(recorded) != len(given):
        return (", ".join(map(str, given)) or "<none>",
                f"names {len(given)} files, the run began on {len(recorded)}")
    for entry, name in zip(recorded, given):
        try:
            now = file_identity(name)
        except OSError as e:
            return str(name), f"cannot be read now ({e.strerror})"
        if now["sha256"] != entry.get("sha256"):
            moved = "" if now["path"] == entry.get("path") else f" (it is {now['path']} now, was {entry.get('path')})"
            return str(name), f"does not hold the text the run began on{moved}"
    return None


def data_files(data) -> list[str]:
    """The local files a data config reads (its source's local_files: data=text's files and
    val_files, ...), as written."""
    from ..data.sources import source_for  # why here: the pre-flight imports this module; data.sources costs ~0.1 s

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
    return (summary or {}).get("status") == Status.FAILED and not any(run_dir.glob("checkpoints/step_*.pt")) \
        and not any(run_dir.glob("events.out.tfevents*"))


# ------------------------------------------------------------- who owns a folder
# Two processes must never train into one folder (two runs started in the same second get the
# same default name; a shared hydra.run.dir; two jobs whose folder names collide). Each run
# claims its folder with an exclusive create of CLAIM before it writes anything of its own;
# a resume hands the claim over by renaming it aside, which only one process can do.
CLAIM = ".normexp_claim"


class FolderTaken(Exception):
    """The folder belongs to another run: str(e) is one line naming the folder and the fix."""


# the claims this process made ({resolved folder: token}): the pre-flight claims a single
# run's folder before Hydra starts, and the job (same process) finds its own claim
_OWN_CLAIMS: dict[str, str] = {}
# the folders a Hydra job of this process has trained into since the command began (claim_folder's `job`)
_JOB_FOLDERS: set[str] = set()


def new_launch() -> None:
    """A command starts its jobs (launch.hydra_job.run_hydra): the folders earlier commands of
    this process trained into are theirs no more (an in-process resume may take them)."""
    _JOB_FOLDERS.clear()


def read_claim(folder: Path) -> dict | None:
    try:
        claim = json.loads((Path(folder) / CLAIM).read_text())
    except (OSError, ValueError):
        return None if not (Path(folder) / CLAIM).exists() else {}
    return claim if isinstance(claim, dict) else {}


def run_artefacts(run_dir: Path) -> list[str]:
    """What in the folder belongs to a run: its claim, summary, record, checkpoints, TensorBoard
    events. Hydra's .hydra/ and train.log are not: Hydra writes them for any job before normexp
    runs. A folder with any of these holds a run, with or without a summary.json."""
    run_dir = Path(run_dir)
    found = [name for name in (CLAIM, "summary.json", RECORD) if (run_dir / name).exists()]
    if any(run_dir.glob("checkpoints/step_*.pt")):
        found.append("checkpoints")
    if any(run_dir.glob("events.out.tfevents*")):
        found.append("TensorBoard events")
    return found


def boot_id() -> str | None:
    """This boot of the machine, as psutil tells it (its boot time, any platform), or None
    where it cannot tell."""
    try:
        return f"{psutil.boot_time():.0f}"
    except Exception:  # noqa: BLE001 - a sandbox that hides the system's counters
        return None


def process_start(pid: int) -> float | None:
    """When process `pid` started (psutil's create_time, to the hundredth of a second), or None
    when there is no telling (no such pid, access denied). With the pid and the boot id it names
    one process: a pid is reused, its start time is not."""
    try:
        return round(psutil.Process(pid).create_time(), 2)
    except Exception:  # noqa: BLE001 - no such process, or access denied
        return None


def process_identity() -> dict:
    """This process as a claim and summary.json record it: pid and host, and (to survive pid
    reuse, e.g. after a reboot) its start time and the machine's boot id."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "pid_start": process_start(os.getpid()),
            "boot_id": boot_id()}


def process_alive(record: dict) -> bool | None:
    """Is the process a claim or summary.json names (process_identity's fields) still running:
    True, False (known gone), or None (no telling: another host, or no pid recorded).

    A record with a start time and boot id is alive only if the pid exists, the machine has not
    restarted since (same boot id) and the pid's process started when the recorded one did: a
    pid that now belongs to another process (after a reboot, or pid reuse) is not the run's.
    Records written before normexp kept a start time (old claims and summaries) are judged by
    the pid alone, as they were: such a run whose pid was reused still looks alive."""
    pid = record.get("pid")
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0 or record.get("host") != socket.gethostname():
        return None
    recorded_boot, recorded_start = record.get("boot_id"), record.get("pid_start")
    if recorded_boot is not None and boot_id() is not None and recorded_boot != boot_id():
        return False  # the machine restarted: nothing of the run's process survives a reboot
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the pid exists
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        pass
    if recorded_start is not None:
        now = process_start(pid)
        if now is not None and now != recorded_start:
            return False  # the pid belongs to another process now
    return True


def claim_alive(claim: dict) -> bool:
    """The claiming process is known to be alive, and is not this process (process_alive)."""
    return process_alive(claim) is True and claim.get("pid") != os.getpid()


def _claim_dead(claim: dict | None) -> bool:
    """The claiming process is known to be gone (process_alive: no such pid, or the pid is another process's now)."""
    return bool(claim) and process_alive(claim) is False


def _create_claim(folder: Path) -> bool:
    """Exclusive create of the claim (O_EXCL): True for exactly one process."""
    folder.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    try:
        fd = os.open(folder / CLAIM, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        json.dump({**process_identity(), "since": time.strftime("%Y-%m-%d %H:%M:%S"), "token": token}, f)
    _OWN_CLAIMS[str(folder.resolve())] = token
    return True


def holds_own_claim(folder: Path) -> bool:
    claim = read_claim(folder)
    return bool(claim) and claim.get("token") == _OWN_CLAIMS.get(str(Path(folder).resolve()))


def claim_holder(claim: dict | None) -> str:
    if not claim:
        return ""
    return f" (claimed by pid {claim.get('pid')} on {claim.get('host')} at {claim.get('since')})"


def training_now(claim: dict | None, key: str = "hydra.run.dir") -> str:
    """Why a folder whose claim a live process holds is refused, and the fix."""
    return (f"a run is training into it now{claim_holder(claim)}; wait for it to end (then resume=true "
            f"continues it), or choose another folder ({key}=PATH)")


def claim_folder(run_dir: Path, resume: bool, key: str = "hydra.run.dir", job: bool = False) -> str | None:
    """Make this process the one run training into `run_dir`, or raise FolderTaken.

    A folder holding no run (nothing of run_artefacts, or only a run that failed before it
    trained) is claimed by an exclusive create: of two processes, one wins, the other is
    refused. A folder holding a run is refused unless `resume`; a resume takes the claim over
    (renamed aside, then created: one winner), unless the claiming process is alive on this
    host (process_alive: its pid, start time and boot id) and the run says it is running.
    `key`: the setting to name in the fix. `job`: the claim of a Hydra job, which trains into
    the folder: of the jobs of one process (a sweep's jobs run in one process, or in reused
    worker processes) only the first may take a folder this process claimed. Returns one line
    to show when the resume released a stranded claim (the run says running, its process is
    gone: killed, or the machine restarted and its pid now belongs to another process), else None."""
    run_dir = Path(run_dir)
    if holds_own_claim(run_dir):  # claimed by this process: by the pre-flight for this job, or by an earlier job
        if job and str(run_dir.resolve()) in _JOB_FOLDERS:
            raise FolderTaken(f"{key}={run_dir}: another job of this sweep trained into it; give each job a folder "
                              "of its own (the default hydra.sweep.subdir=${hydra.job.override_dirname})")
        if job:
            _JOB_FOLDERS.add(str(run_dir.resolve()))
        return None
    claim = read_claim(run_dir)
    summary = read_summary(run_dir)
    held = [] if trained_nothing(run_dir, summary) else run_artefacts(run_dir)
    if held == [CLAIM] and _claim_dead(claim):  # its process ended before it wrote anything (Ctrl-C at start-up)
        held = []
    fix = f"choose another folder ({key}=PATH)"
    if held and claim and claim_alive(claim) and (summary or {}).get("status", Status.RUNNING) == Status.RUNNING:
        raise FolderTaken(f"{key}={run_dir}: {training_now(claim, key)}")
    if held and not resume:
        if held == [CLAIM]:  # a claim alone: a run starting now, or one whose host cannot be asked
            raise FolderTaken(f"{key}={run_dir}: another run claimed it{claim_holder(claim)}; {fix} (or, if that "
                              f"process is gone, remove {run_dir / CLAIM})")
        what = f"status {summary.get('status')}" if summary else "no summary.json, but " + ", ".join(held)
        raise FolderTaken(f"{key}={run_dir}: already holds a run ({what}); pass resume=true to "
                          f"continue it, or {fix}")
    stranded = bool(held) and _claim_dead(claim) and (summary or {}).get("status") == Status.RUNNING
    if claim is not None:  # hand the claim over: of several processes, one renames it
        aside = run_dir / f"{CLAIM}.{os.getpid()}.old"
        try:
            os.rename(run_dir / CLAIM, aside)
        except FileNotFoundError:
            raise FolderTaken(f"{key}={run_dir}: another process claimed it just now; {fix}") from None
        aside.unlink(missing_ok=True)
    if not _create_claim(run_dir):
        raise FolderTaken(f"{key}={run_dir}: another process claimed it just now{claim_holder(read_claim(run_dir))}; {fix}")
    if job:
        _JOB_FOLDERS.add(str(run_dir.resolve()))
    if stranded:
        return (f"{key}={run_dir}: released the claim of a run whose process is gone{claim_holder(claim)} "
                f"(killed, or the machine restarted); resuming it")
    return None


def claim_default_folder(folder: Path, key: str) -> Path:
    """The folder a new run or sweep without a folder of its own writes into, claimed. The default
    name is a time stamp, shared by every command started in that second: a name another
    command claimed, or any folder that is not empty, gets -2, -3, ... appended until an
    exclusive create succeeds."""
    folder = Path(folder)
    for n in range(1, 1000):
        candidate = folder if n == 1 else folder.with_name(f"{folder.name}-{n}")
        if candidate.is_dir() and any(candidate.iterdir()) or candidate.exists() and not candidate.is_dir():
            continue
        if _create_claim(candidate):
            return candidate
    raise FolderTaken(f"{key}={folder}: 999 folders of that name are taken; give {key}=PATH")


def claim_sweep_folder(folder: Path) -> None:
    """A new sweep (no resume=true) into a folder the user named: claimed by an exclusive create,
    so a second sweep started into it is refused (with resume=true sweeps may share a folder:
    each job claims its own folder, see claim_folder)."""
    folder = Path(folder)
    if not _create_claim(folder):
        raise FolderTaken(f"hydra.sweep.dir={folder}: another sweep writes into it{claim_holder(read_claim(folder))}; "
                          "pass resume=true to add this sweep's jobs to it (finished jobs are skipped), or choose "
                          "another folder (hydra.sweep.dir=PATH)")


# ------------------------------------------------------------- sweeps' job folders

def _check_one_value_twice(jobs: list[list[str]]) -> None:
    """Refuse a sweep with two jobs of one setting spelled two ways (grad_clip=1,1.0; lr=1e-3,0.001):
    their folder names differ, but they are one run twice (values compared canonically, as
    runfolder.canonical_value: the form duplicate detection and the resume checks use)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ..config.checks import ConfigError

    parser, seen, seen_jobs = OverridesParser.create(), {}, {}
    for job in jobs:
        values = {}
        for o in parser.parse_overrides([o for o in job if not override_key(o).startswith("hydra")]):
            key = override_key(o.key_or_group)
            if not is_execution_setting(key):
                values[key] = (o.input_line, repr(canonical_value(o.value())))
        identity = tuple(sorted((k, v) for k, (_, v) in values.items()))
        if identity in seen:
            first = seen[identity]
            key = next((k for k in sorted(values) if values[k][0] != first[k][0]), None)
            if key is None:  # the jobs differ in run settings only (threads=1,2), or not at all
                # the jobs come from one grid, so their overrides line up axis by axis
                key, was, now = next(((a.split("=", 1)[0], a.split("=", 1)[-1], b.split("=", 1)[-1])
                                      for a, b in zip(seen_jobs[identity], job) if a != b), (None, None, None))
                if key is None or not is_execution_setting(override_key(key)):
                    raise ConfigError("-m", " ".join(job), "this job comes twice in the sweep; give each value once")
                raise ConfigError(key, f"{was},{now}",
                                  f"{key} does not change what a run computes, so these jobs are one run twice; "
                                  "give it one value")
            spellings = ",".join(v[key][0].split("=", 1)[1] for v in (first, values))
            raise ConfigError(key, spellings, "one value spelled two ways, so two jobs of this sweep would be one run "
                              "twice (in two folders); give each value once")
        seen[identity], seen_jobs[identity] = values, job


def _apply_values(overrides: list, cfg) -> None:
    """Apply parsed value overrides (not group choices) to a composed config as Hydra's config
    loader does: `~key` deletes, `+key`/`++key` add, `key=value` changes (merged) a key that
    exists. Raises for an override Hydra would refuse (the caller counts the job as unresolved)."""
    from omegaconf import OmegaConf, open_dict

    for o in overrides:
        if o.package is not None:
            raise ValueError(f"{o.input_line}: a group override of no group")
        key, value = o.key_or_group, o.value()
        if o.is_delete():
            current = OmegaConf.select(cfg, key, throw_on_missing=False)
            if current is None or (value is not None and value != current):
                raise KeyError(f"{key}: nothing to delete, or another value")
            parent, _, leaf = key.rpartition(".")
            with open_dict(cfg):
                del (OmegaConf.select(cfg, parent) if parent else cfg)[leaf]
        elif o.is_add() and OmegaConf.select(cfg, key, throw_on_missing=False) is not None and not isinstance(
                value, (dict, list)):
            raise KeyError(f"{key}: already set (+ adds a new key)")
        else:
            OmegaConf.update(cfg, key, value, merge=True, force_add=o.is_add() or o.is_force_add())


def _override_dirname(overrides: list, exclude_keys, item_sep: str, kv_sep: str) -> str:
    """hydra.job.override_dirname as Hydra's config loader makes it: the overrides as typed,
    but the excluded keys, sorted, joined by item_sep, each `=` replaced by kv_sep."""
    lines = sorted(o.input_line for o in overrides if o.key_or_group not in exclude_keys)
    return item_sep.join(lines).replace("=", kv_sep)


def job_folders(cfg, jobs: list[list[str]]) -> list[str | None]:
    """The absolute folder each job of a sweep writes into, resolved as Hydra's launchers do:
    each job's config composed from its overrides (a config group's option by composition, the
    other overrides applied as Hydra applies them), hydra.job.override_dirname, num and id set
    as the basic launcher sets them, then hydra.sweep.dir joined with hydra.sweep.subdir,
    resolved (any interpolation: ${seed}, ${hydra.job.num}, ${hydra:...}) relative to the
    current folder. None for a job whose folder cannot be resolved (its config does not
    compose: that job fails on its own). Jobs of one choice of config groups share one
    composition (about 0.1 s), so a sweep of thousands of jobs is resolved in seconds.
    `cfg`: the sweep's composed config (with its hydra node), whose resolved values (the
    `${now:...}` of the sweep folder) the jobs share, as Hydra's load_sweep_config copies them."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf, open_dict

    from ..config.compose import compose_config, config_groups

    parser, composed, folders = OverridesParser.create(), {}, []
    str(OmegaConf.select(cfg, "hydra.sweep.dir"))  # the sweep's time stamp, resolved once, shared by its jobs
    hydra_config, saved = HydraConfig.instance(), HydraConfig.instance().cfg
    try:
        for num, job in enumerate(jobs):
            try:
                parsed = parser.parse_overrides(job)
                # config-group choices (norm=rms, hydra/launcher=joblib, +experiment=x) need a composition
                groups = tuple(o.input_line for o in parsed
                               if "/" in o.key_or_group or override_key(o.key_or_group) in config_groups())
                if groups not in composed:
                    composed[groups] = compose_config(list(groups), hydra=True)
                job_cfg = composed[groups].copy()
                OmegaConf.copy_cache(from_config=cfg, to_config=job_cfg)
                values = [o for o in parsed if o.input_line not in groups]
                _apply_values(values, job_cfg)
                # the sweep's naming (name_jobs_by_what_varies added its shared keys), as Hydra gets it
                dirname = OmegaConf.select(cfg, "hydra.job.config.override_dirname") or \
                    job_cfg.hydra.job.config.override_dirname
                with open_dict(job_cfg.hydra.job):
                    job_cfg.hydra.job.override_dirname = _override_dirname(
                        [o for o in parsed if not o.is_hydra_override()], dirname.exclude_keys, dirname.item_sep,
                        dirname.kv_sep)
                    job_cfg.hydra.job.num = job_cfg.hydra.job.id = num
                hydra_config.set_config(job_cfg)  # for the ${hydra:...} resolver
                folder = os.path.join(str(OmegaConf.select(job_cfg, "hydra.sweep.dir")),
                                      str(OmegaConf.select(job_cfg, "hydra.sweep.subdir")))
                folders.append(os.path.abspath(os.path.expanduser(folder)))
            except Exception:  # noqa: BLE001 - a job whose config does not compose is refused on its own
                folders.append(None)
    finally:
        hydra_config.cfg = saved
    return folders


# A sweep's job folders (and so TensorBoard's run names, which are their paths) name a job by what
# tells it from the other jobs: the keys that vary across the sweep. The keys every job shares
# stay in its config, overrides.yaml and HParams. They are added to Hydra's exclude_keys for this
# sweep (the pre-flight passes them on the command line, so every launcher and a resume see them).
DIRNAME_EXCLUDE_KEYS = "hydra.job.config.override_dirname.exclude_keys"


def constant_overrides(jobs: list[list[str]], keep: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
    """{task key (Hydra's key_or_group: `+x=1` is x): its override} of the keys every job gives
    one value, as typed, but those in `keep`; none for a sweep of fewer than two jobs (nothing
    tells its one job apart, so it keeps every override in its name) or where nothing varies."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    if len(jobs) < 2:
        return {}
    parser, values = OverridesParser.create(), {}
    for job in jobs:
        for o in parser.parse_overrides(job):
            if not o.is_hydra_override():
                values.setdefault(o.key_or_group, set()).add(o.input_line)
    constant = {k: next(iter(v)) for k, v in values.items() if len(v) == 1 and k not in keep}
    return constant if len(constant) < len(values) else {}


def _holds_job(folder: Path, job: list[str], ignore: set[str]) -> bool:
    """Does `folder` hold a run of this job: its .hydra/overrides.yaml has the job's task overrides
    (but the keys in `ignore`: resume=true, threads, ...)?"""
    from omegaconf import OmegaConf

    try:
        recorded = {str(o) for o in OmegaConf.load(folder / ".hydra" / "overrides.yaml")}
    except Exception:  # noqa: BLE001 - no run there, or an unreadable record
        return False
    return {o for o in job if not override_key(o).startswith("hydra") and override_key(o) not in ignore} <= recorded


def name_jobs_by_what_varies(cfg, jobs: list[list[str]], keep: set[str] | frozenset[str] = frozenset()) -> str | None:
    """Leave the keys every job of the sweep shares out of its job folders' names: adds them to
    `cfg`'s exclude_keys and returns the override that tells Hydra (None: names unchanged).
    `keep`: keys a sweeper sets per job beyond `jobs` (the boundary sweeper's searched key, seed,
    and steps and warmup for its budget checks), never left out. A resumed sweep whose job
    folders were named by all of their overrides (before this rule) keeps that naming, so resume
    finds its jobs."""
    from omegaconf import OmegaConf, open_dict

    if OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("subdir") != "${hydra.job.override_dirname}":
        return None  # a subdir of the user's own
    dirname = cfg.hydra.job.config.override_dirname
    before = list(dirname.exclude_keys)
    shared = {k: o for k, o in constant_overrides(jobs, keep).items() if k not in before}
    if not shared:
        return None
    extra = list(shared)
    if OmegaConf.select(cfg, "resume") is True:
        # sweeps may share a folder under resume=true, and two that differ in a shared key only
        # would meet in one folder: the short names only for a sweep whose own jobs already hold them
        trial = cfg.copy()
        with open_dict(trial.hydra.job.config.override_dirname):
            trial.hydra.job.config.override_dirname.exclude_keys = before + extra
        if not any(f is not None and _holds_job(Path(f), job, set(before)) for f, job in zip(job_folders(trial, jobs), jobs)):
            return None
    with open_dict(dirname):
        dirname.exclude_keys = before + extra
    return f"{DIRNAME_EXCLUDE_KEYS}=[{','.join(repr(k) for k in before + extra)}]"


def single_run_name(cfg, overrides: list[str], most: int = 80) -> str:
    """The suffix a single run's default folder (runs/<date>/<time>) gets: its overrides that
    change a setting from its default, as a sweep names its jobs (sorted, `key=value` joined by
    `,`; the keys folder names leave out left out), made safe for file names (`/`, spaces,
    commas inside a value and quotes become `_`), as many whole ones as fit in `most`
    characters; "" when there are none. The folder's claim
    still decides (a taken name gets -2, -3, ...)."""
    import re

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ..config.compose import compose_config

    excluded = set(cfg.hydra.job.config.override_dirname.exclude_keys)
    parsed = [o for o in OverridesParser.create().parse_overrides(overrides)
              if not o.is_hydra_override() and o.key_or_group not in excluded]
    if not parsed:
        return ""
    default = compose_config([], hydra=False)
    changed = []
    for o in parsed:
        key = override_key(o.key_or_group)
        here = _plain_value(cfg, key)
        if repr(canonical_value(here)) != repr(canonical_value(_plain_value(default, key))):
            changed.append(o.input_line)
    items, name = sorted(re.sub(r"[^\w.=+@-]", "_", o) for o in changed), ""
    for item in items:  # whole items, up to `most` characters
        if len(name) + len(item) + bool(name) > most:
            break
        name += ("," if name else "") + item
    return name or (items[0][:most] if items else "")


def _plain_value(cfg, key: str):
    """The plain value at `key` (a config group: its option's name), None where there is none."""
    from collections.abc import Mapping

    from omegaconf import OmegaConf

    try:
        value = OmegaConf.select(cfg, key)
    except Exception:  # noqa: BLE001 - an interpolation that needs Hydra
        return None
    if value is not None and not isinstance(value, (int, float, str, bool)):
        value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    if isinstance(value, Mapping) and "name" in value:
        return value["name"]
    return value


def check_job_folders(cfg, jobs: list[list[str]]) -> None:
    """Refuse a sweep two of whose jobs would write into one folder (raises ConfigError), before
    any job runs: each job's folder resolved as Hydra will (job_folders), whatever places it
    (hydra.sweep.subdir of the user's own, an interpolation, hydra.sweep.dir). With the default
    subdir (${hydra.job.override_dirname}) a collision is a swept key that folder names leave
    out (train.yaml's exclude_keys: paths, presets, the run settings); one value spelled two
    ways is refused too. Behind this, each job claims its folder, so a collision the check
    cannot foresee (a ${now:...} subdir) still never merges two jobs."""
    from omegaconf import OmegaConf

    from ..config.checks import ConfigError

    subdir = OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("subdir")
    default = subdir == "${hydra.job.override_dirname}"
    if default:  # a subdir of the user's own (${hydra.job.num}) may repeat a job on purpose
        _check_one_value_twice(jobs)
    seen: dict[str, list[str]] = {}
    for job, folder in zip(jobs, job_folders(cfg, jobs)):
        if folder is None:
            continue
        if folder not in seen:
            seen[folder] = job
            continue
        first, second = (dict(o.split("=", 1) for o in j if "=" in o) for j in (seen[folder], job))
        key = next((k for k in sorted(set(first) | set(second)) if first.get(k) != second.get(k)), "hydra.sweep.subdir")
        values = f"{first.get(key, '<unset>')},{second.get(key, '<unset>')}"
        if is_execution_setting(override_key(key)):
            why = (f"{key} does not change what a run computes, so these jobs are one run twice, in one folder; "
                   "give it one value")
        elif default:
            name = os.path.relpath(folder, os.path.abspath(str(cfg.hydra.sweep.dir)))
            why = (f"job folder names leave {key} out (hydra.job.config.override_dirname.exclude_keys), so two jobs "
                   f"would share the folder {'(the sweep folder)' if name == '.' else name}; sweep it with one "
                   "sweep per value, each with its own hydra.sweep.dir")
        else:
            a, b = (" ".join(o for o in x if o not in y) or "(the same overrides)"
                    for x, y in ((seen[folder], job), (job, seen[folder])))
            key, values = "hydra.sweep.subdir", subdir
            why = (f"the jobs {a} and {b} would both write into {folder}; give each job a folder of its own (the "
                   "default ${hydra.job.override_dirname} names each by its overrides)")
        raise ConfigError(key, values, why)
