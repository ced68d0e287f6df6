"""The command line of `normexp train`, parsed once: a LaunchPlan that the pre-flight, the
folder claim, torchrun's join and Hydra's start all read (none of them splits the argument
list again or looks for -m itself)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..config.keys import override_key

# Hydra flags that take a value (`--cfg job` or `--cfg=job`).
FLAGS_WITH_VALUE = frozenset({"--cfg", "-c", "--package", "-p", "--config-path", "-cp", "--config-name", "-cn",
                              "--config-dir", "-cd", "--experimental-rerun", "--info", "-i"})
# Flags after which no pre-flight is wanted: help, shell completion, another primary config.
NO_PREFLIGHT = frozenset({"--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc",
                          "--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd",
                          "--experimental-rerun"})


def split_args(args: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(flags with their values, overrides) from the raw argument list."""
    flags, overrides, i = [], [], 0
    while i < len(args):
        a = args[i]
        if a.startswith("-"):
            flags.append(a)
            if a in FLAGS_WITH_VALUE and i + 1 < len(args) and "=" not in args[i + 1]:
                flags.append(args[i + 1])
                i += 1
        else:
            overrides.append(a)
        i += 1
    return tuple(flags), tuple(overrides)


@dataclass(frozen=True)
class LaunchPlan:
    """`normexp train ARGS`: its flags (each with its value) and its overrides, in order.

    multirun     -m/--multirun: a sweep
    cfg          the value of --cfg/-c (job, hydra, all), None without it
    completion   Hydra's shell completion (-sc/--shell-completion)
    preflight    False for help, completion and another primary config: nothing to check
    naming       the override that names a sweep's job folders by what varies across it
                 (launch.folder_names.name_jobs_by_what_varies): chosen by the pre-flight, passed
                 to Hydra with the claimed folder (claim_output); empty: Hydra's own names"""

    flags: tuple[str, ...]
    overrides: tuple[str, ...]
    naming: tuple[str, ...] = ()

    @classmethod
    def parse(cls, args: list[str]) -> "LaunchPlan":
        flags, overrides = split_args(list(args))
        return cls(flags, overrides)

    @property
    def args(self) -> list[str]:
        """The command line as Hydra takes it: flags first (its argparse refuses -m or --cfg
        after the overrides), then the overrides."""
        return [*self.flags, *self.overrides]

    def flag_value(self, *names: str) -> str | None:
        """The value given to the first of `names` (`--flag=value` or `--flag value`); "" for a
        flag given last without one; None when none of them is there."""
        for i, f in enumerate(self.flags):
            flag, eq, value = f.partition("=")
            if flag in names:
                return value if eq else (self.flags[i + 1] if i + 1 < len(self.flags) else "")
        return None

    def has_flag(self, *names: str) -> bool:
        return any(f.split("=")[0] in names for f in self.flags)

    @property
    def multirun(self) -> bool:
        return self.has_flag("-m", "--multirun")

    @property
    def cfg(self) -> str | None:
        return self.flag_value("--cfg", "-c")

    @property
    def completion(self) -> bool:
        return self.has_flag("-sc", "--shell-completion")

    @property
    def preflight(self) -> bool:
        return not self.has_flag(*NO_PREFLIGHT)

    @property
    def folder_key(self) -> str:
        """The setting that names this command's output folder."""
        return "hydra.sweep.dir" if self.multirun else "hydra.run.dir"

    def override(self, key: str) -> str | None:
        """The override that sets `key` (`hydra.run.dir=...`), None if none does."""
        return next((o for o in self.overrides if override_key(o) == key), None)

    def with_naming(self, override: str | None) -> "LaunchPlan":
        """This plan with the sweep's job-folder naming the pre-flight chose (None: none)."""
        return replace(self, naming=(override,) if override else ())

    def with_overrides(self, *added: str, dropping: str | None = None) -> "LaunchPlan":
        """This plan with overrides added at the end (after dropping the one that sets `dropping`)."""
        kept = tuple(o for o in self.overrides if dropping is None or override_key(o) != dropping)
        return replace(self, overrides=kept + added)
