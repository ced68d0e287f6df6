"""A per-layer signal is one registered class (normexp/train/layer_signals/): a signal registered
from outside the package is computed by the instruments, in its phase, against a value computed
here from the model's own forward, and charted by TensorBoard's layout with its description."""

import pytest
import torch
from tensorboard.plugins.custom_scalar import layout_pb2

from normexp.model import GPT, ModelConfig
from normexp.train.instruments import Instruments, recording, scalar_tags
from normexp.train.layer_signals import FORWARD, GRADIENTS, LAYER_SIGNALS, LayerSignal
from normexp.train.logbook import custom_scalars_layout


class BlockMeanAbs(LayerSignal):
    tag, order, phase = "block_mean_abs", 1000, FORWARD
    about = "mean |x| of the stream leaving each block (a test's signal)"

    def compute(self, reading):
        return reading.each_block("block", lambda t: t.abs().mean())


class GradNormSquared(LayerSignal):
    tag, order, phase, extra = "grad_norm_squared", 1001, GRADIENTS, True
    about = "squared gradient norm of each block (a test's extra signal)"

    def compute(self, reading):
        return reading.per_block.pow(2)


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(LAYER_SIGNALS, BlockMeanAbs.tag, BlockMeanAbs())
    monkeypatch.setitem(LAYER_SIGNALS, GradNormSquared.tag, GradNormSquared())


def tiny_step(extra_signals: bool):
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=64, seq_len=8, layers=3, d_model=16, heads=2))
    x, y = torch.randint(0, 64, (2, 8)), torch.randint(0, 64, (2, 8))
    instruments = Instruments(model, model_update=False, extra_signals=extra_signals)
    with recording(model) as trace:
        _, loss = model(x, y)
    loss.backward()
    return model, x, instruments.read(instruments.collect(loss, trace))


def test_a_registered_signal_is_computed_in_its_phase(registered):
    model, x, values = tiny_step(extra_signals=True)
    with torch.no_grad():  # the stream leaving each block, by the model's own blocks
        h, expected = model.embed(x), []
        for block in model.blocks:
            h = block(h)
            expected.append(h.abs().mean().item())
    assert values["block_mean_abs"] == pytest.approx(expected, rel=1e-6)
    by_hand = [sum(p.grad.pow(2).sum().item() for p in block.parameters()) for block in model.blocks]
    assert values["grad_norm_squared"] == pytest.approx(by_hand, rel=1e-5)
    assert values["grad_norm"] == pytest.approx([v ** 0.5 for v in by_hand], rel=1e-5)
    tags = scalar_tags(values)
    assert tags["block_mean_abs/layer_02"] == values["block_mean_abs"][2]


def test_an_extra_signal_is_left_out_without_extra_signals(registered):
    _, _, values = tiny_step(extra_signals=False)
    assert "block_mean_abs" in values and "grad_norm_squared" not in values


def test_the_layout_charts_a_registered_signal_under_its_description(registered):
    summary = custom_scalars_layout(3)
    layout = layout_pb2.Layout.FromString(summary.value[0].tensor.string_val[0])
    [per_layer] = [c for c in layout.category if c.title == "per layer"]
    titles = [chart.title for chart in per_layer.chart]
    assert f"block_mean_abs: {BlockMeanAbs.about}" in titles
    per_block = titles[:-1]  # the per-head chart (attn_entropy_head) comes after every per-block one
    assert per_block[-1] == f"grad_norm_squared: {GradNormSquared.about}"  # the highest order: last
