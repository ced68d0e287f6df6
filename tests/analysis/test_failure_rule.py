"""The failure rule (boundary.FAILURE_RULE): an edge is a stability limit only where a seed
collapsed or diverged, a speed edge where its stalls learn at N× the steps; every table that
names an edge reads it the same way (boundary.csv rows, the depth law, the transfer grid)."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from normexp.analysis import boundary, depth_law, transfer
from normexp.analysis.report.sections import depth_law_section

ROOT = Path(__file__).resolve().parents[2]
LAW_800 = ROOT / "docs" / "results" / "depth_law" / "issue39_800"


def test_edge_class_by_hand():
    assert boundary.edge_class(["learned", "collapsed", "stuck"]) == boundary.STABILITY_LIMIT
    assert boundary.edge_class(["diverged"], ["learned"], 2) == boundary.STABILITY_LIMIT
    # a stall whose rerun collapses is a limit too: a seed collapsed at that lr
    assert boundary.edge_class(["stuck", "learned"], ["collapsed", "learned"], 2) == boundary.STABILITY_LIMIT
    assert boundary.edge_class(["stuck", "slow"], ["learned"] * 3, 4) == "speed edge (learns at ×4)"
    assert boundary.edge_class(["slow", "learned"]) == boundary.STALL_NOT_CHECKED
    assert boundary.edge_class(["stuck"] * 3, ["learned", "learned", "stuck"], 2) == "stall at ×2 too"
    assert not boundary.is_stability_limit("speed edge (learns at ×2)")


def test_a_boundary_row_is_classed_from_its_own_words():
    row = {"last_stable": 0.04, "first_unstable": 0.0462, "upper_edge": "stalled", "upper_why": "learned 2, stuck 1",
           "upper_budget": "fails at ×2 steps at 0.0462 (collapsed 1, learned 2)"}
    assert boundary.row_edge_class(row) == boundary.STABILITY_LIMIT
    row["upper_budget"] = "fails at ×2 steps at 0.0462 (learned 2, stuck 1)"
    assert boundary.row_edge_class(row) == "stall at ×2 too"
    row["upper_budget"] = "learns at ×4 steps at 0.0462 (learned 3): too slow for the budget"
    assert boundary.row_edge_class(row) == "speed edge (learns at ×4)"
    row["upper_budget"] = math.nan   # no budget check
    assert boundary.row_edge_class(row) == boundary.STALL_NOT_CHECKED
    assert boundary.row_edge_class({**row, "upper_edge": "unstable", "upper_why": math.nan}) == boundary.STABILITY_LIMIT
    assert boundary.row_edge_class({"last_stable": math.nan, "first_unstable": 3e-4, "upper_edge": "no window"}) is None
    assert boundary.row_edge_class({"last_stable": 0.3, "first_unstable": math.nan, "upper_edge": "upper bound"}) is None


def test_stable_bracket_is_set_by_the_first_collapse_not_by_the_first_stall():
    by_lr = {1e-3: ["learned"] * 3, 3e-3: ["stuck"] * 3, 1e-2: ["stuck", "collapsed"], 3e-2: ["diverged"]}
    assert boundary.stable_bracket(by_lr) == (3e-3, 1e-2)
    assert boundary.stable_bracket({1e-3: ["learned"], 3e-3: ["slow"]}) == (3e-3, None)
    assert boundary.stable_bracket({1e-3: ["collapsed"]}) == (None, 1e-3)
    assert boundary.bracket_words(3e-3, None, "≥ {:.3g}") == "≥ 0.003"
    assert boundary.bracket_words(None, 1e-3) == "< 0.001"


def test_the_800_step_edges_are_9_limits_and_6_speed_edges_of_16():
    """The committed 800-step search: the issue's count (6 of 16 upper edges slow) by the rule."""
    rows = pd.concat([pd.read_csv(t) for t in sorted(LAW_800.glob("*/boundary.csv"))]).to_dict("records")
    classes = [boundary.row_edge_class(r) for r in rows]
    assert len(rows) == 16
    assert classes.count(boundary.STABILITY_LIMIT) == 9
    assert classes.count("speed edge (learns at ×2)") == 6
    assert classes.count(None) == 1   # Post-LN/xavier at 16 blocks: no window


