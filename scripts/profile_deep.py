"""Where does a deep training step spend its time? (issue 23)

Builds the model of one shape and placement through normexp's own config and training set-up
(`compose_config` + `normexp.train.loop.Trainer`, the objects `normexp train` uses), then times:

* set-up: the whole Trainer (data, model, optimizer, instruments, probe forward), and within
  it the model's construction and its weight init alone;
* one step split into forward, backward and optimizer (zero_grad + AdamW step), each the
  median over `--steps` steps, timed without the profiler;
* a plain step and a logging step through the trainer's own `train_step` (the instruments'
  cost is their difference; amortised over `log_every` it is what a run pays);
* under `torch.profiler`: aten ops per step and per block, and the CPU time inside aten ops
  against the wall time of each phase. What is not inside an aten op is Python, module
  calls, the autograd engine and the dispatcher above the op: the per-op overhead that bounds
  deep narrow stacks. The profiler inflates every op's cost, so read its split as shares.

    python scripts/profile_deep.py --layers 1000 --width 32 --placement deepnorm --steps 3
    python scripts/profile_deep.py --layers 96 --width 32 --placement deepnorm

It runs against whatever `normexp` is importable (run it with PYTHONPATH=<checkout> to profile a
checkout). Nothing is written outside a temporary folder.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from normexp.train.threads import configure as configure_threads_env

configure_threads_env()  # OMP_WAIT_POLICY before torch loads, as `normexp train` runs

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile, record_function  # noqa: E402

import normexp  # noqa: E402
from normexp.bench.corpus import make_corpus
from normexp.config.compose import compose_config


def overrides(args, corpus: Path) -> list[str]:
    heads = 2 if args.width < 64 else 4
    return [f"layers={args.layers}", f"d_model={args.width}", f"heads={heads}", f"seq_len={args.seq}",
            f"batch_size={args.batch}", f"placement={args.placement}", f"log_every={args.log_every}",
            "data=text", f"data.files=[{corpus}]", "steps=1000000", "eval_every=1000000", "eval_batches=1",
            "checkpoint_every=0", "log.progress=off", "log.profiles_every=0", f"threads={args.threads}",
            "device=cpu", *args.override]


def median_seconds(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


class Phases:
    """forward, backward and optimizer of one step, driven by hand on the trainer's own model,
    optimizer and batches (the same work `Trainer.train_step` does on a plain step)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.loss = None

    def forward(self):
        t = self.trainer
        t.optimizer.zero_grad(set_to_none=True)
        x, y = t.next_batch()
        self.loss = t.model(x, y)[1]

    def backward(self):
        self.loss.backward()

    def optimizer(self):
        self.trainer.optimizer.step()

    def step(self, labelled: bool = False):
        for name in ("forward", "backward", "optimizer"):
            if labelled:
                with record_function(name):
                    getattr(self, name)()
            else:
                getattr(self, name)()


def timed_phases(phases: Phases, n: int) -> dict[str, float]:
    out = {"forward": [], "backward": [], "optimizer": []}
    for _ in range(n):
        for name in out:
            t = time.perf_counter()
            getattr(phases, name)()
            out[name].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in out.items()}


