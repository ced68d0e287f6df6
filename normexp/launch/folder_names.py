"""The folders a sweep's jobs write into, and their names: each job's folder resolved as
Hydra's launchers will (job_folders), a sweep whose jobs would share one refused before any
runs (check_job_folders), job folders named by what varies across the sweep
(name_jobs_by_what_varies), and a single run's default folder suffix (single_run_name)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from ..config.checks import ConfigError
from ..config.compose import compose_config
from ..config.keys import override_key
from ..runs.safe_files import read_yaml
from ..runs.schema import is_execution_setting
from ..runs.settings import canonical_value


def _check_one_value_twice(jobs: list[list[str]]) -> None:
    """Refuse a sweep with two jobs of one setting spelled two ways (grad_clip=1,1.0; lr=1e-3,0.001):
    their folder names differ, but they are one run twice (values compared canonically, as
    settings.canonical_value: the form duplicate detection and the resume checks use)."""
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


def _hydra_as_key(text):
    """A folder setting as written, with `${hydra:KEY}` read as `${hydra.KEY}`: the resolver reads
    the running job's hydra node, and a job config composed here carries that node itself, so
    the folder resolves without the job running (and without Hydra's global job state)."""
    return text.replace("${hydra:", "${hydra.") if isinstance(text, str) else text


def compose_job(cfg, job: list[str], num: int):
    """One job's config (with its hydra node) as Hydra's launchers compose it: Hydra's public
    compose API (compose_config) applied to the job's overrides, the sweep's exclude_keys (as
    `cfg` holds them now) and its number (hydra.job.num and id, as the basic launcher sets
    them); None when the config does not compose (that job fails on its own). About 80 ms: the
    pre-flight composes each job once, checks it and names its folder from this one config."""
    excluded = list(OmegaConf.select(cfg, "hydra.job.config.override_dirname.exclude_keys") or [])
    naming = f"{DIRNAME_EXCLUDE_KEYS}=[{','.join(repr(k) for k in excluded)}]"
    try:
        return compose_config([*job, naming, f"hydra.job.num={num}", f"hydra.job.id={num}"], hydra=True)
    except Exception:  # noqa: BLE001 - a job whose config does not compose is refused on its own
        return None


def job_folders(cfg, jobs: list[list[str]], configs: list | None = None) -> list[str | None]:
    """The absolute folder each job of a sweep writes into, as Hydra's launchers make it:
    hydra.sweep.dir joined with hydra.sweep.subdir of the job's config (compose_job; `configs`:
    those already composed, one per job), resolved (any interpolation: ${seed},
    ${hydra.job.override_dirname}, ${hydra:job.num}) relative to the current folder. None for a
    job whose config does not compose. `cfg`: the sweep's composed config (with its hydra node),
    whose resolved values (the `${now:...}` of the sweep folder) the jobs share, as Hydra's
    load_sweep_config copies them."""
    str(OmegaConf.select(cfg, "hydra.sweep.dir"))  # the sweep's time stamp, resolved once, shared by its jobs
    if configs is None:
        configs = [compose_job(cfg, job, num) for num, job in enumerate(jobs)]
    return [None if job_cfg is None else _job_folder(cfg, job_cfg) for job_cfg in configs]


def _job_folder(cfg, job_cfg) -> str | None:
    """The absolute folder of one composed job (None where an interpolation does not resolve)."""
    OmegaConf.copy_cache(from_config=cfg, to_config=job_cfg)
    place = OmegaConf.to_container(job_cfg.hydra.sweep, resolve=False)
    with open_dict(job_cfg.hydra.sweep):
        job_cfg.hydra.sweep.dir, job_cfg.hydra.sweep.subdir = (_hydra_as_key(place.get(k)) for k in ("dir", "subdir"))
    try:
        folder = os.path.join(str(job_cfg.hydra.sweep.dir), str(job_cfg.hydra.sweep.subdir))
    except Exception:  # noqa: BLE001 - an interpolation that does not resolve: the job fails on its own
        return None
    return os.path.abspath(os.path.expanduser(folder))


# A sweep's job folders (and so TensorBoard's run names, which are their paths) name a job by what
# tells it from the other jobs: the keys that vary across the sweep. The keys every job shares
# stay in its config, overrides.yaml and HParams. They are added to Hydra's exclude_keys for this
# sweep (the pre-flight passes them on the command line, so every launcher and a resume see them).
DIRNAME_EXCLUDE_KEYS = "hydra.job.config.override_dirname.exclude_keys"


def constant_overrides(jobs: list[list[str]], keep: set[str] | frozenset[str] = frozenset()) -> dict[str, str]:
    """{task key (Hydra's key_or_group: `+x=1` is x): its override} of the keys every job gives
    one value, as typed, but those in `keep`; none for a sweep of fewer than two jobs (nothing
    tells its one job apart, so it keeps every override in its name) or where nothing varies."""
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
    try:
        recorded = {str(o) for o in read_yaml(folder, Path(".hydra") / "overrides.yaml")}
    except Exception:  # noqa: BLE001 - no run there, or an unreadable record
        return False
    return {o for o in job if not override_key(o).startswith("hydra") and override_key(o) not in ignore} <= recorded


def _named_without(sweep_dir: Path, jobs: list[list[str]], ignore: set[str], keys: set[str]) -> bool:
    """Were this sweep's job folders named without `keys`? The first folder under `sweep_dir` that
    holds one of `jobs` says, by the exclude_keys it was named with (its .hydra/hydra.yaml). This
    finds a boundary search's folders, whose names carry the searched key (lr=...) that the
    pre-flight's jobs lack, so job_folders cannot name them."""
    try:
        children = sorted(p for p in sweep_dir.iterdir() if p.is_dir() and not p.is_symlink())
    except OSError:
        return False
    for child in children:
        if any(_holds_job(child, job, ignore) for job in jobs):
            try:
                named = read_yaml(child, Path(".hydra") / "hydra.yaml")["hydra"]["job"]["config"]["override_dirname"][
                    "exclude_keys"]
            except Exception:  # noqa: BLE001 - no readable record of how it was named
                return False
            return keys <= set(named)
    return False


def name_jobs_by_what_varies(cfg, jobs: list[list[str]], keep: set[str] | frozenset[str] = frozenset()) -> str | None:
    """Leave the keys every job of the sweep shares out of its job folders' names: adds them to
    `cfg`'s exclude_keys and returns the override that tells Hydra (None: names unchanged).
    `keep`: keys a sweeper sets per job beyond `jobs` (the boundary sweeper's searched key, seed,
    and steps and warmup for its budget checks), never left out. A resumed sweep whose job
    folders were named by all of their overrides (before this rule) keeps that naming, so resume
    finds its jobs."""
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
        if not (any(f is not None and _holds_job(Path(f), job, set(before)) for f, job in zip(job_folders(trial, jobs), jobs))
                or _named_without(Path(str(cfg.hydra.sweep.dir)), jobs, set(before), set(extra))):
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
    try:
        value = OmegaConf.select(cfg, key)
    except Exception:  # noqa: BLE001 - an interpolation that needs Hydra
        return None
    if value is not None and not isinstance(value, (int, float, str, bool)):
        value = OmegaConf.to_container(value, resolve=True) if OmegaConf.is_config(value) else value
    if isinstance(value, Mapping) and "name" in value:
        return value["name"]
    return value


NAME_MAX = 255  # the longest file name ext4, xfs, btrfs, tmpfs, APFS and NTFS allow, in bytes


def _check_inside(sweep_dir: str, folder: str, job: list[str]) -> None:
    """A job's folder lies inside the sweep's folder (a value such as `../../x` in its name would
    put the run elsewhere, beyond what the sweep's report and resume see), and no name in it is
    longer than a file system allows (Hydra would stop the sweep midway at that job). ConfigError
    naming the override that makes it so."""
    relative = os.path.relpath(folder, sweep_dir)
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        culprit = next((o for o in job if ".." in o.split("=", 1)[-1]), None)
        key, value = (culprit.split("=", 1) if culprit and "=" in culprit else ("hydra.sweep.subdir", relative))
        raise ConfigError(key, value, f"the job's folder would be {folder}, outside the sweep's folder {sweep_dir}; "
                          "a job writes only inside it: give a value without `..` and `/`, or leave the key out of "
                          "folder names (hydra.job.config.override_dirname.exclude_keys)")
    for part in Path(relative).parts:
        size = len(os.fsencode(part))
        if size > NAME_MAX:
            raise ConfigError("hydra.sweep.subdir", f"{part[:60]}...", f"a job's folder name would be {size} bytes, "
                              f"and file systems allow {NAME_MAX}: sweep fewer keys at once (the keys "
                              "every job shares are left out of the names), or give the jobs short folders "
                              "(hydra.sweep.subdir=${hydra.job.num})")


def check_job_folders(cfg, jobs: list[list[str]], configs: list | None = None) -> None:
    """Refuse a sweep two of whose jobs would write into one folder (raises ConfigError), before
    any job runs: each job's folder resolved as Hydra will (job_folders), whatever places it
    (hydra.sweep.subdir of the user's own, an interpolation, hydra.sweep.dir). With the default
    subdir (${hydra.job.override_dirname}) a collision is a swept key that folder names leave
    out (train.yaml's exclude_keys: paths, presets, the run settings); one value spelled two
    ways is refused too; so is a folder outside the sweep's folder or a name over 255 bytes
    (_check_inside). Behind this, each job claims its folder, so a collision the check
    cannot foresee (a ${now:...} subdir) still never merges two jobs. `configs`: the jobs'
    configs composed already (compose_job), else each job is composed here."""
    subdir = OmegaConf.to_container(cfg.hydra.sweep, resolve=False).get("subdir")
    default = subdir == "${hydra.job.override_dirname}"
    if default:  # a subdir of the user's own (${hydra.job.num}) may repeat a job on purpose
        _check_one_value_twice(jobs)
    seen: dict[str, list[str]] = {}
    sweep_dir = os.path.abspath(os.path.expanduser(str(cfg.hydra.sweep.dir)))
    for job, folder in zip(jobs, job_folders(cfg, jobs, configs)):
        if folder is None:
            continue
        _check_inside(sweep_dir, folder, job)
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
