"""`normexp probe` against Xiong et al. 2020 (§3, Lemma 2, Theorem 1, Fig. 3) at
initialisation, and its outputs against a direct computation.

The study: Post-LN and Pre-LN at depths 4, 8, 16, 24; d_model 32, 2 heads, 8×32 tokens of
the `make_corpus` text; 12 seeds × 1 batch, averaged over seeds. Thresholds come from 24 seeds
on this text and on Tiny Shakespeare: every assertion held for ≥ 99.8 % of 400 random
12-seed subsets of them (≥ 99 % of 8-seed subsets), and each one fails when Post-LN and Pre-LN
are swapped (`test_every_trend_fails_with_post_and_pre_swapped`). Values quoted in the
docstrings are this study's (seeds 0–11).

Each trend test takes the two placements as arguments with defaults — pytest treats
defaulted arguments as plain parameters, not fixtures — so the swap test can call it
with the roles exchanged.
"""

import json
import math
import re

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from conftest import SAFETY_NET_S, make_corpus, run_cli
from normexp.cli import app
from normexp.data.batches import get_batch
from normexp.model import GPT, ModelConfig
from normexp.analysis.probe import fitted_ratio, format_table, mean_profiles
from normexp.train.probe import ProbeError, ProbeSettings, parse_list, probe_tokens, run_probe

DEPTHS = (4, 8, 16, 24)
STUDY = ProbeSettings(placements=("post", "pre"), depths=DEPTHS, seeds=12, batches=1,
                      d_model=32, heads=2, seq_len=32, batch_size=8)


def run_study(tmp_path_factory, settings: ProbeSettings) -> list[dict]:
    """The probe's records for `settings` on the make_corpus text."""
    folder = tmp_path_factory.mktemp("probe")
    corpus = make_corpus(folder / "corpus.txt")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NORMEXP_CACHE", str(folder / "cache"))
        tokens, vocab, _ = probe_tokens(corpus)
    return run_probe(settings, tokens, vocab, progress=False)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """{"grad": {(placement, layers): per-layer W₂ gradient}, "rms": ... hidden RMS}, seed means."""
    records = run_study(tmp_path_factory, STUDY)
    return {"grad": mean_profiles(records, "grad_norm_mlp_out"), "rms": mean_profiles(records, "hidden_rms")}


def last(study, placement, depth):
    return study["grad"][(placement, depth)][-1]


# ------------------------------------------------------------ Theorem 1: the last layer

def test_post_ln_last_layer_gradient_does_not_shrink_with_depth(study, post="post", pre="pre"):
    """Theorem 1: Post-LN's last-layer W₂ gradient is O(d·√ln d), independent of depth L.
    Here it is 0.68, 0.76, 0.86, 0.78 at L = 4, 8, 16, 24: relative to L=4 within [0.85, 2]
    (2 < √(24/4) = 2.45, so it does not grow like √L either). Reproduced."""
    ratios = {d: last(study, post, d) / last(study, post, DEPTHS[0]) for d in DEPTHS[1:]}
    assert all(0.85 < r < 2.0 for r in ratios.values()), ratios


def test_pre_ln_last_layer_gradient_shrinks_like_inverse_sqrt_depth(study, post="post", pre="pre"):
    """Theorem 1: Pre-LN's last-layer W₂ gradient is O(d·√(ln d / L)), ~1/√L.
    Here 0.32, 0.27, 0.23, 0.18 at L = 4, 8, 16, 24: it falls at every step, and from L=8
    to 24 by 0.64, i.e. as L^-0.41 (1/√3 = 0.58; asserted within ×0.7–×1.4 of it, i.e. an
    exponent between −0.8 and −0.2). Deviation: from L=4 to 8 it falls only by 0.86
    (1/√2 = 0.71): ‖x_L‖ is not yet ∝ √L — the stream enters with RMS √2 (token + position
    embeddings, each of unit scale) and ‖x_l‖²/d ≈ 2.4 + 0.6·l over the first blocks, so the
    final RMS grows only ×1.28 from L=4 to 8. At d=64 on Tiny Shakespeare the exponent is
    about −0.33 (6 → 48 layers)."""
    values = [last(study, pre, d) for d in DEPTHS]
    assert all(np.diff(values) < 0), values
    deep = last(study, pre, 24) / last(study, pre, 8)
    assert 0.7 < deep / math.sqrt(8 / 24) < 1.4, deep


