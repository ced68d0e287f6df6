"""What a run shows and writes as it goes: the TensorBoard event file (scalars, the
custom-scalars layout, the HParams row) and the console progress (a bar or log lines)."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from .instruments import LAYOUT_FAMILIES

log = logging.getLogger("normexp")

HPARAM_METRICS = ("hparams/final_val_loss", "hparams/best_val_loss", "hparams/final_train_loss", "hparams/diverged")


def _import_summary_writer():
    """torch's SummaryWriter, imported with boto3 hidden: TensorBoard's file layer imports boto3
    (for s3:// logdirs) whenever it is installed, ~0.2-0.5 s of every run's start-up, and run
    folders are local paths. Hiding it makes that optional `import boto3` fail as if absent."""
    hide = "boto3" not in sys.modules
    if hide:
        sys.modules["boto3"] = None  # `import boto3` now raises ImportError
    try:
        from torch.utils.tensorboard import SummaryWriter
    finally:
        if hide and sys.modules.get("boto3", 0) is None:
            del sys.modules["boto3"]  # later imports of boto3 work as usual
    return SummaryWriter


def open_writer(run_dir: Path, purge_step: int | None, main: bool = True):
    """The run's SummaryWriter (a do-nothing stand-in on torchrun ranks other than 0). A new
    run also gets the custom-scalars layout; a resumed one (`purge_step`) keeps its own."""
    if not main:
        from .distributed import NullWriter

        return NullWriter()
    from torch.utils.tensorboard.summary import custom_scalars

    writer = _import_summary_writer()(str(run_dir), purge_step=purge_step, flush_secs=30)
    if purge_step is None:
        charts = {f"{family}: {what}": ["Multiline", [rf"{family}/layer_\d+"]] for family, what in LAYOUT_FAMILIES.items()}
        layout = {
            "per layer": charts,
            "stability": {
                "activation std max": ["Multiline", [r"stability/act_std_max"]],
                "gradient norm max, last/first": ["Multiline", [r"stability/grad_norm_max", r"stability/grad_norm_top_over_bottom"]],
                "model update (DeepNet)": ["Multiline", [r"stability/model_update"]],
            },
            "training": {
                "loss": ["Multiline", [r"train/loss", r"val/loss"]],
                "lr": ["Multiline", [r"train/lr"]],
                "global grad norm": ["Multiline", [r"train/grad_norm"]],
            },
        }
        writer.file_writer.add_summary(custom_scalars(layout))
    return writer


def write_scalars(writer, tags: dict[str, float], step: int) -> None:
    """All of a step's scalars as one TensorBoard event. Read back exactly like add_scalar's
    (a simple_value per tag), but one proto and one queue entry instead of one per tag:
    ~50× cheaper at depth 48, where a logging step writes ~300 tags."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    values = [Summary.Value(tag=tag, simple_value=float(v)) for tag, v in tags.items()]
    writer.file_writer.add_summary(Summary(value=values), step)


def write_hparams(writer, hparams: dict) -> None:
    """The HParams row into the run's own event file (add_hparams would open a second run
    folder). Values that are not numbers, strings or booleans are shown as text."""
    from torch.utils.tensorboard.summary import hparams as hparams_summary

    clean = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in hparams.items()}
    exp, ssi, sei = hparams_summary(clean, {m: 0.0 for m in HPARAM_METRICS})
    for s in (exp, ssi, sei):
        writer.file_writer.add_summary(s)


class Progress:
    """A tqdm bar on a terminal, plain log lines at logging steps otherwise."""

    def __init__(self, mode: str, total: int, initial: int):
        self.bar = None
        if mode == "bar" or (mode == "auto" and sys.stderr.isatty()):
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, leave=True)
        self.lines = mode in ("auto", "lines")

    def update(self, step: int, fields: dict, line: bool):
        if self.bar is not None:
            self.bar.update(step + 1 - self.bar.n)
            if fields:
                self.bar.set_postfix(fields, refresh=False)
        elif self.lines and line:
            log.info("step %d  %s", step, "  ".join(f"{k} {v}" for k, v in fields.items()))

    def close(self):
        if self.bar is not None:
            self.bar.close()
