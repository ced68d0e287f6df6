"""Timing machinery: step durations from end-of-step timestamps, best-of-rounds pools, the
machine's matmul peak, peak memory, CPU share, and the TensorBoard bytes a step writes.

Per-step times come from timestamps at the end of each step. The first WARMUP steps of every
run and its last step (which also runs validation) are left out. In each round, the median
of the steps that log and of those that do not give the amortised step time at log_every=k,
((k−1)·plain + logged)/k; a configuration's figure is its best round (other processes only
ever add time).

The instruments' overhead is reported two ways, because on a shared machine two runs a
minute apart can differ by ±15 % in step time: *inside* the logging runs, a logging step
against the plain steps around it (the only difference between them is the instruments, and
both see the same load), and *between* runs, log_every=k against a run with no logging step,
paired within each round (median and range over the rounds).
"""

from __future__ import annotations

import contextlib
import math
import os
import statistics
import struct
import sys
import time
from pathlib import Path
from typing import Callable

import torch

WARMUP = 3           # steps of every run left out of the timings (allocator, caches, first logged step)
OFF = 10**9          # log_every that never comes round: no logging step but the first and the last


def step_durations(stamps: list[float], logs: Callable[[int], bool] | None) -> tuple[list[float], list[float]]:
    """(plain, logged) durations of the steps after WARMUP, without the last step; `logs(step)`
    says which steps logged (None: none did)."""
    plain, logged = [], []
    for s in range(max(WARMUP, 1), len(stamps) - 1):
        (logged if logs is not None and logs(s) else plain).append(stamps[s] - stamps[s - 1])
    return plain, logged


class Pool:
    """Step durations of one configuration, one entry per round of the bench.

    `log_every` is the setting the figure stands for: the amortised step time at that
    log_every. The runs themselves may log more often (a short run still needs one timed
    logging step); only the medians of plain and logging steps enter the figure."""

    def __init__(self, log_every: int | None):
        self.log_every = log_every
        self.rounds: list[tuple[list[float], list[float]]] = []
        self.cpu_shares: list[float] = []
        self.rss_mb = 0.0

    def add(self, stamps: list[float], rss_mb: float, cpu_share: float = math.nan,
            logs: Callable[[int], bool] | None = None):
        """One round's run; `logs` defaults to every log_every-th step."""
        k = self.log_every
        if logs is None and k is not None:
            logs = lambda s: s % k == 0  # noqa: E731
        self.rounds.append(step_durations(stamps, logs))
        self.cpu_shares.append(cpu_share)
        self.rss_mb = max(self.rss_mb, rss_mb)

    @property
    def steps_timed(self) -> int:
        return sum(len(p) + len(g) for p, g in self.rounds)

    def amortised(self, plain: list[float], logged: list[float], k: int | None = None) -> float:
        """((k−1)·median plain + median logged)/k at log_every=k (the pool's unless given)."""
        k = self.log_every if k is None else k
        if k is None or k >= OFF or not logged:
            return statistics.median(plain)
        if k == 1 or not plain:
            return statistics.median(logged)
        return ((k - 1) * statistics.median(plain) + statistics.median(logged)) / k

    def best_round(self) -> int:
        return min(range(len(self.rounds)), key=lambda r: self.amortised(*self.rounds[r]))

    def seconds_per_step(self, k: int | None = None) -> float:
        """The best round's amortised step time at log_every=k (the pool's unless given)."""
        return min(self.amortised(p, g, k) for p, g in self.rounds)

    def cpu_share(self) -> float:
        """The CPU share of the round the figure comes from."""
        return self.cpu_shares[self.best_round()]

    def round_seconds(self) -> list[float]:
        """The amortised step time of every round, in order."""
        return [self.amortised(p, g) for p, g in self.rounds]

    def logging_step(self) -> dict | None:
        """What one logging step costs against a plain step, measured inside the same runs so
        that load from other processes hits both alike: medians over the rounds of
        median(plain steps), median(logging steps), their difference and its fraction of the
        plain step (seconds). None if no round timed both."""
        pairs = [(statistics.median(p), statistics.median(g)) for p, g in self.rounds if p and g]
        if not pairs:
            return None
        return {"plain_s": statistics.median(p for p, _ in pairs), "logged_s": statistics.median(g for _, g in pairs),
                "extra_s": statistics.median(g - p for p, g in pairs),
                "extra_fraction": statistics.median(g / p - 1 for p, g in pairs)}


def paired_overhead(pool: Pool, off: Pool) -> tuple[float, float, float]:
    """(median, min, max) over the rounds of pool's step time ÷ off's step time − 1, each
    ratio within one round: the two ran back to back, so slow drift of the machine's load
    cancels; a best-of-N per configuration would compare different moments."""
    ratios = [a / b - 1 for a, b in zip(pool.round_seconds(), off.round_seconds())]
    return statistics.median(ratios), min(ratios), max(ratios)


# ---------------------------------------------------------------------- machine

def matmul_gflops(n: int = 4096, repeats: int = 4) -> float:
    """fp32 GFLOP/s of an n×n @ n×n matmul (2n³ FLOPs), best of `repeats`."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * n**3 / best / 1e9


class PeakRSS:
    """Peak resident memory over a block, in MB. On Linux the process's high-water mark
    (VmHWM) is reset first through /proc/self/clear_refs, so each configuration gets its own
    peak; elsewhere it is the peak since the process started."""

    def __enter__(self):
        with contextlib.suppress(OSError):
            Path("/proc/self/clear_refs").write_text("5")
        return self

    def __exit__(self, *exc):
        self.mb = peak_rss_mb()


class CPUShare:
    """CPU seconds this process got over a block ÷ (wall seconds × torch threads): close to 1
    when the machine is ours, lower when other processes take turns on the cores."""

    def __enter__(self):
        self.t0, self.cpu0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        wall = time.perf_counter() - self.t0
        self.value = (time.process_time() - self.cpu0) / max(wall * torch.get_num_threads(), 1e-9)


def peak_rss_mb() -> float:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 1024 / (1024 if sys.platform == "darwin" else 1)


def load_average() -> str:
    with contextlib.suppress(OSError, AttributeError):
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    return "?"


# ------------------------------------------------------------------ TensorBoard

def event_bytes_by_step(run_dir: Path) -> dict[int, int]:
    """Bytes of the TensorBoard event files under `run_dir`, by the step of each event.

    An event file is a sequence of TFRecords: an 8-byte length, a 4-byte CRC of it, the
    serialized `Event`, a 4-byte CRC of that. Each record's bytes (16 + length) are
    counted against its event's step."""
    from tensorboard.compat.proto.event_pb2 import Event

    out: dict[int, int] = {}
    for path in sorted(Path(run_dir).rglob("events.out.tfevents.*")):
        data, i = path.read_bytes(), 0
        while i + 12 <= len(data):
            (length,) = struct.unpack("<Q", data[i:i + 8])
            step = Event.FromString(data[i + 12:i + 12 + length]).step
            out[step] = out.get(step, 0) + 16 + length
            i += 16 + length
    return out
