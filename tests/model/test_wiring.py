"""Config → built model: each setting given as a command-line override reaches the modules.

Every case goes the way `normexp train` goes: compose the shipped configs with the overrides
(normexp.config.compose.compose_config), turn them into a ModelConfig (normexp.model.ModelConfig.from_composed)
and build the GPT. The checks read the built model — what its norms and placements compute,
the std of its initial weights — never the summary or the config echoed back.
"""

import math

import pytest
import torch

from normexp.config.compose import compose_config
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig

from conftest import placement_expectations
from model_helpers import init_std_ratio

SMALL = ["d_model=16", "heads=2", "seq_len=8", "layers=2"]


def build(*overrides: str) -> GPT:
    cfg = compose_config([*SMALL, *overrides])
    torch.manual_seed(0)
    return GPT(ModelConfig.from_composed(cfg, 256))


def norms_of(model: GPT) -> list[torch.nn.Module]:
    return [m for m in model.modules() if type(m) in NORMS.values()]


# ---------------------------------------------------------------- model keys and groups

def test_shape_keys_reach_the_modules():
    model = build("layers=3", "d_model=24", "heads=3", "mlp_ratio=2", "seq_len=16")
    assert len(model.blocks) == 3
    assert tuple(model.tok_emb.weight.shape) == (256, 24) and tuple(model.pos_emb.weight.shape) == (16, 24)
    for block in model.blocks:
        attn, mlp = block.attn.sublayer, block.mlp.sublayer
        assert attn.heads == 3 and tuple(attn.qkv.weight.shape) == (72, 24)
        assert tuple(mlp.fc_in.weight.shape) == (48, 24) and tuple(mlp.fc_out.weight.shape) == (24, 48)
    # the heads really split the width: 3 heads of 8 give different attention than 1 head of 24
    x = torch.randint(0, 256, (2, 16))
    one_head = build("layers=3", "d_model=24", "heads=1", "mlp_ratio=2", "seq_len=16")
    assert not torch.allclose(model(x)[0], one_head(x)[0])


@pytest.mark.parametrize("option", sorted(NORMS))
def test_every_norm_option_builds_its_norm_everywhere(option):
    """norm=<option> on the command line: every norm of the built model is the class registered
    under that name (NORMS[option]), the model's five norms all of it."""
    model = build(f"norm={option}")
    found = norms_of(model)
    assert len(found) == 2 * 2 + 1  # pre: one per sublayer, two sublayers per block, and the final norm
    assert {type(m) for m in found} == {NORMS[option]}


# placement option → (norms per block, final norm?), each from its own test file
PLACEMENT_SHAPE = {name: module.SHAPE for name, module in placement_expectations().items()}


def test_every_placement_option_is_checked():
    from normexp.config.compose import group_options

    missing = sorted(set(group_options("placement")) - set(PLACEMENT_SHAPE))
    assert not missing, f"no tests/model/placements/test_<name>.py for {missing}: add one (SHAPE, SETTINGS, a test)"
    assert sorted(group_options("placement")) == sorted(PLACEMENT_SHAPE)
    assert sorted(group_options("norm")) == sorted(NORMS)


@pytest.mark.parametrize("option", sorted(PLACEMENT_SHAPE))
def test_every_placement_option_builds_its_placement(option):
    model = build(f"placement={option}", "layers=3")
    per_block, final = PLACEMENT_SHAPE[option]
    for block in model.blocks:
        assert type(block.attn) is PLACEMENTS[option] and type(block.mlp) is PLACEMENTS[option]
        assert len(norms_of(block)) == per_block
    assert (not isinstance(model.final_norm, torch.nn.Identity)) == final


# ---------------------------------------------------------------- norm settings

