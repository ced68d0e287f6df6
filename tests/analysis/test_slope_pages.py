"""The likelihood slopes the depth_law and depth_transfer pages (and the README) print are the
committed CSVs' (docs/results/depth_law/likelihood_slopes.csv and slope_differences.csv, written
by scripts/slope_intervals.py), and those CSVs are what the fit gives from the committed runs."""

import importlib.util
import math
import re
from pathlib import Path

import pandas as pd
import pytest

from normexp.analysis import depth_law

ROOT = Path(__file__).resolve().parents[2]
LAW, TRANSFER = ROOT / "docs/results/depth_law", ROOT / "docs/results/depth_transfer"
# (page, the study whose table it prints, with the stability-limits-only fits beside)
TABLES = ((LAW / "README.md", "depth_law, 800 steps", True),
          (LAW / "README.md", "depth_law, 200 steps (issue 39 search)", False),
          (LAW / "README.md", "depth_law, 800 steps Pre-LN/Sandwich", True),
          (TRANSFER / "README.md", "depth_transfer, 400 steps", False))
PROSE = (LAW / "README.md", TRANSFER / "README.md", ROOT / "README.md", ROOT / "docs/results/README.md")
INTERVAL = re.compile(r"([−-]?\d+\.\d\d) \[([−-]?\d+\.\d\d), ([−-]?\d+\.\d\d)\]")


