"""The mix placement (normexp/model/placements/mix.py, configs/placement/mix.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import pytest
import torch

from model_helpers import D, StandIn, by_hand_norm, compose_model, is_normalized
from normexp.config.registry import build
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig


# (norms per block, whether the model adds a final norm)
SHAPE = (2, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): Mix-LN: ⌊0.25·2⌋ = 0 Post-LN blocks
SETTINGS = {"ratio": 0.25, "post_blocks": 0}


def test_mix_is_post_then_pre():
    model = GPT(ModelConfig(layers=12, d_model=D, heads=2, seq_len=4, placement={"name": "mix", "ratio": 0.25}))
    kinds = [(b.attn.post, b.mlp.post) for b in model.blocks]
    assert kinds == [(True, True)] * 3 + [(False, False)] * 9  # ⌊0.25·12⌋ = 3 Post-LN blocks
    # and each block computes its formula: Post-LN in block 0, Pre-LN in block 3
    f = StandIn()
    for index, formula in ((0, lambda x: (by_hand_norm(x + f(x)), f(x))),
                           (3, lambda x: (x + f(by_hand_norm(x)), f(by_hand_norm(x))))):
        layer = PLACEMENTS["mix"](f, lambda: build(NORMS, "norm", "layer", D), index=index, depth=12, ratio=0.25)
        x = torch.randn(2, 5, D) * 3
        for got, want in zip(layer(x), formula(x)):
            torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def post_blocks(model: GPT) -> list[bool]:
    """For each block, whether it is Post-LN, from what its self-attention sublayer computes:
    Post-LN returns Norm(x + F(x)) (normalized), Pre-LN x + F(Norm(x)) (not, for a large x)."""
    x = torch.randn(2, 8, 16, generator=torch.Generator().manual_seed(4)) * 10 + 3
    with torch.no_grad():
        return [is_normalized(block.attn(x)[0]) for block in model.blocks]


# (layers, ratio, ⌊ratio·layers⌋ by hand): where floor and ceiling differ, and where the
# floating-point product lands just below the integer (0.58·50 = 28.999999999999996)
MIX = [(12, 0.25, 3), (6, 0.25, 1), (7, 0.5, 3), (4, 0.5, 2), (5, 0.9, 4), (8, 0.0, 0), (3, 0.34, 1),
       (50, 0.58, 29)]


@pytest.mark.parametrize("layers, ratio, posts", MIX)
def test_mix_ratio_gives_floor_of_ratio_times_layers_post_ln_blocks(layers, ratio, posts):
    model = compose_model("placement=mix", f"placement.ratio={ratio}", f"layers={layers}")
    assert post_blocks(model) == [True] * posts + [False] * (layers - posts)
    assert not isinstance(model.final_norm, torch.nn.Identity)  # the last block is Pre-LN: a final norm
