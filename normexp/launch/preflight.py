"""The pre-flight of `normexp train`: compose the config as Hydra will and check it before
any folder is written (a typo costs one line and exit code 2, not a traceback after a minute
of data loading); then claim the output folder."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, MissingConfigException
from omegaconf import OmegaConf
from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException

from ..config.checks import ConfigError
from ..config.compose import CONFIG_NAME, compose_config, config_groups, group_options, hydra_groups, sweep_jobs
from ..config.keys import did_you_mean, dotted, hydra_quoted, override_key, spaced_override, suggest_key
from ..config.resources import data_problem, training_memory_bytes
from ..config.variants import check_settings, check_settings_read
from ..data.files import cache_root
from ..runs.claims import (CLAIM, FolderTaken, claim_default_folder, claim_folder, claim_sweep_folder,
                           claim_sweep_folder_to_resume, holds_own_claim, read_claim)
from ..runs.resume import check_output_folder, output_folder
from ..train.signals import exit_if_early_signal
from .exits import environment_refusal, fail, folder_refusal
from .folder_names import check_job_folders, compose_job, name_jobs_by_what_varies, single_run_name
from .plan import LaunchPlan
from .validate import (_on_cpu, check_cache, check_launcher, check_memory, group_outside_its_preset, moved_key,
                       preset_group_conflict, validate)

_HYDRA_FLAGS = {"--help", "-h", "--hydra-help", "--version", "--cfg", "-c", "--resolve", "--package", "-p",
                "--run", "-r", "--multirun", "-m", "--shell-completion", "-sc", "--config-path", "-cp",
                "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun", "--info", "-i"}


def _check_flags(plan: LaunchPlan) -> None:
    """One line for a flag Hydra does not know (argparse would print its whole usage)."""
    for a in plan.flags:
        if not a.startswith("-") or a == "-":  # a flag's value (`--cfg job`)
            continue
        flag = a.partition("=")[0]
        if flag == "--experimental-rerun":  # Hydra unpickles that file: whoever wrote it runs code here
            fail("--experimental-rerun loads a pickle, which can run any code, so normexp refuses it; to run a "
                 "job again, pass its overrides (listed in its folder's .hydra/overrides.yaml)")
        if flag not in _HYDRA_FLAGS:
            # compared without the dashes, which every flag shares (--foo is not close to --info)
            hint = did_you_mean(flag[2:], [f[2:] for f in _HYDRA_FLAGS if f.startswith("--")]).replace(
                "mean ", "mean --") if flag.startswith("--") else ""
            fail(f"unknown option {flag}; {hint}overrides are key=value (no dashes), flags are -m/--multirun, "
                 "--cfg job, --info, --help (see `normexp train --help`)")
        if flag in ("--cfg", "-c") and plan.cfg not in ("job", "hydra", "all"):
            fail(f"{flag} {plan.cfg or '(no value)'}: choose --cfg job, --cfg hydra or --cfg all")


def _check_config_name(plan: LaunchPlan) -> None:
    """--config-name NAME must name a primary config that exists: normexp's train.yaml, or a
    yaml file in a folder given with --config-dir/--config-path (Hydra would print its search
    path and exit 1)."""
    name = plan.flag_value("--config-name", "-cn")
    if name is None:
        return
    stem = name[: -len(".yaml")] if name.endswith(".yaml") else name
    folders = [Path(d) for d in (plan.flag_value("--config-dir", "-cd"), plan.flag_value("--config-path", "-cp"))
               if d]
    if stem == CONFIG_NAME or any((d / f"{stem}.yaml").is_file() for d in folders):
        return
    where = f" in {', '.join(map(str, folders))} or" if folders else ""
    fail(f"--config-name {name}: no such config{where} among normexp's (normexp train's config is "
         f"{CONFIG_NAME}); drop --config-name, and pick a preset with experiment=NAME")


def _check_own_launcher(plan: LaunchPlan) -> None:
    """A sweep's `hydra/launcher=NAME` from the user's own config folder (--config-dir, which skips
    the rest of the pre-flight): its _target_ must name an installed Hydra launcher (check_launcher),
    as Hydra would refuse it only after starting the sweep, with its whole traceback."""
    if not plan.multirun:
        return
    folders = [Path(d).expanduser() for d in (plan.flag_value("--config-dir", "-cd"),
                                              plan.flag_value("--config-path", "-cp")) if d]
    names = [o.split("=", 1)[1] for o in plan.overrides if o.split("=", 1)[0] == "hydra/launcher" and "=" in o]
    for folder in folders:
        for name in names:
            path = folder / "hydra" / "launcher" / f"{name}.yaml"
            if not path.is_file():
                continue
            from ..runs.safe_files import FolderFileRefused, parse_yaml  # plain YAML: nothing resolved

            try:
                node = parse_yaml(path.read_text(encoding="utf-8"), path)
                check_launcher(node if isinstance(node, dict) else {})
            except (OSError, UnicodeDecodeError, FolderFileRefused) as e:
                fail(f"hydra/launcher={name}: {path} does not read ({e}); fix it, or pick a shipped launcher")
            except ConfigError as e:
                fail(f"hydra/launcher={name} ({path}): {e}")


def _parse(overrides: list[str]) -> list:
    if (spaced := spaced_override(overrides)) is not None:
        fail(spaced)
    try:
        return OverridesParser.create().parse_overrides(overrides)
    except HydraException as e:
        fail(f"cannot parse the overrides: {str(e).splitlines()[0]}")


def _check_overrides(parsed: list, multirun: bool) -> list[str]:
    """Moved keys, group options, sweeps without -m; returns the first job's overrides."""
    first = []
    for o in parsed:
        key = o.key_or_group.split("@")[0]
        # a list as a sweeper param's value (hydra.sweeper.params.seed=0,1) is a sweep of the
        # param itself, which Hydra cannot take; a quoted one ('0,1') or one value is the preset form
        if override_key(key).startswith("hydra.sweeper.params.") and o.is_sweep_override():
            swept = override_key(key)[len("hydra.sweeper.params."):]
            fail(f"{o.input_line}: give a sweep on the command line as {swept}={o.input_line.split('=', 1)[-1]} "
                 "with -m (hydra.sweeper.params is for a preset's yaml)")
        values = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        try:
            moved_key(key, values[0])
        except ConfigError as e:
            fail(str(e))
        if "null" in values and (override_key(key) in config_groups() or override_key(key).startswith("hydra/")):
            fail(_null_group(override_key(key)))
        if override_key(key) in config_groups():
            valid = group_options(override_key(key))
            for v in values:
                if v not in valid:
                    fail(f"{key}={v}: unknown option; {did_you_mean(str(v), valid)}choose from {', '.join(valid)}")
        if o.is_sweep_override() and not multirun:
            fail(f"{o.input_line}: a sweep needs -m (normexp train -m {o.input_line})")
        first.append(f"{o.input_line.split('=')[0]}={values[0]}" if o.is_sweep_override() else o.input_line)
    return first