def synthetic_line():
    """boundary rows and points of one line, seeds j = 0.9, 1, 1.1: at 2, 4 and 8 blocks a seed learns
    below 0.1·(L/2)^-½·j and collapses above (a stability limit, slope −½); at 16 and 32 it learns below
    0.002·j and is stuck above (a stall, not budget-checked: far below the limit's line)."""
    lrs = 1e-4 * 1.25 ** np.arange(0, 42)
    points, rows = [], []
    for depth in (2, 4, 8, 16, 32):
        for seed, j in enumerate((0.9, 1.0, 1.1)):
            edge, failure = (0.1 * (depth / 2) ** -0.5 * j, "collapsed") if depth <= 8 else (0.002 * j, "stuck")
            for lr in lrs:
                outcome = "learned" if lr < edge else failure
                points.append({"layers": depth, "lr": lr, "seed": seed, "outcome": outcome,
                               "learned": "yes" if outcome == "learned" else "no", "steps_factor": 1})
        at = pd.DataFrame(points)
        at = at[at["layers"] == depth]
        every = at.groupby("lr")["learned"].apply(lambda s: (s == "yes").all())
        last = every[every].index.max()
        first = every[~every & (every.index > last)].index.min()
        why = boundary.counts_words(at[at["lr"] == first]["outcome"])
        rows.append({"layers": depth, "last_stable": last, "first_unstable": first,
                     "upper_edge": "unstable" if depth <= 8 else "stalled", "upper_why": why, "upper_budget": ""})
    return rows, pd.DataFrame(points)


def test_the_stability_slope_fits_only_the_edges_that_are_stability_limits():
    rows, points = synthetic_line()
    got = depth_law.rule_edges(rows, points)
    assert [e["class"] for e in got["edges"]] == [boundary.STABILITY_LIMIT] * 3 + [boundary.STALL_NOT_CHECKED] * 2
    assert got["lik_stable"]["depths"] == 3
    assert got["lik_stable"]["slope"] == pytest.approx(-0.5, abs=0.05)
    every = depth_law.likelihood_fit(*depth_law.upper_side(points)[:3], intervals=False)
    assert every["slope"] < -1.0   # the stalls at 16 and 32 blocks pull the fit over every depth down
    for e in got["edges"][:3]:     # the stable bracket holds the lowest seed's collapse, 0.09·(L/2)^-½
        low, high = e["stable"]
        assert low < 0.09 * (e["layers"] / 2) ** -0.5 <= high
    assert all(e["stable"][1] is None for e in got["edges"][3:])   # no collapse probed at 16, 32


def test_a_grid_edge_of_stalls_is_not_checked_and_its_stable_lr_is_the_first_collapse():
    points = pd.DataFrame([{"placement": "post", "layers": 8, "lr": lr, "seed": s, "outcome": o,
                            "learned": "yes" if o == "learned" else "no", "loss": 3.0}
                           for lr, o in ((1e-3, "learned"), (2e-3, "stuck"), (4e-3, "slow"), (8e-3, "collapsed"))
                           for s in (0, 1)])
    row = transfer.edges(points, ["placement"]).iloc[0]
    assert (row["last_stable"], row["first_unstable"], row["upper_edge"]) == (1e-3, 2e-3, "stalled")
    assert row["edge_class"] == boundary.STALL_NOT_CHECKED and row["upper_why"] == "stuck 2"
    assert (row["stable_low"], row["stable_high"]) == (4e-3, 8e-3)


def test_the_depth_law_section_prints_the_rule_and_both_quantities(tmp_path):
    tables = sorted(LAW_800.glob("*/boundary.csv"))
    md = "\n".join(depth_law_section(tables, tmp_path, echo=lambda *_: None))
    assert boundary.FAILURE_RULE in md
    slopes = pd.read_csv(tmp_path / "depth_law_slopes.csv").set_index(["placement", "init"])
    assert slopes.loc[("post", "torchscale"), "stability limits among the bracketed edges"] == "4 of 4"
    assert slopes.loc[("deepnorm", "torchscale"), "stability limits among the bracketed edges"] == "0 of 4"
    assert "8: speed edge (learns at ×2)" in slopes.loc[("post", "xavier"), "upper edge per depth (failure rule)"]


