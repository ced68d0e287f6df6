"""The bench itself: its options and their checks, the interleaved rounds, the optional
measurements, and the summary written as JSON. The command is declared in normexp/cli.py;
the printed table is table.py's."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from . import BenchError
from .corpus import make_corpus
from .loops import LOG_EVERY, build_seconds, bytes_per_logging_step, min_steps, minimal_step_times, normexp_run
from .shapes import SHAPES, Shape, default_shape, find_shape, parse_shape, select_shapes
from ..config.defaults import bench_default
from .timing import OFF, WARMUP, CPUShare, PeakRSS, Pool, load_average, matmul_gflops, paired_overhead
from ..runs.schema import Status


@dataclass
class BenchOptions:
    """`normexp bench`'s options (see its --help in cli.py); the defaults are configs/bench.yaml's."""

    only: str = bench_default("only")
    shape: list[str] = field(default_factory=list)
    instruments: str = bench_default("instruments")
    steps: int = bench_default("steps")
    rounds: int = bench_default("rounds")
    peak_size: int = bench_default("peak_size")
    threads: int | None = bench_default("threads")
    compile: bool = False
    sweep: bool = False
    sweep_shape: str = bench_default("sweep_shape")
    sweep_steps: int = bench_default("sweep_steps")
    startup: bool = False
    profiles: bool = False
    packs: bool = False
    all: bool = False
    json: Path = Path(bench_default("json"))
    quick: bool = False


def quick_settings() -> dict:
    """`--quick`: the default model (C) alone, without the instrument-overhead runs, the fewest steps a timing
    needs (min_steps), one round and a 1024² peak matmul: a first look in under a minute, where
    the default bench takes minutes. Its figures are one round's, noisier than the best of three."""
    return {"only": "C", "instruments": "none", "steps": min_steps(), "rounds": 1, "peak_size": 1024}