def _check_preset_groups(parsed: list, first: list[str], full=None) -> None:
    """A preset's group beside a plain key that sets the same thing (arm=pre placement=post): one
    line before the full config's own error (a Depth-μP setting under arm=pre would otherwise be
    "no such setting"). The groups' choices and the preset's sweep do not depend on plain keys:
    they are read from `full`, the composed config, or where it does not compose from the group
    and hydra overrides alone; if those do not compose either, _compose says why next."""
    cfg = full
    if cfg is None:
        chosen = [o for o in first if override_key(o) in config_groups() or override_key(o).startswith("hydra")]
        try:
            cfg = compose_config(chosen, hydra=True)
        except Exception:  # noqa: BLE001 - a broken override: _compose names it in one line next
            return
    conflict = preset_group_conflict(parsed, cfg)
    if conflict:
        fail(conflict)


def _null_group(group: str) -> str:
    """Why `group=null` is refused (Hydra cannot compose a config group set to null), and the fix."""
    if group.startswith("hydra/"):
        return (f"{group}=null: a Hydra config group takes one of its options; leave it out for the default "
                "(`normexp train --hydra-help` lists the options)")
    valid = ", ".join(group_options(group))
    if group == "experiment":
        return f"experiment=null: no preset is the default; leave experiment out, or choose from {valid}"
    without = {"norm": " (norm=none trains without normalization)"}.get(group, "")
    return f"{group}=null: every run needs one {group} option; choose from {valid}{without}"


