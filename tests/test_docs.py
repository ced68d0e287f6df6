"""The README and docs/ link to each other and to figures: every relative link must resolve to a
file in the repository, and a `#fragment` to a heading of that file (GitHub's anchor rule).
And no file under docs/ nor the README holds an absolute path of the machine it was made on.
And each LR sensitivity a results page prints is what the report's functions give from the
`runs.csv` beside it, so a number on a page cannot drift from its runs."""

from __future__ import annotations

import csv
import gzip
import re
import subprocess
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from normexp.analysis.study import bootstrap_sensitivity, seed_sensitivity

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
    """The lines of a text file (a binary one, e.g. a PNG, is skipped; a gzip'd one, e.g. a
    per-layer .csv.gz, is read unzipped) that hold a machine path."""
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
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
    (tmp_path / "layers.csv.gz").write_bytes(gzip.compress(b"run,path\n1,/work/sweep/run\n", mtime=0))
    assert [f.split(": ", 1)[1] for f in machine_paths(tmp_path / "layers.csv.gz")] == ["1,/work/sweep/run"]


def test_no_file_in_docs_or_the_readme_holds_a_machine_path():
    """Committed results and pages name folders relative to themselves or by a placeholder
    (`<sweep>`, `<run>`), never by where they were made (/tmp/..., /work/..., a home folder)."""
    files = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*") if p.is_file())]
    found = [hit for f in files for hit in machine_paths(f)]
    assert not found, f"{len(found)} line(s) hold a machine path:\n" + "\n".join(found[:40])


# ------------------------------------------------------------------ the weight of docs/

# The most a file under docs/ may weigh. The tree once carried 53 files past it (per-layer figures
# of 2-9 MB whose legends had grown them 15,000 pixels high, per-layer CSVs of 3 MB): a per-layer
# figure is now 1100 × 520 pixels whatever the sweep (tests/analysis/test_figure_size.py) and a
# committed per-layer CSV is gzip'd (docs/results/README.md).
MOST_BYTES = 500_000


