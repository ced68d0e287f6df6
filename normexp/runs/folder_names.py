"""The folders a sweep's jobs write into, and their names: each job's folder resolved as
Hydra's launchers will (job_folders), a sweep whose jobs would share one refused before any
runs (check_job_folders), job folders named by what varies across the sweep
(name_jobs_by_what_varies), and a single run's default folder suffix (single_run_name)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import OmegaConf, open_dict

from ..config.checks import ConfigError
from ..config.compose import compose_config, config_groups
from ..config.keys import override_key
from .schema import is_execution_setting
from .settings import canonical_value


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


def _apply_values(overrides: list, cfg) -> None:
    """Apply parsed value overrides (not group choices) to a composed config as Hydra's config
    loader does: `~key` deletes, `+key`/`++key` add, `key=value` changes (merged) a key that
    exists. Raises for an override Hydra would refuse (the caller counts the job as unresolved)."""
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


def check_job_folders(cfg, jobs: list[list[str]]) -> None:
    """Refuse a sweep two of whose jobs would write into one folder (raises ConfigError), before
    any job runs: each job's folder resolved as Hydra will (job_folders), whatever places it
    (hydra.sweep.subdir of the user's own, an interpolation, hydra.sweep.dir). With the default
    subdir (${hydra.job.override_dirname}) a collision is a swept key that folder names leave
    out (train.yaml's exclude_keys: paths, presets, the run settings); one value spelled two
    ways is refused too. Behind this, each job claims its folder, so a collision the check
    cannot foresee (a ${now:...} subdir) still never merges two jobs."""
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
