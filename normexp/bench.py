"""`normexp bench`: how fast is a training step here, and what do the instruments cost?

What it measures, all in one process so the numbers are comparable:

* the fp32 matmul throughput of this machine (a large square matmul, best of N): the
  denominator of model FLOPs utilisation (MFU);
* normexp's real training loop (`normexp.train.train`, the code path `normexp train` runs:
  forward, backward, divergence check, fused AdamW, instruments on logging steps,
  TensorBoard writes), timed step by step through its progress hook, for
  (A) 6 layers × 256 wide, seq 256, batch 16; (B) 48 × 64, seq 64, batch 16; (C) the
  default model of configs/train.yaml;
* `MinimalGPT` below, the same network as a user would write it by hand (Pre-LN,
  nn.Linear, F.scaled_dot_product_attention, torch.optim.AdamW with its defaults), run
  interleaved with normexp so that load from other processes hits both alike;
* the instruments' cost: normexp with no logging step, at log_every=10 and at log_every=1;
* optionally torch.compile, parallel sweep jobs, and start-up time of `normexp train`.

FLOPs per token (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1;
Chowdhery et al. 2022, "PaLM", App. B): 6·N + 12·L·T·d for forward + backward, where N
counts the weights of the matmuls (12·d² per block plus the tied V×d head) and 12·L·T·d the
attention scores and weighted values (no discount for the causal mask). Norms, GELU,
softmax, the optimizer and embeddings lookups are not counted: MFU here is the fraction
of the machine's matmul peak that goes into the model's matmuls.

Per-step times come from timestamps at the end of each step. In each round, the median of
the steps that log and of those that do not give the amortised step time at log_every=k,
((k−1)·plain + logged)/k; a configuration's figure is its best round (other processes only
ever add time). The first WARMUP steps of every run and its last step (which also runs
validation) are left out.

The instruments' overhead is reported two ways, because on a shared machine two runs a
minute apart can differ by ±15 % in step time: *inside* the log_every=10 runs, a logging
step against the plain steps around it (the only difference between them is the
instruments, and both see the same load), and *between* runs, log_every=k against a run
with no logging step, paired within each round (median and range over the rounds).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from .compose import compose_config


class BenchError(Exception):
    """Bad bench arguments; str(e) is one line naming the problem and the fix."""


WARMUP = 3           # steps of every run left out of the timings (allocator, caches, first logged step)
OFF = 10**9          # log_every that never comes round: no logging step but the first and the last


# ---------------------------------------------------------------------------- shapes

@dataclass
class Shape:
    name: str
    layers: int
    d_model: int
    seq_len: int
    batch_size: int
    heads: int = 4
    mlp_ratio: int = 4
    vocab_size: int = 256  # the byte tokenizer

    @property
    def label(self) -> str:
        return f"{self.name}: {self.layers}×{self.d_model} T{self.seq_len} B{self.batch_size}"

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def matmul_params(self) -> int:
        """Weights that enter a matmul: QKV (3d²), attention output (d²), MLP (2·r·d²) per
        block, and the tied head (V·d). Biases, norms and the position table are excluded."""
        d, r = self.d_model, self.mlp_ratio
        return self.layers * (4 + 2 * r) * d * d + self.vocab_size * d

    def flops_per_token(self) -> float:
        """6·N + 12·L·T·d (forward + backward), see the module docstring."""
        return 6 * self.matmul_params() + 12 * self.layers * self.seq_len * self.d_model

    def overrides(self) -> list[str]:
        return [f"layers={self.layers}", f"d_model={self.d_model}", f"heads={self.heads}",
                f"mlp_ratio={self.mlp_ratio}", f"seq_len={self.seq_len}", f"batch_size={self.batch_size}"]


def default_shape() -> Shape:
    """(C): the model `normexp train` trains with no overrides."""
    cfg = compose_config([])
    return Shape("C", cfg.layers, cfg.d_model, cfg.seq_len, cfg.batch_size, cfg.heads, cfg.mlp_ratio)


def parse_shape(text: str) -> Shape:
    """NAME=LAYERSxWIDTH,SEQ,BATCH, e.g. tiny=2x32,32,4; a shape no model can have is a BenchError."""
    try:
        name, spec = text.split("=")
        size, seq, batch = spec.split(",")
        layers, width = size.lower().split("x")
        shape = Shape(name.strip(), int(layers), int(width), int(seq), int(batch), heads=2 if int(width) < 64 else 4)
    except ValueError:
        raise BenchError(f"--shape {text!r}: write NAME=LAYERSxWIDTH,SEQ,BATCH, e.g. tiny=2x32,32,4") from None
    if not shape.name:
        raise BenchError(f"--shape {text!r}: the shape needs a NAME before '=', e.g. tiny=2x32,32,4")
    sizes = {"layers": shape.layers, "width": shape.d_model, "sequence length": shape.seq_len, "batch": shape.batch_size}
    bad = [f"{what} {v}" for what, v in sizes.items() if v < 1]
    if bad:
        raise BenchError(f"--shape {text!r}: {', '.join(bad)} must be at least 1, e.g. tiny=2x32,32,4")
    if shape.seq_len > MAX_SEQ_LEN:
        raise BenchError(f"--shape {text!r}: sequence length {shape.seq_len} is longer than the bench's validation "
                         f"text allows; use at most {MAX_SEQ_LEN}")
    if shape.d_model % shape.heads:
        raise BenchError(f"--shape {text!r}: width {shape.d_model} must be a multiple of its {shape.heads} attention "
                         f"heads (2 below width 64, else 4), e.g. {shape.name}={shape.layers}x"
                         f"{shape.heads * max(1, round(shape.d_model / shape.heads))},{shape.seq_len},{shape.batch_size}")
    return shape


# ---------------------------------------------------------------- the baseline model

class MinimalBlock(nn.Module):
    """x + attn(LN(x)), then x + MLP(LN(x)): the textbook Pre-LN block."""

    def __init__(self, d: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, mlp_ratio * d)
        self.fc2 = nn.Linear(mlp_ratio * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class MinimalGPT(nn.Module):
    """The plain eager GPT a user writes by hand (nanoGPT style): learned positions, embeddings
    scaled by √d (Vaswani et al. 2017, as normexp does), Pre-LN blocks, a final LayerNorm and a
    head tied to the token embedding. The bench's baseline, and an independent reference for
    normexp's model in tests/test_bench.py."""

    def __init__(self, shape: Shape):
        super().__init__()
        d = shape.d_model
        self.tok = nn.Embedding(shape.vocab_size, d)
        self.pos = nn.Embedding(shape.seq_len, d)
        self.blocks = nn.ModuleList(MinimalBlock(d, shape.heads, shape.mlp_ratio) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(d)
        self.scale = d ** 0.5

    def forward(self, idx, targets):
        x = (self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))) * self.scale
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.tok.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    @torch.no_grad()
    def copy_from(self, gpt) -> "MinimalGPT":
        """Take the weights of a normexp `GPT` with norm=layer, placement=pre."""
        self.tok.weight.copy_(gpt.tok_emb.weight)
        self.pos.weight.copy_(gpt.pos_emb.weight)
        for mine, theirs in zip(self.blocks, gpt.blocks):
            attn, mlp = theirs.attn, theirs.mlp
            pairs = ((mine.ln1, attn.norm), (mine.qkv, attn.sublayer.qkv), (mine.proj, attn.sublayer.proj),
                     (mine.ln2, mlp.norm), (mine.fc1, mlp.sublayer.fc_in), (mine.fc2, mlp.sublayer.fc_out))
            for a, b in pairs:
                a.weight.copy_(b.weight)
                a.bias.copy_(b.bias)
        self.ln_f.weight.copy_(gpt.final_norm.weight)
        self.ln_f.bias.copy_(gpt.final_norm.bias)
        return self


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