def test_post_ln_last_layer_exceeds_pre_ln_by_a_factor_growing_with_depth(study, post="post", pre="pre"):
    """Theorem 1, both bounds together: near the output Post-LN's gradient is larger than
    Pre-LN's, by a factor growing like √L. Here 2.1, 2.8, 3.8, 4.5 at L = 4, 8, 16, 24
    (×2.1 from 4 to 24; √6 = 2.45). Asserted: above 1.5 and rising at every depth."""
    gaps = [last(study, post, d) / last(study, pre, d) for d in DEPTHS]
    assert min(gaps) > 1.5 and all(np.diff(gaps) > 0), gaps


# ---------------------------------------------------------------- Lemma 2: the stream

def test_pre_ln_hidden_rms_grows_with_layer_index_and_its_square_linearly(study, post="post", pre="pre"):
    """Lemma 2: in Pre-LN the residual stream's squared norm grows about linearly with the
    layer index, each block adding a roughly independent term. Here RMS 1.6 → 2.1 (L=4) …
    1.6 → 4.8 (L=24), r² of a line through RMS² ≥ 0.98. Reproduced (slightly faster than
    linear at L=24: the slope of RMS² rises from 0.6 to 0.9 per block)."""
    for depth in DEPTHS:
        rms = study["rms"][(pre, depth)]
        assert np.all(np.diff(rms) > 0) and rms[-1] / rms[0] > 1.2, (depth, rms)
        r = np.corrcoef(np.arange(depth), rms ** 2)[0, 1]
        assert r ** 2 > 0.95, (depth, r ** 2)


# --------------------------------------------------------- Fig. 3: the per-layer profile

def test_pre_ln_gradient_falls_with_layer_index_as_one_over_hidden_rms(study, post="post", pre="pre"):
    """Fig. 3 shows Pre-LN's W₂ gradients about equal in every layer. Not reproduced: here they
    fall with the layer index — fitted last/first 0.54, 0.48, 0.39 at L = 8, 16, 24 (the
    `fit` column; raw max/min 1.9–3.0). What holds is Theorem 1's mechanism layer by layer:
    the gradient reaching block l is ∝ 1/‖x_l‖ (each block's LayerNorm divides by it), and
    ‖x_l‖ grows with l (Lemma 2); grad × hidden RMS is flat (fitted 0.89–1.13).
    Asserted at L ≥ 8: fitted last/first of grad < 0.8, of grad × RMS within [0.67, 1.5]."""
    for depth in DEPTHS[1:]:
        g, h = study["grad"][(pre, depth)], study["rms"][(pre, depth)]
        assert fitted_ratio(g) < 0.8, (depth, g)
        assert 0.67 < fitted_ratio(g * h) < 1.5, (depth, g * h)


def test_post_ln_profile_leans_towards_the_output_more_than_pre_ln(study, post="post", pre="pre"):
    """Fig. 3 shows Post-LN's W₂ gradient rising towards the output. Only the contrast with
    Pre-LN is reproduced: Post-LN's fitted last/first (0.85, 1.31, 1.36 at L = 8, 16, 24)
    exceeds Pre-LN's (0.54, 0.48, 0.39) by ×1.6, ×2.7, ×3.5; asserted > ×1.15 at L ≥ 8.
    Post-LN's own rise is not robust here: its profile is a multiplicative random walk over
    layers (per seed, last/first spans ×0.6–×3.5 at L=24 in this study, ×0.2–×6 over 24
    seeds at L=16–24), so the seed-mean profile is flat to ±40 %: fit 0.85–1.36 here; 0.91
    and 0.65 at L = 32, 48 over 48 seeds (d=32); 0.84–1.14 at L=24, d=64."""
    for depth in DEPTHS[1:]:
        lean = fitted_ratio(study["grad"][(post, depth)]) / fitted_ratio(study["grad"][(pre, depth)])
        assert lean > 1.15, (depth, lean)