def test_a_refresh_reproduces_the_committed_columns_or_writes_nothing(tmp_path):
    """refresh_depth_law recomputes a committed study from its CSVs: it reproduces every committed
    column; it refuses to change a committed column (a likelihood interval as printed before issue
    57's corrected profile) unless told to rewrite it, and with a bootstrap slope altered by 0.02
    (two units of its last digit) it refuses and leaves the file as it was."""
    import shutil

    from normexp.analysis.report.sections import refresh_depth_law
    from normexp.analysis.report.tables import _close

    assert _close("-1.16 [-1.36, -0.97]", "-1.17 [-1.36, -0.96]") and not _close("-1.16", "-1.18")
    assert _close("4e-05", "4.9e-05") and not _close("4e-05 [1.4e-05, 0.00011]", "5.2e-05 [1.4e-05, 0.00011]")
    assert not _close("2: 0.0021", "4: 0.0021")
    folder = tmp_path / "issue39_800"
    shutil.copytree(LAW_800, folder)
    slopes = folder / "depth_law_slopes.csv"
    refresh_depth_law(folder, echo=lambda *_: None)
    assert pd.read_csv(slopes).equals(pd.read_csv(LAW_800 / "depth_law_slopes.csv"))
    corrected = "-1.16 [-1.72, -0.57]"     # Post-LN/torchscale; before issue 57: -1.16 [-1.36, -0.97]
    assert corrected in slopes.read_text(encoding="utf-8")
    narrow = slopes.read_text(encoding="utf-8").replace(corrected, "-1.16 [-1.36, -0.97]")
    slopes.write_text(narrow, encoding="utf-8")
    with pytest.raises(ValueError, match="slope, likelihood"):
        refresh_depth_law(folder, echo=lambda *_: None)
    assert slopes.read_text(encoding="utf-8") == narrow
    refresh_depth_law(folder, echo=lambda *_: None, rewrite=LIKELIHOOD_COLUMNS)
    assert corrected in slopes.read_text(encoding="utf-8")
    fresh = pd.read_csv(slopes)
    assert "upper edge per depth (failure rule)" in fresh.columns
    assert fresh["slope [95 %]"].tolist() == pd.read_csv(LAW_800 / "depth_law_slopes.csv")["slope [95 %]"].tolist()
    altered = slopes.read_text(encoding="utf-8").replace("-1.14 [-1.66, -0.84]", "-1.16 [-1.66, -0.84]")
    assert altered != slopes.read_text(encoding="utf-8")
    slopes.write_text(altered, encoding="utf-8")
    with pytest.raises(ValueError, match=r"'slope \[95 %\]'"):
        refresh_depth_law(folder, echo=lambda *_: None, rewrite=LIKELIHOOD_COLUMNS)
    assert slopes.read_text(encoding="utf-8") == altered


LIKELIHOOD_COLUMNS = ("slope, likelihood [95 %]", "limit (50 %) at the shallowest depth [95 %]",
                      "likelihood at 1000 blocks [95 %]", "seed × depth limits fitted (depths left out)",
                      "slope, likelihood, stability limits only [95 %]")


def test_a_refresh_reads_the_depth_of_a_search_run_at_one_depth(tmp_path):
    """A search at one depth writes no layers column (issue49_800/pre_sandwich_8_800): its depth
    comes from the multirun.yaml beside it, so the refresh places its rows at 8 blocks (they
    entered as NaN depths before, and the fit stopped with 'SVD did not converge')."""
    import shutil

    from normexp.analysis.report.sections import refresh_depth_law

    folder = tmp_path / "issue49_800"
    shutil.copytree(LAW_800.parent / "issue49_800", folder)
    assert "layers" not in pd.read_csv(folder / "pre_sandwich_8_800" / "boundary.csv").columns
    refresh_depth_law(folder, echo=lambda *_: None)
    fresh = pd.read_csv(folder / "depth_law_slopes.csv").set_index(["placement", "init"])
    assert fresh.loc[("pre", "xavier"), "max stable lr per depth (failure rule)"].startswith("2: ")
    assert "8: 0.195 .. 0.225" in fresh.loc[("pre", "torchscale"), "max stable lr per depth (failure rule)"]
    (folder / "pre_sandwich_8_800" / "multirun.yaml").write_text("placement: pre\n", encoding="utf-8")
    with pytest.raises(ValueError, match="no layers column"):
        refresh_depth_law(folder, echo=lambda *_: None)
