"""The gated placement (configs/placement/gated.yaml): what a model built with it must show,
worked out by hand. tests/conftest.py's `placement_expectations` reads SHAPE and SETTINGS
from here for the tests every placement passes (test_wiring, test_presets)."""

import pytest

from normexp.model import GPT, ModelConfig

# (norms per block, whether the model adds a final norm)
SHAPE = (2, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): gated residual: GTrXL's gate bias 2,
# no ReLU on the attention output (the authors' code has one: attention_relu=true)
SETTINGS = {"gate_bias": 2.0, "attention_relu": False}


def test_gated_resolves_its_settings_by_hand():
    model = GPT(ModelConfig(layers=2, d_model=16, heads=2, seq_len=8, placement="gated"))
    assert model.settings()["placement"] == pytest.approx(SETTINGS)