TREND_TESTS = [test_post_ln_last_layer_gradient_does_not_shrink_with_depth,
               test_pre_ln_last_layer_gradient_shrinks_like_inverse_sqrt_depth,
               test_post_ln_last_layer_exceeds_pre_ln_by_a_factor_growing_with_depth,
               test_pre_ln_hidden_rms_grows_with_layer_index_and_its_square_linearly,
               test_pre_ln_gradient_falls_with_layer_index_as_one_over_hidden_rms,
               test_post_ln_profile_leans_towards_the_output_more_than_pre_ln]


# ------------------------------------------- Fig. 3 itself: the encoder-decoder model

# Xiong et al. measure Fig. 3 on an encoder-decoder Transformer. `--encoder-decoder` probes
# its decoder (self-attention, cross-attention to the encoder's output, MLP per block).
# Thresholds: 0.5 %-99.5 % quantiles of 400 random 8-seed subsets of 40 seeds on this text.
ED_DEPTHS = (3, 6, 12)
ED_STUDY = ProbeSettings(placements=("post", "pre"), depths=ED_DEPTHS, seeds=8, batches=1, d_model=32, heads=2,
                         seq_len=32, batch_size=8, encoder_decoder=True)


@pytest.fixture(scope="module")
def ed_study(tmp_path_factory):
    records = run_study(tmp_path_factory, ED_STUDY)
    per_seed = {}
    for r in records:
        per_seed.setdefault((r["placement"], r["layers"], r["seed"]), {})[r["layer"]] = r["grad_norm_mlp_out"]
    assert {r["model"] for r in records} == {"encoder-decoder"}
    return {"grad": mean_profiles(records, "grad_norm_mlp_out"), "rms": mean_profiles(records, "hidden_rms"),
            "per_seed": per_seed}


def test_ed_post_ln_gradient_grows_towards_the_output(ed_study, post="post", pre="pre"):
    """Fig. 3, Post-LN: W₂'s gradient rises with layer index. Seed-mean last/first 1.4, 4.3,
    39 at L = 3, 6, 12 (asserted > 1.1, 2.5, 20), and at L = 6 last > first for every seed
    (the least of 40 seeds: ×1.3)."""
    g = ed_study["grad"]
    for depth, least in zip(ED_DEPTHS, (1.1, 2.5, 20.0)):
        assert g[(post, depth)][-1] / g[(post, depth)][0] > least, (depth, g[(post, depth)])
    for seed in range(ED_STUDY.seeds):
        profile = ed_study["per_seed"][(post, 6, seed)]
        assert profile[5] > profile[0], (seed, profile)


def test_ed_post_ln_last_layer_gradient_does_not_shrink_with_depth(ed_study, post="post", pre="pre"):
    """Theorem 1 in the decoder: Post-LN's last-layer gradient relative to L=3 is 1.14, 1.19
    at L = 6, 12 (asserted within [0.85, 1.5])."""
    g = ed_study["grad"]
    for depth in ED_DEPTHS[1:]:
        assert 0.85 < g[(post, depth)][-1] / g[(post, ED_DEPTHS[0])][-1] < 1.5, depth


def test_ed_pre_ln_gradients_are_roughly_equal_across_layers(ed_study, post="post", pre="pre"):
    """Fig. 3, Pre-LN: about the same gradient in every layer. max/min over layers 1.2, 1.37,
    1.58 at L = 3, 6, 12 (asserted < 1.4, 1.7, 2.0), against Post-LN's 1.4, 4.3, 39:
    Post-LN's spread is > 1.6× Pre-LN's at L = 6 and > 12× at L = 12."""
    g = ed_study["grad"]
    spread = {k: v.max() / v.min() for k, v in g.items()}
    for depth, most in zip(ED_DEPTHS, (1.4, 1.7, 2.0)):
        assert spread[(pre, depth)] < most, (depth, g[(pre, depth)])
    assert spread[(post, 6)] > 1.6 * spread[(pre, 6)]
    assert spread[(post, 12)] > 12 * spread[(pre, 12)]


