"""The residual_dual placement (configs/placement/residual_dual.yaml): what a model built with it must show,
worked out by hand. tests/conftest.py's `placement_expectations` reads SHAPE and SETTINGS
from here for the tests every placement passes (test_wiring, test_presets)."""

import pytest

from normexp.model import GPT, ModelConfig

# (norms per block, whether the model adds a final norm); its final module is x_a + Norm(x_d)
SHAPE = (2, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): no settings of its own
SETTINGS = {}


def test_residual_dual_resolves_its_settings_by_hand():
    model = GPT(ModelConfig(layers=2, d_model=16, heads=2, seq_len=8, placement="residual_dual"))
    assert model.settings()["placement"] == pytest.approx(SETTINGS)
