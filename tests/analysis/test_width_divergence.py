"""scripts/width_divergence.py: the divergence bracket of each width-study line on a merged lr
grid, checked against brackets placed by hand on made-up runs.csv rows."""

import math

import pandas as pd
import pytest

from tests.conftest import import_script


def _runs(line: dict, statuses: dict[float, list[str]], loss=lambda lr, s: 2.0 + lr + 0.01 * s) -> list[dict]:
    return [{**line, "lr": lr, "seed": s, "status": st, "final_val_loss": loss(lr, s), "left_out": None,
             "outcome": "diverged" if st == "diverged" else ("learned" if lr < 0.2 or (lr < 0.3 and s == 0) else "stuck")}
            for lr, seeds in statuses.items() for s, st in enumerate(seeds)]


def test_brackets_on_a_merged_grid(monkeypatch, tmp_path):
    wd = import_script(monkeypatch, "width_divergence")
    a = {"qk_norm": "False", "z_loss": 0.0, "d_model": 64}
    b = {"qk_norm": "True", "z_loss": 0.0, "d_model": 64}
    c = {"qk_norm": "True", "z_loss": 0.0001, "d_model": 32}
    ok, one, all3 = ["completed"] * 3, ["completed", "diverged", "completed"], ["diverged"] * 3
    # the committed grid (0.1, 0.3, 1) and a finer one (0.15, 0.225, 0.34) in two files, rows shuffled
    coarse = _runs(a, {0.1: ok, 0.3: all3, 1.0: all3}) + _runs(b, {0.1: ok, 0.3: ok, 1.0: all3}) + \
        _runs(c, {0.1: ok, 0.3: ok, 1.0: ok})
    fine = _runs(a, {0.15: ok, 0.225: one, 0.34: all3}) + _runs(b, {0.15: ok, 0.225: ok, 0.34: one}) + \
        _runs(c, {0.15: ok, 0.225: ok, 0.34: ok})
    fine.append({**a, "lr": 0.15, "seed": 9, "status": "diverged", "final_val_loss": 9.0, "left_out": "no config",
                 "outcome": "diverged"})
    pd.DataFrame(coarse[::-1]).to_csv(tmp_path / "coarse.csv", index=False)
    pd.DataFrame(fine).to_csv(tmp_path / "fine.csv", index=False)
    table = wd.divergence_table(pd.concat([pd.read_csv(tmp_path / f, dtype={"qk_norm": str})
                                           for f in ("coarse.csv", "fine.csv")], ignore_index=True))
    rows = {(r.qk_norm, r.d_model): r for r in table.itertuples()}
    ra, rb, rc = rows[("False", 64)], rows[("True", 64)], rows[("True", 32)]
    # a: calm up to 0.15 (the left-out diverged seed there does not count), one seed of 3 at 0.225
    assert ra.lrs == "0.1 0.15 0.225 0.3 0.34 1"
    assert ra.diverged_of_seeds == "0/3 0/3 1/3 3/3 3/3 3/3"
    assert (ra.last_calm_lr, ra.first_diverging_lr, ra.all_seeds_diverged_from) == (0.15, 0.225, 0.3)
    assert ra.bracket_ratio == pytest.approx(1.5)
    # every seed learned below 0.2 only (the made-up outcome); at 0.225 seed 0 alone did
    assert (ra.highest_lr_every_seed_learned, rb.highest_lr_every_seed_learned) == (0.15, 0.15)
    # b: calm to 0.3, first divergence at 0.34, all seeds only at 1
    assert (rb.last_calm_lr, rb.first_diverging_lr, rb.all_seeds_diverged_from) == (0.3, 0.34, 1.0)
    # c never diverged: calm at the top, no bracket
    assert rc.last_calm_lr == 1.0 and math.isnan(rc.first_diverging_lr) and math.isnan(rc.bracket_ratio)
    # the loss at the last calm lr: mean of the 3 seeds and a t-interval (hand: 2.15 + 0.01·{0,1,2})
    assert ra.loss_at_last_calm == pytest.approx(2.16)
    half = 4.302652729911275 * 0.01 / math.sqrt(3)
    assert (ra.loss_at_last_calm_low, ra.loss_at_last_calm_high) == (pytest.approx(2.16 - half), pytest.approx(2.16 + half))


def test_diverged_at_the_lowest_lr_has_no_calm_lr(monkeypatch):
    wd = import_script(monkeypatch, "width_divergence")
    runs = pd.DataFrame(_runs({"qk_norm": "False", "z_loss": 0.0, "d_model": 256},
                              {0.1: ["diverged", "completed"], 0.3: ["diverged", "diverged"]}))
    (row,) = wd.divergence_table(runs).itertuples()
    assert math.isnan(row.last_calm_lr) and row.first_diverging_lr == 0.1 and row.all_seeds_diverged_from == 0.3