def test_ed_pre_ln_last_layer_shrinks_with_depth(ed_study, post="post", pre="pre"):
    """Theorem 1, Pre-LN: the last layer's gradient falls with depth; L=12 against L=3 is
    0.65 (1/√4 = 0.5 asymptotically; asserted < 0.78, and falling at each step)."""
    last = [ed_study["grad"][(pre, d)][-1] for d in ED_DEPTHS]
    assert last[0] > last[1] > last[2] and last[2] / last[0] < 0.78, last


def test_ed_pre_ln_hidden_rms_grows_with_layer_index(ed_study, post="post", pre="pre"):
    for depth in ED_DEPTHS:
        h = ed_study["rms"][(pre, depth)]
        assert np.all(np.diff(h) > 0) and h[-1] / h[0] > 1.2, (depth, h)


ED_TREND_TESTS = [test_ed_post_ln_gradient_grows_towards_the_output,
                  test_ed_post_ln_last_layer_gradient_does_not_shrink_with_depth,
                  test_ed_pre_ln_gradients_are_roughly_equal_across_layers,
                  test_ed_pre_ln_last_layer_shrinks_with_depth,
                  test_ed_pre_ln_hidden_rms_grows_with_layer_index]


@pytest.mark.parametrize("trend", TREND_TESTS + ED_TREND_TESTS, ids=lambda t: t.__name__.removeprefix("test_"))
def test_every_trend_fails_with_post_and_pre_swapped(request, trend):
    """Each trend separates the placements: with their roles exchanged it must fail."""
    data = request.getfixturevalue("ed_study" if trend in ED_TREND_TESTS else "study")
    with pytest.raises(AssertionError):
        trend(data, post="pre", pre="post")


def test_encoder_decoder_model_is_the_sum_of_its_parts():
    """The probe's encoder-decoder against a by-hand forward: the encoder attends both ways
    (its output at position 0 depends on later source tokens), the decoder's loss equals
    one computed here from the same modules with explicit cross-attention."""
    from normexp.train.instruments import recording
    from normexp.model.encoder_decoder import EncoderDecoder

    torch.manual_seed(0)
    cfg = ModelConfig(vocab_size=50, seq_len=8, layers=2, d_model=16, heads=2, placement="post")
    model = EncoderDecoder(cfg)
    src, x, y = (torch.randint(0, 50, (3, 8)) for _ in range(3))
    with torch.no_grad():
        memory = model.encoder.hidden(src)
        changed = src.clone()
        changed[:, -1] = (changed[:, -1] + 1) % 50
        assert not torch.allclose(model.encoder.hidden(changed)[:, 0], memory[:, 0])  # not causal
        with recording(model.decoder, only=("block",)) as trace:  # how probe_model reads the stream
            _, loss = model(src, x, y)
        streams = trace["block"]
        dec = model.decoder
        h = (dec.tok_emb(x) + dec.pos_emb(torch.arange(8))) * math.sqrt(16)
        for block in dec.blocks:
            cross = block.cross
            h, _ = block.attn(h)
            ca = cross.sublayer
            q = ca.q(h).view(3, 8, 2, 8).transpose(1, 2)
            k, v = ca.kv(memory).view(3, 8, 2, 2, 8).permute(2, 0, 3, 1, 4)
            att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8), dim=-1)
            h = cross.norm(h + ca.proj((att @ v).transpose(1, 2).reshape(3, 8, 16)))  # Post-LN
            h, _ = block.mlp(h)
        expected = torch.nn.functional.cross_entropy((h @ dec.tok_emb.weight.t()).reshape(-1, 50), y.reshape(-1))
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert torch.allclose(streams[-1], h, atol=1e-5)