def trainer_step(trainer, logging: bool) -> None:
    """One `train_step` that is (or is not) a logging step: the step counter decides."""
    every = trainer.config.log.log_every
    trainer.step = every * (1 + trainer.step // every) + (0 if logging else 1)
    trainer.train_step()


def profiled(phases: Phases, n: int):
    """aten op count and CPU self time per phase over n hand-driven steps, under the profiler."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        walls = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0}
        for _ in range(n):
            for name in walls:
                t = time.perf_counter()
                with record_function(f"phase::{name}"):
                    getattr(phases, name)()
                walls[name] += time.perf_counter() - t
    events = prof.events()
    ranges = {}
    for e in events:
        if e.name.startswith("phase::"):
            ranges.setdefault(e.name[len("phase::"):], []).append((e.time_range.start, e.time_range.end))
    stats = {name: {"ops": 0, "top_ops": 0, "aten_self_us": 0.0, "wall": walls[name] / n} for name in walls}
    for e in events:
        if not e.name.startswith("aten::"):
            continue
        start = e.time_range.start
        for name, spans in ranges.items():
            if any(a <= start <= b for a, b in spans):
                s = stats[name]
                s["ops"] += 1
                s["aten_self_us"] += e.self_cpu_time_total
                if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"):
                    s["top_ops"] += 1
                break
    for s in stats.values():
        s["ops"] /= n
        s["top_ops"] /= n
        s["aten_self_us"] /= n
    return stats, prof


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=1000)
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--placement", default="deepnorm")
    ap.add_argument("--log-every", type=int, default=50, help="the default of configs/train.yaml")
    ap.add_argument("--steps", type=int, default=3, help="timed steps of each kind (medians)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile-steps", type=int, default=1)
    ap.add_argument("--threads", default="2")
    ap.add_argument("--top", type=int, default=12, help="rows of the profiler's op table")
    ap.add_argument("override", nargs="*", help="more normexp config overrides, e.g. norm=rms")
    args = ap.parse_args(argv)

    from normexp.train.config import TrainConfig
    from normexp.model import GPT, ModelConfig
    from normexp.train.loop import Hooks, Trainer

    print(f"normexp from {Path(normexp.__file__).parent}; torch {torch.__version__}")
    with tempfile.TemporaryDirectory(prefix="profile-deep-") as tmp:
        tmp = Path(tmp)
        cfg = compose_config(overrides(args, make_corpus(tmp)))
        (tmp / "run").mkdir()
        t = time.perf_counter()
        trainer = Trainer(TrainConfig.from_composed(cfg), tmp / "run", Hooks())
        setup = time.perf_counter() - t
        torch.manual_seed(0)
        t = time.perf_counter()
        model = GPT(ModelConfig.from_composed(cfg, trainer.corpus.vocab_size))
        build = time.perf_counter() - t
        init = median_seconds(model._init_weights, 1) if hasattr(model, "_init_weights") else float("nan")
        del model
        trainer.model.train()
        L, tokens = args.layers, args.batch * args.seq

        phases = Phases(trainer)
        for _ in range(args.warmup):
            phases.step()
            trainer_step(trainer, logging=True)
        times = timed_phases(phases, args.steps)
        plain = median_seconds(lambda: trainer_step(trainer, logging=False), args.steps)
        logged = median_seconds(lambda: trainer_step(trainer, logging=True), max(1, args.steps - 1))
        stats, prof = profiled(phases, args.profile_steps)
        trainer.writer.close()

    k = args.log_every
    amortised = ((k - 1) * plain + logged) / k
    hand = sum(times.values())
    label = f"{L} blocks × {args.width} wide, seq {args.seq}, batch {args.batch}, {args.placement}"
    print(f"\n## {label} (torch threads {torch.get_num_threads()})\n")
    print("| what | ms | ms per block | share of a plain step |")
    print("|---|---:|---:|---:|")
    for name in ("forward", "backward", "optimizer"):
        print(f"| {name} | {1e3 * times[name]:.1f} | {1e3 * times[name] / L:.3f} | {times[name] / hand:.0%} |")
    print(f"| plain step (hand-driven: forward+backward+optimizer) | {1e3 * hand:.1f} | {1e3 * hand / L:.3f} | 100% |")
    print(f"| plain step (Trainer.train_step) | {1e3 * plain:.1f} | {1e3 * plain / L:.3f} | {plain / hand:.0%} |")
    print(f"| logging step (Trainer.train_step) | {1e3 * logged:.1f} | {1e3 * logged / L:.3f} | {logged / hand:.0%} |")
    print(f"| instruments: logging − plain step | {1e3 * (logged - plain):.1f} | {1e3 * (logged - plain) / L:.3f} | "
          f"{(logged - plain) / hand:.0%} |")
    print(f"| step amortised at log_every={k} | {1e3 * amortised:.1f} | {1e3 * amortised / L:.3f} | "
          f"{amortised / hand:.0%} |")
    print(f"| Trainer set-up (data, model, optimizer, instruments, probe) | {1e3 * setup:.0f} | {1e3 * setup / L:.2f} | |")
    print(f"| model build (GPT(...), init included) | {1e3 * build:.0f} | {1e3 * build / L:.2f} | |")
    print(f"| weight init alone (_init_weights) | {1e3 * init:.0f} | {1e3 * init / L:.2f} | |")
    print(f"\n{tokens / amortised:,.0f} tokens/s at log_every={k}; {tokens / plain:,.0f} on plain steps")

    print(f"\n### per-op overhead (torch.profiler, {args.profile_steps} hand-driven step(s); profiled walls are inflated)\n")
    print("| phase | aten ops (all) | top-level aten ops | top-level ops per block | profiled wall ms | "
          "CPU self ms in aten ops | outside aten ops | µs per top-level op |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, s in stats.items():
        inside = s["aten_self_us"] / 1e3
        wall = 1e3 * s["wall"]
        print(f"| {name} | {s['ops']:,.0f} | {s['top_ops']:,.0f} | {s['top_ops'] / L:.1f} | {wall:.1f} | {inside:.1f} | "
              f"{max(0.0, 1 - inside / wall):.0%} | {1e3 * wall / max(s['top_ops'], 1):.1f} |")
    print(f"\n### top {args.top} ops by self CPU time\n")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=40))


if __name__ == "__main__":
    sys.exit(main())
