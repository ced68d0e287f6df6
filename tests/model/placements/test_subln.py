"""The subln placement (configs/placement/subln.yaml): what a model built with it must show,
worked out by hand. tests/conftest.py's `placement_expectations` reads SHAPE and SETTINGS
from here for the tests every placement passes (test_wiring, test_presets)."""

import math

import pytest

from normexp.model import GPT, ModelConfig

# (norms per block, whether the model adds a final norm); 2 outer + 2 inner (before W_O and W₂)
SHAPE = (4, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): Sub-LN: γ = √(ln 2N) = √(ln 4)
SETTINGS = {"gain": math.sqrt(math.log(4))}


def test_subln_resolves_its_settings_by_hand():
    model = GPT(ModelConfig(layers=2, d_model=16, heads=2, seq_len=8, placement="subln"))
    assert model.settings()["placement"] == pytest.approx(SETTINGS)
