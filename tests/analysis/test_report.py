"""`normexp report` on a tiny real sweep (placement × warmup, one job failing, one diverging,
one copy marked running): the table, runs.csv, report.md and the figures against the run
folders' own summary.json and config."""

import json
import math
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml

from conftest import RAN_TO_THE_END, SAFETY_NET_S, TINY, cli_environment, make_corpus, read_csv, read_summary, run_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """6 jobs (2 placements × warmup 0, 5, 2.5; warmup=2.5, not a whole step count, fails), one more job with
    an absurd learning rate that diverges, and a copy of a finished run whose summary.json
    is set back to what a run still going holds (status running, no final numbers)."""
    folder = tmp_path_factory.mktemp("report")
    corpus = make_corpus(folder / "corpus.txt")
    sweep_dir = folder / "sweeps"  # two sweeps side by side: report takes any folder holding runs
    env = cli_environment(folder / "cache")
    common = ["data=text", f"data.files=[{corpus}]", "steps=12", "log_every=4", "eval_every=4", *TINY]
    run_cli(["train", "-m", "placement=pre,post", "warmup=0,5,2.5", *common, f"hydra.sweep.dir={sweep_dir / 'grid'}"], env)
    run_cli(["train", "-m", "placement=post", "warmup=0", "lr=100", *common, f"hydra.sweep.dir={sweep_dir / 'lr'}"], env)
    finished = next(p.parent for p in sweep_dir.glob("*/*/summary.json")
                    if "placement=pre" in p.parent.name and p.parent.name.endswith("warmup=5"))
    running = sweep_dir / "grid" / "still_running"
    shutil.copytree(finished, running)
    summary = read_summary(running)
    summary.update(status="running", steps_completed=0, final_train_loss=None, final_val_loss=None,
                   best_val_loss=None, tokens_per_second=None, wall_seconds=None,
                   pid=os.getpid())  # a live process on this host: the run counts as still going
    from normexp.runs.process import process_identity

    summary.update(process_identity())  # (the finished run's start time and boot would name its own process)
    (running / "summary.json").write_text(json.dumps(summary))
    out = run_cli(["report", str(sweep_dir)], env, timeout=SAFETY_NET_S)
    return sweep_dir, finished, running, out.stdout, env


def runs_of(sweep_dir: Path) -> dict[Path, dict]:
    return {p.parent: read_summary(p.parent) for p in sweep_dir.glob("*/*/summary.json")}


def config_of(run: Path) -> dict:
    return yaml.safe_load((run / ".hydra" / "config.yaml").read_text())


def four(x) -> str:
    return "-" if x is None else f"{x:.4f}"


def expected_row(run: Path, summary: dict, sweep_dir: Path, finished: Path) -> dict:
    """What the table must say about a run: its config's keys, and its summary's numbers (for
    the running copy: the numbers its event file holds, which are the finished run's)."""
    cfg = config_of(run)
    numbers = runs_of(sweep_dir)[finished] if summary["status"] == "running" else summary
    return {"placement": cfg["placement"]["name"], "warmup": str(cfg["warmup"]), "status": summary["status"],
            "final val": four(numbers.get("final_val_loss")), "best val": four(numbers.get("best_val_loss")),
            "diverged at": "-" if numbers.get("diverged_at_step") is None else str(numbers["diverged_at_step"]),
            "steps done": "-" if numbers.get("steps_completed") is None else str(numbers["steps_completed"])}


def parse_table(stdout: str) -> list[dict]:
    lines = stdout.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("#  "))
    head = re.split(r"\s{2,}", lines[start].strip())
    rows = []
    for ln in lines[start + 2:]:
        if not re.match(r"\d+\s", ln):
            break
        rows.append(dict(zip(head, re.split(r"\s{2,}", ln.strip()))))
    return rows