# ------------------------------------------------------------------ normexp's loop

def normexp_step_times(shape: Shape, corpus: Path, steps: int, log_every: int, threads: int,
                       compile: bool = False, extra: tuple[str, ...] = ()) -> list[float]:
    """End-of-step timestamps of normexp's own training loop (`train.train`) on `shape`.

    The loop's `on_step` hook records the time at the end of every step. Nothing else is
    changed: same model, optimizer, instruments, TensorBoard writer, data sampler."""
    from .train import Hooks, train

    stamps: list[float] = []
    cfg = compose_config([
        *shape.overrides(), "data=text", f"data.files=[{corpus}]", f"steps={steps}", f"log_every={log_every}",
        f"eval_every={OFF}", "eval_batches=1", "checkpoint_every=0", "keep_checkpoints=1",
        "log.progress=off", f"threads={threads}", f"compile={str(compile).lower()}", "device=cpu",
        "log.profiles_every=0", *extra])  # the instruments alone: the profile images are timed by bench_profiles
    with tempfile.TemporaryDirectory(prefix="normexp-bench-") as run_dir:
        train(cfg, Path(run_dir), hooks=Hooks(on_step=lambda step: stamps.append(time.perf_counter())))
    if len(stamps) != steps:
        raise RuntimeError(f"normexp's loop reported {len(stamps)} of {steps} steps")
    return stamps


# -------------------------------------------------------------------- statistics

def step_durations(stamps: list[float], log_every: int | None) -> tuple[list[float], list[float]]:
    """(plain, logged) durations of the steps after WARMUP, without the last step."""
    plain, logged = [], []
    for s in range(max(WARMUP, 1), len(stamps) - 1):
        d = stamps[s] - stamps[s - 1]
        (logged if log_every is not None and s % log_every == 0 else plain).append(d)
    return plain, logged


