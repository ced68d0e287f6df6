"""The shipped config package, and composing it outside a Hydra job.

The one place that names the config package: the pre-flight check, torchrun's rank 0,
the bench and the probe all compose through `compose_config`, and the valid option names of
each group are read from the package (so the check needs no torch). Torch-free.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from pathlib import Path

from .defaults import CONFIG_MODULE
from .keys import override_key

CONFIG_NAME = "train"


def _package():
    from importlib.resources import files

    return files(CONFIG_MODULE)


@lru_cache(maxsize=None)
def config_groups() -> tuple[str, ...]:
    """The config groups a user picks from (norm, placement, schedule, ...): every folder
    of the package that holds options, Hydra's own settings excepted."""
    return tuple(sorted(p.name for p in _package().iterdir()
                        if p.is_dir() and p.name != "hydra" and any(f.name.endswith(".yaml") for f in p.iterdir())))


@lru_cache(maxsize=None)
def group_options(group: str) -> tuple[str, ...]:
    """The option files of a group: what `group=...` accepts."""
    return tuple(sorted(p.name[: -len(".yaml")] for p in (_package() / group).iterdir() if p.name.endswith(".yaml")))


def preset_description(name: str) -> str | None:
    """A preset's one-line description: the comment line right after `# @package _global_` in
    configs/experiment/NAME.yaml (the convention every preset follows; tests/test_cli.py checks
    it), or None when the file has none."""
    lines = (_package() / "experiment" / f"{name}.yaml").read_text().splitlines()
    body = lines[1:] if lines and lines[0].startswith("# @package") else lines
    first = body[0] if body else ""
    text = first[1:].strip() if first.startswith("#") else ""
    return text or None


def option_config(group: str, option: str):
    """An option file of a group as written (e.g. configs/data/text.yaml), a DictConfig."""
    from omegaconf import OmegaConf

    return OmegaConf.create((_package() / group / f"{option}.yaml").read_text())


@lru_cache(maxsize=None)
def declared_names(group: str) -> tuple[str, ...]:
    """The `name:` values of a group's options: what the code's registries must accept
    (tests/test_bad_input.py checks they equal NORMS, PLACEMENTS and the data registries)."""
    from omegaconf import OmegaConf

    names = {OmegaConf.create((_package() / group / f"{o}.yaml").read_text()).get("name") for o in group_options(group)}
    return tuple(sorted(str(n) for n in names if n is not None))


@lru_cache(maxsize=None)
def declared_keys(group: str, name: str) -> tuple[str, ...]:
    """The settings a group's option named `name` declares (e.g. schedule cosine: min_lr_ratio):
    the union over the option files whose `name:` is `name`."""
    from omegaconf import OmegaConf

    keys = set()
    for o in group_options(group):
        option = OmegaConf.create((_package() / group / f"{o}.yaml").read_text())
        if option.get("name") == name:
            keys.update(str(k) for k in option if k != "name")
    return tuple(sorted(keys))


@lru_cache(maxsize=None)
def top_level_keys() -> tuple[str, ...]:
    """The dotted keys train.yaml declares outside the groups (`lr`, `optim.eps`, `log.progress`...)."""
    from omegaconf import OmegaConf

    primary = OmegaConf.to_container(OmegaConf.create((_package() / f"{CONFIG_NAME}.yaml").read_text()))
    keys = []

    def walk(node, prefix):
        for k, v in node.items():
            if isinstance(v, dict) and v:
                walk(v, f"{prefix}{k}.")
            else:
                keys.append(f"{prefix}{k}")

    walk({k: v for k, v in primary.items() if k not in ("defaults", "hydra")}, "")
    return tuple(sorted(keys))


PLUGIN_PACKAGE = "hydra_plugins.normexp_boundary_sweeper"  # hydra/sweeper=boundary