@pytest.mark.slow
def test_table_lists_every_run_with_its_status_and_numbers(sweep):
    sweep_dir, finished, running, stdout, _ = sweep
    runs = runs_of(sweep_dir)
    assert len(runs) == 8
    # the four runs that finish end "stalled" or "completed" (12 steps of a tiny model rarely get
    # 2 % below the unigram baseline): both mean "ran to the end", the status says which
    statuses = sorted("finished" if s["status"] in RAN_TO_THE_END else s["status"] for s in runs.values())
    assert statuses == ["diverged", "failed", "failed"] + ["finished"] * 4 + ["running"]
    assert "varied: placement, warmup, lr" in stdout
    rows = parse_table(stdout)
    assert len(rows) == len(runs)
    unmatched = list(rows)
    for run, summary in runs.items():
        want = expected_row(run, summary, sweep_dir, finished)
        match = [r for r in unmatched if all(r[k] == v for k, v in want.items())]
        assert len(match) == 1, (run.name, want, rows)
        unmatched.remove(match[0])
    diverged = next(s for s in runs.values() if s["status"] == "diverged")
    assert diverged["diverged_at_step"] is not None
    assert "warmup=2.5: must be an integer step count" in stdout  # the failed jobs' error is shown


@pytest.mark.slow
def test_csv_has_one_row_per_run_with_the_varied_columns(sweep):
    sweep_dir, finished, _, _, _ = sweep
    rows = read_csv(sweep_dir / "runs.csv")
    runs = runs_of(sweep_dir)
    assert len(rows) == len(runs)
    assert {"placement", "warmup", "lr", "status", "final_val_loss", "diverged_at_step"} <= set(rows[0])
    for row in rows:
        run = sweep_dir / row["path"]
        summary, cfg = runs[run], config_of(run)
        assert (row["placement"], row["warmup"], float(row["lr"])) == (cfg["placement"]["name"], str(cfg["warmup"]), cfg["lr"])
        assert row["status"] == summary["status"]
        numbers = runs[finished] if summary["status"] == "running" else summary
        for key in ("final_val_loss", "best_val_loss", "diverged_at_step"):
            want = numbers.get(key)
            assert (row[key] == "") if want is None else float(row[key]) == pytest.approx(want, rel=1e-6), (key, row)


@pytest.mark.slow
def test_markdown_references_every_figure_and_each_is_a_png(sweep):
    sweep_dir, _, _, _, _ = sweep
    md = (sweep_dir / "report.md").read_text()
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    per_layer = ("grad_norm", "act_std", "update_rms", "attn_logit_max", "attn_entropy")
    assert set(figures) == {"val_loss.png", "train_loss.png", "final_val_loss.png", *(f"{f}_layers.png" for f in per_layer)}
    import matplotlib.image

    for name in figures:
        data = (sweep_dir / name).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000, name
        height, width = matplotlib.image.imread(sweep_dir / name).shape[:2]  # decodes: a valid PNG
        assert width > 300 and height > 200
    assert "| running |" in md and "| failed |" in md and "| diverged |" in md
    assert "heatmap" in md


@pytest.mark.slow
def test_one_varied_key_gives_a_bar_chart_and_out_elsewhere(sweep, tmp_path):
    """Two finished runs that differ only in warmup, reported into another folder."""
    from normexp.analysis.report import make_report

    sweep_dir, _, _, _, _ = sweep
    pair = tmp_path / "pair"
    for run in (sweep_dir / "grid").iterdir():
        if "placement=pre" in run.name and re.search(r"warmup=(0|5)$", run.name):
            shutil.copytree(run, pair / run.name)
    out = tmp_path / "out"
    result = make_report(pair, out, echo=lambda *_: None)
    assert result["keys"] == ["warmup"]
    assert "bar chart" in (out / "report.md").read_text()
    assert (out / "final_val_loss.png").read_bytes()[:8] == PNG_MAGIC
    assert not (pair / "report.md").exists()