def _compose(job: list[str], hydra: bool = False, sweep: bool = False):
    """The config of one job, or one line naming the override Hydra could not apply. The
    override is found from the exception's data (the key OmegaConf could not set, the config
    file Hydra could not find), never from its text."""
    try:
        return compose_config(job, hydra=hydra)
    except MissingConfigException as e:  # hydra/launcher=joblb (normexp's own groups: _check_overrides)
        if e.missing_cfg_file and e.options is not None:
            group, _, option = e.missing_cfg_file.rpartition("/")
            fail(f"{group}={option}: unknown option; {did_you_mean(option, e.options)}choose from "
                 f"{', '.join(e.options)}")
        fail(" ".join(str(e).split()))
    except (HydraException, OmegaConfBaseException) as e:
        cause = e.__cause__
        if isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
            given = _override_setting(job, cause.full_key)
            if given is not None:  # a key the config does not have
                _no_such_setting(job, given, hydra, sweep)
        elif cause is None:
            outside = _group_outside_preset(job)
            if outside:
                fail(outside)  # arm=post without its preset
        elif isinstance(cause, OmegaConfBaseException):
            # a typed setting (the boundary sweeper's hydra.sweeper.ratio=abc): say what the value must be
            key = f"{cause.full_key}=" if getattr(cause, "full_key", None) else ""
            fail(f"{key}{cause.value if hasattr(cause, 'value') and key else ''}: {str(cause).splitlines()[0]}; "
                 "give a value of that type")
        msg = " ".join(str(e).split())
        if isinstance(e, (ConfigAttributeError, ConfigKeyError)):
            msg += " (add new keys with +key=value; see `normexp train --cfg job` for the keys)"
        fail(msg)


def _override_setting(job: list[str], key: str | None) -> str | None:
    """The override of `job` that sets `key`, or a key below it (`foo.bar=1` where the config
    has no `foo`): a plain `key=value`, the kind Hydra applies only to a key that exists."""
    if not key:
        return None
    return next((o for o in job if not o.startswith(("+", "~")) and "=" in o
                 and (o.split("=", 1)[0] == key or o.split("=", 1)[0].startswith(f"{key}."))), None)


def _group_outside_preset(job: list[str]) -> str | None:
    """Why a group of a preset chosen without it does not compose (arm=post alone), or None."""
    if any(o.lstrip("+").startswith("experiment=") for o in job):
        return None
    for o in job:
        group, eq, option = o.partition("=")
        if eq and group in config_groups() and group_outside_its_preset(group, option):
            return group_outside_its_preset(group, option)
    return None


def _no_such_setting(job: list[str], given: str, hydra: bool, sweep: bool) -> None:
    """One line for `given`, an override of a key the composed config does not have."""
    missing = given.split("=", 1)[0]
    key = missing.split(".")[0]
    chosen = next((o for o in job if o.split("=")[0] == key), None)  # e.g. placement=pre
    where = f" of {chosen}" if chosen and key in config_groups() and chosen != given else ""
    swept = "; a setting of only some swept options needs a sweep of its own" if sweep and where else ""
    hint = _suggest_override(missing, [o for o in job if o != given], hydra)
    fail(f"{given}: no such setting{where}{swept}; {hint}see `normexp train --cfg job` for the keys")


