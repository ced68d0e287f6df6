"""The layerscale placement (configs/placement/layerscale.yaml): what a model built with it must show,
worked out by hand. tests/conftest.py's `placement_expectations` reads SHAPE and SETTINGS
from here for the tests every placement passes (test_wiring, test_presets)."""

import pytest

from normexp.model import GPT, ModelConfig

# (norms per block, whether the model adds a final norm)
SHAPE = (2, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): LayerScale: CaiT's ε = 0.1 up to 18 blocks
SETTINGS = {"init_scale": 0.1}


def test_layerscale_resolves_its_settings_by_hand():
    model = GPT(ModelConfig(layers=2, d_model=16, heads=2, seq_len=8, placement="layerscale"))
    assert model.settings()["placement"] == pytest.approx(SETTINGS)
