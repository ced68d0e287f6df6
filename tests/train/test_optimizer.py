"""The optimizer: which parameters get weight decay (listed by hand), and one real training
step with grad_clip and weight decay against AdamW's first step worked out by hand.

AdamW's first update (Loshchilov & Hutter 2019, PyTorch's bias-corrected form), for a
gradient g: m̂ = g, v̂ = g², so

    θ₁ = θ₀·(1 − lr·wd) − lr · g / (|g| + eps)

with wd the group's weight decay. With grad_clip = c and a global gradient norm ‖g‖ > c,
g is first scaled by c/‖g‖. A large `optim.eps` keeps the update proportional to g (not
just its sign), so the clipping shows in θ₁.
"""

import math

import pytest
import torch
from conftest import TINY, make_corpus

from normexp.config.compose import compose_config
from normexp.config.run_config import OptimizerConfig
from normexp.model import GPT, ModelConfig
from normexp.train.config import TrainConfig
from normexp.train.loop import Hooks, Trainer, make_optimizer

# One block of each kind, by hand: the four matrices of a block decay; norms, biases,
# DyT's scalar and the embeddings (the tied head) do not.
MATRICES = ["blocks.0.attn.sublayer.qkv.weight", "blocks.0.attn.sublayer.proj.weight",
            "blocks.0.mlp.sublayer.fc_in.weight", "blocks.0.mlp.sublayer.fc_out.weight"]
BIASES = ["blocks.0.attn.sublayer.qkv.bias", "blocks.0.attn.sublayer.proj.bias",
          "blocks.0.mlp.sublayer.fc_in.bias", "blocks.0.mlp.sublayer.fc_out.bias"]
EMBEDDINGS = ["tok_emb.weight", "pos_emb.weight"]

NO_DECAY = {
    ("layer", "pre"): ["blocks.0.attn.norm.weight", "blocks.0.attn.norm.bias", "blocks.0.mlp.norm.weight",
                       "blocks.0.mlp.norm.bias", "final_norm.weight", "final_norm.bias"],
    ("rms", "post"): ["blocks.0.attn.norm.weight", "blocks.0.mlp.norm.weight"],
    ("batch", "deepnorm"): ["blocks.0.attn.norm.bn.weight", "blocks.0.attn.norm.bn.bias",
                            "blocks.0.mlp.norm.bn.weight", "blocks.0.mlp.norm.bn.bias"],
    ("dyt", "sandwich"): [f"blocks.0.{s}.{n}.{p}" for s in ("attn", "mlp") for n in ("norm_in", "norm_out")
                          for p in ("alpha", "weight", "bias")] + ["final_norm.alpha", "final_norm.weight",
                                                                   "final_norm.bias"],
    ("none", "pre"): [],
    ("rms", "layerscale"): ["blocks.0.attn.norm.weight", "blocks.0.attn.scale", "blocks.0.mlp.norm.weight",
                            "blocks.0.mlp.scale", "final_norm.weight"],
}


@pytest.mark.parametrize("norm, placement", sorted(NO_DECAY))
def test_decay_and_no_decay_groups_by_hand(norm, placement):
    cfg = compose_config(["layers=1", "d_model=8", "heads=2", "seq_len=4", f"norm={norm}",
                          f"placement={placement}", "optim.weight_decay=0.3", "lr=0.007"])
    model = GPT(ModelConfig.from_composed(cfg, 256))
    names = {id(p): n for n, p in model.named_parameters()}
    opt = make_optimizer(model, OptimizerConfig.from_composed(cfg))
    assert len(opt.param_groups) == 2
    decay, no_decay = ([names[id(p)] for p in g["params"]] for g in opt.param_groups)
    assert opt.param_groups[0]["weight_decay"] == 0.3 and opt.param_groups[1]["weight_decay"] == 0.0
    assert sorted(decay) == sorted(MATRICES)
    assert sorted(no_decay) == sorted(BIASES + EMBEDDINGS + NO_DECAY[(norm, placement)])
    for g in opt.param_groups:
        assert g["lr"] == 0.007 and g["betas"] == (0.9, 0.98) and g["eps"] == 1e-8