class Pool:
    """Step durations of one configuration, one entry per round of the bench.

    Load from other processes only ever adds time, so a configuration's figure is its best
    round (best-of-N); within a round, medians of the plain and of the logging steps."""

    def __init__(self, log_every: int | None):
        self.log_every = log_every
        self.rounds: list[tuple[list[float], list[float]]] = []
        self.cpu_shares: list[float] = []
        self.rss_mb = 0.0

    def add(self, stamps: list[float], rss_mb: float, cpu_share: float = math.nan):
        self.rounds.append(step_durations(stamps, self.log_every))
        self.cpu_shares.append(cpu_share)
        self.rss_mb = max(self.rss_mb, rss_mb)

    @property
    def steps_timed(self) -> int:
        return sum(len(p) + len(g) for p, g in self.rounds)

    def _amortised(self, plain: list[float], logged: list[float]) -> float:
        """((k−1)·median plain + median logged)/k at log_every=k."""
        k = self.log_every
        if k is None or k >= OFF or not logged:
            return statistics.median(plain)
        if k == 1 or not plain:
            return statistics.median(logged)
        return ((k - 1) * statistics.median(plain) + statistics.median(logged)) / k

    def best_round(self) -> int:
        return min(range(len(self.rounds)), key=lambda r: self._amortised(*self.rounds[r]))

    def seconds_per_step(self) -> float:
        return self._amortised(*self.rounds[self.best_round()])

    def cpu_share(self) -> float:
        """The CPU share of the round the figure comes from."""
        return self.cpu_shares[self.best_round()]

    def round_seconds(self) -> list[float]:
        """The amortised step time of every round, in order."""
        return [self._amortised(p, g) for p, g in self.rounds]

    def logged_extra(self) -> tuple[float, float] | None:
        """What one logging step costs on top of a plain step, measured inside the same runs,
        so that load from other processes hits both alike: (median over the rounds of
        median(logging steps) − median(plain steps) in seconds, the same as a fraction of the
        plain step)."""
        pairs = [(statistics.median(g), statistics.median(p)) for p, g in self.rounds if p and g]
        if not pairs:
            return None
        return statistics.median(g - p for g, p in pairs), statistics.median(g / p - 1 for g, p in pairs)


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
        self.threads = torch.get_num_threads()
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


CORPUS_BYTES = 400_000  # the bench's own text; data=text holds out the last 10 % for validation
MAX_SEQ_LEN = CORPUS_BYTES // 10 - 2  # a validation batch needs seq_len + 1 bytes of it


def make_corpus(folder: Path, n_bytes: int = CORPUS_BYTES, seed: int = 0) -> Path:
    """Random lowercase words: the bench times steps, so the text only needs enough tokens."""
    import random

    rng = random.Random(seed)
    words = ["".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 9))) for _ in range(500)]
    text, size = [], 0
    while size < n_bytes:
        line = " ".join(rng.choice(words) for _ in range(12)) + ".\n"
        text.append(line)
        size += len(line)
    path = folder / "bench_corpus.txt"
    path.write_text("".join(text))
    return path


# ------------------------------------------------------------------- the bench

def measure(pool: Pool, fn, *args, **kw):
    with PeakRSS() as rss, CPUShare() as share:
        stamps = fn(*args, **kw)
    pool.add(stamps, rss.mb, share.value)


def bench_shapes(shapes: list[Shape], corpus: Path, tokens: torch.Tensor, steps: int, rounds: int,
                 threads: int, instrument_shapes: set[str], peak_size: int, say) -> dict:
    """Interleaved rounds: minimal GPT and normexp (log_every=10) for every shape; for the
    shapes in `instrument_shapes` also normexp with no logging step and at log_every=1.
    Every other round runs the variants in reverse order, so drift in the machine's load
    hits all of them alike."""
    pools, peaks = {}, []
    for shape in shapes:
        pools[shape.name] = {"minimal": Pool(None), "log10": Pool(10)}
        if shape.name in instrument_shapes:
            pools[shape.name].update(off=Pool(OFF), log1=Pool(1))
    for r in range(rounds if shapes else 0):
        peaks.append(matmul_gflops(peak_size))
        say(f"round {r + 1}/{rounds}: matmul {peaks[-1]:.0f} GFLOP/s, load average {load_average()}")
        for shape in shapes:
            variants = list(pools[shape.name])
            for v in (variants if r % 2 == 0 else variants[::-1]):
                t0 = time.perf_counter()
                if v == "minimal":
                    measure(pools[shape.name][v], minimal_step_times, shape, tokens, steps, seed=r)
                else:
                    log_every = {"log10": 10, "log1": 1, "off": OFF}[v]
                    measure(pools[shape.name][v], normexp_step_times, shape, corpus, steps, log_every, threads,
                            extra=(f"seed={r}",))
                say(f"  {shape.label:28s} {v:8s} {time.perf_counter() - t0:6.1f} s")
    return pools, peaks


