"""Continuing a run from its newest checkpoint (`resume=true`): which checkpoint, whether it
may be loaded into this run, and putting its state back into the run's objects.

A checkpoint holds everything needed to continue bit for bit on CPU: model, optimizer, step,
the data sampler's generator, the RNG states, the instruments' reference state, and the
summary so far (loop.py's `Trainer.save_checkpoint`)."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from ..config.checks import ConfigError
from ..runs import checkpoint as ckpt
from ..runs.schema import Status
from ..runs.summary import read_summary

log = logging.getLogger("normexp")


def checkpoint_to_resume(run_dir: Path, settings: dict) -> dict | None:
    """The newest checkpoint's state, checked against this run's settings; None when the folder
    holds none yet (the run starts again from step 0, with a warning). Refused in one line
    (ConfigError) when checkpoints exist but none loads, or one of other settings was copied in."""
    # onto the CPU: the generators' states must be CPU byte tensors; load_state_dict moves the
    # weights and the optimizer's moments to the model's device
    state = ckpt.load_latest(run_dir, map_location="cpu")
    saved = ckpt.list_checkpoints(run_dir)
    if state is None and saved:  # load_latest warned why each one failed
        raise ConfigError("resume", "true", f"none of the {len(saved)} checkpoints in {saved[0].parent} loads "
                          "(damaged or not normexp's); move them away to train again from step 0, "
                          "or train in a new folder")
    if state is None:
        # the pre-flight refused a folder without a run, so this run stopped before its first checkpoint
        log.warning("resume=true but %s holds no checkpoint yet (status %s): training starts again from step 0",
                    run_dir, (read_summary(run_dir) or {}).get("status", Status.UNKNOWN))
        return None
    name = f"step_{state['step']:08d}.pt"
    ckpt.check_settings(state, settings, name, run_dir)
    if repaired := ckpt.reconcile_optimizer_steps(state, name, run_dir):
        log.warning("%s", repaired)
    return state


def restore(state: dict, run_dir: Path, model: torch.nn.Module, optimizer, data_gen: torch.Generator,
            instruments) -> None:
    """Put a checkpoint's model, optimizer, data generator, RNG and instrument states back."""
    try:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    except (RuntimeError, ValueError, KeyError) as e:  # a checkpoint of another model (copied in)
        newest = ckpt.list_checkpoints(run_dir)[-1]
        raise ConfigError("resume", "true", f"{newest} holds a model of another shape than this run's settings "
                          f"({' '.join(str(e).split())[:160]}); remove it or train in a new folder") from None
    data_gen.set_state(state["data_generator"])
    ckpt.restore_rng(state["rng"])
    # checkpoints written before the rename hold h₀ as "probe_h0"
    instruments.load_state_dict(state.get("instruments", {"reference_h0": state.get("probe_h0")}))
