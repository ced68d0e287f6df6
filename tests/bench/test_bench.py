"""The benchmark's reference model against normexp's, its arithmetic checked against hand
computations, the shapes (deep included, never built here), and one tiny end-to-end run.
No timing is asserted: speed targets are read off the bench's table, not tested."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import SAFETY_NET_S, run_cli

from normexp.bench.loops import NormexpRun, bytes_per_logging_step, run_log_every
from normexp.bench.minimal_gpt import MinimalGPT, from_normexp, normexp_key_map
from normexp.bench.shapes import DEFAULT_ONLY, Shape, select_shapes
from normexp.bench.suite import bench_environment, step_costs, summarise
from normexp.bench.timing import OFF, Pool, event_bytes_by_step, paired_overhead, step_durations
from normexp.model import GPT, ModelConfig
from normexp.train.loop import is_logging_step

ROOT = Path(__file__).resolve().parents[2]


def normexp_gpt(shape: Shape, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(ModelConfig(vocab_size=shape.vocab_size, seq_len=shape.seq_len, layers=shape.layers,
                           d_model=shape.d_model, heads=shape.heads, mlp_ratio=shape.mlp_ratio,
                           norm="layer", placement="pre"))


@pytest.mark.parametrize("shape", [Shape("s", 3, 32, 16, 4, heads=4), Shape("t", 2, 48, 24, 3, heads=2, mlp_ratio=2)])
def test_minimal_gpt_computes_normexps_loss_and_gradients(shape):
    """Two independently written networks, one set of weights (moved by state_dict key names):
    same loss, same gradient for every parameter. The init is perturbed so that biases and
    norm gains are not the trivial 0 and 1."""
    gpt = normexp_gpt(shape)
    with torch.no_grad():
        for p in gpt.parameters():
            p.add_(0.05 * torch.randn_like(p))
    mini = from_normexp(shape, gpt.state_dict())
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, shape.vocab_size, (shape.batch_size, shape.seq_len), generator=gen)
    y = torch.randint(0, shape.vocab_size, (shape.batch_size, shape.seq_len), generator=gen)

    loss = gpt(x, y)[1]
    ref = mini(x, y)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)
    loss.backward()
    ref.backward()
    keys = normexp_key_map(shape.layers)
    mine = dict(mini.named_parameters())
    theirs = dict(gpt.named_parameters())
    assert len(theirs) == len(mine) == len(keys) == 2 + 12 * shape.layers + 2
    for name, p in theirs.items():
        torch.testing.assert_close(p.grad, mine[keys[name]].grad, rtol=1e-4, atol=1e-6)


def test_a_normexp_parameter_with_no_counterpart_is_refused():
    shape = Shape("s", 1, 32, 8, 2, heads=2)
    state = normexp_gpt(shape).state_dict()
    state["blocks.0.attn.sublayer.gate.weight"] = torch.zeros(1)
    with pytest.raises(KeyError, match="gate"):
        from_normexp(shape, state)


def test_flop_count_by_hand():
    """5 blocks × 40 wide, MLP ×3, vocabulary 100, 16 tokens: per block QKV 3·1600, output
    1600, MLP 2·3·1600 = 16,000 weights; 5 blocks 80,000 + the head 4,000 = 84,000 = N.
    6·N = 504,000; 12·L·T·d = 12·5·16·40 = 38,400; 542,400 FLOPs a token."""
    shape = Shape("s", 5, 40, 16, 2, heads=4, mlp_ratio=3, vocab_size=100)
    assert shape.matmul_params() == 84_000
    assert shape.flops_per_token() == 542_400
    linear = sum(m.weight.numel() for m in MinimalGPT(shape).modules() if isinstance(m, torch.nn.Linear))
    assert linear + 100 * 40 == 84_000  # the reference model has exactly those matmul weights


def test_pool_amortises_the_logging_step_and_keeps_the_best_round():
    # steps 3..11 of a log_every=4 run: steps 4 and 8 log (3 s), the others 1 s; step 12 is the last
    stamps = [0.0, 1.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 12.0, 13.0, 14.0, 15.0, 99.0]
    plain, logged = step_durations(stamps, lambda s: s % 4 == 0)
    assert logged == [3.0, 3.0]
    assert plain == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    pool = Pool(4)
    pool.add([2 * t for t in stamps], rss_mb=1.0)  # a round at half speed (a busy machine)
    pool.add(stamps, rss_mb=1.0)
    assert pool.seconds_per_step() == pytest.approx((3 * 1.0 + 3.0) / 4)
    assert pool.seconds_per_step(k=50) == pytest.approx((49 * 1.0 + 3.0) / 50)
    # plain 2 s and 1 s, logged 6 s and 3 s, extra 4 s and 2 s (+200 % in both): medians
    assert pool.logging_step() == pytest.approx({"plain_s": 1.5, "logged_s": 4.5, "extra_s": 3.0, "extra_fraction": 2.0})
    assert pool.steps_timed == 18
    off = Pool(OFF)  # no logging step: all nine durations are plain, the median ignores the two slow ones
    off.add(stamps, rss_mb=1.0)
    assert off.rounds == [([1.0, 3.0, 1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0], [])]
    assert off.seconds_per_step() == pytest.approx(1.0)
    off.add([2 * t for t in stamps], rss_mb=1.0)
    # pool's rounds: busy 3.0 s then calm 1.5 s; off's: calm 1.0 s then busy 2.0 s → ratios 3.0 and 0.75
    assert pool.round_seconds() == pytest.approx([3.0, 1.5])
    assert paired_overhead(pool, off) == pytest.approx((0.875, -0.25, 2.0))


def test_a_short_run_logs_often_enough_to_time_a_logging_step_but_is_amortised_at_10():
    """At --steps 6 (the deep shape's) the runs log every 4 steps: steps 3 (plain) and 4
    (logging) are timed; step 5 is the last. The figure is still at log_every=10."""
    assert [run_log_every(10, n) for n in (6, 11, 12, 32)] == [4, 9, 10, 10]
    assert run_log_every(OFF, 6) == OFF and run_log_every(1, 6) == 1
    assert [s for s in range(6) if is_logging_step(s, 4, 6)] == [0, 4, 5]
    stamps = [0.0, 5.0, 6.0, 7.0, 10.0, 11.0]  # step 3 took 1 s, step 4 (logging) 3 s
    run = NormexpRun(stamps, lambda s: is_logging_step(s, 4, 6), {0: 9000, 4: 700, 5: 800, 6: 50})
    pool = Pool(10)
    pool.add(run.stamps, 1.0, logs=run.logs)
    assert pool.rounds == [([1.0], [3.0])]
    assert pool.seconds_per_step() == pytest.approx((9 * 1 + 3) / 10)
    assert bytes_per_logging_step(run) == 700  # not step 0's set-up nor the last step's


def summary_of(stamps_by_variant: dict, shape: Shape, peak: float, bytes_per_round: list) -> dict:
    pools = {}
    for v, (k, stamps) in stamps_by_variant.items():
        pools[v] = Pool(k)
        pools[v].add(stamps, 10.0, 0.5)
    costs = {shape.name: {"build": [{"normexp": 2.0, "minimal": 0.5}, {"normexp": 1.5, "minimal": 0.7}],
                          "event_bytes": bytes_per_round}}
    return summarise([shape], {shape.name: pools}, peak, None, costs)[shape.name]


def test_summary_arithmetic_by_hand():
    """tiny 2×32 T32 B4 (128 tokens a step). N = 2·12·32² + 256·32 = 32,768; FLOPs a token
    6·32,768 + 12·2·32·32 = 221,184. normexp: plain steps 0.5 s, logging steps (10, 20) 1.5 s
    → (9·0.5 + 1.5)/10 = 0.6 s a step at log_every=10, (14·0.5 + 1.5)/15 = 0.5667 s at the
    default run's log_every (auto: 15 at 600 steps); 128/0.6 = 213.3 tokens/s. Minimal GPT 0.4 s a step: 320 tokens/s, so normexp
    runs at 0.4/0.6 = 2/3 of it. MFU at a 1 GFLOP/s peak: 221,184·128/0.6 / 1e9 = 0.04718592."""
    shape = Shape("tiny", 2, 32, 32, 4, heads=2)
    steady = lambda dt, slow=(): [sum(1.5 if s in slow else dt for s in range(1, n + 1)) for n in range(23)]  # noqa: E731
    entry = summary_of({"minimal": (None, steady(0.4)), "log10": (10, steady(0.5, slow=(10, 20)))}, shape,
                       peak=1.0, bytes_per_round=[3000, None])
    normexp, minimal = entry["runs"]["log10"], entry["runs"]["minimal"]
    assert entry["flops_per_token"] == 221_184
    assert normexp["ms_per_step"] == pytest.approx(600.0)
    assert normexp["tokens_per_s"] == pytest.approx(213.3333333)
    assert minimal["tokens_per_s"] == pytest.approx(320.0)
    assert normexp["vs_minimal"] == pytest.approx(2 / 3)
    assert normexp["mfu"] == pytest.approx(0.04718592)
    costs = entry["costs"]
    assert costs["build_s"] == {"normexp": 1.5, "minimal": 0.5}  # best round of each
    assert costs["logging_step"] == pytest.approx({"plain_s": 0.5, "logged_s": 1.5, "extra_s": 1.0,
                                                   "extra_fraction": 2.0})
    assert costs["default_log_every"] == 15
    assert costs["s_per_step_at_default_log_every"] == pytest.approx(8.5 / 15)
    assert costs["event_bytes_per_logging_step"] == 3000  # a round without a logging step is left out


def test_the_extra_signals_cost_by_hand():
    """log10: plain steps 0.5 s, logging steps (10, 20) 1.5 s; plain10 (log.extra_signals=false):
    plain 0.5 s, logging 1.0 s. Inside: a logging step's extra 1.0 − 0.5 = 0.5 s = 500 ms, its
    fraction 2.0 − 1.0 = 1.0, ÷ 10 = 0.1 at log_every=10. Between: (9·0.5 + 1.5)/10 = 0.6 s against
    (9·0.5 + 1.0)/10 = 0.55 s a step: 0.6/0.55 − 1 = 1/11."""
    shape = Shape("tiny", 2, 32, 32, 4, heads=2)
    steady = lambda dt, slow, logged=(10, 20): [sum(slow if s in logged else dt for s in range(1, n + 1))  # noqa: E731
                                                for n in range(23)]
    entry = summary_of({"minimal": (None, steady(0.4, 0.4)), "log10": (10, steady(0.5, 1.5)),
                        "off": (10**9, steady(0.5, 0.5)), "log1": (1, steady(1.5, 1.5, logged=range(23))),
                        "plain10": (10, steady(0.5, 1.0))}, shape, peak=1.0, bytes_per_round=[3000])
    extra = entry["instrument_overhead"]["extra_signals"]
    assert extra["inside"] == pytest.approx({"logging_step_extra_ms": 500.0, "log_every_10": 0.1})
    assert extra["between_log_every_10"] == pytest.approx((1 / 11, 1 / 11, 1 / 11))


def test_event_bytes_are_counted_per_step_and_add_up_to_the_file(tmp_path):
    """Step 9 writes three scalars with tags as long as step 7's one: three times its bytes;
    all steps together (with the file's version record) are the whole file."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(tmp_path)
    writer.add_scalar("a/x", 1.0, 7)
    for tag in ("a/y", "a/z", "b/x"):
        writer.add_scalar(tag, 2.0, 9)
    writer.close()
    sizes = event_bytes_by_step(tmp_path)
    assert sorted(sizes) == [0, 7, 9]
    assert sizes[9] == 3 * sizes[7]
    assert sum(sizes.values()) == sum(p.stat().st_size for p in tmp_path.glob("events.out.tfevents.*"))


def test_the_deep_shape_is_chosen_by_name_and_is_not_in_the_default_set():
    known, shapes = select_shapes("deep", [])
    (deep,) = shapes
    assert (deep.layers, deep.d_model, deep.seq_len, deep.batch_size, deep.placement) == (1000, 32, 32, 8, "deepnorm")
    assert deep.tokens_per_step == 256
    # N = 1000·12·32² + 256·32 = 12,296,192; 6·N + 12·1000·32·32 = 86,065,152
    assert deep.flops_per_token() == 86_065_152
    assert "deep" not in DEFAULT_ONLY.split(",")
    assert [s.name for s in select_shapes(DEFAULT_ONLY, [])[1]] == ["A", "B", "C"]
    from normexp.config.compose import compose_config

    cfg = compose_config(deep.overrides())  # what the bench's normexp runs train: no model is built here
    assert (cfg.layers, cfg.d_model, cfg.seq_len, cfg.batch_size, cfg.placement.name) == (1000, 32, 32, 8, "deepnorm")
    _, mixed = select_shapes("A,deep,tiny", ["tiny=2x32,32,4"])
    assert [s.name for s in mixed] == ["A", "deep", "tiny"]


def test_a_good_shape_is_parsed_as_written():
    _, (s,) = select_shapes("wide", ["wide=12x96,48,8"])
    assert (s.name, s.layers, s.d_model, s.seq_len, s.batch_size, s.heads, s.placement) == ("wide", 12, 96, 48, 8, 4, None)
    assert s.tokens_per_step == 48 * 8


def test_the_bench_environment_is_undone_on_the_way_out(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMEXP_CACHE", "/users/cache")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    threads, level = torch.get_num_threads(), logging.getLogger("normexp").level
    with pytest.raises(RuntimeError), bench_environment(threads + 1, tmp_path / "cache"):
        assert os.environ["NORMEXP_CACHE"] == str(tmp_path / "cache") and os.environ["HF_HUB_OFFLINE"] == "1"
        assert torch.get_num_threads() == threads + 1
        raise RuntimeError("a measurement failed")
    assert os.environ["NORMEXP_CACHE"] == "/users/cache" and "HF_HUB_OFFLINE" not in os.environ
    assert torch.get_num_threads() == threads and logging.getLogger("normexp").level == level


def test_step_costs_without_a_timed_logging_step_say_so():
    pool = Pool(OFF)
    pool.add([0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 1.0)
    costs = step_costs(pool, {"build": [{"normexp": 1.0, "minimal": 1.0}], "event_bytes": [None]}, 50)
    assert costs["logging_step"] is None and costs["event_bytes_per_logging_step"] is None
    assert costs["s_per_step_at_default_log_every"] == pytest.approx(1.0)


@pytest.mark.slow
def test_bench_runs_end_to_end_on_a_tiny_shape(tmp_path, cli_env):
    """scripts/bench.py, as a user runs it, at the fewest steps allowed: the table and the
    JSON hold every run, the build times and the TensorBoard bytes of a logging step."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--only", "tiny", "--shape", "tiny=2x32,32,4",
         "--instruments", "tiny", "--steps", "6", "--rounds", "1", "--threads", "1", "--peak-size", "512",
         "--json", str(out)],
        env=cli_env, capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "6·N + 12·L·T·d" in proc.stdout and "TB/logging step" in proc.stdout
    report = json.loads(out.read_text())
    entry = report["shapes"]["tiny"]
    assert set(entry["runs"]) == {"minimal", "log10", "off", "log1", "plain10"}
    assert all(row["steps_timed"] == 2 for row in entry["runs"].values())  # steps 3 and 4 of 0..5
    costs = entry["costs"]
    assert costs["build_s"]["normexp"] > 0 and costs["build_s"]["minimal"] > 0
    assert costs["logging_step"]["logged_s"] > 0 and costs["event_bytes_per_logging_step"] > 0
    assert set(entry["instrument_overhead"]) >= {"log_every_10", "log_every_1", "extra_signals"}
    assert "of which log.extra_signals" in proc.stdout


def test_bad_bench_arguments_get_one_line_and_exit_2(cli_env):
    proc = run_cli(["bench", "--only", "A,Z"], cli_env, check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown shape Z" in lines[0] and "deep" in lines[0] and "--shape" in lines[0], proc.stderr


def test_the_help_lists_the_options(cli_env):
    out = run_cli(["bench", "--help"], cli_env).stdout
    for flag in ("--only", "--shape", "--instruments", "--steps", "--rounds", "--peak-size", "--threads",
                 "--compile", "--sweep", "--sweep-shape", "--sweep-steps", "--startup", "--profiles", "--packs", "--all", "--json"):
        assert flag in out, flag


@pytest.mark.parametrize("args, message", [
    (["--rounds", "0"], "--rounds 0: must be at least 1"),
    (["--threads", "-1"], "--threads -1: must be at least 1"),
    (["--steps", "5"], "--steps 5: use at least 6"),
    (["--only", "deep", "--steps", "5"], "--steps 5: use at least 6"),
    (["--rounds", "abc"], "Invalid value for '--rounds'"),
    (["--bogus"], "No such option: --bogus"),
    (["--only", "t", "--shape", "t=2x33,32,4"], "width 33 must be a multiple of its 2 attention heads"),
    (["--only", "t", "--shape", "t=0x32,32,4"], "layers 0 must be at least 1"),
    (["--only", "t", "--shape", "t=2x32,0,4"], "sequence length 0 must be at least 1"),
    (["--only", "t", "--shape", "t=2x32,99999,4"], "sequence length 99999 is longer"),
    (["--sweep", "--sweep-shape", "Q"], "--sweep-shape Q: unknown"),
    (["--json", "{missing}/bench.json"], "--json {missing}/bench.json: no folder {missing}"),
    (["--json", "{tmp}"], "--json {tmp} is a folder"),
    (["--only", ""], "--only '': names no shape; give some of A, B, C, deep"),
    (["--only", " , "], "--only ' , ': names no shape"),
    (["--instruments", "B,Q"], "--instruments B,Q: unknown shape Q; choose from A, B, C, deep"),
    # issue 59: checked before anything is built (12 TB of matrices, a 300 TB model: beyond any machine's memory)
    (["--peak-size", "1000000"], "--peak-size 1000000: the 1000000×1000000 fp32 matmul holds three matrices, 11175.9 GiB"),
    (["--only", "t", "--shape", "t=100000x4096,16,2"], "shape t: 100000×4096 T16 B2: one training step needs about"),
    (["--only", "t", "--shape", "t=2x32,32,4", "--shape", "t=4x32,32,4"], "--shape t: given more than once"),
])
def test_bad_bench_arguments_are_refused_before_anything_runs(tmp_path, capsys, monkeypatch, args, message):
    """In-process through the Typer app, with every measurement replaced by a tripwire: a bad
    argument must end the bench (one line, exit 2) before the first measurement."""
    from normexp.bench import suite
    from normexp.cli import app

    def tripwire(*_a, **_k):
        raise AssertionError("the bench started measuring")

    for name in ("bench_shapes", "matmul_gflops", "make_corpus", "bench_startup", "bench_environment"):
        monkeypatch.setattr(suite, name, tripwire)
    fill = dict(missing=tmp_path / "missing", tmp=tmp_path)
    with pytest.raises(SystemExit) as exit_:
        app(["bench", *[a.format(**fill) for a in args]], prog_name="normexp")
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("normexp: error: ") and message.format(**fill) in err[0], err


def test_quick_times_the_default_model_at_the_fewest_steps_one_round(monkeypatch):
    """`normexp bench --quick` (through the Typer app, measurements replaced by a recorder):
    the default model C alone (no instrument-overhead runs), min_steps() steps, one round, a 1024² peak."""
    from normexp.bench import suite
    from normexp.bench.loops import min_steps
    from normexp.cli import app

    seen = {}

    def record(shapes, corpus, tokens, steps, rounds, threads, instruments, peak_size, say):
        seen.update(shapes=[s.name for s in shapes], steps=steps, rounds=rounds, instruments=instruments,
                    peak_size=peak_size)
        raise SystemExit(0)

    monkeypatch.setattr(suite, "bench_shapes", record)
    with pytest.raises(SystemExit):
        app(["bench", "--quick"], prog_name="normexp")
    assert seen == {"shapes": ["C"], "steps": min_steps(), "rounds": 1, "instruments": {"none"}, "peak_size": 1024}
    assert min_steps() == 6  # what --quick's help says