def bench_compile(shapes: list[Shape], corpus: Path, steps: int, threads: int, say) -> dict:
    """normexp with compile=true at log_every=10 (logging steps run the eager model, so the
    instruments are unchanged). The first steps, which compile, are reported separately."""
    out = {}
    for shape in shapes:
        pool = Pool(10)
        t0 = time.perf_counter()
        with PeakRSS() as rss, CPUShare() as share:
            stamps = normexp_step_times(shape, corpus, steps, 10, threads, compile=True)
        pool.add(stamps, rss.mb, share.value)
        out[shape.name] = {"pool": pool, "first_step_s": stamps[0] - t0}
        say(f"  {shape.label:28s} compile  {time.perf_counter() - t0:6.1f} s")
    return out


def _sweep_job(args) -> list[float]:
    shape, corpus, steps, threads, seed = args
    logging.getLogger("normexp").setLevel(logging.ERROR)  # a fresh process: quiet it as main() does
    return normexp_step_times(shape, Path(corpus), steps, 10, threads, extra=(f"seed={seed}",))


def bench_sweep(shape: Shape, corpus: Path, steps: int, cores: int, rounds: int, say) -> dict:
    """Aggregate tokens/s of a sweep on `shape`: `cores` jobs at once × 1 thread each
    (what hydra/launcher=joblib n_jobs=cores does) against one job at a time × `cores` threads
    (the basic launcher). Each job runs in a fresh process, as under a launcher."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    parallel, sequential = [], []
    with ctx.Pool(cores) as workers:
        for r in range(rounds):
            for mode in (("parallel", "sequential") if r % 2 == 0 else ("sequential", "parallel")):
                if mode == "parallel":
                    jobs = [(shape, str(corpus), steps, 1, seed) for seed in range(cores)]
                    runs = workers.map(_sweep_job, jobs, chunksize=1)
                    overlap = min(s[-1] for s in runs) - max(s[WARMUP] for s in runs)
                    # tokens/s of each job over its steady steps, summed: they run side by side
                    tps = sum(shape.tokens_per_step / pool_of(s).seconds_per_step() for s in runs)
                    parallel.append(tps)
                    say(f"  sweep {shape.name}: {cores} jobs × 1 thread  {tps:8,.0f} tok/s (overlap {overlap:.1f} s)")
                else:
                    stamps = workers.apply(_sweep_job, ((shape, str(corpus), steps, cores, r),))
                    tps = shape.tokens_per_step / pool_of(stamps).seconds_per_step()
                    sequential.append(tps)
                    say(f"  sweep {shape.name}: 1 job × {cores} threads   {tps:8,.0f} tok/s")
    return {"parallel_jobs": cores, "parallel_tokens_per_s": statistics.median(parallel),
            "sequential_tokens_per_s": statistics.median(sequential)}


def bench_sweep_cli(shape: Shape, corpus: Path, jobs: int, steps: int, cores: int, say) -> dict:
    """The same comparison as a user runs it: a `normexp train -m` sweep of `jobs` seeds, with
    the joblib launcher (n_jobs=cores, threads=auto gives each job 1 thread) and with Hydra's
    basic launcher (one job at a time, all cores). Wall time includes every job's start-up,
    validation and checkpoint, so this is the number a sweep actually sees."""
    out = {}
    for name, launcher in (("joblib", ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={cores}"]), ("basic", [])):
        with tempfile.TemporaryDirectory(prefix="normexp-sweep-") as tmp:
            cmd = [sys.executable, "-m", "normexp.cli", "train", "-m", *shape.overrides(), "data=text",
                   f"data.files=[{corpus}]", f"steps={steps}", "log_every=10", f"eval_every={steps}", "eval_batches=1",
                   "checkpoint_every=0", "log.progress=off", "threads=auto",
                   "seed=" + ",".join(str(i) for i in range(jobs)), *launcher, f"hydra.sweep.dir={tmp}"]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
            done = [json.loads(p.read_text()) for p in Path(tmp).glob("*/summary.json")]
            if len(done) != jobs or any(d["status"] != "completed" for d in done):
                raise RuntimeError(f"the {name} sweep did not complete all {jobs} jobs: {[d['status'] for d in done]}")
        out[name] = {"wall_s": wall, "tokens_per_s": jobs * steps * shape.tokens_per_step / wall}
        say(f"  sweep {shape.name} via the CLI, {name:6s} launcher: {jobs} jobs × {steps} steps in {wall:.1f} s")
    return out


def pool_of(stamps: list[float], log_every: int = 10) -> Pool:
    pool = Pool(log_every)
    pool.add(stamps, 0.0)
    return pool


# `normexp train` exactly as the user runs it (`cli.run_train`), with the loop's `on_start`
# hook: when set-up is done (step 0 next) it notes the wall clock and the CPU seconds used so
# far. CPU seconds do not depend on what else the machine is doing.
_STARTUP_CHILD = """
import json, resource, sys, time
from normexp.cli import run_train
from normexp.train import Hooks

