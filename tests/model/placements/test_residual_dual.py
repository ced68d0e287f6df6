"""The residual_dual placement (normexp/model/placements/residual_dual.py, configs/placement/residual_dual.yaml): its
formulas against hand computations. SHAPE and SETTINGS, worked out by hand, are read by the
tests every placement passes (tests/model/test_placements.py, test_wiring, test_presets) through
tests/conftest.py's `placement_expectations`."""

import math

import torch

from model_helpers import D, StandIn, randomize, ln, make_ln
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig
from normexp.train.instruments import recording


# (norms per block, whether the model adds a final norm); its final module is x_a + Norm(x_d)
SHAPE = (2, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): no settings of its own
SETTINGS = {}


def test_residual_dual_sublayer_updates_both_streams():
    torch.manual_seed(0)
    f = StandIn()
    layer = PLACEMENTS["residual_dual"](f, make_ln, index=0, depth=4)
    post, dual = torch.randn(2, 5, D) * 2, torch.randn(2, 5, D) * 3
    (new_post, new_dual), out = layer((post, dual))
    torch.testing.assert_close(out, f(post))
    torch.testing.assert_close(new_post, ln(post + f(post), layer.norm), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(new_dual, dual + f(post))


def test_residual_dual_model_is_the_two_streams_by_hand():
    """x_a = x_d = embedded input; per sublayer x_a ← LN(x_a + F(x_a)), x_d ← x_d + F(x_a);
    y = x_a + LN(x_d). The instruments' residual stream is x_a."""
    torch.manual_seed(0)
    model = GPT(ModelConfig(layers=3, d_model=D, heads=2, seq_len=8, placement="residual_dual")).eval()
    for m in model.modules():
        if type(m) is NORMS["layer"]:
            randomize(m)
    idx = torch.randint(0, 256, (2, 8))
    with torch.no_grad():
        post = dual = embedded = (model.tok_emb(idx) + model.pos_emb(torch.arange(8))) * math.sqrt(D)
        streams = []
        for block in model.blocks:
            for wrapper in (block.attn, block.mlp):
                out = wrapper.sublayer(post)
                post, dual = ln(post + out, wrapper.norm), dual + out
            streams.append(post)
        expected = post + ln(dual, model.final_norm.norm)
        torch.testing.assert_close(model.hidden(idx), expected, atol=1e-5, rtol=1e-5)
        with recording(model) as trace:
            model(idx)
    assert len(trace["block"]) == len(streams)
    for got, want in zip(trace["block"], streams):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(trace["embed"][0], embedded)  # not the pair block 0 receives
    torch.testing.assert_close(trace["final"][0], expected, atol=1e-5, rtol=1e-5)
