"""`normexp probe` against Xiong et al. 2020 (§3, Theorem 1, Fig. 3) at initialisation, on
small depths and fixed seeds, and its outputs against a direct computation."""

import json
import math
import re

import numpy as np
import pytest
import torch

from conftest import make_corpus, run_cli
from normexp.data import get_batch
from normexp.model import GPT, ModelConfig
from normexp.probe import ProbeError, ProbeSettings, mean_profiles, parse_list, probe_tokens, run_probe

DEPTHS = (4, 8, 16)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """Post-LN and Pre-LN at depths 4, 8, 16; 3 seeds × 2 batches of 8×64 bytes each."""
    folder = tmp_path_factory.mktemp("probe")
    corpus = make_corpus(folder / "corpus.txt")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMEXP_CACHE", str(folder / "cache"))
        tokens, vocab, _ = probe_tokens(corpus)
    records = run_probe(ProbeSettings(placements=("post", "pre"), depths=DEPTHS, seeds=3, batches=2),
                        tokens, vocab, progress=False)
    return mean_profiles(records, "grad_norm_mlp_out"), records


def last(grads, placement, depth):
    return grads[(placement, depth)][-1]


def test_post_ln_last_layer_gradient_does_not_shrink_with_depth(study):
    """Theorem 1: for Post-LN the last W₂ gradient is O(d·√ln d), independent of L."""
    grads, _ = study
    ratio = last(grads, "post", 16) / last(grads, "post", 4)
    assert 0.75 < ratio < 1.5, ratio


def test_pre_ln_last_layer_gradient_shrinks_like_inverse_sqrt_depth(study):
    """Theorem 1: for Pre-LN the last W₂ gradient is O(d·√(ln d / L)): ×1/2 from L=4 to L=16."""
    grads, _ = study
    values = [last(grads, "pre", d) for d in DEPTHS]
    assert values[0] > values[1] > values[2], values
    ratio = values[2] / values[0]
    assert 0.5 * 0.7 < ratio < 0.5 / 0.7, ratio  # 1/√(16/4) = 0.5, within 30 %


def test_post_ln_last_layer_gradient_exceeds_pre_ln_and_the_gap_grows_with_depth(study):
    """The core of Theorem 1: near the output Post-LN's gradient is larger, by a factor that
    grows like √L."""
    grads, _ = study
    gaps = [last(grads, "post", d) / last(grads, "pre", d) for d in DEPTHS]
    assert all(g > 1 for g in gaps), gaps
    assert gaps[0] < gaps[1] < gaps[2], gaps


def test_pre_ln_hidden_rms_grows_with_layer_index_and_its_square_linearly(study):
    """Xiong et al. (Lemma 2): in Pre-LN the residual stream's squared norm grows linearly
    with depth, since each block adds a roughly independent term of similar size."""
    _, records = study
    for depth in DEPTHS:
        rms = mean_profiles(records, "hidden_rms")[("pre", depth)]  # an expectation: mean over seeds
        assert np.all(np.diff(rms) > 0), (depth, rms)
        r = np.corrcoef(np.arange(depth), rms ** 2)[0, 1]
        assert r ** 2 > 0.97, (depth, r ** 2)


@pytest.mark.parametrize("depth", [
    pytest.param(4, marks=pytest.mark.xfail(strict=True, reason=(
        "not reproduced at this depth: this decoder-only Post-LN has a flat, slightly falling W2-gradient "
        "profile at L<=8 (last/first 0.66 at L=4, 0.72 at L=8 here; 0.88 and 0.83 over 16 seeds on Shakespeare). "
        "The rise towards the output appears from L=16 on"))),
    pytest.param(8, marks=pytest.mark.xfail(strict=True, reason="not reproduced at L=8; see the L=4 case")),
    16,
])
def test_post_ln_last_layer_gradient_exceeds_first(study, depth):
    """Fig. 3: in Post-LN the W₂ gradient is largest near the output."""
    grads, _ = study
    g = grads[("post", depth)]
    assert g[-1] > g[0], g


@pytest.mark.parametrize("depth", [
    pytest.param(d, marks=pytest.mark.xfail(strict=True, reason=(
        "not reproduced: Pre-LN's W2 gradient falls with the layer index (first/last about 3x at L=4, "
        "5x at L=16). The N(0, 0.02) embeddings without sqrt(d) scaling make the stream entering the "
        "early blocks small, so their LayerNorm Jacobians (~1/rms) amplify what reaches the first "
        "blocks; with input RMS 1 the spread is 1.8x at L=4 but still grows with depth")))
    for d in DEPTHS
])
def test_pre_ln_per_layer_gradients_roughly_equal(study, depth):
    """Fig. 3: in Pre-LN the W₂ gradient is about the same in every layer (within 2x)."""
    grads, _ = study
    g = grads[("pre", depth)]
    assert g.max() / g.min() < 2.0, g


