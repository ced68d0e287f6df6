"""The README and docs/ link to each other and to figures: every relative link must resolve to a
file in the repository, and a `#fragment` to a heading of that file (GitHub's anchor rule).
And no file under docs/ nor the README holds an absolute path of the machine it was made on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def prose(text: str) -> str:
    """The text outside code blocks and inline code, where a link is a link."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def anchor(heading: str) -> str:
    """GitHub's heading id: lower case, punctuation dropped (letters, digits, spaces, - and _
    kept), spaces to hyphens."""
    text = heading.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text(encoding="utf-8")).splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            a = anchor(m.group(1))
            n = seen.get(a, 0)
            seen[a] = n + 1
            found.add(a if n == 0 else f"{a}-{n}")
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.is_file():
            broken.append(f"{target} (no such file)")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target} (no such heading)")
    return broken


def test_anchor_follows_github_rule():
    # ids as GitHub renders them for headings of these docs
    assert anchor("Boundary search: `hydra/sweeper=boundary`") == "boundary-search-hydrasweeperboundary"
    assert anchor("A norm's or a placement's own settings") == "a-norms-or-a-placements-own-settings"
    assert anchor("CI: `.ci/run`") == "ci-cirun"


def test_checker_finds_a_broken_link(tmp_path):
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# Present\n", encoding="utf-8")
    page.write_text("[ok](there.md#present) [gone](missing.png) [bad](there.md#absent) `[code](x.md)`\n",
                    encoding="utf-8")
    assert broken_links(page) == ["missing.png (no such file)", "there.md#absent (no such heading)"]


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == []


# A machine's own folders: scratch, home, the project's checkout. Not preceded by a name, a dot or
# a slash-free word (so `runs/tmp/x` and https://host/work/x are not paths of this kind).
MACHINE_PATH = re.compile(rb"(?<![\w.~-])/(?:work|tmp|root|Users)/|(?<![\w.~-])/home/\w")


def machine_paths(path: Path) -> list[str]:
    """The lines of a text file (a binary one, e.g. a PNG, is skipped) that hold a machine path."""
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return []
    return [f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{i}: "
            f"{line.decode(errors='replace').strip()[:120]}"
            for i, line in enumerate(data.splitlines(), 1) if MACHINE_PATH.search(line)]


def test_machine_path_checker_finds_them_and_only_them(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# normexp report: `/tmp/exp/depth`\nruns/tmp/x and ~/work/x and https://example.org/work/x\n"
                    "hydra.sweep.dir='/work/studies/law'\n(/home/ana/data) and /Users/ana/x\n")
    found = machine_paths(page)
    assert [f.split(": ", 1)[1] for f in found] == [
        "# normexp report: `/tmp/exp/depth`", "hydra.sweep.dir='/work/studies/law'", "(/home/ana/data) and /Users/ana/x"]
    (tmp_path / "figure.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0/tmp/")
    assert machine_paths(tmp_path / "figure.png") == []


def test_no_file_in_docs_or_the_readme_holds_a_machine_path():
    """Committed results and pages name folders relative to themselves or by a placeholder
    (`<sweep>`, `<run>`), never by where they were made (/tmp/..., /work/..., a home folder)."""
    files = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*") if p.is_file())]
    found = [hit for f in files for hit in machine_paths(f)]
    assert not found, f"{len(found)} line(s) hold a machine path:\n" + "\n".join(found[:40])
