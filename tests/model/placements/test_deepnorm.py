"""The deepnorm placement (configs/placement/deepnorm.yaml): what a model built with it must show,
worked out by hand. tests/conftest.py's `placement_expectations` reads SHAPE and SETTINGS
from here for the tests every placement passes (test_wiring, test_presets)."""

import math

import pytest

from normexp.model import GPT, ModelConfig

# (norms per block, whether the model adds a final norm)
SHAPE = (2, False)
# its resolved settings at 2 blocks (summary.json's placement_settings): DeepNorm at N = 2 blocks: α = (2N)^¼ = √2, β = (8N)^-¼ = 1/2
SETTINGS = {"alpha": math.sqrt(2), "beta": 0.5}


def test_deepnorm_resolves_its_settings_by_hand():
    model = GPT(ModelConfig(layers=2, d_model=16, heads=2, seq_len=8, placement="deepnorm"))
    assert model.settings()["placement"] == pytest.approx(SETTINGS)