def script():
    spec = importlib.util.spec_from_file_location("slope_intervals", ROOT / "scripts" / "slope_intervals.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def csvs() -> tuple[pd.DataFrame, pd.DataFrame]:
    return pd.read_csv(LAW / "likelihood_slopes.csv"), pd.read_csv(LAW / "slope_differences.csv")


def known_intervals(table: pd.DataFrame, diffs: pd.DataFrame, interval, methods=("", "seeds_only_")) -> set[str]:
    """Every slope (of `methods`) and difference of the CSVs with its interval, as the pages write it."""
    out = set()
    for prefix in ("", "limits_"):
        for method in methods:
            cols = [f"{prefix}{method}{c}" for c in ("slope", "low", "high")]
            out |= {interval(*r) for r in table[cols].itertuples(index=False)}
    return out | {interval(*r) for r in diffs[["difference", "low", "high"]].itertuples(index=False)}


def sentences(text: str) -> list[str]:
    """The page's prose (tables and code blocks left out) as sentences, lines joined."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    prose = " ".join(line.strip() for line in text.splitlines() if not line.startswith("|"))
    return re.split(r"(?<=[.!?:)])\s+(?=[A-Z*(\[`-])", prose)


def stray_intervals(text: str, known: set[str], with_scatter: set[str]) -> list[str]:
    """The intervals that no CSV holds among those in a sentence that names the depth scatter term,
    and the likelihood slopes written L^x [a, b] that are not a fit with the term."""
    out = []
    for sentence in sentences(text):
        if "depth scatter" in sentence:
            out += [f for m in INTERVAL.finditer(sentence) if (f := words(m)) not in known]
        out += [f for m in re.finditer(r"L\^" + INTERVAL.pattern, sentence) if (f := words(m)) not in with_scatter]
    return out


def words(m: re.Match) -> str:
    return f"{m[1]} [{m[2]}, {m[3]}]".replace("-", "−")


@pytest.mark.parametrize("page, study, limits", TABLES, ids=[t[1] for t in TABLES])
def test_each_pages_likelihood_table_is_the_csv(page, study, limits):
    table, _ = csvs()
    assert script().slope_markdown(table, study, limits) in page.read_text(encoding="utf-8")


def test_the_deepnet_sentence_is_the_csv():
    _, diffs = csvs()
    sentence = script().contrast_sentence(diffs)
    assert sentence in (LAW / "README.md").read_text(encoding="utf-8")
    assert "1.96 [0.78, 3.55]" in sentence  # the numbers of the run this page reports (2–64 blocks, issue 60)


@pytest.mark.parametrize("page", PROSE, ids=[p.relative_to(ROOT).as_posix() for p in PROSE])
def test_every_interval_said_with_the_depth_scatter_term_is_in_the_csvs(page):
    table, diffs = csvs()
    interval = script().interval
    known, with_scatter = known_intervals(table, diffs, interval), known_intervals(table, diffs, interval, ("",))
    assert not stray_intervals(page.read_text(encoding="utf-8"), known, with_scatter)


def test_the_checks_find_an_altered_number():
    module = script()
    table, diffs = csvs()
    page = (LAW / "README.md").read_text(encoding="utf-8")
    row = (table["study"] == "depth_law, 800 steps") & (table["line"] == "deepnorm/xavier")
    table.loc[row, ["high", "limits_high"]] = 3.95
    assert module.slope_markdown(table, "depth_law, 800 steps", True) not in page
    known, with_scatter = (known_intervals(table, diffs, module.interval, m) for m in (("", "seeds_only_"), ("",)))
    assert stray_intervals("DeepNorm −0.89 [−5.71, 3.93] with a depth\nscatter term. Other: 1.00 [0.50, 2.00].",
                           known, with_scatter) == ["−0.89 [−5.71, 3.93]"]
    assert stray_intervals("It falls as L^−1.16 [−1.36, −0.97].", known, with_scatter) == ["−1.16 [−1.36, −0.97]"]
    diffs.loc[0, "low"] = -1.02
    assert module.contrast_sentence(diffs) not in page


@pytest.mark.parametrize("study, line", [("depth_transfer, 400 steps", "depth_mup/1"),
                                         ("depth_law, 800 steps", "post/xavier")])
def test_the_csv_is_the_fit_of_the_committed_runs(study, line):
    """One line of each source refitted (both methods; for the depth-law line also over its
    stability limits only) and compared with the CSV to the printed two decimals."""
    module = script()
    lines = module.transfer_lines() if study.startswith("depth_transfer") else module.sweep_lines(module.SWEEPS[study])
    data, _, at_limits = lines[tuple(line.split("/"))]
    row = csvs()[0].set_index(["study", "line"]).loc[(study, line)]
    for prefix, points in (("", data), ("limits_", at_limits)):
        if points is None:
            continue
        new, old = depth_law.likelihood_fit(*points), depth_law.likelihood_fit(*points, scatter=False)
        for method, fit in (("", new), ("seeds_only_", old)):
            got = [fit["slope"], fit["slope_low"], fit["slope_high"]]
            want = [row[f"{prefix}{method}{c}"] for c in ("slope", "low", "high")]
            assert module.interval(*got) == module.interval(*want), (prefix, method, got, want)
    assert math.isfinite(row["slope"])


def test_the_per_seed_tables_are_the_csvs():
    """Issue 57's two tables on the depth_law page: DeepNet's contrast by both readings of the seeds'
    limits (deepnet_contrast.csv, `--deepnet`) and every slope refitted per seed (likelihood_slopes.csv)."""
    module = script()
    page = (LAW / "README.md").read_text(encoding="utf-8")
    contrast = pd.read_csv(LAW / "deepnet_contrast.csv")
    assert module.deepnet_markdown(contrast) in page
    assert "| per seed | depths fitted | 2, 4, 8 and 64 | 2, 4 and 16 | 2.01 [0.12, 4.04] (0.34) |" in page
    table, diffs = csvs()
    assert module.per_seed_markdown(table) in page
    per_seed = diffs[(diffs["rule"] == "per seed") & (diffs["minuend"] == "deepnorm/xavier")
                     & (diffs["subtrahend"] == "post/xavier") & (diffs["depths"] == "own depths")
                     & (diffs["method"] == "depth scatter")].iloc[0]
    same = contrast[(contrast["rule"] == "per seed") & (contrast["depths"] == "depths fitted")
                    & (contrast["method"] == "depth scatter")].iloc[0]
    assert module.interval(per_seed["difference"], per_seed["low"], per_seed["high"]) == \
        module.interval(same["difference"], same["low"], same["high"])   # the two scripts' paths agree
