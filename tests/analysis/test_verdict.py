"""Issue 51 item 4: the report opens with its verdict, and its words and figures say what the data hold.

The run folders are written by hand (config and summary.json, no training, as
tests/analysis/test_left_out_runs.py does), with known outcomes: every expected sentence below
is written out here, its numbers worked from the losses the test writes (t-intervals with
t₀.₉₇₅,₂ = 4.302653)."""

import json
import math
from pathlib import Path

import pytest

from conftest import read_csv

BASELINE = 3.3
NAN = float("nan")

# (placement, lr): [(seed, status, outcome, final val loss)]; a diverged run enters as ℓ₀ = 5.5
SWEEP = {
    ("pre", 0.001): [(0, "completed", "learned", 2.40), (1, "completed", "learned", 2.42),
                     (2, "completed", "learned", 2.44),
                     (3, "completed", "learned", NAN)],      # no finite loss: left out, never "learned"
    ("pre", 0.01): [(0, "completed", "learned", 2.45), (1, "completed", "learned", 2.47),
                    (2, "completed", "learned", 2.49)],
    ("post", 0.001): [(0, "stalled", "stuck", 3.29), (1, "stalled", "stuck", 3.30), (2, "stalled", "collapsed", 3.31)],
    ("post", 0.01): [(0, "diverged", "diverged", None), (1, "diverged", "diverged", None),
                     (2, "diverged", "diverged", None)],
    ("deepnorm", 0.001): [(0, "completed", "learned", 3.20), (1, "completed", "learned", 3.22),
                          (2, "stalled", "stuck", 3.30)],
    ("deepnorm", 0.01): [(0, "stalled", "stuck", 3.31),
                         (1, "failed", None, None)],          # failed: left out, so n = 1
}
DIVERGED_AT = {0: 3, 1: 5, 2: 7}


def write_run(root: Path, placement: str, lr: float, seed: int, status: str, outcome, loss) -> Path:
    overrides = [f"placement={placement}", f"lr={lr}", f"seed={seed}"]
    run = root / ",".join(overrides)
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(json.dumps({"placement": {"name": placement}, "lr": lr, "seed": seed,
                                                            "threads": 1}))
    (run / ".hydra" / "overrides.yaml").write_text(json.dumps(overrides))
    summary = {"status": status, "outcome": outcome, "final_val_loss": loss, "initial_loss": 5.5,
               "baseline_loss": BASELINE, "stall_margin": 0.02, "steps_completed": 100,
               "diverged_at_step": DIVERGED_AT[seed] if status == "diverged" else None}
    if status == "failed":
        summary["error"] = "lr=0.01: an error written by the test"
    (run / "summary.json").write_text(json.dumps(summary))
    return run


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from normexp.analysis.report import make_report

    root = tmp_path_factory.mktemp("verdict") / "sweep"
    for (placement, lr), seeds in SWEEP.items():
        for seed, status, outcome, loss in seeds:
            write_run(root, placement, lr, seed, status, outcome, loss)
    printed = []
    make_report(root, echo=printed.append)
    return root, (root / "report.md").read_text(), printed


# the verdict, by hand: learned best first; the other groups in the settings table's order
# (placement, then lr: deepnorm < post < pre); the overlapping intervals merged (A 2.370 … 2.470
# and B 2.420 … 2.520; E 3.109 … 3.371 and C 3.275 … 3.325; D 5.500 … 5.500 alone)
EXPECTED = [
    "- **Learned (2 of 6)**: placement=pre, lr=0.001 (n=3, loss 2.420, interval 2.370 … 2.470); "
    "placement=pre, lr=0.01 (n=3, loss 2.470, interval 2.420 … 2.520)",
    "- **Stalled, ended less than stall_margin (2 %) below the unigram baseline (2 of 6)**: "
    "placement=deepnorm, lr=0.01 (n=1: 1 stuck; loss 3.310); "
    "placement=post, lr=0.001 (n=3: 2 stuck, 1 collapsed; loss 3.300, interval 3.275 … 3.325)",
    "- **Diverged (1 of 6)**: placement=post, lr=0.01 (n=3; at steps 3, 5, 7)",
    "- **Seeds disagree, so the data do not say how the setting ends (1 of 6)**: "
    "placement=deepnorm, lr=0.001 (n=3: 2 learned, 1 stuck; loss 3.240, interval 3.109 … 3.371)",
    "- **Not separated by the data**: by final validation loss: "
    "placement=pre, lr=0.001 and placement=pre, lr=0.01 (their 95 % intervals overlap); "
    "placement=deepnorm, lr=0.001 and placement=post, lr=0.001 (their 95 % intervals overlap); "
    "placement=deepnorm, lr=0.01 rests on one seed (n = 1): no interval, so nothing separates it from the "
    "others by loss",
]