@lru_cache(maxsize=None)
def expose_plugins() -> None:
    """Make normexp's Hydra plugins findable before Hydra scans for plugins. Installed from a
    wheel they sit in site-packages/hydra_plugins, where Hydra looks anyway; installed editable
    (`pip install -e .`) the namespace holds only an import hook, which Hydra's scan (pkgutil)
    cannot list, so the plugins' real folder is added to the namespace's path."""
    import importlib.util

    import hydra_plugins

    spec = importlib.util.find_spec(PLUGIN_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return
    folder = str(Path(list(spec.submodule_search_locations)[0]).parent)
    if folder not in list(hydra_plugins.__path__):
        hydra_plugins.__path__.append(folder)


def presets_help() -> str:
    """The presets of `normexp train --help`: one line each, name and description ($ doubled:
    Hydra fills the help template in as a string.Template)."""
    names = group_options("experiment")
    width = max(map(len, names), default=0)
    lines = "\n".join(f"  {n:<{width}}  {preset_description(n) or ''}".rstrip() for n in names)
    return lines.replace("$", "$$")


def register_resolvers() -> None:
    """`${normexp_presets:}` of configs/train.yaml's help template: the presets, when the help is shown."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("normexp_presets", presets_help, replace=True, use_cache=False)


def compose_config(overrides=(), hydra: bool = False):
    """The config `normexp train OVERRIDES` would run (with the `hydra` node if asked, e.g. for
    hydra.run.dir). Raises Hydra's and OmegaConf's own exceptions for bad overrides.
    Each call gets its own copy; a command composes the same overrides several times (the
    pre-flight, `--cfg job`'s notes), so the last few compositions are kept (~0.5 s each)."""
    from omegaconf import open_dict

    cfg, error = _composed(tuple(overrides))
    if error is not None:
        raise error
    cfg = copy.deepcopy(cfg)
    if not hydra:  # as Hydra's compose(return_hydra_config=False) does
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg


def forget_compositions() -> None:
    """Compose anew from here on (the compositions kept by compose_config are dropped)."""
    _composed.cache_clear()


@lru_cache(maxsize=8)
def _composed(overrides: tuple[str, ...]):
    """(config with its hydra node, None), or (None, the exception): a refusal composes once too."""
    from hydra import compose, initialize_config_module

    expose_plugins()
    register_resolvers()
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            return compose(config_name=CONFIG_NAME, overrides=list(overrides), return_hydra_config=True), None
    except Exception as e:  # noqa: BLE001 - re-raised by compose_config, each time it is asked
        return None, e


@lru_cache(maxsize=None)
def hydra_groups() -> tuple[str, ...]:
    """Hydra's own config groups (hydra/launcher, hydra/sweeper, ...) with normexp's plugins."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    expose_plugins()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        return tuple(sorted(f"hydra/{g}" for g in loader.list_groups("hydra")))


def sweep_jobs(parsed: list, sweeper_params) -> list[list[str]]:
    """The override list of every job of a sweep, in Hydra's basic sweeper's order (so the
    position is the job's number): the cross product of the preset's `hydra.sweeper.params`
    first, then the command line's overrides; a key on the command line replaces the
    preset's in the preset's place. `parsed`: Hydra's parsed overrides."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser

    given = {override_key(o.key_or_group): o for o in parsed}
    preset = OverridesParser.create().parse_overrides(
        [f"{k}={v}" for k, v in (sweeper_params or {}).items() if str(k) not in given])
    preset_keys = [str(k) for k in (sweeper_params or {})]
    by_key = {override_key(o.key_or_group): o for o in preset}
    ordered = [given[k] if k in given else by_key[k] for k in preset_keys]
    ordered += [o for o in parsed if override_key(o.key_or_group) not in preset_keys]
    axes = []
    for o in ordered:
        if o.is_sweep_override():
            key = o.input_line.split("=")[0]
            axes.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            axes.append([o.input_line])
    return [list(job) for job in itertools.product(*axes)]


# ------------------------------------------------------------ what each key means
# `normexp train --help` shows each key with its one-line meaning, and `--cfg job` each "auto"
# with its value: both as comments after the key's line of the printed yaml. The meanings are the
# comments of the shipped yaml files themselves (train.yaml's, each option file's), parsed here,
# never written twice.

import re as _re

_KEY_LINE = _re.compile(r"^(?P<indent> *)(?:- )?(?P<key>[A-Za-z_][\w]*):(?P<rest>.*)$")


def _split_comment(rest: str) -> tuple[str, str | None, int]:
    """(value, comment or None, the comment's column within `rest`) of what follows `key:`."""
    quote = None
    for i, ch in enumerate(rest):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or rest[i - 1] == " "):
            return rest[:i].strip(), rest[i + 1:].strip(), i
    return rest.strip(), None, -1


def key_comments(text: str, blocks: bool = False) -> dict[str, str]:
    """{dotted key: its comment} of a yaml file as written: the comment after the key, with the
    comment-only lines under it that start in the same column (its continuation) joined into one
    line. `blocks`: a key without one takes the comment lines right above it (an option file's
    `# what the √d embedding scale multiplies ...`). A defaults-list entry (`- norm: layer  # ...`)
    is its group's key; the text of block scalars (`template: |-`) is skipped."""
    found: dict[str, str] = {}
    stack: list[tuple[int, str]] = []   # (indent, key) of the open mappings
    above: list[str] = []               # comment lines right above the current line
    last, column, block_indent = None, -1, None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        if block_indent is not None:
            if not line.strip() or indent > block_indent:
                continue
            block_indent = None
        stripped = line.strip()
        if stripped.startswith("#"):
            if last is not None and line.index("#") == column:  # a continuation of the last key's comment
                found[last] += " " + stripped[1:].strip()
            else:
                last = None
                above.append(stripped[1:].strip())
            continue
        match = _KEY_LINE.match(line)
        if not match:
            above, last = [], None
            continue
        key_indent = len(match["indent"])
        in_list = line.lstrip().startswith("- ")
        while stack and stack[-1][0] >= key_indent:
            stack.pop()
        path = match["key"] if in_list else ".".join([k for _, k in stack] + [match["key"]])
        value, comment, at = _split_comment(match["rest"])
        if value in ("|", "|-", "|+", ">", ">-", ">+"):
            block_indent = key_indent
        if not in_list and value == "":
            stack.append((key_indent, match["key"]))
        if comment:
            found[path] = comment
            last, column = path, len(line) - len(match["rest"]) + at
        else:
            last = None
            if blocks and above:
                found[path] = " ".join(above)
        above = []
    return found


def _option_chosen(group: str, overrides) -> str | None:
    """The option of `group` an override picks (`norm=rms`), else train.yaml's default."""
    from .defaults import group_default

    for o in overrides:
        key, eq, value = str(o).partition("=")
        if eq and key.lstrip("+~") == group and "," not in value:
            return value
    try:
        return group_default(group)
    except StopIteration:  # a group train.yaml does not pick (arm, width: the presets')
        return None


def key_meanings(overrides=()) -> dict[str, str]:
    """{dotted key: one-line meaning} of every key of the config `overrides` compose: train.yaml's
    comments, and each group's settings from its chosen option file (else any option file of the
    group that says what the key is)."""
    meanings = key_comments((_package() / f"{CONFIG_NAME}.yaml").read_text(encoding="utf-8"))
    meanings = {k: v for k, v in meanings.items() if not k.startswith("hydra.")}
    for group in config_groups():
        chosen = _option_chosen(group, overrides)
        ordered = sorted(group_options(group), key=lambda o: o != chosen)  # the chosen file first
        for option in ordered:
            text = (_package() / group / f"{option}.yaml").read_text(encoding="utf-8")
            if text.startswith("# @package _global_"):  # a preset's keys are train.yaml's, not the group's
                continue
            for key, meaning in key_comments(text, blocks=True).items():
                if key != "name" and key.split(".")[0] != "defaults":  # `name:` carries the option's comment
                    meanings.setdefault(f"{group}.{key}", meaning)
    return meanings


def annotate(text: str, notes: dict[str, str]) -> str:
    """`text` (yaml as OmegaConf prints it: two spaces an indent) with `  # note` after each
    line whose dotted key has a note."""
    lines, stack = [], []
    for line in text.splitlines():
        match = _KEY_LINE.match(line)
        if match and not line.lstrip().startswith("- "):
            indent = len(match["indent"])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            path = ".".join([k for _, k in stack] + [match["key"]])
            if match["rest"].strip() == "":
                stack.append((indent, match["key"]))
            if path in notes and " #" not in match["rest"]:
                line += f"  # {notes[path]}"
        lines.append(line)
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def _app_config_groups() -> str:
    """Hydra's $APP_CONFIG_GROUPS (`group: option, option`), read off the package: Hydra's own
    listing builds a config repository per group and option (94 of them: most of a second)."""
    return "".join(f"{g}: {', '.join(group_options(g))}\n" for g in config_groups())


def train_help(overrides=()) -> str:
    """`normexp train [OVERRIDES] --help`: train.yaml's help template (its header, the groups, the
    presets, the config, its footer) with each key of the config followed by its meaning."""
    import string

    from omegaconf import OmegaConf, open_dict

    cfg = compose_config(overrides, hydra=True)
    template = OmegaConf.select(cfg, "hydra.help.template")
    with open_dict(cfg):
        del cfg["hydra"]
    shown = annotate(OmegaConf.to_yaml(cfg), key_meanings(overrides))
    return string.Template(template).safe_substitute(APP_CONFIG_GROUPS=_app_config_groups(), CONFIG=shown,
                                                     HYDRA_CONFIG_GROUPS="", FLAGS_HELP="")

