"""The report's analysis sections, each registered beside the function that writes it: when it
applies to a folder, how it is written, which files it may leave. `make_report` asks every
registered section in `order`; a module of this package is imported by the package, so a new
analysis is one module here that calls `register_section`: no chain of cases to extend."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ...runs.reading import Run


class ReportError(Exception):
    """A user-facing problem; str(e) is one line naming the problem and the fix."""


@dataclass(frozen=True)
class Folder:
    """What a section may look at: the runs, the keys that vary between them, the folder, and the
    boundary-search tables found under it (none for a grid)."""

    runs: list[Run]
    keys: list[str]
    root: Path
    searched: list[Path]


@dataclass(frozen=True)
class Section:
    name: str
    order: int                                    # smaller first in report.md
    applies: Callable[[Folder], bool]
    write: Callable[[Folder, Path, Callable], list[str]]  # (folder, out_dir, echo) → markdown lines
    files: tuple[str, ...] = ()                   # what it may write into out_dir (listed when present)


SECTIONS: dict[str, Section] = {}


def register_section(name: str, *, order: int, applies: Callable[[Folder], bool],
                     write: Callable[[Folder, Path, Callable], list[str]], files: tuple[str, ...] = ()) -> None:
    if name in SECTIONS:
        raise ValueError(f"report section {name!r} is registered twice")
    SECTIONS[name] = Section(name, order, applies, write, tuple(files))


def write_sections(folder: Folder, out_dir: Path, echo) -> tuple[list[str], list[str]]:
    """(markdown lines, files written) of every section that applies, in order."""
    lines, files = [], []
    for section in sorted(SECTIONS.values(), key=lambda s: (s.order, s.name)):
        if section.applies(folder):
            lines += section.write(folder, out_dir, echo)
            files += [n for n in section.files if (out_dir / n).exists()]
    return lines, files
