"""How long a run will take: the estimate after the first steps, the hint for a long CPU run and
the time left on each log line, driven by a hand-moved clock (no real timing)."""

import logging

import pytest

from normexp.train.progress import Progress, duration_words, round_down


class HandClock:
    """A clock that moves only when told to."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run_steps(progress: Progress, clock: HandClock, steps: range, seconds_per_step: float, log_every: int):
    for step in steps:
        clock.now += seconds_per_step
        progress.update(step, step % log_every == 0, 5.0, 1e-3, 350.0)


def said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "normexp"]


def test_durations_and_suggested_step_counts():
    assert [duration_words(s) for s in (44.6, 425, 2520, 3576, 3900)] == ["45 s", "7 min 05 s", "42 min", "1 h 00 min",
                                                                         "1 h 05 min"]
    assert [round_down(n) for n in (7, 96, 100, 437)] == [7, 90, 100, 400]


def test_a_long_cpu_run_says_its_length_after_three_steps_and_what_to_cut(caplog):
    """The README's first usage line on a loaded CPU: 600 steps at 6 s each."""
    caplog.set_level(logging.INFO, logger="normexp")
    clock = HandClock()
    progress = Progress("lines", total=600, initial=0, on_cpu=True, clock=clock)
    run_steps(progress, clock, range(0, 3), 6.0, log_every=50)
    assert said(caplog) == ["step 0  loss 5.0000  lr 1.00e-03  tok/s 350"]  # no rate yet: no estimate, no eta
    run_steps(progress, clock, range(3, 4), 6.0, log_every=50)
    # timed over steps 1..3 (step 0's warm-up left out): 6 s a step; 600 steps = 3600 s; left: 596 × 6 = 3576 s
    assert said(caplog)[1:] == [
        "6 s a step here (timed over 3 steps): about 1 h 00 min for 600 steps plus evaluations, 1 h 00 min left",
        "hint: that is long for a first look on a CPU: steps=100 takes about 10 min here, fewer layers or a "
        "smaller d_model cut each step; a GPU (device=cuda), or several runs trained as one pack "
        "(docs/speed.md#packs), is faster"]
    run_steps(progress, clock, range(4, 101), 6.0, log_every=50)
    lines = said(caplog)[3:]
    # every later log line carries the time left: (600 - 1 - step) × 6 s: 3294 s at step 50, 2994 s at 100
    assert lines == [f"step {s}  loss 5.0000  lr 1.00e-03  tok/s 350  eta {eta}" for s, eta in ((50, "55min"),
                                                                                                (100, "50min"))]


def test_the_time_left_follows_the_rate_measured_so_far(caplog):
    """Steps that slow down (evaluations, a loaded machine) stretch the eta: the mean since the first step."""
    caplog.set_level(logging.INFO, logger="normexp")
    clock = HandClock()
    progress = Progress("lines", total=200, initial=0, on_cpu=True, clock=clock)
    run_steps(progress, clock, range(0, 10), 1.0, log_every=10)
    run_steps(progress, clock, range(10, 21), 3.0, log_every=10)
    # at step 20: 9 steps of 1 s + 11 of 3 s = 42 s over 20 steps = 2.1 s a step; left 179 × 2.1 = 375.9 s
    assert said(caplog)[-1] == "step 20  loss 5.0000  lr 1.00e-03  tok/s 350  eta 6min16s"


@pytest.mark.parametrize("on_cpu, label, seconds_per_step", [(False, "", 6.0), (True, "#1 lr=0.01", 6.0),
                                                             (True, "", 0.9)])
def test_no_hint_on_a_gpu_in_a_sweep_job_or_for_a_short_run(caplog, on_cpu, label, seconds_per_step):
    caplog.set_level(logging.INFO, logger="normexp")
    clock = HandClock()
    progress = Progress("lines", total=600, initial=0, label=label, on_cpu=on_cpu, clock=clock)
    run_steps(progress, clock, range(0, 10), seconds_per_step, log_every=50)
    estimates = [m for m in said(caplog) if "a step here" in m]
    assert len(estimates) == 1 and not any(m.startswith("hint:") for m in said(caplog))


def test_a_resumed_run_estimates_the_steps_it_has_left(caplog):
    caplog.set_level(logging.INFO, logger="normexp")
    clock = HandClock()
    progress = Progress("lines", total=600, initial=500, on_cpu=True, clock=clock)
    run_steps(progress, clock, range(500, 504), 2.0, log_every=50)
    assert said(caplog)[-1] == "2 s a step here (timed over 3 steps): about 3 min 20 s for 100 steps plus evaluations, 3 min 12 s left"


def test_progress_off_says_nothing(caplog):
    caplog.set_level(logging.INFO, logger="normexp")
    clock = HandClock()
    progress = Progress("off", total=600, initial=0, on_cpu=True, clock=clock)
    run_steps(progress, clock, range(0, 60), 6.0, log_every=50)
    assert said(caplog) == []