def check_options(opts: BenchOptions, cores: int) -> tuple[dict[str, Shape], list[Shape]]:
    """Everything that can be checked before the bench runs, so that no measurement is lost to
    a bad argument at the end (the --json file is written last). Returns select_shapes'."""
    if not [n for n in opts.only.split(",") if n.strip()]:
        raise BenchError(f"--only {opts.only!r}: names no shape; give some of {', '.join(SHAPES)} (or a --shape "
                         "NAME), or --only none to time no shapes")
    names = [parse_shape(s).name for s in opts.shape]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BenchError(f"--shape {', '.join(twice)}: given more than once; give each shape a name of its own")
    known, shapes = select_shapes(opts.only, opts.shape)
    unknown = [n.strip() for n in opts.instruments.split(",")
               if n.strip() and n.strip() != "none" and n.strip() not in known and n.strip() not in SHAPES]
    if unknown:
        raise BenchError(f"--instruments {opts.instruments}: unknown shape {', '.join(unknown)}; choose from "
                         f"{', '.join(dict.fromkeys([*SHAPES, *known]))}, or none")
    if opts.sweep or opts.all:
        known[opts.sweep_shape] = find_shape(opts.sweep_shape, known, "--sweep-shape")
    if opts.steps < min_steps():
        raise BenchError(f"--steps {opts.steps}: use at least {min_steps()} ({WARMUP} warm-up steps, "
                         "a plain and a logging step timed, and the last step)")
    at_least = {"--rounds": opts.rounds, "--peak-size": opts.peak_size, "--sweep-steps": opts.sweep_steps}
    if opts.threads is not None:
        at_least["--threads"] = opts.threads
    for flag, value in at_least.items():
        if value < 1:
            raise BenchError(f"{flag} {value}: must be at least 1"
                             + (f" (this machine lets the process use {cores} cores)" if flag == "--threads" else ""))
    check_memory(opts, known)
    out = opts.json
    if out.is_dir():
        raise BenchError(f"--json {out} is a folder; give a file name, e.g. {out / 'bench.json'}")
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise BenchError(f"--json {out}: no folder {folder}; create it first or choose another path")
    if not os.access(folder, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise BenchError(f"--json {out}: cannot write there; choose another path")
    return known, shapes


def check_memory(opts: BenchOptions, known: dict[str, Shape]) -> None:
    """The peak matmul and every shape the bench will build fit in the free memory (checked
    before building: a shape too large for the machine would otherwise swap for minutes or be
    killed). The matmul holds three n×n fp32 matrices; a shape's step is estimated as `normexp
    train`'s pre-flight estimates it (config.resources.memory_problem)."""
    from omegaconf import OmegaConf

    from ..config.resources import available_memory_bytes, memory_problem

    free = available_memory_bytes()
    if free is None:
        return
    need = 3 * 4 * opts.peak_size ** 2
    if need > free:
        most = int((free / 12) ** 0.5)
        raise BenchError(f"--peak-size {opts.peak_size}: the {opts.peak_size}×{opts.peak_size} fp32 matmul holds three "
                         f"matrices, {need / 2 ** 30:.1f} GiB, and {free / 2 ** 30:.1f} GiB is free; use at most "
                         f"{most} (the default is {bench_default('peak_size')})")
    for shape in known.values():
        cfg = OmegaConf.create({"layers": shape.layers, "d_model": shape.d_model, "seq_len": shape.seq_len,
                                "batch_size": shape.batch_size, "heads": shape.heads, "mlp_ratio": shape.mlp_ratio,
                                "tokenizer": {"vocab_size": shape.vocab_size}})
        problem = memory_problem(cfg, free, names={"layers": "LAYERS", "d_model": "WIDTH", "seq_len": "SEQ",
                                                   "batch_size": "BATCH"})
        if problem:
            raise BenchError(f"shape {shape.label}: {problem}")


@contextlib.contextmanager
def bench_environment(threads: int, cache: Path):
    """For the bench's duration only: torch threads, the Hub offline, the bench's corpus in a
    token cache of its own (not the user's), and normexp's logger quiet (the runs' log lines
    would drown the table). Everything is restored on the way out, so a caller in the same
    process (a test, a notebook) sees no change."""
    logger = logging.getLogger("normexp")
    saved = torch.get_num_threads(), logger.level, {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "NORMEXP_CACHE")}
    torch.set_num_threads(threads)
    logger.setLevel(logging.ERROR)
    os.environ.update(HF_HUB_OFFLINE="1", NORMEXP_CACHE=str(cache))
    try:
        yield
    finally:
        torch.set_num_threads(saved[0])
        logger.setLevel(saved[1])
        for key, value in saved[2].items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# ------------------------------------------------------------------- the rounds

VARIANTS = {"minimal": None, "log10": LOG_EVERY, "off": OFF, "log1": 1,  # name → log_every (None: the minimal GPT)
            "plain10": LOG_EVERY}
# overrides of a variant's runs: plain10 is log10 without issue 29's signals, so the pair prices them
VARIANT_OVERRIDES = {"plain10": ("log.extra_signals=false",)}


def bench_shapes(shapes: list[Shape], corpus: Path, tokens: torch.Tensor, steps: int, rounds: int,
                 threads: int, instrument_shapes: set[str], peak_size: int, say) -> tuple[dict, list, dict]:
    """Interleaved rounds: minimal GPT and normexp (log_every=10) for every shape; for the
    shapes in `instrument_shapes` also normexp with no logging step, at log_every=1, and at
    log_every=10 with log.extra_signals=false (what the signals of issue 29 cost).
    Every other round runs the variants in reverse order, so drift in the machine's load
    hits all of them alike. Each round also times building both models and keeps the
    TensorBoard bytes of the log_every=10 run's logging steps.
    Returns (pools by shape and variant, matmul peaks, per shape {"build": [...], "event_bytes": [...]})."""
    pools, peaks, costs = {}, [], {}
    for shape in shapes:
        names = ["minimal", "log10"] + (["off", "log1", "plain10"] if shape.name in instrument_shapes else [])
        pools[shape.name] = {v: Pool(VARIANTS[v]) for v in names}
        costs[shape.name] = {"build": [], "event_bytes": []}
    for r in range(rounds if shapes else 0):
        peaks.append(matmul_gflops(peak_size))
        say(f"round {r + 1}/{rounds}: matmul {peaks[-1]:.0f} GFLOP/s, load average {load_average()}")
        for shape in shapes:
            t0 = time.perf_counter()
            costs[shape.name]["build"].append(build_seconds(shape, tokens))
            say(f"  {shape.label:28s} {'build':8s} {time.perf_counter() - t0:6.1f} s")
            variants = list(pools[shape.name])
            for v in (variants if r % 2 == 0 else variants[::-1]):
                pool, t0 = pools[shape.name][v], time.perf_counter()
                with PeakRSS() as rss, CPUShare() as share:
                    if v == "minimal":
                        stamps, logs = minimal_step_times(shape, tokens, steps, seed=r), None
                    else:
                        run = normexp_run(shape, corpus, steps, pool.log_every, threads,
                                          extra=(f"seed={r}", *VARIANT_OVERRIDES.get(v, ())))
                        stamps, logs = run.stamps, run.logs
                        if v == "log10":
                            costs[shape.name]["event_bytes"].append(bytes_per_logging_step(run))
                pool.add(stamps, rss.mb, share.value, logs=logs)
                say(f"  {shape.label:28s} {v:8s} {time.perf_counter() - t0:6.1f} s")
    return pools, peaks, costs


