"""Learning rates against the closed forms, written here, not read from the code.

Notation: the run has S optimizer updates, a linear warmup of W updates and a peak lr η.
Update n = 1 … S (the trainer's step s = n − 1) uses

    warmup (n ≤ W):   η · n / W
    after warmup, with p = (n − 1 − W) / (S − 1 − W) going 0 → 1 from the first
    update after warmup to the last one, and floor f = min_lr_ratio:
      constant:      η
      cosine:        η · (f + (1 − f) · (1 + cos πp) / 2)
      linear:        η · (f + (1 − f) · (1 − p))
      inverse_sqrt:  η · sqrt(W / n)   (Vaswani et al. 2017; η / sqrt(n) without warmup)

Then the same numbers through a real run: the lr each optimizer update used and the
`train/lr` TensorBoard logged for it, and the warmup clamped to a short run.
"""

import math

import pytest
import torch
from conftest import RAN_TO_THE_END, TINY, make_corpus, read_scalars
from omegaconf import OmegaConf

from normexp.config.compose import option_config
from normexp.train.schedules import lr_multiplier

ETA = 1.0  # lr_multiplier is the lr over the peak


def sched(name, **settings):
    """The schedule's own yaml (its defaults, e.g. cosine's min_lr_ratio 0.1), with `settings` over it."""
    return OmegaConf.merge(option_config("schedule", name), settings)


def expected(name, n, S, W, f=0.0):
    """The closed form above, for update number n (1-based)."""
    if n <= W:
        return ETA * n / W
    if name == "inverse_sqrt":
        return ETA * math.sqrt(max(W, 1) / n) if W else ETA / math.sqrt(n)
    p = (n - 1 - W) / (S - 1 - W) if S - 1 - W > 0 else 1.0  # one update after warmup: the last
    return {"constant": ETA,
            "cosine": ETA * (f + (1 - f) * (1 + math.cos(math.pi * p)) / 2),
            "linear": ETA * (f + (1 - f) * (1 - p))}[name]


def lr_at(name, n, S, W, **settings):
    return lr_multiplier(n - 1, S, W, sched(name, **settings))


# ---------------------------------------------------------------- chosen values, by hand

# (S=100, W=10): the first update, the last of warmup, the first after it, the middle of the
# decay, and the last update, each worked out by hand from the formulas above.
HAND = [
    # name, settings, n, value
    ("constant", {}, 1, 0.1),
    ("constant", {}, 10, 1.0),
    ("constant", {}, 11, 1.0),
    ("constant", {}, 100, 1.0),
    ("cosine", {"min_lr_ratio": 0.1}, 1, 0.1),
    ("cosine", {"min_lr_ratio": 0.1}, 5, 0.5),
    ("cosine", {"min_lr_ratio": 0.1}, 10, 1.0),   # warmup reaches the peak on its last update
    ("cosine", {"min_lr_ratio": 0.1}, 11, 1.0),   # p = 0
    ("cosine", {"min_lr_ratio": 0.1}, 100, 0.1),  # p = 1: the floor, not 0
    ("cosine", {"min_lr_ratio": 0.0}, 100, 0.0),
    ("linear", {"min_lr_ratio": 0.0}, 11, 1.0),
    ("linear", {"min_lr_ratio": 0.0}, 100, 0.0),
    ("linear", {"min_lr_ratio": 0.2}, 100, 0.2),
    ("inverse_sqrt", {}, 1, 0.1),
    ("inverse_sqrt", {}, 10, 1.0),
    ("inverse_sqrt", {}, 40, 0.5),                # sqrt(10/40)
    ("inverse_sqrt", {}, 90, 1 / 3),              # sqrt(10/90)
]


@pytest.mark.parametrize("name, settings, n, value", HAND)
def test_lr_at_chosen_updates_by_hand(name, settings, n, value):
    assert lr_at(name, n, 100, 10, **settings) == pytest.approx(value, abs=1e-12)


def test_middle_of_the_decay_by_hand():
    """S=21, W=0: the middle update n=11 has p = 10/20 = 1/2: cos(π/2) = 0 → halfway
    between peak and floor for cosine and linear alike."""
    assert lr_at("cosine", 11, 21, 0, min_lr_ratio=0.1) == pytest.approx(0.55, abs=1e-12)
    assert lr_at("linear", 11, 21, 0, min_lr_ratio=0.1) == pytest.approx(0.55, abs=1e-12)
    # a quarter of the way, floor 0: cosine (1 + cos π/4)/2 = 0.853553..., linear 0.75
    assert lr_at("cosine", 6, 21, 0, min_lr_ratio=0.0) == pytest.approx((1 + math.sqrt(0.5)) / 2, abs=1e-12)
    assert lr_at("linear", 6, 21, 0) == pytest.approx(0.75, abs=1e-12)


def test_inverse_sqrt_without_warmup():
    for n, value in ((1, 1.0), (4, 0.5), (100, 0.1)):
        assert lr_at("inverse_sqrt", n, 200, 0) == pytest.approx(value, abs=1e-12)


