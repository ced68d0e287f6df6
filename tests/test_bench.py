"""The benchmark's baseline model against normexp's, its arithmetic, and one tiny end-to-end
run. No timing is asserted: speed targets are read off the bench's table, not tested."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_cli

from normexp.bench import OFF, MinimalGPT, Pool, Shape, paired_overhead, step_durations
from normexp.model import GPT, ModelConfig

ROOT = Path(__file__).resolve().parents[1]


def normexp_gpt(shape: Shape, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(ModelConfig(vocab_size=shape.vocab_size, seq_len=shape.seq_len, layers=shape.layers,
                           d_model=shape.d_model, heads=shape.heads, mlp_ratio=shape.mlp_ratio,
                           norm="layer", placement="pre"))


@pytest.mark.parametrize("shape", [Shape("s", 3, 32, 16, 4, heads=4), Shape("t", 2, 48, 24, 3, heads=2, mlp_ratio=2)])
def test_minimal_gpt_computes_normexps_loss_and_gradients(shape):
    """Two independently written networks, one set of weights: same loss, same gradients.
    The init is perturbed so that biases and norm gains are not the trivial 0 and 1."""
    gpt = normexp_gpt(shape)
    with torch.no_grad():
        for p in gpt.parameters():
            p.add_(0.05 * torch.randn_like(p))
    mini = MinimalGPT(shape).copy_from(gpt)
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, shape.vocab_size, (shape.batch_size, shape.seq_len), generator=gen)
    y = torch.randint(0, shape.vocab_size, (shape.batch_size, shape.seq_len), generator=gen)

    _, loss = gpt(x, y)
    ref = mini(x, y)
    assert loss.item() == pytest.approx(ref.item(), rel=1e-6)
    loss.backward()
    ref.backward()
    pairs = [(gpt.tok_emb.weight, mini.tok.weight), (gpt.final_norm.weight, mini.ln_f.weight)]
    for theirs, mine in zip(gpt.blocks, mini.blocks):
        pairs += [(theirs.attn.sublayer.qkv.weight, mine.qkv.weight), (theirs.attn.norm.bias, mine.ln1.bias),
                  (theirs.mlp.sublayer.fc_out.weight, mine.fc2.weight), (theirs.mlp.norm.weight, mine.ln2.weight)]
    for a, b in pairs:
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-6)


def test_flop_count_counts_every_matmul_weight_once():
    """N in 6·N: every nn.Linear weight of the hand-written model plus the tied head (V×d)."""
    shape = Shape("s", 5, 40, 16, 2, heads=4, mlp_ratio=3, vocab_size=100)
    mini = MinimalGPT(shape)
    linear = sum(m.weight.numel() for m in mini.modules() if isinstance(m, torch.nn.Linear))
    assert shape.matmul_params() == linear + 100 * 40
    assert shape.flops_per_token() == 6 * (linear + 4000) + 12 * 5 * 16 * 40


def test_pool_amortises_the_logging_step_and_keeps_the_best_round():
    # steps 3..11 of a log_every=4 run: steps 4 and 8 log (3 s), the others 1 s; step 12 is the last
    stamps = [0.0, 1.0, 2.0, 3.0, 6.0, 7.0, 8.0, 9.0, 12.0, 13.0, 14.0, 15.0, 99.0]
    plain, logged = step_durations(stamps, 4)
    assert logged == [3.0, 3.0]
    assert plain == [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    pool = Pool(4)
    pool.add([2 * t for t in stamps], rss_mb=1.0)  # a round at half speed (a busy machine)
    pool.add(stamps, rss_mb=1.0)
    assert pool.seconds_per_step() == pytest.approx((3 * 1.0 + 3.0) / 4)
    # extra seconds 4 (busy round) and 2, i.e. twice a plain step in both: medians 3 s and +200 %
    assert pool.logged_extra() == pytest.approx((3.0, 2.0))
    assert pool.steps_timed == 18
    off = Pool(OFF)  # no logging step: all nine durations are plain, the median ignores the two slow ones
    off.add(stamps, rss_mb=1.0)
    assert off.rounds == [(plain[:1] + [3.0] + plain[1:4] + [3.0] + plain[4:], [])]
    assert off.seconds_per_step() == pytest.approx(1.0)
    off.add([2 * t for t in stamps], rss_mb=1.0)
    # pool's rounds: busy 3.0 s then calm 1.5 s; off's: calm 1.0 s then busy 2.0 s → ratios 3.0 and 0.75
    assert pool.round_seconds() == pytest.approx([3.0, 1.5])
    assert paired_overhead(pool, off) == pytest.approx((0.875, -0.25, 2.0))


def test_bench_runs_end_to_end_on_a_tiny_shape(tmp_path, cli_env):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "bench.py"), "--only", "tiny", "--shape", "tiny=2x32,32,4",
         "--instruments", "tiny", "--steps", "12", "--rounds", "1", "--threads", "1", "--peak-size", "512",
         "--json", str(out)],
        env=cli_env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "6·N + 12·L·T·d" in proc.stdout
    report = json.loads(out.read_text())
    entry = report["shapes"]["tiny"]
    assert set(entry["runs"]) == {"minimal", "log10", "off", "log1"}
    tokens = 4 * 32
    base = entry["runs"]["minimal"]["tokens_per_s"]
    for row in entry["runs"].values():
        assert row["tokens_per_s"] == pytest.approx(tokens / (row["ms_per_step"] / 1e3))
        assert row["vs_minimal"] == pytest.approx(row["tokens_per_s"] / base)
        flops = entry["flops_per_token"] * tokens
        assert row["mfu"] == pytest.approx(flops * row["tokens_per_s"] / tokens / (report["matmul_peak_gflops"] * 1e9))
        assert row["peak_rss_mb"] > 0 and row["steps_timed"] > 0
    assert set(entry["instrument_overhead"]) >= {"log_every_10", "log_every_1"}


def test_bad_bench_arguments_get_one_line_and_exit_2(cli_env):
    proc = run_cli(["bench", "--only", "A,Z"], cli_env, check=False)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown shape Z" in lines[0] and "--shape" in lines[0], proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--rounds", "0"], "--rounds 0: must be at least 1"),
    (["--threads", "-1"], "--threads -1: must be at least 1"),
    (["--rounds", "abc"], "argument --rounds: invalid int value: 'abc'"),
    (["--only", "t", "--shape", "t=2x33,32,4"], "width 33 must be a multiple of its 2 attention heads"),
    (["--only", "t", "--shape", "t=0x32,32,4"], "layers 0 must be at least 1"),
    (["--only", "t", "--shape", "t=2x32,0,4"], "sequence length 0 must be at least 1"),
    (["--only", "t", "--shape", "t=2x32,99999,4"], "sequence length 99999 is longer"),
    (["--json", "{missing}/bench.json"], "--json {missing}/bench.json: no folder {missing}"),
    (["--json", "{tmp}"], "--json {tmp} is a folder"),
])
def test_bad_bench_arguments_are_refused_before_anything_runs(tmp_path, capsys, monkeypatch, args, message):
    """In-process, with every measurement replaced by a tripwire: a bad argument must end the
    bench (one line, exit 2) before the first measurement, so nothing measured is lost."""
    from normexp import bench

    def tripwire(*_a, **_k):
        raise AssertionError("the bench started measuring")

    for name in ("bench_shapes", "matmul_gflops", "make_corpus", "bench_startup"):
        monkeypatch.setattr(bench, name, tripwire)
    fill = dict(missing=tmp_path / "missing", tmp=tmp_path)
    with pytest.raises(SystemExit) as exit_:
        bench.run([a.format(**fill) for a in args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("normexp: error: ") and message.format(**fill) in err[0], err


def test_a_good_shape_is_parsed_as_written():
    from normexp.bench import parse_shape

    s = parse_shape("deep=12x96,48,8")
    assert (s.name, s.layers, s.d_model, s.seq_len, s.batch_size, s.heads) == ("deep", 12, 96, 48, 8, 4)
    assert s.d_model % s.heads == 0 and s.tokens_per_step == 48 * 8
