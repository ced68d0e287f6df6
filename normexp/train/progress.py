"""A run's console progress: a tqdm bar on a terminal, plain log lines otherwise, and how long the
run will take: one estimate after its first few steps (on a CPU, with a hint of what to cut when
the run would take longer than a first look needs) and, in line mode, the time left on every
line. The step rate is measured from the progress updates themselves (the clock is injectable,
so tests drive it by hand)."""

from __future__ import annotations

import logging
import math
import sys
import time

from tqdm import tqdm

log = logging.getLogger("normexp")

ESTIMATE_AFTER = 3  # steps timed before the estimate (the first step, with its warm-up, is not among them)
LONG_RUN_SECONDS = 600  # a CPU run estimated longer than this gets the hint


def duration_words(seconds: float) -> str:
    """45 s, 7 min 05 s, 42 min, 1 h 05 min: as precise as a plan needs."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 600:
        return f"{s // 60} min {s % 60:02d} s"
    minutes = round(s / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


def round_down(n: int) -> int:
    """n to one significant digit, never above n (437 -> 400, 96 -> 90): a step count to suggest."""
    if n < 10:
        return n
    unit = 10 ** int(math.log10(n))
    return n // unit * unit


class Progress:
    """A tqdm bar on a terminal, plain log lines at logging steps otherwise. A sweep job
    (`label` set) logs lines under "auto": the sweep's own line is the one the terminal
    redraws, and parallel jobs' bars would overwrite each other; log.progress=bar still
    gives it a bar, labelled.

    After ESTIMATE_AFTER steps past the first one it sees, it says once how long the whole run
    will take at the rate measured; a single run on a CPU (`on_cpu`, no `label`) estimated
    beyond LONG_RUN_SECONDS also gets a hint of what to cut. Log lines carry the time left
    (`eta`), at the rate measured from the first step seen (evaluations and checkpoints
    included); the bar shows tqdm's own."""

    def __init__(self, mode: str, total: int, initial: int, label: str = "", on_cpu: bool = False,
                 clock=time.monotonic):
        self.bar = None
        if mode == "bar" or (mode == "auto" and not label and sys.stderr.isatty()):
            self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, leave=True,
                            desc=label or None)
        self.lines = mode in ("auto", "lines")
        self.total, self.initial, self.label, self.on_cpu, self.clock = total, initial, label, on_cpu, clock
        self.first: tuple[int, float] | None = None  # (step, time) of the first update: the timing starts there
        self.estimated = False

    def seconds_per_step(self, step: int, now: float) -> float | None:
        """The mean time of the steps after the first one seen, up to `step`; None before any."""
        if self.first is None or step <= self.first[0]:
            return None
        return (now - self.first[1]) / (step - self.first[0])

    def update(self, step: int, line: bool, loss: float | None, lr: float, tokens_per_second: float | None):
        """The bar (or, on a logging step, a log line) after `step`: its loss, lr, tokens/s and the
        time left; the estimate (and hint) once enough steps are timed."""
        now = self.clock()
        if self.first is None:
            self.first = (step, now)
        per_step = self.seconds_per_step(step, now)
        if not self.estimated and per_step is not None and step - self.first[0] >= ESTIMATE_AFTER:
            self.estimated = True
            for said in self.estimate(step, per_step):
                self.say(said)
        fields = {} if loss is None else {"loss": f"{loss:.4f}"}
        fields["lr"] = f"{lr:.2e}"
        if tokens_per_second:
            fields["tok/s"] = f"{tokens_per_second:,.0f}"
        if self.bar is not None:
            self.bar.update(step + 1 - self.bar.n)
            if fields:
                self.bar.set_postfix(fields, refresh=False)
        elif self.lines and line:
            if per_step is not None:
                fields["eta"] = duration_words(per_step * (self.total - 1 - step)).replace(" ", "")
            log.info("step %d  %s", step, "  ".join(f"{k} {v}" for k, v in fields.items()))

    def estimate(self, step: int, per_step: float) -> list[str]:
        """The estimate's line, and the hint's where a single CPU run would take long."""
        steps = self.total - self.initial
        whole = per_step * steps
        said = [f"{duration_words(per_step) if per_step >= 60 else f'{per_step:.3g} s'} a step here (timed over "
                f"{step - self.first[0]} steps): about {duration_words(whole)} for {steps} steps plus evaluations, "
                f"{duration_words(per_step * (self.total - 1 - step))} left"]
        if self.on_cpu and not self.label and whole > LONG_RUN_SECONDS:
            fits = round_down(int(LONG_RUN_SECONDS / per_step))
            cut = f"steps={fits} takes about {duration_words(fits * per_step)} here, " if fits >= 1 else ""
            said.append(f"hint: that is long for a first look on a CPU: {cut}fewer layers or a smaller d_model cut "
                        "each step; a GPU (device=cuda), or several runs trained as one pack (docs/speed.md#packs), "
                        "is faster")
        return said

    def say(self, text: str) -> None:
        """One line above the bar, or a log line."""
        if self.bar is not None:
            self.bar.write(text, file=sys.stderr)
        elif self.lines:
            log.info("%s", text)

    def close(self):
        if self.bar is not None:
            self.bar.close()
