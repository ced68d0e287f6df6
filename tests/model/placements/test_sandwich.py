"""The sandwich placement (configs/placement/sandwich.yaml): what a model built with it must show,
worked out by hand. tests/conftest.py's `placement_expectations` reads SHAPE and SETTINGS
from here for the tests every placement passes (test_wiring, test_presets)."""

import pytest

from normexp.model import GPT, ModelConfig

# (norms per block, whether the model adds a final norm); Norm_in and Norm_out around each sublayer
SHAPE = (4, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): no settings of its own
SETTINGS = {}


def test_sandwich_resolves_its_settings_by_hand():
    model = GPT(ModelConfig(layers=2, d_model=16, heads=2, seq_len=8, placement="sandwich"))
    assert model.settings()["placement"] == pytest.approx(SETTINGS)