def bench_compile(shapes: list[Shape], corpus: Path, steps: int, threads: int, say) -> dict:
    """normexp with compile=true at log_every=10 (logging steps run the eager model, so the
    instruments are unchanged). The first steps, which compile, are reported separately."""
    out = {}
    for shape in shapes:
        pool = Pool(LOG_EVERY)
        t0 = time.perf_counter()
        with PeakRSS() as rss, CPUShare() as share:
            run = normexp_run(shape, corpus, steps, LOG_EVERY, threads, compile=True)
        pool.add(run.stamps, rss.mb, share.value, logs=run.logs)
        out[shape.name] = {"pool": pool, "first_step_s": run.stamps[0] - t0}
        say(f"  {shape.label:28s} compile  {time.perf_counter() - t0:6.1f} s")
    return out


def _sweep_job(args) -> list[float]:
    shape, corpus, steps, threads, seed = args
    logging.getLogger("normexp").setLevel(logging.ERROR)  # a fresh process: quiet it as the bench does
    return normexp_run(shape, Path(corpus), steps, LOG_EVERY, threads, extra=(f"seed={seed}",)).stamps


def pool_of(stamps: list[float], log_every: int = LOG_EVERY) -> Pool:
    pool = Pool(log_every)
    pool.add(stamps, 0.0)
    return pool


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
            if len(done) != jobs or any(d["status"] != Status.COMPLETED for d in done):
                raise RuntimeError(f"the {name} sweep did not complete all {jobs} jobs: {[d['status'] for d in done]}")
        out[name] = {"wall_s": wall, "tokens_per_s": jobs * steps * shape.tokens_per_step / wall}
        say(f"  sweep {shape.name} via the CLI, {name:6s} launcher: {jobs} jobs × {steps} steps in {wall:.1f} s")
    return out


def bench_startup(repeats: int, say) -> dict:
    """Seconds from launching `normexp train` (the default config, the user's token cache)
    to the start of step 0: wall clock, and CPU seconds of the process (startup_child.py).
    A first run builds the token cache if it is missing and is not counted."""
    starts, cpus, totals = [], [], []
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    for i in range(repeats + 1):
        with tempfile.TemporaryDirectory(prefix="normexp-startup-") as tmp:
            stamp = Path(tmp) / "stamp.json"
            cmd = [sys.executable, "-m", "normexp.bench.startup_child", str(stamp), "train", "steps=2", "eval_batches=1",
                   "log.progress=off", "checkpoint_every=0", f"hydra.run.dir={Path(tmp) / 'run'}"]
            t0 = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
            total = time.time() - t0
            if proc.returncode != 0 or not stamp.exists():
                raise RuntimeError(f"normexp train {' '.join(cmd[5:])} failed:\n{proc.stderr[-2000:]}")
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