def _suggest_override(key: str, others: list[str], hydra: bool) -> str:
    """"did you mean K? " for a key no config declares (`placment=pre`, `placement.alhpa=2`,
    `hydra.run.dri=x`, `hydra/launchr=joblib`): the keys and groups of the config the other
    overrides compose, or "" when none is close."""


    if "/" in key:  # a Hydra group: hydra/launcher, hydra/sweeper, ...
        return did_you_mean(key, hydra_groups())
    try:
        cfg = compose_config(others, hydra=hydra or key.startswith("hydra."))
    except Exception:  # noqa: BLE001 - another override is broken too: suggest nothing rather than fail here
        return ""
    groups = config_groups()
    # a group's `name` is set by choosing the option (placement=deepnorm), never suggested as a key
    keys = [k for k in dotted(OmegaConf.to_container(cfg, resolve=False)) if k.split(".")[0] not in groups
            or k.split(".", 1)[1] != "name"]
    return suggest_key(key, keys, groups)


def check_job(job, explicit) -> None:
    """Everything about one job's settings that needs no data: validate.py's rules, the norm's,
    placement's and init's own (their settings classes, config/variants/: no torch), no model
    setting that nothing reads, the memory and the data's size."""
    validate(job, explicit)
    check_settings(job.norm, job.placement, job.init, job.layers)
    check_settings_read(job.norm, job.placement, job.qk_norm, job.scale_embeddings)  # no setting that changes nothing
    check_memory(job)
    check_data_fits(job)


def check_data_fits(job) -> None:
    """Refuse, before anything is read, local data files that cannot be read into memory beside
    the model (on the CPU) or whose tokens cannot fit on the token cache's disk (unless they are
    cached already: only then are the files hashed, a piece at a time)."""
    from ..data.sources import source_for, tokenizer_for, with_defaults  # why here: only a run's check needs it

    data, tok = with_defaults("data", job.data), with_defaults("tokenizer", job.tokenizer)
    files = source_for(data).sizes()
    if not files:
        return
    fits = {"files": files, "tokenizer": tok.name, "vocab_size": tokenizer_for(tok).vocab_size,
            "cache_dir": cache_root() / "tokens", "model": training_memory_bytes(job) if _on_cpu(job.device) else 0}
    problem = data_problem(**fits)
    if problem and data_problem(**fits, build=False) is None:  # the build does not fit: is it built already?
        from ..data.batches import is_cached  # imports torch: only for data not cached yet

        problem = None if is_cached(data, tok) else problem
    if problem:
        key, _, why = problem.partition(": ")  # data.files or data.val_files: the file it names
        raise ConfigError(key, job.data.get(key[len("data."):]), why)


# a sweep larger than this has its settings checked on an evenly spread sample of its jobs
MAX_CHECKED_JOBS = 200


