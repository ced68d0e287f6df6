"""The rezero placement (configs/placement/rezero.yaml): what a model built with it must show,
worked out by hand. tests/conftest.py's `placement_expectations` reads SHAPE and SETTINGS
from here for the tests every placement passes (test_wiring, test_presets)."""

import pytest

from normexp.model import GPT, ModelConfig

# (norms per block, whether the model adds a final norm); no norm anywhere
SHAPE = (0, False)
# its resolved settings at 2 blocks (summary.json's placement_settings): ReZero: α starts at 0
SETTINGS = {"init_alpha": 0.0}


def test_rezero_resolves_its_settings_by_hand():
    model = GPT(ModelConfig(layers=2, d_model=16, heads=2, seq_len=8, placement="rezero"))
    assert model.settings()["placement"] == pytest.approx(SETTINGS)