# ----------------------------------------------------------------------- the summaries

def test_fitted_ratio_is_last_over_first_for_a_geometric_profile():
    profile = 0.3 * 1.1 ** np.arange(9)                     # exactly geometric: fit = last/first
    assert fitted_ratio(profile) == pytest.approx(1.1 ** 8, rel=1e-12)
    noisy = profile * np.array([1, 1.2, 0.8, 1, 1, 1, 1, 1, 1])   # noise in the middle only
    assert 1.1 ** 8 / 1.2 < fitted_ratio(noisy) < 1.1 ** 8 * 1.2
    assert fitted_ratio(np.array([0.5])) == 1.0


def test_table_shows_the_trend_columns():
    """By hand: grads post (1, 2), pre (4, 1) at L=2 and post (1, 2, 1, 2) at L=4; hidden RMS 1."""
    records = [{"placement": p, "norm": "layer", "layers": L, "layer": i, "seed": 0,
                "grad_norm_mlp_out": g, "hidden_rms": 1.0}
               for p, L, grads in [("post", 2, (1, 2)), ("pre", 2, (4, 1)), ("post", 4, (1, 2, 1, 2))]
               for i, g in enumerate(grads)]
    lines = format_table(records).splitlines()
    assert lines[0].split() == ["placement", "layers", "grad", "last", "last·√L", "last/first", "fit",
                                "max/min", "rms", "first", "rms", "last", "fit", "g·rms"]
    rows = {(r[0], r[1]): r[2:] for r in (ln.split() for ln in lines[2:5])}
    assert rows[("post", "2")] == ["2", f"{2 * math.sqrt(2):.3g}", "2.00", "2.00", "2.00", "1.00", "1.00", "2.00"]
    assert rows[("pre", "2")] == ["1", f"{math.sqrt(2):.3g}", "0.25", "0.25", "4.00", "1.00", "1.00", "0.25"]
    # log(1, 2, 1, 2) against (0, 1, 2, 3): least-squares slope ln2/5, so fit = 2^(3/5), last/first 2
    assert rows[("post", "4")][2:4] == ["2.00", f"{2 ** 0.6:.2f}"]
    by_depth = [ln.split() for ln in lines[lines.index("") + 2:]]
    assert by_depth[0] == ["layers", "post", "pre", "post/pre"]
    assert by_depth[2:] == [["2", "2", "1", "2.00"], ["4", "2", "-", "-"]]


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
                    "--data-file", str(corpus), "--out", str(out)], cli_env, timeout=SAFETY_NET_S)
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


