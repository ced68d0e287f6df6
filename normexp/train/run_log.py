"""What a run leaves behind, and the one owner of its status: summary.json, the TensorBoard
events, the checkpoints and the progress line. The Trainer (loop.py) computes; it tells its
RunLog what happened (a logging step's values, an evaluation, a divergence, the end), and the
RunLog writes it and moves the status: running → completed / stalled / diverged /
interrupted / requeued. A pack's members have one each, as solo runs do."""

from __future__ import annotations

import contextlib
import errno
import logging
import math
import time
from dataclasses import asdict
from pathlib import Path
from typing import Callable

from omegaconf import OmegaConf

from ..runs import checkpoint as ckpt
from ..runs import outcomes, schema
from ..runs.process import process_identity
from ..runs.schema import Status
from ..runs.summary import beat_baseline, hparams_row, write_summary
from .config import TrainConfig
from .instruments import scalar_tags
from .logbook import (can_draw, depth_profile_figure, hparam_values, hparams_writer, open_writer, trial_id,
                      write_hparams, write_scalars)
from .progress import Progress
from .signals import Interrupted, Preempted
from .spikes import HampelSpikeRule

log = logging.getLogger("normexp")


class RunLog:
    """One run's record (see the module docstring). `summary` is the run's summary.json as a
    dict, updated in place; `job` the launcher's JobContext; `main`: whether this process writes
    (rank 0 under torchrun)."""

    def __init__(self, config: TrainConfig, run_dir: Path, job, main: bool, summary: dict):
        self.config, self.run_dir, self.job, self.main, self.summary = config, run_dir, job, main, summary
        self.writing: Path | None = None  # the file a checkpoint or summary write is writing (full_disk_named)
        self.t_start = time.time()
        self.wall_before = 0.0  # a resumed run's earlier segments (start): wall_seconds sums them all
        self.spike_rule = HampelSpikeRule(**asdict(config.loss_spike))
        self.bytes_per_token = 1.0
        self.draws = can_draw()  # the depth-profile images need matplotlib
        if not self.draws and config.log.profile_interval(config.steps):
            log.info("depth-profile images off: matplotlib is not installed (pip install matplotlib draws them)")

    def start(self, purge_step: int | None, step: int) -> None:
        """The run begins (or resumes at `step`; `purge_step`: where a resumed run's events start again)."""
        if purge_step is not None:  # resumed: the summary is its checkpoint's, wall_seconds up to it
            self.wall_before = float(self.summary.get("wall_seconds") or 0.0)
        self.summary.update(status=Status.RUNNING, **process_identity())  # tells `normexp report` a live run
        self.write_summary()
        self.writer = open_writer(self.run_dir, purge_step, self.main, layers=self.config.model.layers)
        if purge_step is None:
            if self.main:  # the HParams session, in its sub-run (logbook.HPARAMS_RUN)
                with contextlib.closing(hparams_writer(self.run_dir)) as writer:
                    write_hparams(writer, hparam_values(hparams_row(self.summary), self.config.composed),
                                  trial_id(self.run_dir, self.job.label))
            self.writer.add_text(schema.CONFIG_TEXT, "```\n" + OmegaConf.to_yaml(self.config.composed) + "\n```", 0)
        elif purge_step % self.config.log.eval_every == 0 and self.summary.get("final_val_loss") is not None:
            # purge_step hides the old file's events from the resume step on, val/loss there included
            self.log_val(self.summary["final_val_loss"], purge_step)
        self.progress = Progress(self.config.log.progress if self.main else "off", self.config.steps, step, self.job.label,
                                 on_cpu=str(self.summary.get("device", "")).startswith("cpu"))

    def log_val(self, val: float, step: int) -> None:
        self.writer.add_scalar(schema.VAL_LOSS, val, step)
        if self.bytes_per_token != 1.0:
            self.writer.add_scalar(schema.VAL_LOSS_PER_BYTE, val / self.bytes_per_token, step)

    def log_step(self, values: dict, lr: float, step: int, histograms: Callable[[], list] | None) -> float:
        """A logging step's scalars, depth-profile image and optional histograms (`histograms()`:
        each block's output) at `step`; returns the seconds spent drawing (not training)."""
        trajectory = self.summary[schema.LOSS_TRAJECTORY]["train"]
        trajectory.append([step, values["loss"]])  # for outcomes.classify and the loss-spike rule
        tags = {**scalar_tags(values), schema.TRAIN_LOSS: values["loss"], schema.TRAIN_LR: lr, **self.check_spike(trajectory)}
        write_scalars(self.writer, tags, step)
        every = self.config.log.profile_interval(self.config.steps) if self.draws else 0
        t0 = time.perf_counter()
        if every and (step % every == 0 or step == self.config.steps - 1):
            self.writer.add_figure(schema.DEPTH_PROFILE, depth_profile_figure(values, step), step)
        if self.config.log.histograms and histograms is not None:
            for i, t in enumerate(histograms()):
                self.writer.add_histogram(schema.layer_tag(schema.ACT_HIST, i), t, step)
        return time.perf_counter() - t0

    def check_spike(self, trajectory: list) -> dict[str, float]:
        """The loss-spike rule (spikes.py) on the logged train losses, the newest last: its
        TensorBoard tags, and a spike's onset counted in the summary (loss_spikes, loss_spike_steps).
        Only the last window + 2 points decide, so a logging step costs the same late in a run.
        Until the rule has min_points losses before this one it cannot judge: no tag is written
        (a 0 flag would read "looked, found none") and loss_spikes stays null; the first step
        it judges sets loss_spikes to 0 and loss_spikes_judged_from to that step."""
        onset, threshold = self.spike_rule.check([v for _, v in trajectory[-(self.spike_rule.window + 2):]])
        if threshold is None:
            return {}
        step, loss = trajectory[-1]
        if self.summary.get("loss_spikes") is None:
            self.summary.update(loss_spikes=0, loss_spikes_judged_from=step)
        tags = {schema.TRAIN_LOSS_SPIKE: float(onset), schema.TRAIN_LOSS_SPIKE_THRESHOLD: threshold}
        if onset:
            self.summary["loss_spikes"] += 1
            self.summary.setdefault("loss_spike_steps", []).append(step)
            log.warning("loss spike at step %d: train loss %.4f above the rule's threshold %.4f "
                        "(loss_spike.k=%g robust deviations over the last %d logged losses)",
                        step, loss, threshold, self.spike_rule.k, self.spike_rule.window)
        return tags

    def log_divergence(self, values: dict, why: str, step: int) -> None:
        """Every layer's scalars at the step that diverged, a note in TensorBoard and the log."""
        write_scalars(self.writer, {**scalar_tags(values), schema.TRAIN_LOSS: values["loss"]}, step)
        self.writer.add_text(schema.DIVERGENCE_TEXT, f"Diverged at step {step}: {why}. "
                             "See the per-layer charts at this step for the layer that blew up first.", step)
        log.warning("diverged at step %d: %s", step, why)

    @contextlib.contextmanager
    def full_disk_named(self, step_now: Callable[[], int]):
        """A write the disk refuses mid-run (full, quota) comes out naming its file (a plain
        write's OSError names none: `writing` is the file a checkpoint or summary write was
        writing) after a line saying how to resume; the launcher then marks the run interrupted
        at its newest checkpoint. The TensorBoard writer's thread reports its failures on a
        later call: any other unnamed one is its event file."""
        try:
            yield
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            where = e.filename or self.writing or next(iter(sorted(self.run_dir.glob("events.out.tfevents*"))[-1:]), self.run_dir)
            saved = ckpt.list_checkpoints(self.run_dir)
            kept = (f"its checkpoint of step {int(saved[-1].stem.split('_')[1])} is kept" if saved
                    else "it has no checkpoint yet")
            log.warning("stopped at step %d: %s could not be written (%s); %s: free some space, then resume with: %s",
                        step_now(), where, e.strerror, kept, self.job.resume or ckpt.resume_command(self.run_dir))
            named = OSError(e.errno, e.strerror, str(where))
            named.then = "then resume=true continues the run (the command is on the line above)"  # describe_error
            raise named from None

    def save_checkpoint(self, state: dict, settings: dict) -> None:
        """The training state (model, optimizer, step, generators, ...) with the summary and the
        settings it was computed under, as step_XXXXXXXX.pt."""
        self.summary["steps_completed"] = state["step"]
        self.summary["wall_seconds"] = self.wall_seconds()  # what a resume adds its own segment to
        if not self.main:
            return
        self.writing = ckpt.checkpoint_dir(self.run_dir) / f"step_{state['step']:08d}.pt"  # named if the disk refuses it
        ckpt.save(self.run_dir, {**state, "summary": self.summary, "settings": settings}, keep=self.config.keep_checkpoints)
        self.writing = None

    def wall_seconds(self) -> float:
        """Wall-clock seconds of the run so far: every segment of a resumed run, this one up to now."""
        return round(self.wall_before + time.time() - self.t_start, 2)

    def write_summary(self) -> None:
        if self.main:
            self.writing = self.run_dir / "summary.json"
            write_summary(self.run_dir, self.summary)
            self.writing = None

    def interrupted(self, e: Interrupted, step: int, save: Callable[[], None], results: dict) -> None:
        """Checkpoint at this step boundary (`save`), then status "interrupted", or "requeued" when
        SLURM preempts the job (its requeued job resumes from here; `requeues` counts the times)."""
        self.progress.close()
        preempted = isinstance(e, Preempted)
        if preempted:
            self.summary["requeues"] = self.summary.get("requeues", 0) + 1
        save()
        self.finish(Status.REQUEUED if preempted else Status.INTERRUPTED, step, **results)
        if preempted:
            log.warning("preempted by %s at step %d (SLURM time limit or preemption): checkpoint saved; "
                        "the job is requeued and resumes from it", e, step)
        else:
            log.warning("interrupted by %s at step %d: checkpoint saved; resume with: %s", e, step,
                        ckpt.resume_folder_command(self.run_dir))

    def finish(self, status: str, step: int, best_val: float, last_train_loss: float | None,
               tokens_per_second: float | None, **extra) -> dict:
        """Final numbers into the summary, TensorBoard's HParams metrics and summary.json.
        A completed run that did not end at least `stall_margin` below the unigram baseline
        is "stalled" (runs.summary.beat_baseline)."""
        self.progress.close()
        self.summary.update(extra)
        if status == Status.COMPLETED and not beat_baseline(self.summary["final_val_loss"], self.summary.get("baseline_loss"),
                                                       self.summary["stall_margin"]):
            status = Status.STALLED
        self.summary.update(status=status, steps_completed=step, final_train_loss=last_train_loss,
                            best_val_loss=None if best_val == math.inf else best_val,
                            tokens_per_second=tokens_per_second, wall_seconds=self.wall_seconds())
        self.summary["outcome"] = outcomes.classify(self.summary)
        if self.summary.get("loss_spikes") is None and status in (Status.COMPLETED, Status.STALLED):
            log.info("loss spikes: not evaluated (%d logged train losses; the rule judges from logged loss %d on, "
                     "loss_spike.min_points=%d; a smaller log_every logs more)",
                     len(self.summary[schema.LOSS_TRAJECTORY]["train"]), self.spike_rule.min_points + 1,
                     self.spike_rule.min_points)
        self.writer.close()
        if self.main:  # the HParams metrics, beside the session's start info
            with contextlib.closing(hparams_writer(self.run_dir)) as writer:
                for tag, v in schema.hparam_metric_values(self.summary).items():
                    if v is not None and math.isfinite(v):
                        writer.add_scalar(tag, v, step)
        self.write_summary()
        if status in (Status.COMPLETED, Status.STALLED):
            s = self.summary
            log.info("%s %d steps: val loss %.4f (best %.4f, unigram baseline %.4f), %s tokens/s, %.0f s -> %s",
                     status, step,
                     s["final_val_loss"] or float("nan"), s["best_val_loss"] or float("nan"),
                     s.get("baseline_loss") or float("nan"), f"{s['tokens_per_second']:,.0f}" if s["tokens_per_second"] else "?", s["wall_seconds"], self.run_dir)
        return self.summary