# ---------------------------------------------------------------- every update, closed form

CASES = [(100, 10), (50, 0), (7, 3), (5, 5), (6, 5), (12, 1), (3, 0)]


@pytest.mark.parametrize("name, settings", [("constant", {}), ("cosine", {"min_lr_ratio": 0.1}),
                                            ("cosine", {"min_lr_ratio": 0.0}), ("linear", {"min_lr_ratio": 0.0}),
                                            ("linear", {"min_lr_ratio": 0.3}), ("inverse_sqrt", {})])
@pytest.mark.parametrize("S, W", CASES)
def test_every_update_follows_the_closed_form(name, settings, S, W):
    f = settings.get("min_lr_ratio", 0.0)
    for n in range(1, S + 1):
        got = lr_at(name, n, S, W, **settings)
        want = expected(name, n, S, W, f)
        assert got == pytest.approx(want, abs=1e-12), (name, settings, S, W, n)


def test_warmup_is_linear_from_eta_over_w_to_eta():
    W = 8
    values = [lr_at("constant", n, 30, W) for n in range(1, W + 2)]
    assert values == pytest.approx([1 / 8, 2 / 8, 3 / 8, 4 / 8, 5 / 8, 6 / 8, 7 / 8, 1.0, 1.0])
    assert lr_at("constant", 1, 30, 0) == 1.0  # no warmup: the peak from the first update


def test_decay_with_one_update_after_warmup_ends_at_the_floor():
    """S = W + 1: the one update after warmup is the last one, so it gets the floor."""
    assert lr_at("cosine", 6, 6, 5, min_lr_ratio=0.25) == pytest.approx(0.25)
    assert lr_at("linear", 6, 6, 5, min_lr_ratio=0.25) == pytest.approx(0.25)


# ---------------------------------------------------------------- through a real run

def _run(tmp_path, monkeypatch, overrides):
    """Train in-process; returns ([lr the optimizer held at each update], {step: train/lr})."""
    import normexp.train.loop as train_mod
    from normexp.train.alone import train
    from normexp.config.compose import compose_config

    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "cache"))
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    cfg = compose_config([*TINY, "data=text", f"data.files=[{corpus}]", "log_every=1", "eval_every=1000",
                          "log.progress=off", "checkpoint_every=0", *overrides])
    used: list[float] = []
    real = train_mod.make_optimizer

    def recording(model, cfg):
        opt = real(model, cfg)
        step = opt.step

        def stepped(*a, **k):
            lrs = {g["lr"] for g in opt.param_groups}
            assert len(lrs) == 1, lrs  # every group gets the update's lr
            used.append(lrs.pop())
            return step(*a, **k)
        opt.step = stepped
        return opt

    monkeypatch.setattr(train_mod, "make_optimizer", recording)
    threads = torch.get_num_threads()
    (tmp_path / "run").mkdir()  # Hydra makes the run folder before the job starts
    try:
        summary = train(cfg, tmp_path / "run")
    finally:
        torch.set_num_threads(threads)
    assert summary["status"] in RAN_TO_THE_END  # a plumbing run of 4-6 steps: it need not learn
    logged = read_scalars(tmp_path / "run")["train/lr"]
    return used, logged


def test_train_lr_is_the_lr_of_each_update(tmp_path, monkeypatch):
    """steps=6, warmup=2, cosine to 0.1·lr, lr=0.01: updates 1..6 by hand."""
    used, logged = _run(tmp_path, monkeypatch, ["steps=6", "warmup=2", "lr=0.01", "schedule=cosine",
                                                "schedule.min_lr_ratio=0.1"])
    # p = (n-3)/3 for n = 3..6; cosine(p) = 0.1 + 0.9·(1+cos πp)/2, cos(π/3) = 1/2
    want = [0.005, 0.01, 0.01, 0.01 * (0.1 + 0.9 * 0.75), 0.01 * (0.1 + 0.9 * 0.25), 0.001]
    eta, S, W, f = 0.01, 6, 2, 0.1  # the same six from the formula in the module docstring
    formula = [eta * n / W if n <= W else eta * (f + (1 - f) * (1 + math.cos(math.pi * (n - 1 - W) / (S - 1 - W))) / 2)
               for n in range(1, S + 1)]
    assert want == pytest.approx(formula, abs=1e-15)
    assert used == pytest.approx(want, rel=1e-9)  # six updates, each at its own lr
    assert logged == pytest.approx(dict(enumerate(want)), rel=1e-6)  # steps 0..5; float32 in the event file


def test_default_warmup_longer_than_the_run_is_clamped_to_it(tmp_path, monkeypatch):
    """The default warmup (100) on a 4-step run warms up over the 4 steps: lr·n/4, so the last
    update reaches the peak (not lr·4/100)."""
    used, logged = _run(tmp_path, monkeypatch, ["steps=4", "lr=0.01", "schedule=constant"])
    want = [0.0025, 0.005, 0.0075, 0.01]
    assert used == pytest.approx(want, rel=1e-9)
    assert logged == pytest.approx(dict(enumerate(want)), rel=1e-6)