def tracked_files(folder: str, root: Path = ROOT) -> list[Path] | None:
    """The files git tracks under `folder` of `root`; None where `root` is not a git checkout
    (a source archive) or git is not installed."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", folder], cwd=root, capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return [root / name for name in out.decode().split("\0") if name]


def too_heavy(files: list[Path], most: int = MOST_BYTES) -> list[str]:
    """'path: N bytes' for each file over `most` bytes (one deleted but not yet committed is skipped)."""
    return [f"{f.relative_to(ROOT) if f.is_relative_to(ROOT) else f}: {f.stat().st_size:,} bytes"
            for f in files if f.is_file() and f.stat().st_size > most]


def test_the_weight_checker_finds_a_heavy_file(tmp_path):
    (tmp_path / "light.csv").write_bytes(b"x" * 10)
    (tmp_path / "heavy.png").write_bytes(b"x" * 11)
    assert too_heavy([tmp_path / "light.csv", tmp_path / "heavy.png", tmp_path / "gone.png"], most=10) == [
        f"{tmp_path / 'heavy.png'}: 11 bytes"]


def test_no_file_git_tracks_under_docs_weighs_more_than_500_kb():
    """The tree is cloned by everyone who uses it: a committed figure or table stays under
    MOST_BYTES (docs/results/depth_law/deep_end/boundary_record.jsonl, a search record that
    grows with each run, too)."""
    files = tracked_files("docs")
    if not files:
        pytest.skip("not a git checkout (or no git): no list of tracked files")
    heavy = too_heavy(files)
    assert not heavy, f"{len(heavy)} file(s) under docs/ weigh more than {MOST_BYTES:,} bytes:\n" + "\n".join(heavy)


# ------------------------------------------------------------------ LR sensitivity on the results pages

T_COLUMN, BOOT_COLUMN = "LR sensitivity [95 % t over seeds]", "old: [95 % bootstrap]"
# Each page: the varied keys of runs.csv other than lr and seed, and how a row of its sensitivity
# table names a setting (the row's cells -> those keys' values as runs.csv writes them).
SENSITIVITY_PAGES = {
    "lr_sensitivity": (("placement", "warmup"), lambda c: (c[0], c[1])),
    "stabilizers": (("placement", "qk_norm"), lambda c: (c[0], {"no": "False", "yes": "True"}[c[1]])),
    "stabilizers_2025": (("placement", "placement.exponent"),
                         lambda c: {"depth_mup ½": ("depth_mup", "0.5"), "depth_mup 1": ("depth_mup", "1")}.get(
                             c[0], (c[0], ""))),
    "stabilizers_more": (("placement", "attn_softcap", "norm", "logit_softcap"),
                         lambda c: (c[0].split(",")[0].split(" (")[0], "50" if "soft-capped" in c[0] else "",
                                    "scale" if "norm=scale" in c[0] else "layer", "30" if "soft-capped" in c[0] else "")),
}


def printed_sensitivity(page: Path, setting_of) -> dict[tuple, tuple[str, str]]:
    """{setting: (t cell, old bootstrap cell)} from the page's table headed by T_COLUMN."""
    lines = page.read_text(encoding="utf-8").splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("|") and T_COLUMN in line)
    columns = [c.strip() for c in lines[head].strip("|").split("|")]
    t, boot = columns.index(T_COLUMN), columns.index(BOOT_COLUMN)
    out = {}
    for line in lines[head + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        out[setting_of(cells)] = (cells[t], cells[boot])
    return out


def lr_grids(runs_csv: Path, keys) -> dict[tuple, list[dict]]:
    """{setting: one {seed: final loss} per lr, lr ascending}: seed_sensitivity's input. runs.csv
    holds no ℓ₀, so a diverged run (which the report counts at ℓ₀) cannot be recomputed here."""
    grids: dict[tuple, dict] = defaultdict(lambda: defaultdict(dict))
    for r in csv.DictReader(runs_csv.open(encoding="utf-8")):
        if r.get("left_out"):
            continue
        assert r["status"] in ("completed", "stalled"), f"{runs_csv}: run {r['run']} is {r['status']}: no ℓ₀ to count it at"
        grids[tuple(r[k] for k in keys)][float(r["lr"])][r["seed"]] = float(r["final_val_loss"])
    return {s: [g[lr] for lr in sorted(g)] for s, g in grids.items()}


def same_value(a: str, b: str) -> bool:
    """Whether two CSV cells hold one value: runs.csv writes an exponent 1 where sensitivity.csv has 1.0."""
    try:
        return a == b or float(a) == float(b)
    except ValueError:
        return False


def three_places(x: float) -> str:
    return f"{x:.3f}".replace("-", "−")


def sensitivity_mismatches(folder: Path, keys, setting_of) -> list[str]:
    """Where the page's sensitivity table differs from seed_sensitivity and bootstrap_sensitivity
    recomputed from the runs.csv beside it, to the 3 decimals printed; and where that recomputation
    differs from the report's own sensitivity.csv (which saw ℓ₀: a difference would mean a clipped
    loss or a runs.csv that is not the report's input)."""
    grids, printed = lr_grids(folder / "runs.csv", keys), printed_sensitivity(folder / "README.md", setting_of)
    problems = [f"setting {s} is in runs.csv but not in the table" for s in grids.keys() - printed.keys()]
    problems += [f"setting {s} is in the table but not in runs.csv" for s in printed.keys() - grids.keys()]
    report = {tuple(r[k] for k in keys): r for r in csv.DictReader((folder / "sensitivity.csv").open(encoding="utf-8"))}
    for setting in grids.keys() & printed.keys():
        by_seed = grids[setting]
        point, low, high = seed_sensitivity(by_seed)
        boot_low, boot_high = bootstrap_sensitivity([np.asarray(list(g.values()), dtype=float) for g in by_seed])
        want = (f"{three_places(point)} [{three_places(low)}, {three_places(high)}]",
                f"[{three_places(boot_low)}, {three_places(boot_high)}]")
        if printed[setting] != want:
            problems.append(f"{setting}: the page prints {printed[setting]}, runs.csv gives {want}")
        row = next(r for k, r in report.items() if all(map(same_value, k, setting)))
        boot = ("lr_sensitivity_boot_low", "lr_sensitivity_boot_high")
        reported = [float(row[k]) for k in ("lr_sensitivity", *(boot if boot[0] in row else
                                                                 ("lr_sensitivity_low", "lr_sensitivity_high")))]
        if not np.allclose(reported, [point, boot_low, boot_high], rtol=0, atol=1e-12):
            problems.append(f"{setting}: sensitivity.csv has {reported}, runs.csv gives {[point, boot_low, boot_high]}")
    return problems


@pytest.mark.parametrize("name", sorted(SENSITIVITY_PAGES))
def test_printed_lr_sensitivity_is_what_the_pages_runs_give(name):
    problems = sensitivity_mismatches(ROOT / "docs" / "results" / name, *SENSITIVITY_PAGES[name])
    assert not problems, "\n".join(problems)


def test_sensitivity_checker_finds_an_altered_number(tmp_path):
    source = ROOT / "docs" / "results" / "stabilizers_2025"
    for f in ("README.md", "runs.csv", "sensitivity.csv"):
        shutil.copy(source / f, tmp_path / f)
    page = tmp_path / "README.md"
    page.write_text(page.read_text(encoding="utf-8").replace("| 0.060 [0.055, 0.065] |", "| 0.060 [0.055, 0.070] |"),
                    encoding="utf-8")
    assert sensitivity_mismatches(tmp_path, *SENSITIVITY_PAGES["stabilizers_2025"]) == [
        "('reordered', ''): the page prints ('0.060 [0.055, 0.070]', '[0.055, 0.070]'), "
        "runs.csv gives ('0.060 [0.055, 0.065]', '[0.055, 0.070]')"]
# ------------------------------------------------------------------ module references
# Docstrings, comments and pages name modules as paths (`train/loop.py`, `loop.py`) or dotted
# (`normexp.train.loop.Hooks`, `runs.folder.beat_baseline`): each must name a module that exists,
# and a dotted one a name defined in it, so a moved or renamed module cannot leave them behind.

PACKAGE = ROOT / "normexp"
SUBPACKAGES = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
PY_PATH = re.compile(r"(?<![\w/.-])((?:[\w-]+/)*\w+\.py)\b")
# normexp.x[.y...], or a subpackage's module and a name in it (runs.folder.beat_baseline): two
# parts alone (data.val_files) are as often config keys as modules
DOTTED = re.compile(rf"(?<![\w.])(normexp(?:\.\w+)+|(?:{'|'.join(SUBPACKAGES)})\.[a-z_]\w*\.\w+(?:\.\w+)*)")
# pages that describe another tree on purpose, and files of other projects that a docstring names
HISTORICAL = {"docs/architecture/before.md", "tests/test_docs.py"}  # (this file: the checker's examples)
ELSEWHERE = {("normexp/model/placements/gated.py", "gtrxl.py"),     # opendilab/DI-engine's
             ("normexp/model/placements/ngpt.py", "model.py"),      # NVIDIA/ngpt's
             # the demonstration branch's new files (placement-demo), and the guide's example
             ("docs/architecture/new_placement.md", "normexp/model/placements/pre_unit_input.py"),
             ("docs/architecture/new_placement.md", "tests/model/placements/test_pre_unit_input.py"),
             ("docs/architecture/new_placement.md", "tests/model/placements/test_halfpre.py")}


def texts(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(file, first line, text) of the pages (README.md, docs/) and of the comments and strings
    (docstrings among them) of the Python sources."""
    import io
    import tokenize

    out = []
    for page in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        if page.is_file() and page.relative_to(root).as_posix() not in HISTORICAL:
            out += [(page.relative_to(root).as_posix(), i, line)
                    for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)]
    for folder in ("normexp", "hydra_plugins", "scripts", "tests"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.relative_to(root).as_posix() in HISTORICAL:
                continue
            source = io.StringIO(path.read_text(encoding="utf-8"))
            out += [(path.relative_to(root).as_posix(), tok.start[0], tok.string)
                    for tok in tokenize.generate_tokens(source.readline)
                    if tok.type in (tokenize.COMMENT, tokenize.STRING)]
    return out


def defined_names(module: Path) -> set[str]:
    """The names a module defines or imports at its top level."""
    import ast

    names = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def module_file(package: Path, parts: list[str]) -> Path | None:
    path = package.joinpath(*parts)
    return next((p for p in (path.with_suffix(".py"), path / "__init__.py") if p.is_file()), None)


def dotted_problem(package: Path, ref: str) -> str | None:
    """None if `ref` ("normexp.train.loop.Hooks", "train.loop.Hooks") names a module, or a name
    defined in its longest module prefix (or a module's own attribute: __file__); else what is missing."""
    parts = ref.split(".")[1:] if ref.startswith("normexp.") else ref.split(".")
    if parts[:1] == ["configs"]:  # the repo's configs/ folder, shipped as normexp.configs (pyproject's package-dir)
        return None if (package.parent / "configs").is_dir() else "no configs/ folder beside normexp/"
    longest = max(i for i in range(len(parts) + 1) if module_file(package, parts[:i]))
    if longest == 0 and not ref.startswith("normexp."):
        return "no such module"
    name = parts[longest] if longest < len(parts) else None
    if name and not name.startswith("__") and name not in defined_names(module_file(package, parts[:longest])):
        return f"{'.'.join(['normexp', *parts[:longest]])} defines no {name}"
    return None


def stale_module_references(root: Path = ROOT) -> list[str]:
    python_files = {p.relative_to(root).as_posix() for folder in ("normexp", "hydra_plugins", "scripts", "tests")
                    for p in (root / folder).rglob("*.py")}
    stale = []
    for file, first, text in texts(root):
        for m in PY_PATH.finditer(text):
            ref = m.group(1)
            if (file, ref) not in ELSEWHERE and not any(p == ref or p.endswith("/" + ref) for p in python_files):
                stale.append(f"{file}:{first + text.count(chr(10), 0, m.start())}: {ref} (no such file)")
        for m in DOTTED.finditer(text):
            if why := dotted_problem(root / "normexp", m.group(1)):
                stale.append(f"{file}:{first + text.count(chr(10), 0, m.start())}: {m.group(1)} ({why})")
    return stale


def test_the_module_reference_checker_finds_stale_ones(tmp_path):
    (tmp_path / "normexp" / "runs").mkdir(parents=True)
    (tmp_path / "normexp" / "__init__.py").write_text("")
    (tmp_path / "normexp" / "runs" / "__init__.py").write_text("from .folder import beat_baseline\n")
    (tmp_path / "normexp" / "runs" / "folder.py").write_text(
        '"""See runs.folder.beat_baseline, normexp.runs.folder, normexp.__file__,\n'
        'folder.py and runs/folder.py, not runs.folder.read_it."""\n\n'
        "def beat_baseline():\n    pass  # nor runfolder.py, nor normexp.runs.names\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("`normexp/runs/folder.py`, `normexp.runs.beat_baseline`, corpora.py\n")
    assert stale_module_references(tmp_path) == [
        "docs/page.md:1: corpora.py (no such file)",
        "normexp/runs/folder.py:2: runs.folder.read_it (normexp.runs.folder defines no read_it)",
        "normexp/runs/folder.py:5: runfolder.py (no such file)",
        "normexp/runs/folder.py:5: normexp.runs.names (normexp.runs defines no names)"]


def test_every_module_reference_names_an_existing_module():
    stale = stale_module_references()
    assert not stale, f"{len(stale)} reference(s) to modules or names that do not exist:\n" + "\n".join(stale)
