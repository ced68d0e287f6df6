"""Training numerics are pinned: every norm × placement gives, step for step, the training
losses recorded in tests/fixtures/numerics.json by the code before the placement/norm
redesign (scripts/numerics_fixture.py). A moved loss is a finding to explain, not to
re-record."""

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # 30 short trainings; run it (`python -m pytest tests/test_numerics.py`) after touching training

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def test_every_norm_and_placement_trains_to_the_recorded_losses(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))
    import numerics_fixture

    expected = json.loads(numerics_fixture.FIXTURE.read_text())
    assert expected["settings"] == numerics_fixture.SETTINGS
    got = numerics_fixture.train_losses(work=tmp_path)
    assert set(got) == set(expected["losses"]) and len(got) == 30
    for run, losses in expected["losses"].items():
        assert len(got[run]) == len(losses) == numerics_fixture.STEPS
        for step, (a, b) in enumerate(zip(got[run], losses)):
            assert abs(a - b) <= 1e-6, f"{run} step {step}: {a} != {b} (recorded)"
    sys.modules.pop("numerics_fixture", None)