def small_input(*shape) -> torch.Tensor:
    """Activations with variance 0.0025: an eps of 0.01 dominates it, 1e-5 does not."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(1)) * 0.05 + 0.02


@pytest.mark.parametrize("option", ["layer", "rms", "batch"])
def test_norm_eps_from_the_command_line_is_the_eps_computed_with(option):
    model = build(f"norm={option}", "norm.eps=0.01").train()
    x = small_input(3, 5, 16)
    found = norms_of(model)
    assert len(found) == 5
    for norm in found:
        y = norm(x)
        if option == "layer":
            want = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 0.01)
        elif option == "rms":
            want = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 0.01)
        else:  # per feature over all 15 tokens
            flat = x.reshape(-1, 16)
            want = ((flat - flat.mean(0)) / torch.sqrt(flat.var(0, unbiased=False) + 0.01)).view_as(x)
        torch.testing.assert_close(y, want, atol=1e-5, rtol=1e-4)


def test_batchnorm_momentum_from_the_command_line_moves_the_running_statistics():
    """One training forward from running mean 0, var 1 with momentum m:
    mean ← (1−m)·0 + m·μ_B, var ← (1−m)·1 + m·σ²_B (unbiased), over all B·T tokens."""
    model = build("norm=batch", "norm.momentum=0.5").train()
    x = torch.randn(4, 6, 16, generator=torch.Generator().manual_seed(2)) * 2 + 3
    flat = x.reshape(-1, 16)
    found = norms_of(model)
    assert len(found) == 5
    for norm in found:
        norm(x)
        torch.testing.assert_close(norm.bn.running_mean, 0.5 * flat.mean(0), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(norm.bn.running_var, 0.5 + 0.5 * flat.var(0, unbiased=True), atol=1e-4, rtol=1e-5)


def test_dyt_init_alpha_from_the_command_line_is_the_initial_scale():
    model = build("norm=dyt", "norm.init_alpha=0.8")
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3)) * 2
    found = norms_of(model)
    assert len(found) == 5
    for norm in found:
        torch.testing.assert_close(norm(x), torch.tanh(0.8 * x))  # γ = 1, β = 0 at init


# ---------------------------------------------------------------- placement settings


def test_other_placements_keep_gain_one():
    d = 64
    for placement in ("pre", "post", "sandwich", "mix", "layerscale"):
        qk, rest, se = init_std_ratio(build(f"placement={placement}", "layers=3", f"d_model={d}", "heads=4"), d)
        assert abs(qk - 1) < 0.05 and abs(rest - 1) < 5 * se, (placement, qk, rest)


def test_settings_read_from_the_built_model():
    """What summary.json records (model.settings()) for settings given on the command line."""
    cases = [
        (["norm=rms", "norm.eps=0.001"], {"eps": 0.001}, {}),
        (["norm=batch", "norm.momentum=0.3"], {"eps": 1e-5, "momentum": 0.3}, {}),
        (["norm=dyt", "norm.init_alpha=0.8", "placement=post"], {"init_alpha": 0.8}, {}),
        (["placement=mix", "placement.ratio=0.5", "layers=5"], {"eps": 1e-5}, {"ratio": 0.5, "post_blocks": 2}),
        (["placement=layerscale", "layers=20"], {"eps": 1e-5}, {"init_scale": 1e-5}),  # CaiT: 19-24 blocks
        (["placement=layerscale", "placement.init_scale=0.5"], {"eps": 1e-5}, {"init_scale": 0.5}),
        (["placement=deepnorm", "layers=2"], {"eps": 1e-5}, {"alpha": math.sqrt(2), "beta": 0.5}),  # 4^¼, 16^-¼
        (["placement=subln", "layers=6"], {"eps": 1e-5}, {"gain": 1.5763587}),  # √(ln 12) = √2.4849066
        (["placement=gated", "placement.gate_bias=1.0", "norm=scale"], {"eps": 1e-5}, {"gate_bias": 1.0, "attention_relu": False}),
        (["placement=gated", "placement.attention_relu=true"], {"eps": 1e-5}, {"gate_bias": 2.0, "attention_relu": True}),
        (["placement=hybrid", "placement.qkv_norm=per_head"], {"eps": 1e-5}, {"qkv_norm": "per_head"}),
    ]
    for overrides, norm, placement in cases:
        settings = build(*overrides).settings()
        assert settings["norm"] == pytest.approx(norm), overrides
        assert settings["placement"] == pytest.approx(placement), overrides
