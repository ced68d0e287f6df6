"""What every placement keeps, parametrized over the registry: its own test file
(tests/model/placements/test_<name>.py, with SHAPE and SETTINGS worked out by hand), the settings
a model reports equal to those SETTINGS, its own module in normexp/model/placements/, the
standard model-level policy leaving the model as it is where a placement keeps it, and the
sublayer slots the placements share (the lists of placements in the docs: tests/test_registry_lists.py)."""

from pathlib import Path

import pytest
import torch
import torch.nn as nn

from conftest import placement_expectations
from model_helpers import D, ln, make_ln
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig
from normexp.model.layers import ACT_SCALE, INNER_NORM, K_NORM, MLP, Q_NORM, QKV_NORM, CausalSelfAttention, CrossAttention
from normexp.model.placements import ModelPolicy

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = placement_expectations()  # {name: its test module}
STANDARD = sorted(name for name, cls in PLACEMENTS.items() if cls.model_policy is ModelPolicy)


def small_model(placement: str) -> GPT:
    torch.manual_seed(0)
    return GPT(ModelConfig(layers=2, d_model=16, heads=2, seq_len=8, placement=placement))


def test_every_registered_placement_has_its_own_test_file():
    missing = sorted(set(PLACEMENTS) - set(EXPECTED))
    assert not missing, f"no tests/model/placements/test_<name>.py for {missing}: add one (SHAPE, SETTINGS, its formula)"
    assert sorted(EXPECTED) == sorted(PLACEMENTS), "a test file names no registered placement"


@pytest.mark.parametrize("name", sorted(PLACEMENTS))
def test_each_placement_reports_the_settings_its_test_file_works_out(name):
    """summary.json's placement_settings at 2 blocks: the yaml's values, "auto" resolved."""
    assert small_model(name).settings()["placement"] == pytest.approx(EXPECTED[name].SETTINGS)


def test_each_placement_is_one_module_named_after_it():
    """normexp/model/placements/<name>.py holds the class registered first as <name> (its
    aliases, peri, share it); base.py the contract; nothing else."""
    package = ROOT / "normexp" / "model" / "placements"
    classes = set(PLACEMENTS.values())
    assert {cls.__module__ for cls in classes} == {f"normexp.model.placements.{cls.name}" for cls in classes}
    assert {p.stem for p in package.glob("*.py")} - {"__init__", "base"} == {cls.name for cls in classes}


@pytest.mark.parametrize("name", STANDARD)
def test_the_standard_policy_leaves_the_model_as_it_is(name):
    """The stream enters as the embedded input itself; one optimizer group of every parameter
    at the run's lr and ε; no logit scale; nothing moves after a step."""
    model = small_model(name)
    assert type(model.policy) is ModelPolicy
    idx = torch.randint(0, 256, (2, 8), generator=torch.Generator().manual_seed(1))
    x = model.embed(idx)
    assert model.policy.enter(x) is x
    [group] = model.param_groups(0.01, 1e-7)
    assert (group["lr"], group["lr_scale"], group["eps"]) == (0.01, 1.0, 1e-7) and "weight_decay" not in group
    assert [id(p) for p in group["params"]] == [id(p) for p in model.parameters()]
    assert model.logit_scale is None
    before = {k: v.clone() for k, v in model.state_dict().items()}
    model.after_optimizer_step()
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


@pytest.mark.parametrize("name", sorted(PLACEMENTS))
def test_the_policy_is_the_placements_own_and_holds_no_parameters(name):
    """The GPT builds the policy the placement names; its modules (a final norm, a logit
    scale) are the GPT's own, so the parameter names are the blocks', final_norm's and
    logit_scale's as before the policies existed."""
    model = small_model(name)
    assert type(model.policy) is PLACEMENTS[name].model_policy and not isinstance(model.policy, nn.Module)
    tops = {key.split(".")[0] for key in model.state_dict()}
    assert tops <= {"tok_emb", "pos_emb", "blocks", "final_norm", "logit_scale"}, tops


# ------------------------------------------------------------ the slots placements share

def test_placements_fill_only_the_slots_a_sublayer_declares():
    """The slots are declared (`norm_slots`), not probed: Sub-LN around cross-attention (no
    slot) adds no inner norm and still computes Pre-LN; HybridNorm around the MLP (no QKV slot)
    takes the FFN form; filling an undeclared slot is refused."""
    torch.manual_seed(0)
    cfg = ModelConfig(d_model=D, heads=2)
    assert CausalSelfAttention(cfg).norm_slots == {INNER_NORM, QKV_NORM, Q_NORM, K_NORM}
    assert MLP(cfg).norm_slots == {INNER_NORM, ACT_SCALE}
    cross = CrossAttention(cfg)
    assert cross.norm_slots == frozenset()
    layer = PLACEMENTS["subln"](cross, make_ln, index=0, depth=6)
    assert not hasattr(cross, "inner_norm") and sum(isinstance(m, NORMS["layer"]) for m in layer.modules()) == 1
    x, memory = torch.randn(2, 5, D), torch.randn(2, 3, D)
    torch.testing.assert_close(layer(x, memory)[0], x + cross(ln(x, layer.norm), memory), atol=1e-5, rtol=1e-5)
    mlp = MLP(cfg)
    assert not PLACEMENTS["hybrid"](mlp, make_ln, index=0, depth=4, qkv_norm="full").attention_form and mlp.inner_norm is None
    with pytest.raises(ValueError, match="CrossAttention has no slot 'inner_norm'"):
        cross.fill_slot(INNER_NORM, make_ln())