def bench_profiles(shape: Shape, ms_per_step: float | None, say, repeats: int = 10) -> dict:
    """The depth-profile images: milliseconds to draw and write one for `shape`'s depth
    (median of `repeats`, after one warm-up), and what the default setting
    (log.profiles_every=auto) adds to the default run: images × ms ÷ (steps × ms/step)."""
    from ..config.compose import compose_config
    from ..train.logbook import depth_profile_figure, open_writer
    from ..config.run_config import LogConfig
    from ..train.loop import is_logging_step

    cfg = compose_config([])
    every = LogConfig.from_composed(cfg).profile_interval(cfg.steps)
    logged = [s for s in range(cfg.steps) if is_logging_step(s, cfg.log_every, cfg.steps)]
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


# ---------------------------------------------------------------------- summary

def default_log_every() -> int:
    """The default run's log_every as a step count ("auto" resolved at its steps)."""
    from ..config.compose import compose_config
    from ..config.run_config import LogConfig

    return int(LogConfig.from_composed(compose_config([])).log_every)


def run_row(shape: Shape, pool: Pool, peak: float) -> dict:
    s = pool.seconds_per_step()
    flops = shape.flops_per_token() * shape.tokens_per_step
    return {"tokens_per_s": shape.tokens_per_step / s, "ms_per_step": 1e3 * s, "peak_rss_mb": pool.rss_mb,
            "mfu": flops / s / (peak * 1e9), "steps_timed": pool.steps_timed, "cpu_share": pool.cpu_share()}


def step_costs(log10: Pool, costs: dict, default_every: int) -> dict:
    """Model build (best round, seconds), one logging step against a plain step (inside the
    log_every=10 runs, see Pool.logging_step), the step time amortised at the default run's
    log_every, and TensorBoard bytes per logging step (median of the rounds)."""
    builds = costs["build"]
    sizes = [b for b in costs["event_bytes"] if b is not None]
    out = {"build_s": {"normexp": min(b["normexp"] for b in builds), "minimal": min(b["minimal"] for b in builds)},
           "logging_step": log10.logging_step(),
           "default_log_every": default_every,
           "s_per_step_at_default_log_every": log10.seconds_per_step(default_every),
           "event_bytes_per_logging_step": statistics.median(sizes) if sizes else None}
    return out


def extra_signals_cost(log10: Pool, plain10: Pool) -> dict:
    """What log.extra_signals adds at log_every=10: whole runs paired round by round
    (`between`: median, min, max of log10 ÷ plain10 − 1), and inside the runs, a logging step's
    extra time over its plain steps with the signals minus the same without them (ms, and ÷ the
    plain step ÷ 10 as a fraction of the run at log_every=10). None where a round timed no
    logging step."""
    with_signals, without = log10.logging_step(), plain10.logging_step()
    inside = None if with_signals is None or without is None else {
        "logging_step_extra_ms": 1e3 * (with_signals["extra_s"] - without["extra_s"]),
        "log_every_10": (with_signals["extra_fraction"] - without["extra_fraction"]) / LOG_EVERY}
    return {"between_log_every_10": paired_overhead(log10, plain10), "inside": inside}


def summarise(shapes: list[Shape], pools: dict, peak: float, compiled: dict | None, costs: dict) -> dict:
    out, every = {}, default_log_every() if shapes else None
    for shape in shapes:
        rows = {v: run_row(shape, pool, peak) for v, pool in pools[shape.name].items()}
        if compiled and shape.name in compiled:
            rows["compile"] = {**run_row(shape, compiled[shape.name]["pool"], peak),
                               "first_step_s": compiled[shape.name]["first_step_s"]}
        base = rows["minimal"]["tokens_per_s"]
        for row in rows.values():
            row["vs_minimal"] = row["tokens_per_s"] / base
        entry = {"shape": {k: getattr(shape, k) for k in ("layers", "d_model", "heads", "mlp_ratio", "seq_len",
                                                        "batch_size", "vocab_size", "placement")},
                 "matmul_params": shape.matmul_params(), "flops_per_token": shape.flops_per_token(), "runs": rows,
                 "costs": step_costs(pools[shape.name]["log10"], costs[shape.name], every)}
        if "off" in rows:
            p = pools[shape.name]
            inside = p["log10"].logging_step()
            entry["instrument_overhead"] = {
                "rounds": len(p["off"].rounds),
                # whole runs against a run without logging steps, paired round by round
                "log_every_10": paired_overhead(p["log10"], p["off"]),
                "log_every_1": paired_overhead(p["log1"], p["off"]),
                # inside the log_every=10 runs: a logging step's extra cost, ÷ 10 at log_every=10
                "logging_step_extra_ms": None if inside is None else 1e3 * inside["extra_s"],
                "log_every_10_within_runs": None if inside is None else inside["extra_fraction"] / LOG_EVERY,
                "log_every_1_within_runs": None if inside is None else inside["extra_fraction"],
            }
            if "plain10" in p:
                entry["instrument_overhead"]["extra_signals"] = extra_signals_cost(p["log10"], p["plain10"])
        out[shape.name] = entry
    return out


