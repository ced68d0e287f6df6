"""The one owner of a run's status: summary.json is written only through runs.summary.write_summary,
which refuses a change its table (runs.schema.TRANSITIONS) does not allow. The expectation is the run
lifecycle written out by hand below, pair by pair, not read from the table."""

import json

import pytest

from normexp.runs.schema import STATUSES, Status, StatusChangeRefused
from normexp.runs.summary import set_status, write_summary

# The lifecycle: a job begins (running), or is refused/broken (failed) or stopped (interrupted,
# requeued) before it trains; training ends a run (completed, stalled, diverged) or is stopped;
# a stopped or failed run may start again; a finished run never changes.
ALLOWED = {
    (None, "running"), (None, "failed"), (None, "interrupted"), (None, "requeued"),
    ("running", "completed"), ("running", "stalled"), ("running", "diverged"), ("running", "interrupted"),
    ("running", "requeued"), ("running", "failed"),
    ("interrupted", "running"), ("interrupted", "failed"), ("interrupted", "requeued"),
    ("requeued", "running"), ("requeued", "failed"), ("requeued", "interrupted"),
    ("failed", "running"), ("failed", "interrupted"), ("failed", "requeued"),
}


def _on_disk(run_dir, status):
    """A summary.json holding `status`, written as a file (not through the writer under test)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if status is not None:
        (run_dir / "summary.json").write_text(json.dumps({"status": status, "steps_completed": 3}))


@pytest.mark.parametrize("old", [None, *map(str, STATUSES)])
def test_every_status_change_is_allowed_exactly_as_the_lifecycle_says(tmp_path, old):
    for new in map(str, STATUSES):
        run = tmp_path / f"{old}-{new}"
        _on_disk(run, old)
        if old == new or (old, new) in ALLOWED:
            write_summary(run, {"status": new, "steps_completed": 4})
            assert json.loads((run / "summary.json").read_text())["status"] == new
        else:
            with pytest.raises(StatusChangeRefused, match=f"from {old or 'no summary'} to {new}"):
                write_summary(run, {"status": new, "steps_completed": 4})
            left = json.loads((run / "summary.json").read_text()) if old is not None else None
            assert left == ({"status": old, "steps_completed": 3} if old is not None else None), \
                "a refused change must leave summary.json as it was"
            assert (run / "summary.json").exists() == (old is not None)


def test_a_finished_run_is_final_through_set_status_too(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    set_status(run, Status.RUNNING)
    set_status(run, Status.COMPLETED)
    with pytest.raises(StatusChangeRefused, match="completed is final"):
        set_status(run, Status.INTERRUPTED)
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