def test_one_step_with_grad_clip_and_weight_decay_by_hand(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "cache"))
    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    lr, wd, eps, clip = 0.01, 0.5, 1e-3, 0.05
    tiny = [o for o in TINY if not o.startswith("layers=")]
    cfg = compose_config([*tiny, "data=text", f"data.files=[{corpus}]", "steps=3", "warmup=0",
                          "schedule=constant", f"lr={lr}", f"grad_clip={clip}", f"optim.eps={eps}",
                          f"optim.weight_decay={wd}", "log.model_update=false", "log.progress=off",
                          "checkpoint_every=0", "layers=1"])
    threads = torch.get_num_threads()
    (tmp_path / "run").mkdir()
    trainer = Trainer(TrainConfig.from_composed(cfg), tmp_path / "run", Hooks())
    try:
        from normexp.data.batches import get_batch

        theta0 = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
        gen = torch.Generator()
        gen.set_state(trainer.data_gen.get_state())
        x, y = get_batch(trainer.corpus.train, cfg.batch_size, cfg.seq_len, gen)  # the batch of step 0
        assert trainer.train_step() is None
        theta1 = {n: p.detach().clone().double() for n, p in trainer.model.named_parameters()}
    finally:
        trainer.writer.close()
        trainer.progress.close()
        torch.set_num_threads(threads)

    # the same model at θ₀ and the same batch: the gradient by hand
    model = GPT(ModelConfig.from_composed(cfg, trainer.corpus.vocab_size))
    model.load_state_dict(theta0, strict=False)
    loss = torch.nn.functional.cross_entropy(model(x)[0].reshape(-1, 256), y.reshape(-1))
    loss.backward()
    grads = {n: p.grad.double() for n, p in model.named_parameters()}
    norm = math.sqrt(sum((g ** 2).sum().item() for g in grads.values()))
    assert norm > 4 * clip  # the premise: this step is clipped, and by a lot
    decays = set(MATRICES)

    def first_adamw_step(scale):
        out = {}
        for n, g in grads.items():
            g = g * scale
            out[n] = theta0[n].double() * (1 - lr * (wd if n in decays else 0.0)) - lr * g / (g.abs() + eps)
        return out

    clipped = first_adamw_step(clip / (norm + 1e-6))  # clip_grad_norm_'s coefficient
    for n in grads:
        torch.testing.assert_close(theta1[n], clipped[n], atol=2e-6, rtol=1e-5, msg=n)
    # and the test can tell: without clipping, or with decay on every tensor, θ₁ would differ
    unclipped = first_adamw_step(1.0)
    assert max((theta1[n] - unclipped[n]).abs().max().item() for n in grads) > 1e-3
    decays = set(grads)
    all_decay = first_adamw_step(clip / (norm + 1e-6))
    assert max((theta1[n] - all_decay[n]).abs().max().item() for n in grads) > 1e-3


# ------------------------------------------- FlatAdamW: the same numbers as torch's AdamW

def _groups(model, wd=0.01):
    from normexp.train.loop import decays

    named = list(model.named_parameters())
    return [{"params": [p for n, p in named if decays(n, p)], "weight_decay": wd},
            {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0}]


def _twin_models(overrides):
    cfg = compose_config(overrides)
    torch.manual_seed(0)
    a = GPT(ModelConfig.from_composed(cfg, 256))
    b = GPT(ModelConfig.from_composed(cfg, 256))
    b.load_state_dict(a.state_dict())
    return a, b


def _same_random_grads(*models, skip=()):
    for ps in zip(*(m.named_parameters() for m in models)):
        g = torch.randn_like(ps[0][1])
        for n, p in ps:
            p.grad = None if n in skip else g.clone()


KWARGS = dict(lr=3e-3, betas=(0.9, 0.98), eps=1e-8)


@pytest.mark.parametrize("threads", [1, 2])
def test_flat_adamw_is_torch_adamw_bit_for_bit(threads):
    """A DeepNorm stack 32 wide (every tensor a multiple of 16 elements): five steps with a
    changing lr on one flat buffer give exactly torch's per-tensor fused AdamW."""
    from normexp.train.flat_adamw import FlatAdamW

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a, b = _twin_models(["layers=12", "d_model=32", "heads=4", "seq_len=32", "placement=deepnorm"])
        ref, flat = torch.optim.AdamW(_groups(a), **KWARGS, fused=True), FlatAdamW(_groups(b), **KWARGS)
        assert not flat.per_tensor
        for step in range(5):
            _same_random_grads(a, b)
            for g in ref.param_groups + flat.param_groups:
                g["lr"] = KWARGS["lr"] * (step + 1) / 5
            ref.step()
            flat.step()
            flat.zero_grad(set_to_none=True)
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            assert torch.equal(p, q), n
        assert not flat.per_tensor
    finally:
        torch.set_num_threads(before)


def test_flat_adamw_leaves_a_parameter_without_gradient_alone():
    """torch skips a parameter whose grad is None (no decay, no momentum); so does FlatAdamW,
    by going back to the per-tensor step for good."""
    from normexp.train.flat_adamw import FlatAdamW

    a, b = _twin_models(["layers=2", "d_model=32", "heads=4", "seq_len=32"])
    ref, flat = torch.optim.AdamW(_groups(a, 0.5), **KWARGS, fused=True), FlatAdamW(_groups(b, 0.5), **KWARGS)
    unused = "blocks.1.mlp.sublayer.fc_in.weight"
    frozen = dict(b.named_parameters())[unused].detach().clone()
    _same_random_grads(a, b)
    ref.step()
    flat.step()
    _same_random_grads(a, b, skip={unused})
    ref.step()
    flat.step()
    assert flat.per_tensor
    assert not torch.equal(dict(b.named_parameters())[unused], frozen)  # it moved at step 1 ...
    moved_once = dict(b.named_parameters())[unused].detach().clone()
    _same_random_grads(a, b, skip={unused})
    ref.step()
    flat.step()
    assert torch.equal(dict(b.named_parameters())[unused], moved_once)  # ... and not without a gradient
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n


