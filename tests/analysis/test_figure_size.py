"""A per-layer figure has one size whatever the sweep: a 64-block sweep of 72 runs drawn by the
report's own function is PROFILE_SIZE × PROFILE_DPI pixels (1100 × 520) and well under the
500 KB a committed file may weigh (tests/test_docs.py). Drawn by the earlier code, one legend
entry a line grew such a figure to ~15,000 pixels high and 2-9 MB."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

LIMIT = 500_000  # bytes: tests/test_docs.py's limit on a file under docs/
BLOCKS = 64


def _crowded_sweep() -> list:
    """72 runs of a 64-block stack: 4 placements × 6 lrs × 3 seeds, each with its own gradient-norm
    profile at step 0 and at step 200: a trend over depth, jagged block to block (rougher than
    the depth_law sweep's real profiles, whose 596 lines draw a figure of ~250 KB)."""
    from normexp.runs.reading import Run

    rng = np.random.default_rng(0)
    runs = []
    for placement in ("pre", "post", "deepnorm", "sandwich"):
        for lr in (3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1):
            for seed in range(3):
                start = np.exp(rng.normal(0.0, 1.0) + np.linspace(0, 3, BLOCKS) + rng.normal(0, 0.3, BLOCKS))
                end = start * np.exp(rng.normal(-2.0, 1.0) * np.linspace(1, 3, BLOCKS) + rng.normal(0, 0.5, BLOCKS))
                scalars = {f"grad_norm/layer_{k:02d}": [(0, float(start[k])), (200, float(end[k]))]
                           for k in range(BLOCKS)}
                name = f"placement={placement},lr={lr},seed={seed}"
                summary = {"status": "completed", "outcome": "learned", "final_val_loss": 2.5, "initial_loss": 5.5}
                runs.append(Run(Path(name), name, {"placement.name": placement, "lr": lr, "seed": seed}, [],
                                summary, scalars, index=len(runs) + 1))
    return runs


def test_a_crowded_per_layer_figure_keeps_its_size_and_stays_light(tmp_path):
    import matplotlib.image

    from normexp.analysis.report.figures import plot_layer_profiles

    path = tmp_path / "grad_norm_layers.png"
    assert plot_layer_profiles(_crowded_sweep(), ["placement.name", "lr"], "grad_norm", path) is None
    height, width = matplotlib.image.imread(path).shape[:2]
    assert (width, height) == (1100, 520)
    assert path.stat().st_size < LIMIT, f"{path.stat().st_size:,} bytes"


def test_a_crowded_panel_names_colours_not_lines(tmp_path, monkeypatch):
    """72 lines in a panel: each thin, coloured by placement, and the legend one entry a
    placement (with how many lines it has), not 72 entries."""
    from normexp.analysis.report import figures

    saved = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, data: saved.update({path.name: fig}))
    assert figures.plot_layer_profiles(_crowded_sweep(), ["placement.name", "lr"], "grad_norm",
                                       tmp_path / "g.png") is None
    last = saved["g.png"].axes[1]
    assert len(last.lines) == 72 and all(ln.get_linewidth() < 1 for ln in last.lines)
    texts = [t.get_text() for t in last.get_legend().get_texts()]
    assert texts == [f"placement={p} (18 lines)" for p in ("deepnorm", "post", "pre", "sandwich")]
    colours = {ln.get_color() for ln in last.lines}
    assert len(colours) == 4


@pytest.mark.parametrize("gzipped", [False, True])
def test_the_figure_is_redrawn_from_its_data_file_as_drawn_from_the_runs(tmp_path, monkeypatch, gzipped):
    """The .csv a per-layer figure writes beside it, read back (gzip'd as committed under docs/,
    or not), draws the same lines: what scripts/redraw_figures.py relies on."""
    import pandas as pd

    from normexp.analysis.report import figures

    runs = _crowded_sweep()[:9]  # few lines: one legend entry each
    figures.plot_layer_profiles(runs, ["placement.name", "lr"], "grad_norm", tmp_path / "g.png")
    data = tmp_path / "g.csv"
    if gzipped:
        data = tmp_path / "g.csv.gz"
        pd.read_csv(tmp_path / "g.csv").to_csv(data, index=False)
    saved = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, data: saved.update({path.name: fig}))
    figures.plot_layer_profiles(runs, ["placement.name", "lr"], "grad_norm", tmp_path / "g.png")
    again = figures.draw_layer_table(pd.read_csv(data), "grad_norm", {r.rel: "learned" for r in runs})
    for ax, ax_again in zip(saved["g.png"].axes, again.axes):
        assert [ln.get_label() for ln in ax.lines] == [ln.get_label() for ln in ax_again.lines]
        for ln, ln_again in zip(ax.lines, ax_again.lines):
            np.testing.assert_allclose(ln.get_ydata(), ln_again.get_ydata(), rtol=1e-12)