def test_the_hand_worked_intervals_are_the_ones_the_verdict_quotes():
    """The expectation's numbers, from the losses above (a check on the hand arithmetic)."""
    t = 4.302653  # t quantile 0.975 with 2 degrees of freedom
    for losses, low, high in (([2.40, 2.42, 2.44], "2.370", "2.470"), ([3.20, 3.22, 3.30], "3.109", "3.371"),
                              ([3.29, 3.30, 3.31], "3.275", "3.325")):
        mean = sum(losses) / 3
        sd = math.sqrt(sum((x - mean) ** 2 for x in losses) / 2)
        assert (f"{mean - t * sd / math.sqrt(3):.3f}", f"{mean + t * sd / math.sqrt(3):.3f}") == (low, high)


def test_the_report_opens_with_the_verdict(report):
    _, md, _ = report
    lines = md.splitlines()
    assert lines[0] == "# normexp report: `sweep`" and lines[2] == "## Verdict", lines[:3]
    intro = lines[4]
    assert intro.startswith("6 settings (n = 1 to 3 seeds); 2 runs left out of the statistics and not counted"), intro
    assert "95 % t-interval over seeds where n ≥ 2" in intro
    bullets = lines[6:6 + len(EXPECTED)]
    assert bullets == EXPECTED
    assert lines[6 + len(EXPECTED)] == "", "the verdict ends where the overview starts"
    assert md.index("## Verdict") < md.index("## Settings")


def test_the_terminal_ends_with_the_same_verdict(report):
    _, _, printed = report
    verdict = [str(p) for p in printed if str(p).startswith("verdict: ")]
    want = [b[len("- **"):].replace("**: ", ": ", 1) for b in EXPECTED]
    assert [v[len("verdict: "):] for v in verdict] == [w[0].lower() + w[1:] for w in want]


def test_the_report_speaks_runs_csv_words(report):
    """One vocabulary: the per-run table has the outcome beside the status, as runs.csv does,
    and the overview says which outcomes each status holds."""
    root, md, _ = report
    rows = read_csv(root / "runs.csv")
    want = {(p, lr, seed): (status, outcome or "") for (p, lr), seeds in SWEEP.items() for seed, status, outcome, _ in seeds}
    assert {(r["placement"], float(r["lr"]), int(r["seed"])): (r["status"], r["outcome"]) for r in rows} == want
    table = [ln for ln in md.splitlines() if ln.startswith("| # |")][0].split(" | ")
    assert table.index("outcome") == table.index("status") + 1
    assert "| post | 0.001 | 2 | stalled | collapsed |" in md
    # in run order: deepnorm's runs come first; statuses in the order they appear, each with its outcomes
    assert ("18 runs under sweep: 9 completed (learned), 5 stalled (4 stuck, 1 collapsed), 1 failed, 3 diverged; "
            "varied: placement, lr") in md


def _verdict(tmp_path, seeds_by_setting):
    """verdict_lines of a hand-written sweep: {placement: [(seed, status, outcome, loss)]}."""
    from normexp.analysis.report.verdict import verdict_lines
    from normexp.runs.reading import read_runs

    for placement, seeds in seeds_by_setting.items():
        for seed, status, outcome, loss in seeds:
            write_run(tmp_path, placement, 0.01, seed, status, outcome, loss)
    runs = read_runs(tmp_path)
    return dict(verdict_lines(runs, ["placement.name"]))


def test_with_one_seed_each_the_verdict_says_nothing_is_measured(tmp_path):
    got = _verdict(tmp_path, {"pre": [(0, "completed", "learned", 2.4)], "post": [(0, "stalled", "stuck", 3.3)]})
    assert got["learned (1 of 2)"] == "placement=pre (n=1, loss 2.400)"
    assert got["not separated by the data"] == (
        "every setting rests on one seed (n = 1): each outcome is one run's, and no interval says whether the losses "
        "differ beyond chance (more seeds, e.g. seed=0,1,2, would)")


def test_settings_whose_intervals_are_apart_are_said_to_be_separated(tmp_path):
    got = _verdict(tmp_path, {"pre": [(0, "completed", "learned", 2.40), (1, "completed", "learned", 2.41)],
                              "post": [(0, "stalled", "slow", 3.25), (1, "stalled", "slow", 3.26)]})
    assert "not separated by the data" not in got
    assert got["separated"] == "every setting's 95 % interval is apart from the others'"
    assert got["stalled, ended less than stall_margin (2 %) below the unigram baseline (1 of 2)"] == (
        "placement=post (n=2: 2 slow; loss 3.255, interval 3.191 … 3.319)")


# ------------------------------------------------------------------------ the figures

def _run(name: str, placement: str, seed: int, status: str, scalars: dict, outcome=None):
    from normexp.runs.reading import Run

    summary = {"status": status, "outcome": outcome, "final_val_loss": 3.0, "initial_loss": 5.5,
               "baseline_loss": BASELINE}
    return Run(Path(name), name, {"placement.name": placement, "seed": seed}, [], summary, scalars)


@pytest.fixture
def saved(monkeypatch):
    from normexp.analysis.report import figures

    out = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, data: out.update({path.name: fig}))
    return out


