"""Checks of the folder a command will write into, before anything is written: it can be
created, an existing run is never overwritten, and a resumed run keeps its own settings and
data (the value rules of the config are launch/validate.py's)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ..config.checks import ConfigError
from ..config.keys import dotted, hydra_quoted, override_key
from .claims import CLAIM, claim_alive, read_claim, run_artefacts, trained_nothing, training_now
from .reading import find_runs
from .record import RECORD, changed_data_file, data_files, read_record
from .search_record import RECORD as SEARCH_RECORD, SearchRecord
from .schema import FINISHED
from .settings import result_settings
from .summary import read_summary
from .reading import read_summary_checked


def _nearest_existing(path: Path) -> Path:
    return next(p for p in [path, *path.parents] if p.exists())


def check_creatable(key: str, folder: Path) -> None:
    """The folder exists as a writable folder, or can be created (checked with a temp folder
    in its nearest existing parent, so nothing is left behind), and no name in its path is
    longer than the file system allows."""
    for part in folder.parts:
        if len(os.fsencode(part)) > 255:  # NAME_MAX of ext4, xfs, btrfs, tmpfs, APFS, NTFS (in bytes)
            raise ConfigError(key, folder, f"a folder name of {len(os.fsencode(part))} bytes; file systems allow "
                              "255 at most: choose a shorter name")
    if folder.exists():
        if not folder.is_dir():
            raise ConfigError(key, folder, "is a file, not a folder; choose another folder")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise ConfigError(key, folder, "the folder is not writable; choose another folder")
        return
    parent = _nearest_existing(folder)
    if not parent.is_dir():
        raise ConfigError(key, folder, f"cannot create it: {parent} is a file; choose another folder")
    try:
        os.rmdir(tempfile.mkdtemp(dir=parent, prefix=".normexp-write-check-"))
    except OSError as e:
        raise ConfigError(key, folder, f"cannot create it in {parent} ({e.strerror}); choose another folder") from None


def output_folder(cfg: DictConfig, key: str) -> Path:
    """The folder hydra.run.dir or hydra.sweep.dir names, `~` expanded (Hydra would make a
    folder literally named `~`); launch.preflight.claim_output pins this form for Hydra."""
    return Path(str(OmegaConf.select(cfg, key))).expanduser()


def check_own_folder(key: str, given, folder: Path) -> None:
    """A run (or sweep) needs a folder of its own: not the current folder or one above it
    (`hydra.run.dir=''`, `.`, `..`: the run's files would lie among everything else there),
    and for a single run not a sweep's folder (one holding multirun.yaml, or other runs below
    it: its report would count the run as one of its jobs). `given`: the value as written."""
    here = Path.cwd().resolve()
    where = folder.resolve()
    if where == here or where in here.parents:
        what = "the current folder" if where == here else "a folder above the current one"
        run = "run" if key == "hydra.run.dir" else "sweep"
        raise ConfigError(key, f"'{given}'" if not str(given).strip() else given,
                          f"is {what}, not a folder of its own: the {run}'s files would lie among everything else "
                          f"there; give the {run} a folder ({key}=runs/NAME), or leave {key} out for a new one")
    if key != "hydra.run.dir" or not where.is_dir():
        return
    others = [r for r in find_runs(where) if r.resolve() != where]
    if (where / "multirun.yaml").is_file() or others:
        what = ("a sweep's folder (it holds multirun.yaml): a run there would be counted as one of its jobs"
                if (where / "multirun.yaml").is_file() else f"a folder of other runs ({len(others)} below it, e.g. "
                f"{others[0].relative_to(where)}): a run there would be counted among them")
        raise ConfigError(key, given, f"is {what}; give the run a folder of its own ({key}=PATH)")


def refuse_links(folder: Path, key: str) -> None:
    """A folder a run or sweep is about to write into holds no symbolic link: Hydra opens
    train.log and .hydra/*.yaml following links, and checkpoints would be written and pruned where
    a link points. ConfigError naming the first link (runs.safe_files.folder_links)."""
    from .safe_files import folder_links, link_target, printable

    links = folder_links(folder, limit=1)
    if links:
        raise ConfigError(key, printable(folder), printable(
            f"{links[0]} is a symbolic link (to {link_target(links[0])}); a run writes only inside its folder, never "
            "through a link (train.log, .hydra and checkpoints would reach its target): replace it with the file or "
            "folder itself, or choose another folder"))


def _flat(cfg) -> dict:
    """{dotted.key: value} of a job config, for comparing two of them."""
    return dotted(OmegaConf.to_container(cfg, resolve=False))


def _recorded_settings(run_dir: Path) -> dict | None:
    """The run's own settings (runs.settings.result_settings): normexp's record, or for a run made
    before there was one, .hydra/config.yaml (only trustworthy before Hydra rewrites it for a new job)."""
    from .safe_files import parse_yaml, read_yaml  # plain data: nothing resolved, no alias, bounded

    record = read_record(run_dir)
    try:
        config = (parse_yaml(record["config"], Path(run_dir) / RECORD) if record else
                  read_yaml(run_dir, Path(".hydra") / "config.yaml"))
        return result_settings(config) if isinstance(config, dict) else None
    except (OSError, OmegaConfBaseException, ValueError):
        return None


def _shown(v) -> str:
    return "[" + ",".join(map(str, v)) + "]" if isinstance(v, (list, tuple)) else str(v)


def same_settings(run_dir: Path, job: DictConfig) -> None:
    """A resumed run must compute what the run it continues computed: the same settings by
    value (runs.settings.result_settings: run settings such as threads aside, 1 and 1.0 alike) and
    the same contents in the data files the job names now (runs.record.changed_data_file)."""
    old = _recorded_settings(Path(run_dir))
    if old is None:
        raise ConfigError("hydra.run.dir", run_dir, f"the run's settings are unreadable (no .hydra/config.yaml or "
                          f"{RECORD}, or not one normexp reads: a link, not plain YAML, aliases), so a resume cannot be "
                          "checked against them; train in a new folder")
    new = result_settings(job)
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            shown, was = (_shown(v) for v in (new.get(key, "<unset>"), old.get(key, "<unset>")))
            raise ConfigError(key, shown, f"differs from the run in {run_dir} ({key}={was}); "
                              "resume with the run's own settings, or train in a new folder")
    record = read_record(run_dir)
    if record is None or "data_files" not in record:
        return
    changed = changed_data_file(record["data_files"], data_files(job.data))
    if changed:
        given, why = changed
        raise ConfigError("data.files", given, f"{why}: it is not the file the run in {run_dir} began on; resume on "
                          "the same data, or train in a new folder")


def check_output_folder(cfg: DictConfig, multirun: bool, explicit: set[str] | frozenset[str]) -> str | None:
    """Check where the run (or sweep) will write, before Hydra creates anything. Raises
    ConfigError; returns a message when there is nothing to do (resume=true on a run that
    already finished), in which case the caller exits 0 without touching the folder.

    An existing run is never overwritten: without resume=true a folder holding a run is
    refused; with resume=true the settings must match the run's own."""
    job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    resume = job.get("resume") is True
    if multirun:
        sweep_dir = output_folder(cfg, "hydra.sweep.dir")
        check_own_folder("hydra.sweep.dir", OmegaConf.select(cfg, "hydra.sweep.dir"), sweep_dir)
        check_creatable("hydra.sweep.dir", sweep_dir)
        refuse_links(sweep_dir, "hydra.sweep.dir")
        if "hydra.sweep.dir" in explicit and not resume and sweep_dir.is_dir():
            held = [r for r in find_runs(sweep_dir) if run_artefacts(r)]
            if held:
                raise ConfigError("hydra.sweep.dir", sweep_dir, f"already holds {len(held)} runs; pass resume=true "
                                  "to continue them (finished jobs are skipped), or choose another folder")
        return None
    run_dir = output_folder(cfg, "hydra.run.dir")
    check_own_folder("hydra.run.dir", OmegaConf.select(cfg, "hydra.run.dir"), run_dir)
    check_creatable("hydra.run.dir", run_dir)
    refuse_links(run_dir, "hydra.run.dir")
    claim = read_claim(run_dir)
    if "hydra.run.dir" in explicit and claim and claim_alive(claim) and os.environ.get("RANK", "0") == "0":
        # another process is starting or training in the folder the user named: what it has written
        # so far (a record without a summary, a summary saying running) is half a run, so its claim
        # decides. A default (time-stamped) folder is not refused: the launch picks a free name.
        # torchrun's other ranks follow rank 0's claim.
        raise ConfigError("hydra.run.dir", run_dir, training_now(claim))
    if "hydra.run.dir" not in explicit and not resume:
        # a new run's default (time-stamped) folder: what another run started in the same second
        # has written there so far is that run's, and the launch gives this run a free name
        # (runs.claims.claim_default_folder: <time>-2, ...), so there is nothing to refuse
        return None
    previous = read_summary(run_dir)
    if previous is None and (run_dir / "summary.json").exists():
        raise ConfigError("hydra.run.dir", run_dir, unreadable_summary(run_dir))
    if trained_nothing(run_dir, previous):  # failed before training: the corrected command may use it
        return None
    if previous is None:
        # a run's files without its summary (deleted, or a run in its first seconds) still make a run
        held = [f for f in run_artefacts(run_dir) if f != CLAIM]  # a claim alone: the claim itself decides
        if resume and not held:  # most likely a mistyped path: starting afresh would pass for a resume
            raise ConfigError("hydra.run.dir", run_dir, "resume=true but no run here (no summary.json); give the "
                              "run's folder as hydra.run.dir=PATH, or drop resume=true to start a new run")
        if held and not resume:
            raise ConfigError("hydra.run.dir", run_dir, f"holds a run's files ({', '.join(held)}) but no summary.json; "
                              "pass resume=true to continue it, or choose another folder")
        if held:
            same_settings(run_dir, job)
        return None
    if not resume:
        raise ConfigError("hydra.run.dir", run_dir, f"already holds a run (status {previous.get('status')}); "
                          "pass resume=true to continue it, or choose another folder")
    same_settings(run_dir, job)
    if previous.get("status") in FINISHED:
        return (f"hydra.run.dir={run_dir} already finished (status {previous['status']} at step "
                f"{previous.get('steps_completed')}); nothing to resume, nothing written")
    return None


def unreadable_summary(run_dir: Path) -> str:
    """What is wrong with a run folder's summary.json that cannot be read, and the fix."""
    problem = read_summary_checked(run_dir)[1] or f"{Path(run_dir) / 'summary.json'}: cannot be read"
    return (f"{problem}; fix or remove that file (without it resume=true continues the run from its checkpoints), "
            "or choose another folder")


# ------------------------------------------------------------------------ memory


def _read_yaml(source: Path, text: str | None = None):
    """A record as plain YAML: OmegaConf would resolve `${...}` in it as it is read (an
    environment variable, another setting), before any check could see it."""
    from .safe_files import FolderFileRefused, parse_yaml, read_text  # no link, bounded, no alias

    try:
        return parse_yaml(read_text(source.parent, source.name) if text is None else text, source)
    except (OSError, FolderFileRefused) as e:
        why = e.strerror if isinstance(e, OSError) else str(e).split(": ", 1)[-1]
        raise ConfigError("FOLDER", source.parent, f"its {source.name} does not read "
                          f"({' '.join(str(why).split())[:200]}); resume it with its own command and resume=true") from None


def _override_list(value, source: Path) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError("FOLDER", source.parent, f"its {source.name} holds no list of overrides; resume it "
                          "with its own command and resume=true")
    return value


def sweep_overrides(folder: Path) -> tuple[list, list, Path]:
    """The command line that started the sweep in `folder`, as Hydra recorded it: (its Hydra
    overrides, such as hydra/sweeper=boundary, hydra.sweeper.*, hydra/launcher=packed,
    hydra.launcher.*; its task overrides; the file they came from), read from multirun.yaml, or
    from a boundary search's record where that is all the folder holds. Read as plain YAML
    (`_read_yaml`: no interpolation resolved). Raises ConfigError when neither file holds them."""
    folder = Path(folder)
    if (folder / "multirun.yaml").is_file():
        source = folder / "multirun.yaml"
        started = _read_yaml(source)
        node = started.get("hydra") if isinstance(started, dict) else None
        overrides = node.get("overrides") if isinstance(node, dict) else None
    else:  # a boundary search's record alone, copied from another machine: its header has the command
        source = folder / SEARCH_RECORD
        overrides = SearchRecord.read(source).header.get("overrides")
    if not isinstance(overrides, dict):
        raise ConfigError("FOLDER", folder, f"its {source.name} holds no hydra.overrides; resume it with the "
                          "sweep's own command and resume=true")
    hydra, task = (_override_list(overrides.get(part), source) for part in ("hydra", "task"))
    return hydra, task, source


def sweep_resume_overrides(sweep_dir: Path) -> list[str]:
    """What the line printed when a sweep's job stops says to run again (with -m, resume=true
    and the sweep's folder, runs.checkpoint.resume_command): every override that shaped the
    sweep, Hydra's (its sweeper and launcher and their settings: without them a boundary search
    would come back as a grid of one job, a packed or SLURM sweep as local solo jobs) before
    its task overrides. hydra.mode is -m's own; the folder and resume are set anew."""
    hydra, task, _ = sweep_overrides(sweep_dir)
    return [o for o in [*hydra, *task] if isinstance(o, str) and override_key(o) != "hydra.mode"]


def resume_arguments(folder: Path) -> list[str]:
    """The `normexp train` arguments that continue the run or sweep in `folder` with its own
    settings (`normexp resume FOLDER`): a sweep folder (multirun.yaml) gives the sweep's command
    line (its overrides and Hydra's, -m) into that folder; a run folder its recorded overrides
    (normexp_run.json, else .hydra/overrides.yaml) into that folder; both with resume=true.
    Only overrides normexp records are replayed (runs.replay): anything else is a ReplayRefused
    naming the file, raised before anything runs."""
    from .replay import check_replayable

    folder = Path(folder).expanduser().absolute()
    drop = ("resume", "hydra.run.dir", "hydra.sweep.dir")  # set anew below

    def kept(overrides: list, source: Path) -> list[str]:
        mine = [o for o in overrides if not (isinstance(o, str) and override_key(o) in drop)]
        return check_replayable(mine, source)

    search_record = folder / SEARCH_RECORD
    if (folder / "multirun.yaml").is_file() or search_record.is_file():
        hydra, task, source = sweep_overrides(folder)
        return ["-m", *kept(hydra, source), *kept(task, source), "resume=true",
                f"hydra.sweep.dir={hydra_quoted(str(folder))}"]
    record = read_record(folder)
    if record is not None and record.get("overrides") is not None:
        source = folder / RECORD
        text = record["overrides"]
        overrides = _read_yaml(source, text) if isinstance(text, str) else text
    elif (folder / ".hydra" / "overrides.yaml").is_file():
        source = folder / ".hydra" / "overrides.yaml"
        overrides = _read_yaml(source)
    else:
        raise ConfigError("FOLDER", folder, "holds no run normexp started (no normexp_run.json, no "
                          ".hydra/overrides.yaml, no multirun.yaml); give a run's or a sweep's folder")
    return [*kept(_override_list(overrides, source), source), "resume=true",
            f"hydra.run.dir={hydra_quoted(str(folder))}"]
