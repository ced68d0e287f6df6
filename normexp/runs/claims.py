"""Who owns a run folder: <run>/.normexp_claim.

Two processes must never train into one folder (two runs started in the same second get the
same default name; a shared hydra.run.dir; two jobs whose folder names collide). Each run
claims its folder with an exclusive create of CLAIM before it writes anything of its own;
a resume hands the claim over by renaming it aside, which only one process can do."""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from .process import process_alive, process_identity
from .safe_files import read_json
from .record import RECORD
from .schema import Status
from .summary import read_summary

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
        claim = read_json(folder, CLAIM)
    except (OSError, ValueError):  # FolderFileRefused (a link, a pipe, too large) is a ValueError
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

def trained_nothing(run_dir: Path, summary: dict | None) -> bool:
    """A run that failed before training began (no checkpoint, no TensorBoard events): its
    folder may be reused by the corrected command, as nothing in it would be lost."""
    run_dir = Path(run_dir)
    return (summary or {}).get("status") == Status.FAILED and not any(run_dir.glob("checkpoints/step_*.pt")) \
        and not any(run_dir.glob("events.out.tfevents*"))


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


def claim_sweep_folder_to_resume(folder: Path) -> None:
    """A sweep with resume=true claims its folder too, taking over the claim of a sweep whose
    process is gone: while a live process holds it (another sweep writes into the folder now),
    it is refused, since two sweeps in one folder would count each other's jobs as their own and
    the later would overwrite the other's multirun.yaml. Raises FolderTaken."""
    folder = Path(folder)
    if holds_own_claim(folder):
        return
    claim = read_claim(folder)
    if claim and claim_alive(claim):
        raise FolderTaken(f"hydra.sweep.dir={folder}: another sweep writes into it now{claim_holder(claim)}; wait for "
                          "it to end (then resume=true continues what it left unfinished), or choose another folder")
    if claim is not None:  # its process is gone (or on another host): hand the claim over, one process renames it
        aside = folder / f"{CLAIM}.{os.getpid()}.old"
        try:
            os.rename(folder / CLAIM, aside)
        except FileNotFoundError:
            raise FolderTaken(f"hydra.sweep.dir={folder}: another sweep claimed it just now; wait for it to end, "
                              "or choose another folder") from None
        aside.unlink(missing_ok=True)
    if not _create_claim(folder):
        raise FolderTaken(f"hydra.sweep.dir={folder}: another sweep claimed it just now{claim_holder(read_claim(folder))}; "
                          "wait for it to end, or choose another folder")