def stamp():
    use = resource.getrusage(resource.RUSAGE_SELF)
    with open(sys.argv[1], "w") as f:
        json.dump({"wall": time.time(), "cpu": use.ru_utime + use.ru_stime}, f)

run_train(sys.argv[3:], hooks=Hooks(on_start=stamp))
"""


def bench_startup(repeats: int, say) -> dict:
    """Seconds from launching `normexp train` (the default config, the user's token cache)
    to the start of step 0: wall clock, and CPU seconds of the process. A first run builds
    the token cache if it is missing and is not counted."""
    starts, cpus, totals = [], [], []
    for i in range(repeats + 1):
        with tempfile.TemporaryDirectory(prefix="normexp-startup-") as tmp:
            stamp = Path(tmp) / "stamp.json"
            cmd = [sys.executable, "-c", _STARTUP_CHILD, str(stamp), "train", "steps=2", "eval_batches=1",
                   "log.progress=off", "checkpoint_every=0", f"hydra.run.dir={Path(tmp) / 'run'}"]
            t0 = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True)
            total = time.time() - t0
            if proc.returncode != 0 or not stamp.exists():
                raise RuntimeError(f"normexp train {' '.join(cmd[4:])} failed:\n{proc.stderr[-2000:]}")
            at = json.loads(stamp.read_text())
        if i == 0:
            say(f"  startup: warm-up run {total:.1f} s (builds the token cache if needed)")
            continue
        starts.append(at["wall"] - t0)
        cpus.append(at["cpu"])
        totals.append(total)
        say(f"  startup: step 0 starts {at['wall'] - t0:.2f} s after launch ({at['cpu']:.2f} CPU s); "
            f"whole 2-step run {total:.2f} s, load average {load_average()}")
    return {"to_first_step_s": statistics.median(starts), "to_first_step_cpu_s": statistics.median(cpus),
            "best_to_first_step_s": min(starts), "whole_two_step_run_s": statistics.median(totals),
            "repeats": repeats}


# ---------------------------------------------------------------------- report

def summarise(shapes: list[Shape], pools: dict, peak: float, compiled: dict | None) -> dict:
    out = {}
    for shape in shapes:
        flops = shape.flops_per_token() * shape.tokens_per_step
        rows = {}
        for v, pool in pools[shape.name].items():
            s = pool.seconds_per_step()
            rows[v] = {"tokens_per_s": shape.tokens_per_step / s, "ms_per_step": 1e3 * s,
                       "peak_rss_mb": pool.rss_mb, "mfu": flops / s / (peak * 1e9),
                       "steps_timed": pool.steps_timed, "cpu_share": pool.cpu_share()}
        if compiled and shape.name in compiled:
            pool = compiled[shape.name]["pool"]
            s = pool.seconds_per_step()
            rows["compile"] = {"tokens_per_s": shape.tokens_per_step / s, "ms_per_step": 1e3 * s,
                               "peak_rss_mb": pool.rss_mb, "mfu": flops / s / (peak * 1e9),
                               "first_step_s": compiled[shape.name]["first_step_s"],
                               "steps_timed": pool.steps_timed, "cpu_share": pool.cpu_share()}
        base = rows["minimal"]["tokens_per_s"]
        for row in rows.values():
            row["vs_minimal"] = row["tokens_per_s"] / base
        entry = {"shape": {k: getattr(shape, k) for k in ("layers", "d_model", "heads", "mlp_ratio", "seq_len",
                                                        "batch_size", "vocab_size")},
                 "matmul_params": shape.matmul_params(), "flops_per_token": shape.flops_per_token(), "runs": rows}
        if "off" in rows:
            p = pools[shape.name]
            inside = p["log10"].logged_extra()
            entry["instrument_overhead"] = {
                "rounds": len(p["off"].rounds),
                # whole runs against a run without logging steps, paired round by round
                "log_every_10": paired_overhead(p["log10"], p["off"]),
                "log_every_1": paired_overhead(p["log1"], p["off"]),
                # inside the log_every=10 runs: a logging step's extra cost, ÷ 10 at log_every=10
                "logging_step_extra_ms": None if inside is None else 1e3 * inside[0],
                "log_every_10_within_runs": None if inside is None else inside[1] / 10,
                "log_every_1_within_runs": None if inside is None else inside[1],
            }
        out[shape.name] = entry
    return out


def bench_profiles(shape: Shape, ms_per_step: float | None, say, repeats: int = 10) -> dict:
    """The depth-profile images: milliseconds to draw and write one for `shape`'s depth
    (median of `repeats`, after one warm-up), and what the default setting
    (log.profiles_every=auto) adds to the default run: images × ms ÷ (steps × ms/step)."""
    from .logbook import depth_profile_figure, open_writer
    from .train import profiles_every

    cfg = compose_config([])
    every = profiles_every(cfg)
    logged = [s for s in range(cfg.steps) if s % cfg.log_every == 0 or s == cfg.steps - 1]
    images = sum(1 for s in logged if s % every == 0 or s == cfg.steps - 1)
    values = {k: [float(i + 1) for i in range(shape.layers)] for k in ("act_std", "grad_norm", "update_ratio")}
    times = []
    with tempfile.TemporaryDirectory(prefix="normexp-bench-") as tmp:
        writer = open_writer(Path(tmp), None)
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            writer.add_figure("depth_profile", depth_profile_figure(values, i), i)
            times.append(time.perf_counter() - t0)
        writer.close()
    ms = 1e3 * statistics.median(times[1:])
    out = {"ms_per_image": ms, "images_per_default_run": images, "profiles_every": every, "default_steps": cfg.steps,
           "overhead": None if not ms_per_step else images * ms / (cfg.steps * ms_per_step)}
    say(f"  profiles: {ms:.1f} ms an image at depth {shape.layers}; the default run draws {images}")
    return out


NAMES = {"minimal": "minimal GPT (by hand)", "log10": "normexp log_every=10", "off": "normexp instruments off",
         "log1": "normexp log_every=1", "compile": "normexp compile=true, log 10"}


def table(shapes: list[Shape], results: dict, peak: float, threads: int, peak_size: int) -> str:
    lines = [f"fp32 matmul peak, n×n @ n×n with n={peak_size}, {threads} threads: {peak:.1f} GFLOP/s (best of the rounds)",
             "MFU = FLOPs/token × tokens/s ÷ peak;  FLOPs/token = 6·N + 12·L·T·d  (N = matmul weights "
             "incl. the tied head, 12·L·T·d = attention scores and values, fwd+bwd)",
             "each figure is the best of the rounds; CPU = CPU time ÷ (wall × threads) in that round "
             "(well below 100 % means other processes shared the cores)", ""]
    head = (f"{'shape':24s} {'run':28s} {'tok/s':>9s} {'ms/step':>9s} {'peak RSS':>9s} {'MFU':>6s} "
            f"{'vs minimal':>10s} {'CPU':>5s}")
    lines += [head, "-" * len(head)]
    for shape in shapes:
        entry = results[shape.name]
        label = f"{shape.name} {shape.layers}×{shape.d_model} T{shape.seq_len} B{shape.batch_size}"
        for v, row in entry["runs"].items():
            lines.append(f"{label:24s} {NAMES[v]:28s} {row['tokens_per_s']:9,.0f} {row['ms_per_step']:9.1f} "
                         f"{row['peak_rss_mb']:7.0f}MB {100 * row['mfu']:5.1f}% {row['vs_minimal']:9.3f}× "
                         f"{100 * row['cpu_share']:4.0f}%")
            label = ""
        lines.append("")
    comp = [(s, results[s.name]["runs"]) for s in shapes if "compile" in results[s.name]["runs"]]
    if comp:
        lines.append("torch.compile (compile=true) against eager, both at log_every=10 (logging steps run eager):")
        for s, runs in comp:
            ratio = runs["compile"]["tokens_per_s"] / runs["log10"]["tokens_per_s"]
            verdict = "helps" if ratio > 1.03 else "does not help" if ratio < 0.97 else "makes no clear difference"
            lines.append(f"  {s.name} {s.layers}×{s.d_model}: {ratio:.2f}× eager's tokens/s, {verdict}; "
                         f"the first step (compiling) took {runs['compile']['first_step_s']:.0f} s")
        lines.append("")
    over = [(s, results[s.name]["instrument_overhead"]) for s in shapes if "instrument_overhead" in results[s.name]]
    if over:
        lines.append("instrument overhead (target ≤ 3 % at log_every=10, ≤ 15 % at log_every=1):")
        lines.append("  inside  = a logging step's extra time over the plain steps of the same log_every=10 runs "
                     "(median of the rounds; ÷ 10 at log_every=10)")
        lines.append("  between = whole runs against a run with no logging step, paired within each round: "
                     "median [min … max] of the rounds")
        pct = lambda x: f"{100 * x:+5.1f} %"  # noqa: E731
        for s, o in over:
            rng = lambda t: f"{pct(t[0])} [{pct(t[1]).strip()} … {pct(t[2]).strip()}]"  # noqa: E731
            inside = ("n/a" if o["log_every_1_within_runs"] is None else
                      f"log_every=10 {pct(o['log_every_10_within_runs'])}, log_every=1 {pct(o['log_every_1_within_runs'])}"
                      f"  ({o['logging_step_extra_ms']:.1f} ms a logging step)")
            lines.append(f"  {s.name} {s.layers}×{s.d_model}  inside:  {inside}")
            lines.append(f"  {' ' * len(f'{s.name} {s.layers}×{s.d_model}')}  between: log_every=10 {rng(o['log_every_10'])}, "
                         f"log_every=1 {rng(o['log_every_1'])}  ({o['rounds']} rounds)")
    return "\n".join(lines)


class _Parser(argparse.ArgumentParser):
    """argparse, with its errors as one BenchError line (not a usage block and exit 2 of its own)."""

    def error(self, message):
        raise BenchError(f"{message}; `normexp bench --help` lists the options")


def parse_args(argv):
    p = _Parser(prog="normexp bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", default="A,B,C", help="shapes to run, from A,B,C and --shape names (default A,B,C)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=LxD,SEQ,BATCH",
                   help="an extra shape, e.g. tiny=2x32,32,4 (add its NAME to --only)")
    p.add_argument("--instruments", default="B,C", help="shapes whose instrument overhead is measured (default B,C)")
    p.add_argument("--steps", type=int, default=32, help="steps per timed run (default 32)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--peak-size", type=int, default=4096, help="n of the n×n fp32 matmul that measures the peak (default 4096)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: the cores this process may use)")
    p.add_argument("--compile", action="store_true", help="also time normexp with compile=true")
    p.add_argument("--sweep", action="store_true", help="also compare parallel 1-thread jobs with sequential jobs on B")
    p.add_argument("--sweep-shape", default="B", metavar="NAME", help="the shape of the sweep comparison (default B)")
    p.add_argument("--sweep-steps", type=int, default=150, help="steps per job of the CLI sweep comparison (default 150)")
    p.add_argument("--startup", action="store_true", help="also time `normexp train` from launch to step 0")
    p.add_argument("--profiles", action="store_true", help="also time the depth-profile images (cost at the default setting)")
    p.add_argument("--all", action="store_true", help="--compile --sweep --startup --profiles")
    p.add_argument("--json", type=Path, default=Path("bench.json"), help="where to write the results (default bench.json)")
    return p.parse_args(argv)


def select_shapes(args) -> tuple[dict, list]:
    """({name: Shape} of every known shape, the shapes --only asks for); bad choices are a BenchError."""
    known = {"A": Shape("A", 6, 256, 256, 16), "B": Shape("B", 48, 64, 64, 16), "C": default_shape()}
    for text in args.shape:
        s = parse_shape(text)
        known[s.name] = s
    names = [n.strip() for n in args.only.split(",") if n.strip() and n.strip() != "none"]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise BenchError(f"unknown shape {', '.join(unknown)} in --only; "
                         f"choose from {', '.join(known)} or add one with --shape NAME=LxD,SEQ,BATCH")
    if args.sweep and args.sweep_shape not in known:
        raise BenchError(f"--sweep-shape {args.sweep_shape}: unknown; choose from {', '.join(known)} "
                         "or add one with --shape NAME=LxD,SEQ,BATCH")
    if args.steps < 12:
        raise BenchError(f"--steps {args.steps} times no logging step at log_every=10; "
                         "use at least 12")
    return known, [known[n] for n in names]


def check_args(args, cores: int) -> None:
    """Everything that can be checked before the bench runs, so that no measurement is lost
    to a bad argument at the end (the --json path is written last)."""
    at_least = {"--rounds": (args.rounds, 1), "--peak-size": (args.peak_size, 1), "--sweep-steps": (args.sweep_steps, 1)}
    if args.threads is not None:
        at_least["--threads"] = (args.threads, 1)
    for flag, (value, low) in at_least.items():
        if value < low:
            raise BenchError(f"{flag} {value}: must be at least {low}"
                             + (f" (this machine lets the process use {cores} cores)" if flag == "--threads" else ""))
    out = args.json
    if out.is_dir():
        raise BenchError(f"--json {out} is a folder; give a file name, e.g. {out / 'bench.json'}")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise BenchError(f"--json {out}: no folder {folder}; create it first or choose another path")
    if not os.access(folder, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise BenchError(f"--json {out}: cannot write there; choose another path")


def extras_text(sweep: dict | None, startup: dict | None, profiles: dict | None, cores: int, sweep_steps: int) -> str:
    """The lines of the optional measurements (--sweep, --startup, --profiles) under the table;
    sets sweep["faster"]."""
    text = ""
    if sweep:
        faster = "parallel" if sweep["parallel_tokens_per_s"] > sweep["sequential_tokens_per_s"] else "sequential"
        text += (f"\n\nsweep throughput on {sweep['shape']} (aggregate tokens/s, steady state): {sweep['parallel_jobs']} jobs × 1 thread "
                 f"{sweep['parallel_tokens_per_s']:,.0f}  vs  1 job × {cores} threads {sweep['sequential_tokens_per_s']:,.0f}"
                 f"  -> {faster} is faster ({sweep['parallel_tokens_per_s'] / sweep['sequential_tokens_per_s']:.2f}×)")
        cli = sweep["cli"]
        text += (f"\nthe same through `normexp train -m` ({2 * cores} seeds × {sweep_steps} steps, "
                 f"start-up, validation and checkpoints included): "
                 f"joblib n_jobs={cores} {cli['joblib']['wall_s']:.1f} s, basic launcher {cli['basic']['wall_s']:.1f} s "
                 f"({cli['basic']['wall_s'] / cli['joblib']['wall_s']:.2f}× in favour of "
                 f"{'joblib' if cli['joblib']['wall_s'] < cli['basic']['wall_s'] else 'basic'})")
        sweep["faster"] = faster
    if startup:
        text += (f"\n\nstart-up, `normexp train` (default config, token cache warm), median of {startup['repeats']}: "
                 f"step 0 starts {startup['to_first_step_s']:.2f} s after launch (best {startup['best_to_first_step_s']:.2f} s), "
                 f"{startup['to_first_step_cpu_s']:.2f} CPU s")
    if profiles:
        share = profiles["overhead"]
        text += (f"\n\ndepth-profile images (log.profiles_every=auto): {profiles['ms_per_image']:.1f} ms each "
                 f"(median of 10); the default run ({profiles['default_steps']} steps) draws "
                 f"{profiles['images_per_default_run']}, every {profiles['profiles_every']} steps: "
                 + (f"+{100 * share:.2f} % of its step time" if share is not None else "add C to --only for the share"))
    return text


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.all:
        args.compile = args.sweep = args.startup = args.profiles = True
    from .distributed import available_cores

    cores = available_cores()
    known, shapes = select_shapes(args)
    check_args(args, cores)
    threads = args.threads or cores
    torch.set_num_threads(threads)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731 - progress on stderr, table on stdout

    os.environ["HF_HUB_OFFLINE"] = "1"
    logging.getLogger("normexp").setLevel(logging.ERROR)  # the runs' own log lines would drown the table
    say(f"normexp bench: {threads} threads, {cores} cores, load average {load_average()}")
    with tempfile.TemporaryDirectory(prefix="normexp-bench-") as tmp:
        os.environ["NORMEXP_CACHE"] = str(Path(tmp) / "cache")  # the bench's corpus stays out of the user's cache
        corpus = make_corpus(Path(tmp))
        tokens = torch.frombuffer(bytearray(corpus.read_bytes()), dtype=torch.uint8).long()
        pools, peaks = bench_shapes(shapes, corpus, tokens, args.steps, args.rounds, threads,
                                     {n.strip() for n in args.instruments.split(",")}, args.peak_size, say)
        compiled = bench_compile(shapes, corpus, args.steps, threads, say) if args.compile else None
        sweep = None
        if args.sweep and cores > 1:
            b = known[args.sweep_shape]
            sweep = bench_sweep(b, corpus, max(args.steps, 42), cores, 2, say)
            sweep["cli"] = bench_sweep_cli(b, corpus, 2 * cores, args.sweep_steps, cores, say)
            sweep["shape"] = b.name
        os.environ.pop("NORMEXP_CACHE")
    torch.set_num_threads(threads)
    startup = bench_startup(3, say) if args.startup else None
    peak = max(peaks + [matmul_gflops(args.peak_size)])

    results = summarise(shapes, pools, peak, compiled)
    profiles = None
    if args.profiles:
        c = results.get("C", {}).get("runs", {}).get("log10")  # the default model's ms per step, measured above
        profiles = bench_profiles(default_shape(), c and c["ms_per_step"], say)
    text = table(shapes, results, peak, threads, args.peak_size) if shapes else f"fp32 matmul peak: {peak:.1f} GFLOP/s"
    text += extras_text(sweep, startup, profiles, cores, args.sweep_steps)
    print(text)
    report = {"profiles": profiles, "threads": threads, "cores": cores, "torch": torch.__version__, "matmul_peak_gflops": peak,
              "flops_per_token": "6*N + 12*L*T*d (N = matmul weights incl. tied head)",
              "load_average_at_end": load_average(), "shapes": results, "sweep": sweep, "startup": startup}
    try:
        args.json.write_text(json.dumps(report, indent=2))
    except OSError as e:  # checked up front; the table above is printed, so nothing is lost
        raise BenchError(f"cannot write {args.json} ({e.strerror}); the table above holds the results") from None
    say(f"wrote {args.json}")
    return report


def run(argv: list[str] | None = None) -> None:
    """`normexp bench` and scripts/bench.py: main() with bad arguments as a one-line error."""
    try:
        main(argv)
    except BenchError as e:
        print(f"normexp: error: {e}", file=sys.stderr)  # the one-line form of every normexp command
        raise SystemExit(2) from None


if __name__ == "__main__":
    run()