@pytest.mark.parametrize("seeds, named", [((0,), False), ((0, 1), True)])
def test_loss_figures_draw_the_baseline_and_name_an_interval_only_with_two_seeds(tmp_path, saved, seeds, named):
    from normexp.analysis.report.figures import plot_val_curves

    runs = [_run(f"{p}{s}", p, s, st, {"val/loss": [(0, 5.5), (50, 3.4 + s / 10), (100, v + s / 10)]}, outcome)
            for p, st, outcome, v in (("pre", "completed", "learned", 2.5), ("post", "stalled", "stuck", 3.3))
            for s in seeds]
    for i, r in enumerate(runs, 1):
        r.index = i
    assert plot_val_curves(runs, ["placement.name"], tmp_path / "val.png") is None
    fig = saved["val.png"]
    (ax,) = [a for a in fig.axes if a.lines]
    baseline = [ln for ln in ax.lines if ln.get_label() == f"unigram baseline {BASELINE:.3f}"]
    assert len(baseline) == 1 and baseline[0].get_linestyle() == "--"
    assert list(baseline[0].get_ydata()) == [BASELINE, BASELINE]
    assert f"unigram baseline {BASELINE:.3f}" in [t.get_text() for t in ax.get_legend().get_texts()]
    title = fig._suptitle.get_text()
    assert ("95 % t-interval" in title) is named, title
    assert ("no interval" in title) is (not named), title
    # the legend speaks runs.csv's outcome words, not the status
    words = " ".join(t.get_text() for t in ax.get_legend().get_texts())
    assert "learned" in words and "stuck" in words and "completed" not in words and "stalled" not in words

    from normexp.analysis.report.figures import plot_final_grid

    assert plot_final_grid(runs, ["placement.name"], tmp_path / "final.png") == ("bar chart", None)
    (ax,) = saved["final.png"].axes
    assert ("95 % t-interval" in ax.get_title()) is named and ("no interval" in ax.get_title()) is (not named)
    assert [ln.get_ydata()[0] for ln in ax.lines if ln.get_label().startswith("unigram baseline")] == [BASELINE]


def _profiles(family: str, values: dict) -> list:
    """One run per placement: {placement: [value of layer 0, 1, 2]} at step 0 and step 100."""
    runs = []
    for i, (placement, v) in enumerate(values.items(), 1):
        scalars = {f"{family}/layer_{k:02d}": [(0, x), (100, 2 * x)] for k, x in enumerate(v)}
        r = _run(placement, placement, 0, "completed", scalars, "learned")
        r.index = i
        runs.append(r)
    return runs


def test_coinciding_profiles_are_told_apart_on_a_linear_axis_with_enough_ticks(tmp_path, saved):
    """The step-0 activation std of Post-LN and DeepNorm (both ≈ 1 after their final norm): a
    range far under two decades, so a linear axis with five ticks or more, and each line its own
    dash pattern and marker, so the one drawn last does not hide the other."""
    from normexp.analysis.report.figures import plot_layer_profiles

    runs = _profiles("act_std", {"post": [1.0, 1.0, 1.0], "deepnorm": [1.0, 1.0, 1.0 + 1e-4], "pre": [1.5, 1.6, 1.7]})
    assert plot_layer_profiles(runs, ["placement.name"], "act_std", tmp_path / "act.png") is None
    step0 = saved["act.png"].axes[0]
    assert step0.get_yscale() == "linear"
    lo, hi = step0.get_ylim()
    assert len([t for t in step0.get_yticks() if lo <= t <= hi]) >= 5
    lines = {ln.get_label(): ln for ln in step0.lines}
    post, deepnorm = lines["placement=post"], lines["placement=deepnorm"]
    assert post.get_linestyle() != deepnorm.get_linestyle() and post.get_marker() != deepnorm.get_marker()


def test_profile_legends_sit_outside_the_data_and_entropy_is_in_nats(tmp_path, saved):
    from normexp.analysis.report.figures import plot_layer_profiles

    runs = _profiles("attn_entropy", {"post": [1.6, 2.1, 2.2], "deepnorm": [1.7, 2.2, 2.25], "pre": [2.25, 2.2, 2.2]})
    assert plot_layer_profiles(runs, ["placement.name"], "attn_entropy", tmp_path / "ent.png") is None
    fig = saved["ent.png"]
    fig.canvas.draw()
    for ax in fig.axes:
        assert ax.get_yscale() == "linear" and "nats" in ax.get_ylabel()
        legend, frame = ax.get_legend().get_window_extent(), ax.get_window_extent()
        assert legend.y1 < frame.y0, "the legend lies below the panel, over no data"


def test_a_profile_spanning_more_than_two_decades_gets_a_log_axis(tmp_path, saved):
    from normexp.analysis.report.figures import plot_layer_profiles

    runs = _profiles("grad_norm", {"post": [1e-3, 1e-2, 1.0], "pre": [0.5, 0.5, 0.6]})
    assert plot_layer_profiles(runs, ["placement.name"], "grad_norm", tmp_path / "g.png") is None
    assert [ax.get_yscale() for ax in saved["g.png"].axes] == ["log", "log"]
