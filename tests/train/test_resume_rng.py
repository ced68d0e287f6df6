"""Resume restores the global RNG states (torch, numpy, python) from the checkpoint.

No training path draws from the global generators today (batches, the probe and evaluation
have generators of their own, and the model is built before the checkpoint is loaded), so
a resumed run and an uninterrupted one would agree even if resume forgot the RNG states.
To see the restore, the test plants states of its own in a checkpoint, resumes through the
command line, and reads the states the resumed run saved at its end."""

import json
import random
import shutil

import numpy as np
import pytest
import torch
from conftest import TINY, read_summary, run_cli

from normexp.runs import checkpoint as ckpt

pytestmark = pytest.mark.slow  # trains, then resumes, through the command line


def planted_states() -> dict:
    """RNG states no run of seed 0 is in: those of seed 1234."""
    return {"torch": torch.Generator().manual_seed(1234).get_state(),
            "numpy": np.random.RandomState(1234).get_state(),
            "python": random.Random(1234).getstate()}


def same_states(a: dict, b: dict) -> bool:
    # numpy's keys: an ndarray (np.random.get_state, checkpoints of format 1) or a tensor (format 2)
    numpy_equal = all(np.array_equal(np.asarray(x), np.asarray(y)) if hasattr(x, "shape") else x == y
                      for x, y in zip(a["numpy"], b["numpy"]))
    return torch.equal(a["torch"], b["torch"]) and numpy_equal and a["python"] == b["python"]


def states_at(run, step) -> dict:
    path = ckpt.checkpoint_dir(run) / f"step_{step:08d}.pt"
    return torch.load(path, weights_only=False)


def test_resume_restores_the_global_rng_states(tmp_path, corpus, cli_env):
    args = ["train", *TINY, "data=text", f"data.files=[{corpus}]", "steps=4", "warmup=0", "eval_every=2",
            "checkpoint_every=2", "keep_checkpoints=5"]
    a, b = tmp_path / "a", tmp_path / "b"
    run_cli([*args, f"hydra.run.dir={a}"], cli_env)
    a2, a4 = states_at(a, 2), states_at(a, 4)
    assert same_states(a2["rng"], a4["rng"]), "steps 3-4 drew from a global RNG: compare with the uninterrupted run instead"

    # b: run a as if killed after its step-2 checkpoint, with planted RNG states in that checkpoint
    shutil.copytree(a, b)
    (ckpt.checkpoint_dir(b) / "step_00000004.pt").unlink()
    planted = planted_states()
    assert not same_states(planted, a2["rng"])
    torch.save({**a2, "rng": planted}, ckpt.checkpoint_dir(b) / "step_00000002.pt")
    summary = read_summary(b)
    (b / "summary.json").write_text(json.dumps({**summary, "status": "interrupted", "steps_completed": 2}))

    run_cli([*args, "resume=true", f"hydra.run.dir={b}"], cli_env)
    b4 = states_at(b, 4)
    assert b4["step"] == 4
    assert same_states(b4["rng"], planted), "the resumed run did not continue from the checkpoint's RNG states"
    for key, value in a4["model"].items():  # and the training itself continued exactly
        assert torch.equal(b4["model"][key], value), key
