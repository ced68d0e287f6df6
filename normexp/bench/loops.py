"""The timed runs: normexp's own training loop, the hand-written loop of the minimal GPT,
and the time to build each model.

normexp's loop is `normexp.train.alone.train`, the code path `normexp train` runs (forward,
backward, divergence check, fused AdamW, instruments on logging steps, TensorBoard writes),
timed through its `on_step` hook and otherwise unchanged."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..config.compose import compose_config
from ..train.loop import is_logging_step
from .minimal_gpt import MinimalGPT
from .shapes import Shape
from .timing import OFF, WARMUP, event_bytes_by_step

LOG_EVERY = 10  # the log_every of the bench's instrumented runs (the default run's is 50: see the table)


def run_log_every(log_every: int, steps: int) -> int:
    """The log_every a timed run uses: `log_every` itself, unless the run is too short for a
    logging step among its timed steps (WARMUP … steps − 2); then steps − 2, the last timed
    step. The figure is still amortised at `log_every` (timing.Pool)."""
    return log_every if log_every >= OFF or log_every <= steps - 2 else max(1, steps - 2)


def min_steps() -> int:
    """WARMUP steps, one plain and one logging step timed, and the last (untimed) step."""
    return WARMUP + 3


@dataclass
class NormexpRun:
    stamps: list[float]                 # end of every step (perf_counter)
    logs: Callable[[int], bool]         # which steps logged
    event_bytes: dict[int, int]         # TensorBoard bytes written per step


def normexp_config(shape: Shape, corpus: Path, steps: int, log_every: int, threads: int,
                   compile: bool = False, extra: tuple[str, ...] = ()):
    return compose_config([
        *shape.overrides(), "data=text", f"data.files=[{corpus}]", f"steps={steps}", f"log_every={log_every}",
        f"eval_every={OFF}", "eval_batches=1", "checkpoint_every=0", "keep_checkpoints=1",
        "log.progress=off", f"threads={threads}", f"compile={str(compile).lower()}", "device=cpu",
        "log.profiles_every=0", *extra])  # the instruments alone: the profile images are timed on their own


def normexp_run(shape: Shape, corpus: Path, steps: int, log_every: int, threads: int,
                compile: bool = False, extra: tuple[str, ...] = ()) -> NormexpRun:
    """normexp's training loop on `shape`, timestamped at the end of every step."""
    from ..train.alone import train
    from ..train.loop import Hooks

    k = run_log_every(log_every, steps)
    cfg = normexp_config(shape, corpus, steps, k, threads, compile, extra)
    stamps: list[float] = []
    with tempfile.TemporaryDirectory(prefix="normexp-bench-") as run_dir:
        train(cfg, Path(run_dir), hooks=Hooks(on_step=lambda step: stamps.append(time.perf_counter())))
        event_bytes = event_bytes_by_step(Path(run_dir))
    if len(stamps) != steps:
        raise RuntimeError(f"normexp's loop reported {len(stamps)} of {steps} steps")
    return NormexpRun(stamps, lambda s: is_logging_step(s, k, steps), event_bytes)


def bytes_per_logging_step(run: NormexpRun) -> float | None:
    """Median TensorBoard bytes of the logging steps between the first and the last (those two
    also write the run's set-up and summary)."""
    import statistics

    sizes = [run.event_bytes.get(s, 0) for s in range(1, len(run.stamps) - 1) if run.logs(s)]
    return statistics.median(sizes) if sizes else None


def minimal_step_times(shape: Shape, tokens: torch.Tensor, steps: int, seed: int = 0) -> list[float]:
    """End-of-step timestamps of a hand-written loop: random windows, forward, backward, AdamW."""
    torch.manual_seed(seed)
    model = MinimalGPT(shape)
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, betas=(0.9, 0.98), weight_decay=0.01)
    window = torch.arange(shape.seq_len + 1)
    stamps = []
    for step in range(steps):
        rows = tokens[torch.randint(len(tokens) - shape.seq_len - 1, (shape.batch_size, 1)) + window]
        loss = model(rows[:, :-1].contiguous(), rows[:, 1:].contiguous())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            loss.item()
        stamps.append(time.perf_counter())
    return stamps


def build_seconds(shape: Shape, tokens: torch.Tensor) -> dict[str, float]:
    """Seconds to construct and initialise each model at `shape`: normexp's as its training
    loop builds it (`train.loop.build_model`: construction, init, calibration where the placement
    has one) on the bench's byte tokens, and the minimal GPT."""
    from types import SimpleNamespace

    from ..train.config import TrainConfig
    from ..train.loop import build_model

    config = TrainConfig.from_composed(compose_config(shape.overrides()))
    corpus = SimpleNamespace(vocab_size=shape.vocab_size, train=tokens.numpy())  # as load_data gives it
    torch.manual_seed(0)
    t0 = time.perf_counter()
    build_model(config, corpus, torch.device("cpu"))
    t1 = time.perf_counter()
    MinimalGPT(shape)
    return {"normexp": t1 - t0, "minimal": time.perf_counter() - t1}