# ---------------------------------------------------------------------- the bench

def run(opts: BenchOptions, say=None) -> tuple[dict, str]:
    """Check the options, measure, and write opts.json. Returns (the report, the table text)."""
    from ..train.threads import available_cores
    from .table import extras_text, table

    say = say or (lambda m: print(m, file=sys.stderr, flush=True))  # progress on stderr, the table on stdout
    if opts.all:
        opts.compile = opts.sweep = opts.startup = opts.profiles = opts.packs = True
    if opts.quick:
        for name, value in quick_settings().items():
            setattr(opts, name, value)
    cores = available_cores()
    known, shapes = check_options(opts, cores)
    threads = opts.threads or cores
    with tempfile.TemporaryDirectory(prefix="normexp-bench-") as tmp, bench_environment(threads, Path(tmp) / "cache"):
        say(f"normexp bench: {threads} threads, {cores} cores, load average {load_average()}")
        corpus = make_corpus(Path(tmp))
        tokens = torch.frombuffer(bytearray(corpus.read_bytes()), dtype=torch.uint8).long()
        pools, peaks, costs = bench_shapes(shapes, corpus, tokens, opts.steps, opts.rounds, threads,
                                           {n.strip() for n in opts.instruments.split(",")}, opts.peak_size, say)
        compiled = bench_compile(shapes, corpus, opts.steps, threads, say) if opts.compile else None
        sweep = None
        if opts.sweep and cores > 1:
            b = known[opts.sweep_shape]
            sweep = bench_sweep(b, corpus, max(opts.steps, 42), cores, 2, say)
            sweep["cli"] = bench_sweep_cli(b, corpus, 2 * cores, opts.sweep_steps, cores, say)
            sweep["shape"] = b.name
        torch.set_num_threads(threads)  # the runs set their own
        peak = max(peaks + [matmul_gflops(opts.peak_size)])
        results = summarise(shapes, pools, peak, compiled, costs)
        profiles = None
        if opts.profiles:
            c = results.get("C", {}).get("runs", {}).get("log10")  # the default model's ms per step, measured above
            profiles = bench_profiles(default_shape(), c and c["ms_per_step"], say)
    startup = bench_startup(3, say) if opts.startup else None  # the user's token cache, as `normexp train` sees it
    text = table(shapes, results, peak, threads, opts.peak_size) if shapes else f"fp32 matmul peak: {peak:.1f} GFLOP/s"
    text += extras_text(sweep, startup, profiles, cores, opts.sweep_steps)
    packs = None
    if opts.packs:
        from .packs import pack_section

        torch.set_num_threads(threads)
        packs = pack_section(min(opts.steps, 10), say)
        text += "\n\npacks (one model alone, then K of its shape as one pack; tokens/s of training steps):\n" + "\n".join(packs)
    report = {"profiles": profiles, "threads": threads, "cores": cores, "torch": torch.__version__,
              "matmul_peak_gflops": peak, "flops_per_token": "6*N + 12*L*T*d (N = matmul weights incl. tied head)",
              "load_average_at_end": load_average(), "shapes": results, "sweep": sweep, "startup": startup, "packs": packs}
    return report, text


def write_report(report: dict, path: Path) -> None:
    try:
        path.write_text(json.dumps(report, indent=2))
    except OSError as e:  # checked up front; the table is printed first, so nothing is lost
        raise BenchError(f"cannot write {path} ({e.strerror}); the table above holds the results") from None
