"""The hybrid placement (configs/placement/hybrid.yaml): what a model built with it must show,
worked out by hand. tests/conftest.py's `placement_expectations` reads SHAPE and SETTINGS
from here for the tests every placement passes (test_wiring, test_presets)."""

import pytest

from normexp.model import GPT, ModelConfig

# (norms per block, whether the model adds a final norm); q, k, v norms + the MLP's
SHAPE = (4, True)
# its resolved settings at 2 blocks (summary.json's placement_settings): Q, K, V normalized over the
# full width (the authors' code: per_head)
SETTINGS = {"qkv_norm": "full"}


def test_hybrid_resolves_its_settings_by_hand():
    model = GPT(ModelConfig(layers=2, d_model=16, heads=2, seq_len=8, placement="hybrid"))
    assert model.settings()["placement"] == pytest.approx(SETTINGS)