def test_probe_cli_encoder_decoder(tmp_path, cli_env):
    """--encoder-decoder: default placements post, pre, sandwich; records say which model."""
    corpus = make_corpus(tmp_path / "corpus.txt")
    out = tmp_path / "out"
    proc = run_cli(["probe", "--encoder-decoder", "--depths", "2", "--seeds", "1", "--data-file", str(corpus),
                    "--out", str(out)], cli_env, timeout=SAFETY_NET_S)
    records = json.loads((out / "probe.json").read_text())
    assert [(r["placement"], r["layer"]) for r in records] == [(p, i) for p in ("post", "pre", "sandwich") for i in (0, 1)]
    assert all(r["model"] == "encoder-decoder" for r in records)
    rows = [ln.split()[0] for ln in proc.stdout.splitlines() if ln.split()[:1] in (["post"], ["pre"], ["sandwich"])]
    assert rows == ["post", "pre", "sandwich"]
    assert (out / "probe.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("settings, message", [
    (dict(placements=("post", "nope")), "unknown placement 'nope'"),
    (dict(depths=(4, 0)), "--depths 4,0: give positive layer counts"),
    (dict(d_model=30, heads=4), "--heads 4 must divide --d-model 30"),
    (dict(norm="group"), "--norm group: unknown norm"),
    (dict(seeds=0), "--seeds 0: must be a positive integer"),
    (dict(placements=("post", "deepnorm"), encoder_decoder=True), "--encoder-decoder: placement deepnorm is not supported"),
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
    # issue 38: BatchNorm over one token per channel (PyTorch's ValueError, exit 1, before)
    (["--norm", "batch", "--batch-size", "1", "--seq-len", "1", "--depths", "2", "--seeds", "1"],
     "--batch-size 1: with --seq-len 1, norm=batch has one value per channel"),
    # issue 38: no memory check (the kernel killed it at 23 GB); 100000 blocks of d=64 hold
    # 100000·12·64² ≈ 4.9e9 parameters, 39 GB of weights and gradients alone, more than this machine's memory
    (["--depths", "100000", "--placements", "pre", "--seeds", "1", "--data-file", "{corpus}"],
     "--depths 100000: one forward and backward pass needs about"),
])
def test_probe_bad_input_is_one_line(args, message, tmp_path):
    """In-process (a subprocess costs ~7 s of torch import on a loaded machine; the CLI test
    above covers the real process): exit 2 through SystemExit, one line on stderr, no
    traceback — an escaping exception would show as result.exception instead."""
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=5_000)
    result = CliRunner().invoke(app, ["probe", *(a.format(corpus=corpus) for a in args), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and isinstance(result.exception, SystemExit), result.exception
    assert message in result.stderr
    errors = [line for line in result.stderr.strip().splitlines() if "error" in line]
    assert "Traceback" not in result.stderr and len(errors) == 1, result.stderr
    assert not (tmp_path / "out").exists()


def test_the_probe_memory_check_names_what_helps():
    """check_probe_memory against validate's estimate without the optimizer (8 bytes a
    parameter), for the deepest model: refused just above what is free, with the fix that helps."""
    from normexp.train.probe import check_probe_memory
    from normexp.launch.validate import memory_parts
    from omegaconf import OmegaConf

    s = ProbeSettings(depths=(2, 6), d_model=64, heads=4, seq_len=32, batch_size=4)
    V, d, L, T, B, r = 256, 64, 6, 32, 4, 4
    params = 2 * V * d + T * d + L * (4 + 2 * r) * d * d
    need = 8 * params + 4 * L * B * T * (16 + 2 * r) * d + 12 * B * T * V
    cfg = OmegaConf.create({"tokenizer": {"vocab_size": V}, "d_model": d, "seq_len": T, "layers": L, "mlp_ratio": r,
                            "batch_size": B, "heads": 4})
    assert sum(memory_parts(cfg, optimizer=False)) == need
    check_probe_memory(s, V, available=need)
    with pytest.raises(ProbeError, match=r"^--depths 6: .*; lower --batch-size or --seq-len"):
        check_probe_memory(s, V, available=need - 1)
    with pytest.raises(ProbeError, match=r"lower --depths or --d-model \(now 6 and 64\)"):
        check_probe_memory(s, V, available=8 * params - 1)  # the weights alone do not fit


def test_an_out_that_cannot_be_a_folder_is_refused_before_computing(tmp_path):
    """`check_out_dir` runs before the models are built: an existing file, a folder under a
    file, or an unwritable place is one ProbeError naming --out; a new or existing folder is fine."""
    from normexp.train.probe import check_out_dir

    afile = tmp_path / "probe_out"
    afile.write_text("not a folder")
    with pytest.raises(ProbeError, match=re.escape(f"--out {afile} is a file; give a folder")):
        check_out_dir(afile)
    with pytest.raises(ProbeError, match=re.escape(f"--out {afile / 'sub'}: {afile} is a file")):
        check_out_dir(afile / "sub")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        import os

        if not os.access(locked, os.W_OK):  # root can write anywhere: nothing to refuse then
            with pytest.raises(ProbeError, match=re.escape(f"cannot write in {locked}")):
                check_out_dir(locked / "new")
    finally:
        locked.chmod(0o700)
    check_out_dir(tmp_path / "new" / "deeper")  # created later by write_outputs
    check_out_dir(tmp_path)
    check_out_dir(None)
    assert afile.read_text() == "not a folder" and not (tmp_path / "new").exists()  # checking writes nothing