# ------------------------------------------------------------------------------- CLI

def direct_measurement(placement, layers, seed, tokens, batches=2, batch_size=8, seq_len=64, d_model=64):
    """W₂ gradient norms averaged over batches, computed here with torch.autograd.grad."""
    torch.manual_seed(seed)
    model = GPT(ModelConfig(vocab_size=256, seq_len=seq_len, layers=layers, d_model=d_model, heads=4,
                            placement=placement))
    gen = torch.Generator().manual_seed(seed)
    total = np.zeros(layers)
    for _ in range(batches):
        x, y = get_batch(tokens, batch_size, seq_len, gen)
        _, loss = model(x, y)
        grads = torch.autograd.grad(loss, [b.mlp.sublayer.fc_out.weight for b in model.blocks])
        total += np.array([math.sqrt(float((g.double() ** 2).sum())) for g in grads])
    return total / batches


def test_probe_cli_writes_table_json_and_figures(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "corpus.txt")
    out = tmp_path / "out"
    proc = run_cli(["probe", "--placements", "post,pre", "--depths", "2,3", "--seeds", "2", "--batches", "2",
                    "--data-file", str(corpus), "--out", str(out)], cli_env, timeout=120)
    records = json.loads((out / "probe.json").read_text())
    assert len(records) == 2 * (2 + 3) * 2  # placements × Σ layers × seeds
    assert all(set(r) == {"placement", "norm", "layers", "layer", "seed", "grad_norm_mlp_out", "hidden_rms"}
               for r in records)
    text = corpus.read_bytes()
    text += b"" if text.endswith(b"\n") else b"\n"             # data=text ends each file with a newline
    tokens = np.frombuffer(text, dtype=np.uint8)                  # byte tokenizer = UTF-8 bytes (ASCII here)
    tokens = tokens[: len(tokens) - round(len(tokens) * 0.1)]    # and trains on the first 90 %
    for placement, layers, seed in [("post", 3, 1), ("pre", 2, 0)]:
        got = [r["grad_norm_mlp_out"] for r in records
               if (r["placement"], r["layers"], r["seed"]) == (placement, layers, seed)]
        np.testing.assert_allclose(got, direct_measurement(placement, layers, seed, tokens), rtol=1e-5)
    # Post-LN with LayerNorm (γ=1, β=0) leaves every token at mean 0, variance σ²/(σ²+ε): RMS ≈ 1
    post_rms = [r["hidden_rms"] for r in records if r["placement"] == "post"]
    np.testing.assert_allclose(post_rms, 1.0, atol=1e-3)
    table = [ln.split() for ln in proc.stdout.splitlines() if ln.split()[:1] in (["post"], ["pre"])]
    assert [(row[0], row[1]) for row in table] == [("post", "2"), ("post", "3"), ("pre", "2"), ("pre", "3")]
    for name in ("probe.png", "probe_last_layer.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("settings, message", [
    (dict(placements=("post", "nope")), "unknown placement 'nope'"),
    (dict(depths=(4, 0)), "--depths 4,0: give positive layer counts"),
    (dict(d_model=30, heads=4), "--heads 4 must divide --d-model 30"),
    (dict(norm="group"), "--norm group: unknown norm"),
    (dict(seeds=0), "--seeds 0: must be a positive integer"),
])
def test_probe_settings_are_checked(settings, message):
    with pytest.raises(ProbeError, match=re.escape(message)):
        ProbeSettings(**settings).check()


def test_probe_list_options_are_parsed():
    assert parse_list("post, pre,", str, "--placements") == ("post", "pre")
    assert parse_list("6,12", int, "--depths") == (6, 12)
    with pytest.raises(ProbeError, match=re.escape("--depths 4,x: expected a comma-separated list of ints")):
        parse_list("4,x", int, "--depths")


@pytest.mark.parametrize("args, message", [
    (["--placements", "post,nope"], "unknown placement 'nope'"),
    (["--data-file", "/no/such/file.txt"], "--data-file /no/such/file.txt: no such file"),
])
def test_probe_bad_input_is_one_line(cli_env, args, message):
    proc = run_cli(["probe", *args], cli_env, check=False, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