def test_varied_keys_follow_the_overrides_and_drop_group_details():
    from normexp.analysis.report.tables import varied_keys
    from normexp.runs.reading import Run

    def run(norm, eps, layers, seed, overrides):
        cfg = {"norm.name": norm, "norm.eps": eps, "layers": layers, "seed": seed, "threads": seed, "lr": 1e-3}
        return Run(Path("x"), "x", cfg, overrides, {})

    runs = [run("layer", 1e-5, 6, 0, ["layers=6", "norm=layer"]), run("rms", 1e-6, 12, 1, ["layers=12", "norm=rms"])]
    # norm.eps follows from norm.name; threads never counts; seed is a replicate, never a varied key
    assert varied_keys(runs) == ["layers", "norm.name"]


def test_varied_keys_the_overrides_do_not_name_follow_the_hparams_order():
    """Without overrides (an experiment file set them), varied keys come in runs/schema.py's
    HPARAMS order, a group by its name key: the one "most often varied first" order."""
    from normexp.analysis.report.tables import varied_keys
    from normexp.runs.reading import Run
    from normexp.runs.schema import HPARAMS

    def run(i):
        cfg = {"schedule.name": ["cosine", "linear"][i], "heads": [2, 4][i], "lr": [1e-3, 3e-3][i],
               "placement.name": ["pre", "post"][i], "seq_len": [32, 64][i], "zeta": i}
        return Run(Path("x"), "x", cfg, [], {})

    by_hand = [k for k in HPARAMS if k in ("placement", "lr", "heads", "seq_len", "schedule")]
    assert by_hand == ["placement", "lr", "heads", "seq_len", "schedule"]
    # HPARAMS' keys first, in its order; a key it does not list (zeta) after them
    assert varied_keys([run(0), run(1)]) == ["placement.name", "lr", "heads", "seq_len", "schedule.name", "zeta"]


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "no such folder"),
    (lambda p: p, "no run folders found"),
])
def test_bad_path_is_one_line_and_exit_2(tmp_path, cli_env, make, message):
    proc = run_cli(["report", str(make(tmp_path))], cli_env, check=False, timeout=SAFETY_NET_S)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_key_only_some_settings_have_still_draws_every_setting(tmp_path, monkeypatch):
    """depth_mup's placement.exponent beside placements without one: the lr figure draws a line
    for every placement (pandas' groupby drops missing keys unless told), labelled without the
    key the setting lacks; the tables write the missing value as '-'."""
    import matplotlib.axes

    from normexp.analysis.report.figures import plot_sweep
    from normexp.analysis.report.tables import fmt_param
    from normexp.runs.reading import Run

    def run(placement, lr, seed, loss, exponent=None):
        cfg = {"placement.name": placement, "lr": lr, "seed": seed}
        if exponent is not None:
            cfg["placement.exponent"] = exponent
        summary = {"status": "completed", "final_val_loss": loss, "initial_loss": 5.5, "baseline_loss": 3.3}
        return Run(Path(f"r{placement}{lr}{seed}"), "x", cfg, [], summary)

    runs = [run("depth_mup", lr, s, 2.5 + lr + s / 100, exponent=0.5) for lr in (1e-3, 1e-2) for s in (0, 1)]
    runs += [run("lns", lr, s, 2.6 + lr + s / 100) for lr in (1e-3, 1e-2) for s in (0, 1)]
    drawn = []
    real_errorbar = matplotlib.axes.Axes.errorbar
    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar",
                        lambda ax, x, y, **kw: drawn.append((ax.get_title(), kw["label"], list(y))) or real_errorbar(ax, x, y, **kw))
    plot_sweep(runs, ["placement.name", "placement.exponent", "lr"], "lr", tmp_path / "lr.png")
    by_label = {label: ys for _, label, ys in drawn}
    assert by_label["placement.exponent=0.5 (n=2)"] == pytest.approx([2.505 + 1e-3, 2.505 + 1e-2])
    assert by_label["mean (n=2)"] == pytest.approx([2.605 + 1e-3, 2.605 + 1e-2])  # lns: drawn, no "=nan"
    assert fmt_param(float("nan")) == "-" and fmt_param(0.5) == "0.5"