def test_resume_of_a_plain_adamw_checkpoint_continues_bit_for_bit(tmp_path):
    """A checkpoint written before FlatAdamW (torch.optim.AdamW's own state, per tensor) loads
    into FlatAdamW, which continues exactly as the plain optimizer does; and FlatAdamW's
    checkpoint loads back into a plain AdamW."""
    from normexp.train.flat_adamw import FlatAdamW

    a, b = _twin_models(["layers=3", "d_model=32", "heads=4", "seq_len=32"])
    ref = torch.optim.AdamW(_groups(a), **KWARGS, fused=True)
    for _ in range(3):
        _same_random_grads(a)
        ref.step()
    torch.save({"model": a.state_dict(), "optimizer": ref.state_dict()}, tmp_path / "old.pt")
    old = torch.load(tmp_path / "old.pt", weights_only=False)
    b.load_state_dict(old["model"])
    flat = FlatAdamW(_groups(b), **KWARGS)
    flat.load_state_dict(old["optimizer"])
    assert not flat.per_tensor
    for _ in range(2):
        _same_random_grads(a, b)
        ref.step()
        flat.step()
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n
    # and back: FlatAdamW's state as a plain AdamW reads it, each step count its own tensor
    torch.save({"optimizer": flat.state_dict()}, tmp_path / "new.pt")
    c = GPT(ModelConfig.from_composed(compose_config(["layers=3", "d_model=32", "heads=4", "seq_len=32"]), 256))
    c.load_state_dict(b.state_dict())
    plain = torch.optim.AdamW(_groups(c), **KWARGS, fused=True)
    plain.load_state_dict(torch.load(tmp_path / "new.pt", weights_only=False)["optimizer"])
    assert all(float(s["step"]) == 5 for s in plain.state.values())
    _same_random_grads(a, c)
    ref.step()
    plain.step()
    for (n, p), q in zip(a.named_parameters(), c.parameters()):
        assert torch.equal(p, q), n


def test_flat_adamw_keeps_per_tensor_steps_for_sizes_off_the_vector_width():
    """A 36-wide model (tensors of 36 and 108 elements): the flat path could round tail
    elements differently, so FlatAdamW runs torch's per-tensor step from the start."""
    from normexp.train.flat_adamw import FlatAdamW

    a, b = _twin_models(["layers=2", "d_model=36", "heads=3", "seq_len=16"])
    ref, flat = torch.optim.AdamW(_groups(a), **KWARGS, fused=True), FlatAdamW(_groups(b), **KWARGS)
    assert flat.per_tensor
    for _ in range(3):
        _same_random_grads(a, b)
        ref.step()
        flat.step()
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        assert torch.equal(p, q), n


def test_flat_adamw_state_dict_counts_every_step_however_often_it_is_saved():
    """Each state_dict() holds the number of updates taken so far, for every parameter, also
    after earlier state_dict() calls (issue 38: the first call cut the per-parameter step off
    the live flat one, so every later checkpoint kept the first one's count)."""
    from normexp.train.flat_adamw import FlatAdamW

    a, b = _twin_models(["layers=2", "d_model=32", "heads=2", "seq_len=16"])
    flat = FlatAdamW(_groups(b), **KWARGS)
    plain = torch.optim.AdamW(_groups(a), **KWARGS, fused=True)
    assert not flat.per_tensor
    for taken in range(1, 8):
        _same_random_grads(a, b)
        flat.step()
        plain.step()
        if taken in (2, 3, 7):  # three checkpoints, as a run with checkpoint_every writes them
            counts = {float(s["step"]) for s in flat.state_dict()["state"].values()}
            assert counts == {float(taken)}
    # and the saved state continues the run as torch's AdamW does: load it into a fresh one
    c = GPT(ModelConfig.from_composed(compose_config(["layers=2", "d_model=32", "heads=2", "seq_len=16"]), 256))
    c.load_state_dict(b.state_dict())
    resumed = FlatAdamW(_groups(c), **KWARGS)
    resumed.load_state_dict(flat.state_dict())
    _same_random_grads(a, c)
    plain.step()
    resumed.step()
    for (n, p), q in zip(a.named_parameters(), c.parameters()):
        assert torch.equal(p, q), n
