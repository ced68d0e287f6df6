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
    # where it does not apply: what it is called and why it was left out (None: nothing to say)
    left_out: Callable[[Folder], str | None] | None = None


SECTIONS: dict[str, Section] = {}


def register_section(name: str, *, order: int, applies: Callable[[Folder], bool],
                     write: Callable[[Folder, Path, Callable], list[str]], files: tuple[str, ...] = (),
                     left_out: Callable[[Folder], str | None] | None = None) -> None:
    if name in SECTIONS:
        raise ValueError(f"report section {name!r} is registered twice")
    SECTIONS[name] = Section(name, order, applies, write, tuple(files), left_out)


def write_sections(folder: Folder, out_dir: Path, echo) -> tuple[list[str], list[str], list[str]]:
    """(markdown lines, files written, why each section that does not apply was left out) of
    every registered section, in order."""
    lines, files, left_out = [], [], []
    for section in sorted(SECTIONS.values(), key=lambda s: (s.order, s.name)):
        if section.applies(folder):
            lines += section.write(folder, out_dir, echo)
            files += [n for n in section.files if (out_dir / n).exists()]
        elif section.left_out is not None and (why := section.left_out(folder)):
            left_out.append(why)
    return lines, files, left_out


def left_out_line(left_out: list[str]) -> list[str]:
    """The one note naming the sections not drawn and why (none: no note)."""
    return [f"sections left out: {'; '.join(left_out)}"] if left_out else []