def _check_sweep(cfg, jobs: list[list[str]], explicit) -> list:
    """Compose every job of the sweep (a job Hydra cannot compose would stop the whole sweep
    midway) and check its settings: if every job would fail, refuse the sweep; a value that
    is bad in only some jobs fails just those jobs when they run. Returns each job's config
    (with its hydra node, as compose_job makes it, named as `cfg` names the jobs now): one
    composition a job, which check_job_folders reads again for the job's folder."""
    checked = set(range(0, len(jobs), max(1, -(-len(jobs) // MAX_CHECKED_JOBS))))
    configs, errors = [], []
    for num, job in enumerate(jobs):
        exit_if_early_signal()
        configs.append(compose_job(cfg, job, num))
        if num not in checked:
            continue
        try:  # a job that does not compose: _compose says why in one line
            check_job(_compose(job, sweep=True) if configs[-1] is None else _settings(configs[-1]), explicit)
        except ConfigError as e:
            errors.append(str(e))
    if errors and len(errors) == len(checked):
        fail(f"{errors[0]} (every one of the {len(jobs)} jobs of the sweep would fail)")
    if errors:
        typer.echo(f"normexp: warning: {len(errors)} of {len(checked)} jobs will fail: {errors[0]}", err=True)
    return configs


def check_max_members(launcher) -> None:
    """The packed launcher's max_members is `auto` or a whole number >= 1: `abc`, `null` or a list
    would fail only after the sweep's folder was made, and `1.5` or `true` would silently mean 1."""
    if "normexp_packed_launcher" not in str(launcher.get("_target_")):
        return
    size = launcher.get("max_members")
    if size == "auto" or (isinstance(size, int) and not isinstance(size, bool) and size >= 1):
        return
    shown = "null" if size is None else OmegaConf.to_container(size) if OmegaConf.is_config(size) else size
    raise ConfigError("hydra.launcher.max_members", str(shown).lower() if isinstance(shown, bool) else shown,
                      "must be a whole number >= 1 (the largest pack), or auto (as many as fit)")


def _settings(cfg):
    """A job's settings: its composed config without the hydra node (as compose_config(hydra=False))."""
    return OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])


def _check_boundary_search(sweeper, parsed: list) -> None:
    """hydra/sweeper=boundary: its own settings, and the searched key not swept as well."""
    from ..analysis.boundary import check_settings  # why here: only a boundary search needs it

    problem = check_settings(sweeper.key, sweeper.lower, sweeper.upper, sweeper.ratio, sweeper.initial_points,
                             sweeper.get("lower_ratio"), sweeper.get("schedule"), sweeper.get("parallel"),
                             sweeper.get("budget_check", 0), sweeper.get("max_hours"))
    if problem:
        fail(problem)
    swept = {o.key_or_group for o in parsed if o.is_sweep_override()} | set((sweeper.get("params") or {}).keys())
    if sweeper.key in swept:
        fail(f"{sweeper.key}: the boundary sweeper searches it between hydra.sweeper.lower={sweeper.lower} and "
             f"hydra.sweeper.upper={sweeper.upper}; drop the list of {sweeper.key} values")


def _check_search_record(cfg, configs: list) -> None:
    """A boundary search whose sweep folder holds a search record (runs/search_record.py)
    continues it only with resume=true, and only if the record is this command's."""
    if "boundary_sweeper" not in str(OmegaConf.select(cfg, "hydra.sweeper._target_")):
        return
    from ..runs.search_record import RECORD, SearchRecord, run_settings
    from ..runs.record import data_files, file_identity

    path = output_folder(cfg, "hydra.sweep.dir") / RECORD
    if not (path.exists() or path.is_symlink()):
        return
    if OmegaConf.select(cfg, "resume") is not True:
        raise ConfigError("hydra.sweep.dir", path.parent, f"holds a search record ({RECORD}); pass resume=true to "
                          "continue that search, or give this one another hydra.sweep.dir")
    key = str(cfg.hydra.sweeper.key)
    settings = [run_settings(c, key) for c in configs if c is not None]
    SearchRecord.read(path).check_command(key, settings, [file_identity(f) for f in data_files(cfg.data)])


def preflight(plan: LaunchPlan) -> tuple[LaunchPlan, object]:
    """Compose the config as Hydra will and check it before any folder is written: one run
    fully; a sweep job by job (see _check_sweep). Returns the plan (with the naming of a
    sweep's job folders, LaunchPlan.naming) and the composed config (with its hydra node) of
    a command that will train, else None."""
    _check_flags(plan)
    _check_config_name(plan)
    _check_own_launcher(plan)
    if not plan.preflight:
        return plan, None
    multirun, show, overrides = plan.multirun, plan.cfg is not None, list(plan.overrides)
    if multirun and show and plan.cfg != "job":
        fail(f"--cfg {plan.cfg} shows the config of one run: drop -m, or use -m --cfg job to list the "
             "sweep's jobs")


    parsed = _parse(overrides)
    first = _check_overrides(parsed, multirun)
    try:
        full = compose_config(first, hydra=True)
    except Exception:  # noqa: BLE001 - _compose names the problem in one line, after the group check
        full = None
    _check_preset_groups(parsed, first, full)
    cfg = full if full is not None else _compose(first, hydra=True)
    sweeper_params = OmegaConf.select(cfg, "hydra.sweeper.params")
    if sweeper_params and not multirun and not show:  # a preset that is a sweep
        preset = next((o for o in overrides if o.startswith("experiment=")), "the preset")
        fail(f"{preset}: a sweep over {', '.join(map(str, sweeper_params))}; add -m "
             f"(normexp train -m {' '.join(overrides)})")
    if "boundary_sweeper" in str(OmegaConf.select(cfg, "hydra.sweeper._target_")):
        if not multirun and not show:  # without -m Hydra runs one plain job and never calls the sweeper
            fail(f"hydra/sweeper=boundary searches over many runs: add -m (normexp train -m {' '.join(overrides)})")
        if multirun:
            _check_boundary_search(cfg.hydra.sweeper, parsed)
    if multirun:
        from .launchers import launcher_problem
        if launcher_problem(cfg.hydra.launcher):
            fail(launcher_problem(cfg.hydra.launcher))
        try:
            check_launcher(cfg.hydra.launcher)
            check_max_members(cfg.hydra.launcher)
        except ConfigError as e:
            fail(str(e))
    explicit = {o.key_or_group for o in parsed}
    try:
        if multirun:
            jobs = sweep_jobs(parsed, sweeper_params)
            # named before they are composed: each job's one composition then gives its folder too
            plan = plan.with_naming(name_jobs_by_what_varies(cfg, jobs, _set_per_job(cfg)))
            configs = _check_sweep(cfg, jobs, explicit)
            _check_search_record(cfg, configs)
        else:
            check_job(_settings(cfg), explicit)
        check_cache()
        if multirun:
            check_job_folders(cfg, jobs, configs)
        nothing_to_do = check_output_folder(cfg, multirun, explicit)
    except ConfigError as e:
        fail(str(e))
    if multirun and show:  # the dry run of a sweep: every check above, then the job list; nothing is written
        typer.echo(sweep_preview(jobs, cfg.hydra.sweeper))
        raise SystemExit(0)
    if nothing_to_do:  # resume=true on a finished run: say so, write nothing
        typer.echo(f"normexp: {nothing_to_do}", err=True)
        raise SystemExit(0)
    return plan, (None if show else cfg)


def sweep_preview(jobs: list[list[str]], sweeper) -> str:
    """`normexp train -m ... --cfg job`: the sweep's jobs, one line each (Hydra's job number and
    the overrides that differ between jobs), after the overrides every job shares. With the
    boundary sweeper the lines are its settings; it picks the searched key's values as it goes."""
    shared = [o for o in jobs[0] if all(o in job for job in jobs)] if jobs else []
    boundary = "boundary_sweeper" in str(sweeper.get("_target_"))
    if boundary:  # a setting is searched over all its seeds at once: jobs differing only in seed are one
        settings = {tuple(o for o in job if not o.startswith("seed=")) for job in jobs}
        seeds = f" × {len(jobs) // len(settings)} seeds" if len(settings) < len(jobs) else ""
        what = (f"{len(settings)} settings{seeds}, each a search of {sweeper.key} in [{sweeper.lower}, "
                f"{sweeper.upper}] by the boundary sweeper")
    else:
        what = f"{len(jobs)} jobs"
    lines = [f"normexp train -m: {what} (a dry run: nothing was trained or written)"]
    if shared:
        lines.append(f"every job: {' '.join(shared)}")
    width = len(str(len(jobs) - 1))
    lines += [f"#{i:<{width}} {' '.join(o for o in job if o not in shared) or '(no overrides)'}"
              for i, job in enumerate(jobs)]
    return "\n".join(lines)


def claim_output(plan: LaunchPlan, cfg) -> LaunchPlan:
    """Claim the folder this command writes into before Hydra writes anything (runs/claims.py),
    and pin it in the arguments: Hydra would resolve the default `${now:...}` name again, maybe
    in the next second. A single run claims its run folder; a new sweep its sweep folder (each
    job then claims its own job folder); a sweep's job folders named as the pre-flight chose
    (plan.naming). One line and exit 2 when the folder belongs to another run."""


    multirun, key, given = plan.multirun, plan.folder_key, plan.override(plan.folder_key)
    folder = output_folder(cfg, key)  # `~` expanded: Hydra would make a folder named `~`
    if given is not None:  # as given (torchrun's join_run pins rank 0's folder after the pre-flight composed its own)

        value = str(OverridesParser.create().parse_override(given).value())
        folder = folder if "${" in value else Path(value).expanduser()
    resume = OmegaConf.select(cfg, "resume") is True
    made = _missing_parents(folder)
    _MADE[:] = made
    try:
        if given is None and not resume:
            folder = claim_default_folder(_named_run_folder(folder, cfg, list(plan.overrides), multirun), key)
        elif not multirun:
            released = claim_folder(folder, resume, key)
            if released:  # a stranded claim (its process gone, e.g. after a reboot): say so once
                typer.echo(f"normexp: {released}", err=True)
        elif not resume:
            claim_sweep_folder(folder)
        else:  # one sweep at a time in a folder, resumed ones too
            claim_sweep_folder_to_resume(folder)
    except FolderTaken as e:
        fail(str(e))
    except OSError as e:  # a full disk or a read-only folder while claiming: undo the claim, one line

        if environment_refusal(e) is None:
            raise
        _undo_claim(folder, made)
        fail(folder_refusal(e, key, folder, resumable=resume and not made))

    return plan.with_overrides(f"{key}={hydra_quoted(str(folder))}", *plan.naming, dropping=key)


def _set_per_job(cfg) -> set[str]:
    """Keys the boundary sweeper sets in each job beyond the sweep's grid: never left out of names."""
    if "boundary_sweeper" not in str(OmegaConf.select(cfg, "hydra.sweeper._target_")):
        return set()
    return {str(cfg.hydra.sweeper.key), "seed", "steps", "warmup"}


def _named_run_folder(folder: Path, cfg, overrides: list[str], multirun: bool) -> Path:
    """A single run's default folder (runs/<date>/<time>) with its non-default overrides added
    to the name (launch.folder_names.single_run_name)."""


    if multirun or not str(OmegaConf.to_container(cfg.hydra.run, resolve=False).get("dir")).endswith("${now:%H-%M-%S}"):
        return folder
    name = single_run_name(cfg, overrides)
    return folder.with_name(f"{folder.name}_{name}") if name else folder


_MADE: list[Path] = []  # the folders claim_output created (see made_by_claim)


def made_by_claim() -> list[Path]:
    """The folders this command's claim created, deepest first (none if they existed): what a
    run that cannot start (a full disk) removes again, if they are still empty."""
    return list(_MADE)


def _missing_parents(folder: Path) -> list[Path]:
    """The folders of `folder`'s path (itself included) that do not exist yet, deepest first:
    what claiming it will create, and what a claim that could not be written removes again."""
    missing = []
    while not folder.exists() and folder != folder.parent:
        missing.append(folder)
        folder = folder.parent
    return missing


def _undo_claim(folder: Path, made: list[Path]) -> None:
    """Remove what a claim that the machine refused half-way left: a claim file that is not a
    whole claim (an empty file on a full disk: it would block the folder for the next run),
    then the folders the claim created, if they are empty."""


    with contextlib.suppress(OSError):
        if (folder / CLAIM).exists() and (not read_claim(folder) or holds_own_claim(folder)):
            (folder / CLAIM).unlink()
    for f in made:
        with contextlib.suppress(OSError):
            f.rmdir()