def _unit_run(root: Path, placement: str, lr: float, tokenizer: str, seed: int, loss: float) -> Path:
    """A finished run folder as `normexp train -m placement=... lr=... tokenizer=...` leaves it."""
    vocab = 256 if tokenizer == "byte" else 512
    run = root / f"placement={placement},lr={lr},tokenizer={tokenizer},seed={seed}"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump({
        "placement": {"name": placement}, "lr": lr, "seed": seed, "layers": 2, "threads": 1,
        "tokenizer": {"name": tokenizer, "vocab_size": vocab}, "data": {"name": "text", "files": ["c.txt"]}}))
    (run / ".hydra" / "overrides.yaml").write_text(
        yaml.safe_dump([f"placement={placement}", f"lr={lr}", f"tokenizer={tokenizer}", f"seed={seed}"]))
    (run / "summary.json").write_text(json.dumps({
        "status": "completed", "final_val_loss": loss, "best_val_loss": loss, "initial_loss": 6.0,
        "baseline_loss": 7.0, "stall_margin": 0.02, "steps_completed": 10, "diverged_at_step": None}))
    return run


def test_settings_with_different_loss_units_are_never_pooled(tmp_path):
    """A sweep over placement × lr × tokenizer=byte,bpe, one seed: the final-loss grid (which
    shows placement × lr) must not average nats/byte with nats/token, nor print an interval
    "over seeds" from one seed; the report says in one line what it kept apart."""
    import pandas as pd

    from normexp.analysis.report import make_report

    loss = {("pre", 0.001, "byte"): 1.5, ("pre", 0.001, "bpe"): 4.25, ("pre", 0.01, "byte"): 1.75,
            ("pre", 0.01, "bpe"): 4.75, ("post", 0.001, "byte"): 2.0, ("post", 0.001, "bpe"): 5.5,
            ("post", 0.01, "byte"): 2.5, ("post", 0.01, "bpe"): 6.0}
    for (placement, lr, tok), v in loss.items():
        _unit_run(tmp_path, placement, lr, tok, 0, v)
    printed = []
    result = make_report(tmp_path, echo=printed.append)
    assert result["keys"] == ["placement.name", "lr", "tokenizer.name"]
    apart = [n for n in result["notes"] if n.startswith("kept apart")]
    assert apart == ["kept apart: tokenizer (it sets the loss's unit, e.g. nats per byte or per token: runs with "
                     "different values are never pooled into one mean)"], result["notes"]
    assert not any("pools tokenizer" in n for n in result["notes"]), result["notes"]
    grid = pd.read_csv(tmp_path / "final_val_loss.csv")
    got = {(r["placement"], r["lr"], r["tokenizer"]): (r["n"], r["mean"], r["low"]) for r in grid.to_dict("records")}
    # one row per (placement, lr, tokenizer): each the one run's own loss, n=1, no interval
    assert set(got) == set(loss)
    for k, v in loss.items():
        n, mean, low = got[k]
        assert n == 1 and mean == v and math.isnan(low), (k, got[k])
    settings = pd.read_csv(tmp_path / "settings.csv")
    assert settings["low"].isna().all() and settings["high"].isna().all()


def test_an_interval_over_seeds_needs_two_seeds():
    """The final-loss grid pools keys beyond its two axes: two runs of ONE seed that differ in
    warmup give a mean but no t-interval "over seeds"; two seeds of one setting do, with the
    half-width t(0.975, 1)·s/√2 computed here by hand."""
    from normexp.analysis import study
    from normexp.analysis.report.figures import _cell_text
    from normexp.runs.reading import Run

    def run(seed, warmup, loss):
        return Run(Path(f"r{seed}{warmup}"), "x", {"lr": 0.01, "warmup": warmup, "seed": seed},
                   [], {"status": "completed", "final_val_loss": loss, "baseline_loss": 7.0})

    mean, text = _cell_text([run(0, 0, 2.0), run(0, 5, 4.0)])
    assert mean == 3.0 and text.splitlines()[0] == "3.000" and "±" not in text, text
    assert math.isnan(study.cell_stats([run(0, 0, 2.0), run(0, 5, 4.0)])["low"])
    half = 12.706205 * math.sqrt((2.0 - 3.0) ** 2 + (4.0 - 3.0) ** 2) / math.sqrt(2)
    mean, text = _cell_text([run(0, 0, 2.0), run(1, 0, 4.0)])
    assert text.splitlines()[0] == f"3.000 ±{half:.3f}", text


