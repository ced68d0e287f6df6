"""The depth_mup placement (normexp/model/placements/depth_mup.py, configs/placement/depth_mup.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`.

Depth-μP / CompleteP with m = L/L₀ (L blocks, base depth L₀) and exponent α: each sublayer
x ← x + m^-α·F(Norm(x)); every parameter inside the blocks trains with lr·m^(α−1) and Adam
ε·m^-α; the embeddings (and the tied head) and the final norm keep lr and ε
(EleutherAI/nanoGPT-mup, branch completep, `configure_optimizers`)."""

import math
from types import SimpleNamespace

import pytest
import torch

from model_helpers import D, StandIn
from normexp.config.compose import compose_config
from normexp.config.run_config import OptimizerConfig
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig
from normexp.train.config import TrainConfig
from normexp.train.loop import Trainer, make_optimizer


# (norms per block, whether the model adds a final norm): Pre-LN's
SHAPE = (2, True)
# its resolved settings at 2 blocks with the yaml's exponent ½ and base depth 6: m = 2/6 = ⅓,
# so the branch multiplier m^-½ = √3, the hidden lr scale m^(½−1) = √3, the hidden ε scale m^-½ = √3
SETTINGS = {"exponent": 0.5, "base_depth": 6, "branch_scale": math.sqrt(3), "lr_scale": math.sqrt(3),
            "eps_scale": math.sqrt(3)}


# (layers L, base depth L₀, exponent α, branch multiplier (L/L₀)^-α by hand)
BRANCH = [(12, 3, 1.0, 0.25), (12, 3, 0.5, 0.5), (32, 2, 0.5, 0.25), (6, 6, 0.75, 1.0), (4, 8, 1.0, 2.0)]


@pytest.mark.parametrize("layers, base, exponent, branch", BRANCH)
def test_depth_mup_sublayer_is_x_plus_branch_multiplier_times_f_of_norm(layers, base, exponent, branch):
    f = StandIn()
    layer = PLACEMENTS["depth_mup"](f, lambda: NORMS["layer"](D, eps=1e-5), index=1, depth=layers,
                                    exponent=exponent, base_depth=base)
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(0)) * 3 + 1
    normed = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
    y, out = layer(x)
    torch.testing.assert_close(out, branch * f(normed), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(y, x + branch * f(normed), atol=1e-6, rtol=1e-5)


def optimizer_for(layers: int, exponent: float, base: int, lr=0.01, eps=1e-6, wd=0.1):
    cfg = compose_config(["placement=depth_mup", f"placement.exponent={exponent}", f"placement.base_depth={base}",
                          f"layers={layers}", "d_model=16", "heads=2", "seq_len=8", f"lr={lr}", f"optim.eps={eps}",
                          f"optim.weight_decay={wd}"])
    torch.manual_seed(0)
    model = GPT(ModelConfig.from_composed(cfg, 256))
    return model, make_optimizer(model, OptimizerConfig.from_composed(cfg)), cfg


# (L, L₀, α, hidden lr scale (L/L₀)^(α−1), hidden ε scale (L/L₀)^-α), by hand
GROUPS = [(12, 3, 1.0, 1.0, 0.25), (12, 3, 0.5, 0.5, 0.5), (32, 2, 0.5, 0.25, 0.25), (8, 2, 0.75, 4 ** -0.25, 4 ** -0.75)]


@pytest.mark.parametrize("layers, base, exponent, lr_scale, eps_scale", GROUPS)
def test_depth_mup_optimizer_groups_scale_the_hidden_lr_and_eps(layers, base, exponent, lr_scale, eps_scale):
    """Four groups: outside the blocks (embeddings, final norm) decaying / not, at lr and ε;
    inside the blocks decaying (matrices) / not (norms, biases), at lr·m^(α−1) and ε·m^-α."""
    model, opt, _ = optimizer_for(layers, exponent, base)
    names = {id(p): n for n, p in model.named_parameters()}
    seen = []
    for group in opt.param_groups:
        inside = {names[id(p)].startswith("blocks.") for p in group["params"]}
        assert len(inside) == 1  # a group is all hidden or all not
        hidden = inside.pop()
        assert group["lr"] == pytest.approx(0.01 * (lr_scale if hidden else 1.0), rel=1e-12)
        assert group["lr_scale"] == pytest.approx(lr_scale if hidden else 1.0, rel=1e-12)
        assert group["eps"] == pytest.approx(1e-6 * (eps_scale if hidden else 1.0), rel=1e-12)
        decays = {p.dim() >= 2 and "emb" not in names[id(p)] for p in group["params"]}
        assert decays == {group["weight_decay"] > 0}
        seen += [names[id(p)] for p in group["params"]]
    assert sorted(seen) == sorted(names.values())  # every parameter once
    assert {n for n in seen} >= {"tok_emb.weight", "final_norm.weight", "blocks.0.attn.sublayer.qkv.weight"}


def test_the_flat_adamw_step_honours_each_groups_lr_and_eps():
    """AdamW's first step, θ₁ = θ₀·(1 − lr·wd) − lr·g/(|g| + ε), with each group's lr and ε:
    a large ε (comparable to |g|) makes ε's scale show in the update."""
    from normexp.train.flat_adamw import FlatAdamW

    model, opt, _ = optimizer_for(12, 0.5, 3, lr=0.01, eps=1e-3, wd=0.1)
    assert isinstance(opt, FlatAdamW) and not opt.per_tensor  # the flat path, one buffer per group
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    idx = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(1))
    _, loss = model(idx, idx)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    opt.step()
    for n, p in model.named_parameters():
        hidden = n.startswith("blocks.")
        lr, eps = (0.01 * 0.5, 1e-3 * 0.5) if hidden else (0.01, 1e-3)  # m = 4, α = ½: lr·4^-½, ε·4^-½ inside
        wd = 0.1 if p.dim() >= 2 and "emb" not in n else 0.0
        g = grads[n]
        want = before[n] * (1 - lr * wd) - lr * g / (g.abs() + eps)
        torch.testing.assert_close(p.detach(), want, atol=1e-7, rtol=1e-5, msg=n)


def test_the_schedule_keeps_each_groups_lr_scale():
    """The trainer's lr schedule sets lr·multiplier·lr_scale in every group (not one lr for all)."""
    _, opt, cfg = optimizer_for(12, 0.5, 3, lr=0.02)
    config = TrainConfig.from_composed(compose_config(["lr=0.02", "warmup=10", "steps=100", "schedule=constant"]))
    trainer = SimpleNamespace(config=config, optimizer=opt)
    lr = Trainer.set_lr(trainer, 4)  # linear warmup: (4 + 1)/10 of the peak at step 4
    assert lr == pytest.approx(0.01)
    for group in opt.param_groups:
        assert group["lr"] == pytest.approx(lr * group["lr_scale"], rel=1e-12)
    assert sorted({g["lr_scale"] for g in opt.param_groups}) == pytest.approx([0.5, 1.0])
