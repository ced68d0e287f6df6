"""What a folder's record may make normexp run again: an allow-list of overrides.

`normexp resume DIR` replays the overrides a run or sweep recorded (normexp_run.json,
.hydra/overrides.yaml, multirun.yaml). Run folders are shared, copied from clusters and
downloaded with papers, so a record is input from someone else: an override Hydra would act
on beyond normexp's settings (a callback, any `_target_`, a config folder, a launcher from
elsewhere, an interpolation that reads the environment) would run or read what the folder's
author chose. So only what normexp itself records is replayed: its own keys and config
groups (the shipped options), the launchers and sweepers it ships with their resource
settings, with values that are plain data. Anything else is refused before anything runs.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..config.checks import ConfigError
from ..config.keys import hydra_quoted

LAUNCHERS = ("basic", "joblib", "packed", "slurm", "slurm_packed", "submitit_local", "submitit_slurm")
SWEEPERS = ("basic", "boundary")
# settings of those launchers that size and place the jobs; never one that holds commands
# (submitit's setup, srun_args, additional_parameters) or folders to write (submitit_folder, temp_folder)
LAUNCHER_SETTINGS = frozenset({
    "n_jobs", "backend", "prefer", "verbose", "timeout", "pre_dispatch", "batch_size",  # joblib
    "max_members", "cuda_graph",  # packed, slurm_packed
    "timeout_min", "cpus_per_task", "gpus_per_node", "tasks_per_node", "mem_gb", "nodes", "name",  # submitit
    "partition", "qos", "comment", "constraint", "exclude", "gres", "cpus_per_gpu", "gpus_per_task",
    "mem_per_gpu", "mem_per_cpu", "account", "signal_delay_s", "max_num_timeout", "array_parallelism",
    "stderr_to_stdout"})
# the boundary sweeper's search settings (its `params`, the sweep grid, is refused on any command line)
SWEEPER_SETTINGS = frozenset({"key", "lower", "upper", "ratio", "initial_points", "lower_ratio", "schedule",
                              "parallel", "budget_check", "max_hours"})
# Hydra settings normexp itself puts on a command line it records (the sweep's folder naming)
# or that its docs offer, with what each takes
_HYDRA_SETTINGS = {
    "hydra.mode": lambda v: v in ("RUN", "MULTIRUN"),
    "hydra.job.chdir": lambda v: isinstance(v, bool),
    "hydra.job.config.override_dirname.exclude_keys": lambda v: isinstance(v, list) and all(isinstance(k, str) for k in v),
}
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class ReplayRefused(ConfigError):
    """A recorded override normexp will not replay; str(e) is one line naming the file and it."""

    def __init__(self, source: Path, override: str, why: str):
        folder = Path(source).parent.parent if Path(source).parent.name == ".hydra" else Path(source).parent
        own = (f"-m SETTINGS resume=true hydra.sweep.dir={hydra_quoted(str(folder))}" if Path(source).name == "multirun.yaml"
               else f"SETTINGS resume=true hydra.run.dir={hydra_quoted(str(folder))}")
        Exception.__init__(self, _printable(f"{source}: {override}: {why}; nothing was run: remove it from that file "
                                            f"if you trust the rest, or resume by hand (normexp train {own})"))
        self.key, self.value = "FOLDER", override


def _printable(text: str) -> str:
    """`text` on one line: control characters as their escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _plain(value) -> str | None:
    """Why `value` is not plain data (numbers, strings, true/false, null, lists of those), or None."""
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    if value is None or isinstance(value, (bool, int, float)):
        return None
    if isinstance(value, str):
        return ("its value holds an interpolation (${...}), which resolves to other settings or the environment "
                "(oc.env)" if "${" in value else None)
    if isinstance(value, list):
        return next((why for why in map(_plain, value) if why), None)
    if isinstance(value, ChoiceSweep):
        return _plain(list(value.list))
    if isinstance(value, (RangeSweep, IntervalSweep)):
        ends = [getattr(value, k, None) for k in ("start", "stop", "step", "end")]
        return None if all(v is None or isinstance(v, (int, float)) for v in ends) else "a sweep of non-numbers"
    return f"its value ({type(value).__name__}) is not plain data (numbers, strings, true/false, null, lists of those)"


def _choices(value) -> list:
    """The options a group override picks: one, or a sweep's."""
    from hydra.core.override_parser.types import ChoiceSweep

    return list(value.list) if isinstance(value, ChoiceSweep) else [value]


def _hydra_refusal(o) -> str | None:
    from hydra.core.override_parser.types import OverrideType

    key, value = o.key_or_group, o.value()
    head, _, setting = key.rpartition(".")
    allowed = {"hydra.launcher": LAUNCHER_SETTINGS, "hydra.sweeper": SWEEPER_SETTINGS}.get(head)
    if not (key in ("hydra/launcher", "hydra/sweeper") or key in _HYDRA_SETTINGS or
            (allowed is not None and setting in allowed)):
        what = {"hydra.callbacks": " (a callback: Hydra would call the code it names)",
                "hydra.searchpath": " (it adds config folders from elsewhere)"}.get(".".join(key.split(".")[:2]), "")
        return (f"Hydra's {key} is not one normexp replays{what}; it replays a shipped launcher or sweeper, "
                "their resource settings and the sweep's folder naming")
    if o.type is not OverrideType.CHANGE:
        return f"it adds or deletes Hydra's {key}, which normexp never records"
    for group, shipped in (("hydra/launcher", LAUNCHERS), ("hydra/sweeper", SWEEPERS)):
        if key == group:
            kind = group.split("/")[1]
            return None if value in shipped else f"{value!s} is not a {kind} normexp ships ({', '.join(shipped)})"
    if key in _HYDRA_SETTINGS:
        return None if _HYDRA_SETTINGS[key](value) else f"not a value normexp records for {key}"
    return _plain(value)


def refusal(override: str) -> str | None:
    """Why normexp will not replay this recorded override, or None when it is one normexp records."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from ..config.compose import config_groups, group_options, top_level_keys

    try:
        o = OverridesParser.create().parse_override(override)
    except Exception:  # noqa: BLE001 - Hydra's grammar errors: any text that is not one override
        return "it does not parse as one Hydra override"
    if o.package is not None:
        return f"it moves a config group to another place (@{o.package}), which normexp never records"
    if o.is_hydra_override():
        return _hydra_refusal(o)
    key = o.key_or_group
    odd = next((part for part in key.split(".") if not _NAME.fullmatch(part)), None)
    if odd is not None:
        return (f"`{odd}` is not a name of a normexp setting (keys such as _target_, _args_ and _partial_ make "
                "Hydra call code)")
    if key in config_groups():
        bad = next((c for c in _choices(o.value()) if c not in group_options(key)), None)
        return None if bad is None else f"{bad!s} is not a {key} option normexp ships"
    if key.split(".")[0] in config_groups() or key in top_level_keys():
        return _plain(o.value())
    return f"{key} is not one of normexp's settings or config groups"


def check_replayable(overrides: list, source: Path) -> list[str]:
    """The recorded overrides, each checked by `refusal`: ReplayRefused (one line naming
    `source` and the first refused override) when any is not what normexp records."""
    for override in overrides:
        if not isinstance(override, str):
            raise ReplayRefused(source, repr(override), "not an override (a string)")
        why = refusal(override)
        if why:
            raise ReplayRefused(source, override, why)
    return list(overrides)