def test_files_the_report_writes_hold_no_absolute_path(tmp_path):
    """report.md, the CSVs and the figures are committed and shared: they name the reported
    folder by its name and each run relative to it, never by the machine's absolute path —
    a killed run's resume hint included (the terminal still prints it absolute, to paste)."""
    import socket

    from normexp.analysis.report import make_report
    from normexp.runs.process import process_start

    sweep = tmp_path / "machine" / "studies" / "lr_sweep"
    for lr, loss in ((0.001, 2.0), (0.003, 1.8), (0.01, 2.2)):  # 3 lrs: the sensitivity section too
        _unit_run(sweep, "pre", lr, "byte", 0, loss)
    killed = _unit_run(sweep, "post", 0.003, "byte", 0, 2.1)
    # a "running" run on this host whose pid now belongs to another process: killed
    (killed / "summary.json").write_text(json.dumps({
        "status": "running", "pid": os.getpid(), "host": socket.gethostname(),
        "pid_start": process_start(os.getpid()) + 1, "initial_loss": 6.0, "baseline_loss": 7.0}))
    (killed / "checkpoints").mkdir()
    (killed / "checkpoints" / "step_5.pt").write_bytes(b"")
    out = tmp_path / "elsewhere" / "report"
    printed = []
    make_report(sweep, out, echo=printed.append)

    written = sorted(p for p in out.rglob("*") if p.is_file())
    assert {"report.md", "runs.csv", "sensitivity.csv"} <= {p.name for p in written}
    for p in written:
        assert str(tmp_path).encode() not in p.read_bytes(), p.name
    md = (out / "report.md").read_text()
    assert md.startswith("# normexp report: `lr_sweep`"), md.splitlines()[0]
    assert "4 runs under lr_sweep:" in md
    rel = killed.relative_to(sweep)
    assert f"hydra.run.dir=lr_sweep/{rel}`" in md, md  # from the folder that holds lr_sweep
    # the terminal's hint stays absolute: it is pasted wherever the user is
    assert any(f"hydra.run.dir={killed.resolve()}`" in str(ln) for ln in printed), printed


def _curve_run(name: str, placement: str, status: str, val: list, overrides=(), steps: int = 200, warmup: int = 100):
    """A finished run as read back (runs.reading.Run), with val/loss and train/loss points."""
    from normexp.runs.reading import Run, warmup_as_run

    cfg = warmup_as_run({"placement.name": placement, "seed": 0, "steps": steps, "warmup": warmup}, list(overrides))
    summary = {"status": status, "final_val_loss": val[-1][1], "initial_loss": 5.5, "baseline_loss": 3.3}
    return Run(Path(name), name, cfg, list(overrides), summary,
               {"val/loss": val, "train/loss": [(st, v + 0.1) for st, v in val]})


