"""scripts/optimum_seed_bootstrap.py: the optimal-lr slope with seeds resampled whole, checked on
made-up grids whose vertices follow a known power law in depth."""

import math

import numpy as np
import pandas as pd
import pytest

from tests.conftest import import_script

LRS = [0.01 * 1.4 ** k for k in range(-3, 4)]
DEPTHS = [2, 4, 8, 16]


def _grid(slope: float, seed_offsets, noise: float = 0.0, rng=None) -> pd.DataFrame:
    """Loss = (log lr - log v_L)^2 + the seed's offset (+ noise), v_L = 0.01 (L/2)^slope."""
    rows = []
    for L in DEPTHS:
        v = math.log(0.01) + slope * math.log(L / 2)
        for lr in LRS:
            for s, off in enumerate(seed_offsets):
                e = rng.normal(0, noise) if noise else 0.0
                rows.append({"layers": L, "lr": lr, "seed": s, "final_val_loss": 2 + (math.log(lr) - v) ** 2 + off + e})
    return pd.DataFrame(rows)


def test_a_seed_that_shifts_the_whole_curve_does_not_move_the_slope(monkeypatch):
    """Seeds 0.5 nats apart at every lr (far more than the curve's depth over the grid), no other
    noise: the vertices are exact (a parabola through 3 points of a parabola), so every seed draw
    gives the true slope. Resampling each lr's seeds on its own would scatter the vertices."""
    sb = import_script(monkeypatch, "optimum_seed_bootstrap")
    out = sb.seed_bootstrap(_grid(-0.3, [0.0, 0.5, -0.4, 0.9, 0.2]), samples=500)
    assert out["slope"] == pytest.approx(-0.3, abs=1e-9)
    assert (out["seed_bootstrap_low"], out["seed_bootstrap_high"]) == (pytest.approx(-0.3, abs=1e-9),) * 2
    assert out["depths"] == "2 4 8 16" and out["seeds"] == 5 and out["lrs"] == 7


def test_within_seed_noise_widens_the_interval_around_the_truth(monkeypatch):
    """With noise per run the interval has width and, over 40 made-up studies at n = 5 seeds,
    contains the true slope in most (a coarse bootstrap: at least 75 %, against 95 % nominal)."""
    sb = import_script(monkeypatch, "optimum_seed_bootstrap")
    rng = np.random.default_rng(3)
    hits, widths = 0, []
    for _ in range(40):
        out = sb.seed_bootstrap(_grid(0.2, rng.normal(0, 0.3, 5), noise=0.02, rng=rng), samples=300, seed=int(rng.integers(1e6)))
        hits += out["seed_bootstrap_low"] <= 0.2 <= out["seed_bootstrap_high"]
        widths.append(out["seed_bootstrap_high"] - out["seed_bootstrap_low"])
    assert hits >= 30 and min(widths) > 0


def test_a_missing_run_is_refused(monkeypatch):
    sb = import_script(monkeypatch, "optimum_seed_bootstrap")
    grid = _grid(0.0, [0.0, 0.1, 0.2]).iloc[1:]
    with pytest.raises(SystemExit, match="missing"):
        sb.seed_bootstrap(grid, samples=10)