def test_loss_figures_keep_coinciding_curves_visible_and_say_how_each_run_ended(tmp_path, monkeypatch):
    """The quickstart's case: Post-LN and DeepNorm stall on one plateau, their curves equal to
    the fourth digit. One varied key: one panel, where each line has its own marker, marker size
    and width (the later, smaller ones nested inside the earlier), and a legend naming its outcome;
    the train-loss figure is drawn from train/loss the same way, from step 0."""
    from normexp.analysis.report import figures

    saved = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, data: saved.update({path.name: (fig, data)}))
    plateau = [(0, 5.55), (100, 3.3209), (200, 3.3209)]
    runs = [_curve_run("a", "pre", "completed", [(0, 5.55), (100, 2.9), (200, 2.4379)]),
            _curve_run("b", "post", "stalled", plateau), _curve_run("c", "deepnorm", "stalled", plateau)]
    for r, i in zip(runs, (1, 2, 3)):
        r.index = i
    keys = ["placement.name"]
    for tag, name in (("val/loss", "val.png"), ("train/loss", "train.png")):
        assert figures.plot_val_curves(runs, keys, tmp_path / name, tag, tag) is None
        fig, data = saved[name]
        (ax,) = [a for a in fig.axes if a.get_visible() and a.lines]
        lines = {ln.get_label(): ln for ln in ax.lines if not ln.get_label().startswith("_")}
        # runs.csv's outcome words (these summaries predate the outcome: classified, a stalled run
        # without its loss trajectory as never_learned), the unigram baseline beside them
        assert set(lines) == {"placement=pre (learned)", "placement=post (never_learned)",
                              "placement=deepnorm (never_learned)", "unigram baseline 3.300"}
        post, deepnorm = lines["placement=post (never_learned)"], lines["placement=deepnorm (never_learned)"]
        assert list(post.get_ydata()) == list(deepnorm.get_ydata())  # the same curve ...
        assert post.get_marker() != deepnorm.get_marker()  # ... told apart by marker, size and width
        assert post.get_markersize() != deepnorm.get_markersize() and post.get_linewidth() != deepnorm.get_linewidth()
        assert min(row["step"] for row in data) == 0
    assert [row["mean"] for row in saved["train.png"][1] if row["placement"] == "pre"] == pytest.approx([5.65, 3.0, 2.5379])


def test_the_warmup_shown_is_the_one_the_run_used():
    """A run that left warmup at its default (100) with steps=60 warmed up over 60 steps (the
    summary and HParams say 60); a warmup given on the command line is shown as given."""
    assert _curve_run("a", "pre", "completed", [(0, 5.0)], steps=60).config["warmup"] == 60
    assert _curve_run("a", "pre", "completed", [(0, 5.0)], steps=300).config["warmup"] == 100
    assert _curve_run("a", "pre", "failed", [(0, 5.0)], ["warmup=100"], steps=60).config["warmup"] == 100


def test_a_figure_too_crowded_for_tight_layout_is_saved_whole_without_a_warning(tmp_path):
    import warnings

    import matplotlib.image

    from normexp.analysis.report.figures import pyplot, save_figure

    fig, ax = pyplot().subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, 1])
    ax.set_yticks([0, 1], ["a tick label far wider than the figure " * 5, "b"])  # tight_layout gives up on it
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        save_figure(fig, tmp_path / "crowded.png", [{"x": 0}])
    assert [str(w.message) for w in caught] == []
    height, width = matplotlib.image.imread(tmp_path / "crowded.png").shape[:2]
    assert width > 3 * 100  # the bounding box grew to hold the label, wider than the 3-inch figure at 100 dpi


def test_terminal_tables_have_unique_headers_and_leave_out_empty_columns():
    from normexp.analysis.report.tables import table_rows, without_empty_columns

    runs = [_curve_run(n, p, "stalled", [(0, 5.0), (200, 3.3)], ["steps=200", f"placement={p}"])
            for n, p in (("a", "pre"), ("b", "post"))]
    for i, r in enumerate(runs, 1):
        r.index = i
    head, rows = table_rows(runs, ["placement.name", "steps"])
    assert len(head) == len(set(head)), head  # `steps` (the setting) and `steps done` (the count)
    shown, shown_rows = without_empty_columns(head, rows)
    dropped = [h for i, h in enumerate(head) if all(r[i] == "-" for r in rows)]
    assert "diverged at" in dropped and shown == [h for h in head if h not in dropped]
    assert all(len(r) == len(shown) for r in shown_rows)
