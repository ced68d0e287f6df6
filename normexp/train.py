"""The training loop: one run from a resolved config into one run folder.

`train()` reads top to bottom: set up a `Trainer` (data, model, optimizer, instruments,
resume, TensorBoard), then step until done, then finish. One step (`Trainer.train_step`):

    lr for this update → next batch → forward/backward (with the instruments' trace on a
    logging step) → divergence check → optional clipping → optimizer step → logging

and after it (`Trainer.after_step`): throughput, evaluation, checkpoint, progress.
Checkpoints hold everything needed to continue bit-for-bit on CPU: model, optimizer, step,
RNG states and the data sampler's generator.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from . import checkpoint as ckpt
from . import distributed
from .instruments import Instruments, scalar_tags
from .logbook import Progress, depth_profile_figure, leading_keys, open_writer, write_hparams, write_scalars
from .model import GPT, IGNORE_TARGET, ModelConfig
from .runfolder import STATUSES, hparams_row, learned, read_summary, summary_record, write_summary
from .schedules import lr_multiplier
from .signals import Interrupted, Preempted, StopSignals
from .validate import ConfigError

log = logging.getLogger("normexp")


@dataclass
class Hooks:
    """Ways in for tools that measure the loop (the bench) without changing it."""

    on_start: Callable[[], None] | None = None      # set-up done, step 0 next
    on_step: Callable[[int], None] | None = None    # a step finished (its index)


def train(cfg: DictConfig, run_dir: Path, stop: StopSignals | None = None, hooks: Hooks | None = None) -> dict:
    """Train one model as `cfg` says, logging into `run_dir`. Returns the summary (also
    written to summary.json). On SIGINT/SIGTERM (see signals.py) it saves a checkpoint,
    records status "interrupted" and raises `Interrupted`."""
    trainer = Trainer(cfg, Path(run_dir), hooks or Hooks())
    with contextlib.ExitStack() as stack:
        stop = stop or stack.enter_context(StopSignals())
        try:
            with stop.deferred():
                while trainer.step < cfg.steps:
                    stop.check()
                    if trainer.train_step() == "diverged" or trainer.after_step() == "diverged":
                        return trainer.finish("diverged", diverged_at_step=trainer.step)
        except Interrupted as e:
            trainer.stop_interrupted(e)
            raise
    trainer.save_checkpoint()
    return trainer.finish("completed")


# ----------------------------------------------------------------------- set-up

def select_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return torch.device(name)


def autocast_for(device: torch.device):
    """bf16 autocast on CUDA GPUs that support it; fp32 elsewhere (bf16 is slower on most CPUs)."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


def model_config(cfg: DictConfig, vocab_size: int) -> ModelConfig:
    """The model's shape from the config; the norm and placement nodes go to their classes as they are."""
    return ModelConfig(vocab_size=vocab_size, seq_len=cfg.seq_len, layers=cfg.layers, d_model=cfg.d_model,
                       heads=cfg.heads, mlp_ratio=cfg.mlp_ratio, norm=OmegaConf.to_container(cfg.norm),
                       placement=OmegaConf.to_container(cfg.placement), init=OmegaConf.to_container(cfg.init),
                       qk_norm=cfg.qk_norm)


def set_threads(cfg: DictConfig) -> int:
    """cores ÷ parallel jobs when a launcher runs several jobs at once (joblib reuses
    worker processes, so this is reset at the start of every job); see distributed.py."""
    threads = cfg.get("threads", "auto")
    torch.set_num_threads(distributed.threads_per_job() if threads == "auto" else int(threads))
    return torch.get_num_threads()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def profiles_every(cfg: DictConfig) -> int:
    """Steps between depth-profile images (0 = none). "auto": about five per run, at logging
    steps (a multiple of log_every), plus the last step: each costs ~50-100 ms of matplotlib."""
    every = cfg.log.get("profiles_every", "auto")
    if every == "auto":
        return cfg.log_every * math.ceil(cfg.steps / (5 * cfg.log_every))
    return int(every)


def decays(name: str, p: torch.nn.Parameter) -> bool:
    """Weight decay on matrices only: not on norms, biases or embeddings."""
    return p.dim() >= 2 and "emb" not in name


def make_optimizer(model: GPT, cfg: DictConfig) -> torch.optim.AdamW:
    """AdamW, weight decay as `decays` says; fused (one kernel per step for all tensors)
    where the build has it, else foreach."""
    named = list(model.named_parameters())
    groups = [{"params": [p for n, p in named if decays(n, p)], "weight_decay": cfg.optim.weight_decay},
              {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0}]
    kwargs = dict(lr=cfg.lr, betas=tuple(cfg.optim.betas), eps=cfg.optim.eps)
    try:
        return torch.optim.AdamW(groups, **kwargs, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, **kwargs, foreach=True)


class Trainer:
    """One run's state and its parts: set-up (`__init__`), `train_step`, `after_step`,
    `evaluate`, `save_checkpoint`, `finish`. `train()` drives them."""

    def __init__(self, cfg: DictConfig, run_dir: Path, hooks: Hooks):
        self.cfg, self.run_dir, self.hooks = cfg, run_dir, hooks
        self.t_start = time.time()
        threads = set_threads(cfg)
        seed_everything(cfg.seed)
        self.device = distributed.rank_device(select_device(cfg.device))
        self.main = distributed.is_main()  # under torchrun only rank 0 writes into run_dir
        distributed.local_batch_size(cfg.batch_size)  # the global batch must split evenly over ranks
        self.autocast = autocast_for(self.device)
        self.warmup = min(cfg.warmup, cfg.steps)
        if self.warmup < cfg.warmup:
            log.warning("warmup=%d is longer than steps=%d: warming up over all %d steps", cfg.warmup, cfg.steps, self.warmup)
        self.summary = summary_record(cfg, device=str(self.device), threads=threads)
        self.corpus = self._load_data()
        self.summary.update(baseline_loss=self.corpus.baseline_loss)
        self._build_model()
        self.step, self.best_val, self.last_train_loss = 0, math.inf, None
        purge_step = self._resume()
        self.start_step = self.step
        # who is running it: lets `normexp report` tell a live run from one killed without a word
        self.summary.update(status="running", pid=os.getpid(), host=socket.gethostname())
        self._write_summary()
        self.writer = open_writer(run_dir, purge_step, self.main)
        self._first_events(purge_step)
        self.check_every_step = self.device.type == "cpu"  # .item() is free on CPU; on GPUs only on logging steps
        self.max_loss = cfg.divergence.max_loss
        if self.summary.get("initial_loss") is not None:  # resumed: the ceiling set at step 0
            self.max_loss = max(self.max_loss, 2 * self.summary["initial_loss"])
        self.progress = Progress(cfg.log.progress if self.main else "off", cfg.steps, self.step)
        self.profiles_every = profiles_every(cfg)
        # tokens/s counts training steps only: each step's time is summed from its start to the start of
        # after_step, less what log_step spends drawing images and histograms (step_extra)
        self.step_began, self.step_extra = time.perf_counter(), 0.0
        self.timer_seconds, self.timer_steps, self.tps = 0.0, 0, self.summary.get("tokens_per_second")
        self.model.train()
        if hooks.on_start:
            hooks.on_start()

    def _load_data(self):
        from .data import load_corpus

        corpus = load_corpus(self.cfg.data, self.cfg.tokenizer, progress=self.cfg.log.progress != "off")
        for split, tokens in (("train", corpus.train), ("val", corpus.val)):
            if len(tokens) < self.cfg.seq_len + 2:
                raise ConfigError("seq_len", self.cfg.seq_len, f"the {split} split has only {len(tokens)} tokens; "
                                  "use a smaller seq_len or a larger corpus")
        log.info("%s", corpus.description)
        return corpus

    def _build_model(self) -> None:
        """Model, optimizer, DDP/compile wrappers, instruments and the model-update probe batch."""
        from .data import get_batch

        cfg = self.cfg
        self.model = GPT(model_config(cfg, self.corpus.vocab_size)).to(self.device)
        # Admin's profiling pass, on a batch of its own (the training batches are untouched)
        calibration_batch = get_batch(self.corpus.train, cfg.batch_size, cfg.seq_len, torch.Generator().manual_seed(cfg.seed + 3))
        self.model.calibrate(calibration_batch[0].to(self.device))
        settings = self.model.settings()  # read from the modules: what was built, "auto" resolved
        self.summary.update(parameters=self.model.num_parameters(), placement_settings=settings["placement"],
                            norm_settings=settings["norm"])
        self.optimizer = make_optimizer(self.model, cfg)
        self.ddp_model = distributed.wrap(self.model, self.device)  # DDP under torchrun; `model` itself otherwise
        self.step_model = torch.compile(self.ddp_model) if cfg.compile else self.ddp_model
        self.instruments = Instruments(self.model, cfg.log.model_update, cfg.log.model_update_every)
        self.data_gen = torch.Generator().manual_seed(cfg.seed)
        probe_gen = torch.Generator().manual_seed(cfg.seed + 1)
        # a sixteenth of the batch (1 to 8 sequences): the probe joins every logging step's
        # forward and backward, so its size is paid for at every logging step
        probe_x, _ = get_batch(self.corpus.val, min(8, max(1, cfg.batch_size // 16)), cfg.seq_len, probe_gen)
        self.instruments.set_probe(probe_x.to(self.device), self.autocast)

    def _resume(self) -> int | None:
        """With resume=true, continue from the newest checkpoint; returns its step (TensorBoard's
        purge_step: later events of the old file are dropped) or None for a fresh start."""
        if not self.cfg.resume:
            return None
        state = ckpt.load_latest(self.run_dir, map_location=self.device)
        if state is None:
            # the pre-flight refused a folder without a run, so this run stopped before its first checkpoint
            log.warning("resume=true but %s holds no checkpoint yet (status %s): training starts again from step 0",
                        self.run_dir, (read_summary(self.run_dir) or {}).get("status", "unknown"))
            return None
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.data_gen.set_state(state["data_generator"])
        ckpt.restore_rng(state["rng"])
        self.instruments.probe_h0 = state.get("probe_h0")
        self.step, self.best_val = state["step"], state["best_val"]
        self.summary.update(state["summary"])
        self.last_train_loss = self.summary.get("final_train_loss")
        log.info("resumed from step %d", self.step)
        return self.step

    def _first_events(self, purge_step: int | None) -> None:
        if purge_step is None:
            write_hparams(self.writer, hparams_row(self.summary), leading_keys())
            self.writer.add_text("config", "```\n" + OmegaConf.to_yaml(self.cfg) + "\n```", 0)
        elif purge_step % self.cfg.eval_every == 0 and self.summary.get("final_val_loss") is not None:
            # purge_step hides the old file's events from the resume step on, val/loss there included
            self._log_val(self.summary["final_val_loss"], purge_step)

    # ------------------------------------------------------------------ one step

    def train_step(self) -> str | None:
        """One optimizer update; "diverged" if the run must end here."""
        cfg, step, instruments = self.cfg, self.step, self.instruments
        logging_step = step % cfg.log_every == 0 or step == cfg.steps - 1
        lr = self.set_lr(step)
        x, y = self.next_batch()
        measure_update = logging_step and instruments.model_update_due(step, cfg.log_every, cfg.steps - 1)
        probe = instruments.fused_probe_rows() if measure_update else None
        loss, trace = self.forward_backward(x, y, record=logging_step, probe=probe)
        values = probe_hidden = None
        if logging_step:
            probe_hidden = None if probe is None else trace["final"][len(x):]
            values = instruments.read(instruments.collect(loss, trace, rows=len(x)))  # the step's one sync
            del trace
        if logging_step or self.check_every_step:
            loss_value = values["loss"] if values else distributed.mean(loss.detach()).item()
            grad_ok = math.isfinite(values["grad_norm_global"]) if values else True
            if not self.healthy(loss_value, grad_ok):
                self.log_divergence(x, y, values, loss_value, grad_ok)
                return "diverged"
            self.last_train_loss = loss_value
        if cfg.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip, foreach=True)
        if logging_step:  # the model update is measured at θ_step, like every other scalar of this step
            model_update = instruments.model_update_size(self.autocast, probe_hidden) if measure_update else {}
            instruments.before_step()
        self.optimizer.step()
        self.step += 1
        if logging_step:
            values.update(instruments.read({**instruments.after_step(), **model_update}))
            self.log_step(values, lr, x)
        return None

    def set_lr(self, step: int) -> float:
        lr = self.cfg.lr * lr_multiplier(step, self.cfg.steps, self.warmup, self.cfg.schedule)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every rank draws the same global batch and trains on its own rows of it."""
        from .data import get_batch

        x, y = (distributed.my_rows(t) for t in get_batch(self.corpus.train, self.cfg.batch_size, self.cfg.seq_len,
                                                          self.data_gen))
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def forward_backward(self, x, y, record: bool, probe: torch.Tensor | None = None):
        """Loss and (record=True) the instruments' trace. `probe` rows, if given, ride along
        in the forward with ignored targets (see Instruments.fused_probe_rows)."""
        self.optimizer.zero_grad(set_to_none=True)
        if probe is not None:
            x = torch.cat([x, probe])
            y = torch.cat([y, torch.full_like(probe, IGNORE_TARGET)])
        with self.autocast():
            if record:
                _, loss, trace = self.ddp_model(x, y, record=True, z_loss=self.cfg.z_loss)
            else:
                (_, loss), trace = self.step_model(x, y, z_loss=self.cfg.z_loss), None
        loss.backward()
        return loss, trace

    def healthy(self, loss_value: float, grad_ok: bool) -> bool:
        """A finite loss under the ceiling and a finite gradient. At step 0 the ceiling becomes
        at least twice the initial loss: a model that starts high (norm=none) has not diverged."""
        if self.step == 0 and math.isfinite(loss_value):
            self.summary["initial_loss"] = loss_value
            self.max_loss = max(self.max_loss, 2 * loss_value)
        return math.isfinite(loss_value) and loss_value <= self.max_loss and grad_ok

    def log_divergence(self, x, y, values: dict | None, loss_value: float, grad_ok: bool) -> None:
        """Every layer's scalars at the step that diverged (a plain step is redone with the
        trace), a note in TensorBoard and the log."""
        if values is None:
            loss, trace = self.forward_backward(x, y, record=True)
            values = self.instruments.read(self.instruments.collect(loss, trace))
        write_scalars(self.writer, {**scalar_tags(values), "train/loss": values["loss"]}, self.step)
        why = ("non-finite gradient" if math.isfinite(loss_value) and loss_value <= self.max_loss
               else f"loss {loss_value:.4g}" + ("" if not math.isfinite(loss_value) else
                                               f" above the ceiling {self.max_loss:.4g} (divergence.max_loss, or twice the initial loss)"))
        self.writer.add_text("divergence", f"Diverged at step {self.step}: {why}. "
                             "See the per-layer charts at this step for the layer that blew up first.", self.step)
        log.warning("diverged at step %d: %s", self.step, why)

    def log_step(self, values: dict, lr: float, x: torch.Tensor) -> None:
        """A logging step's scalars, depth-profile image and optional histograms, at the step just taken."""
        s = self.step - 1
        write_scalars(self.writer, {**scalar_tags(values), "train/loss": values["loss"], "train/lr": lr}, s)
        every = self.profiles_every
        t0 = time.perf_counter()
        if every and (s % every == 0 or s == self.cfg.steps - 1):
            self.writer.add_figure("depth_profile", depth_profile_figure(values, s), s)
        if self.cfg.log.histograms:
            for i, t in enumerate(block_outputs(self.model, x)):
                self.writer.add_histogram(f"act_hist/layer_{i:02d}", t, s)
        self.step_extra += time.perf_counter() - t0  # drawing is not training: kept out of tokens/s

    # ---------------------------------------------------------------- after a step

    def after_step(self) -> str | None:
        """Throughput, evaluation, checkpoint and progress after the step just taken;
        "diverged" if the validation loss is not finite."""
        cfg, step = self.cfg, self.step
        logged = (step - 1) % cfg.log_every == 0 or step == cfg.steps
        self.timer_seconds += time.perf_counter() - self.step_began - self.step_extra
        self.timer_steps += 1
        if logged:  # throughput over the steps since the last logging step (the first is warm-up)
            if step - 1 > self.start_step:
                self.tps = round(self.timer_steps * cfg.batch_size * cfg.seq_len / max(self.timer_seconds, 1e-9), 1)
                self.writer.add_scalar("perf/tokens_per_second", self.tps, step - 1)
            self.timer_seconds, self.timer_steps = 0.0, 0
        if step % cfg.eval_every == 0 or step == cfg.steps:
            val = self.evaluate()
            self.summary["final_val_loss"] = val
            self.best_val = min(self.best_val, val)
            self._log_val(val, step)
            if not math.isfinite(val):
                return "diverged"
        if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < cfg.steps:
            self.save_checkpoint()
        fields = {} if self.last_train_loss is None else {"loss": f"{self.last_train_loss:.4f}"}
        fields["lr"] = f"{self.optimizer.param_groups[0]['lr']:.2e}"
        if self.tps:
            fields["tok/s"] = f"{self.tps:,.0f}"
        self.progress.update(step - 1, fields, line=logged)
        if self.hooks.on_step:
            self.hooks.on_step(step - 1)
        # evaluation, checkpoint, progress and the hook above are not the step: the next one starts here
        self.step_began, self.step_extra = time.perf_counter(), 0.0
        return None

    def evaluate(self) -> float:
        """Mean validation loss over `eval_batches` fixed batches (the same every time)."""
        from .data import get_batch

        cfg = self.cfg
        gen = torch.Generator().manual_seed(cfg.seed + 2)
        self.model.eval()
        total = torch.zeros((), device=self.device)
        with torch.no_grad(), self.autocast():
            for _ in range(cfg.eval_batches):
                x, y = (distributed.my_rows(t) for t in get_batch(self.corpus.val, cfg.batch_size, cfg.seq_len, gen))
                total += self.model(x.to(self.device), y.to(self.device))[1].float()
        self.model.train()
        return distributed.mean(total / cfg.eval_batches).item()

    def _log_val(self, val: float, step: int) -> None:
        self.writer.add_scalar("val/loss", val, step)
        if self.corpus.bytes_per_token != 1.0:
            self.writer.add_scalar("val/loss_per_byte", val / self.corpus.bytes_per_token, step)

    # ------------------------------------------------------------ saving, finishing

    def save_checkpoint(self) -> None:
        self.summary["steps_completed"] = self.step
        if not self.main:
            return
        ckpt.save(self.run_dir, {
            "model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step,
            "data_generator": self.data_gen.get_state(), "rng": ckpt.capture_rng(), "best_val": self.best_val,
            "probe_h0": self.instruments.probe_h0, "summary": self.summary,
        }, keep=self.cfg.keep_checkpoints)

    def _write_summary(self) -> None:
        if self.main:
            write_summary(self.run_dir, self.summary)

    def stop_interrupted(self, e: Interrupted) -> None:
        """Checkpoint at this step boundary, then status "interrupted", or "requeued" when SLURM
        preempts the job (its requeued job resumes from here; `requeues` counts the times)."""
        self.progress.close()
        preempted = isinstance(e, Preempted)
        if preempted:
            self.summary["requeues"] = self.summary.get("requeues", 0) + 1
        self.save_checkpoint()
        self.finish("requeued" if preempted else "interrupted")
        if preempted:
            log.warning("preempted by %s at step %d (SLURM time limit or preemption): checkpoint saved; "
                        "the job is requeued and resumes from it", e, self.step)
        else:
            log.warning("interrupted by %s at step %d: checkpoint saved; resume with: %s", e, self.step,
                        ckpt.resume_command(self.run_dir))

    def finish(self, status: str, **extra) -> dict:
        """Final numbers into the summary, TensorBoard's HParams metrics and summary.json.
        A completed run that did not end at least `stall_margin` below the unigram baseline
        is "stalled" (runfolder.learned)."""
        self.progress.close()
        self.summary.update(extra)
        if status == "completed" and not learned(self.summary["final_val_loss"], self.summary.get("baseline_loss"),
                                                 self.summary["stall_margin"]):
            status = "stalled"
        self.summary.update(status=status, steps_completed=self.step, final_train_loss=self.last_train_loss,
                            best_val_loss=None if self.best_val == math.inf else self.best_val,
                            tokens_per_second=self.tps, wall_seconds=round(time.time() - self.t_start, 2))
        final = {"hparams/final_val_loss": self.summary["final_val_loss"], "hparams/best_val_loss": self.summary["best_val_loss"],
                 "hparams/final_train_loss": self.last_train_loss, "hparams/status": float(STATUSES.index(status)),
                 "hparams/diverged_at_step": self.summary["diverged_at_step"]}
        for tag, v in final.items():
            if v is not None and math.isfinite(v):
                self.writer.add_scalar(tag, v, self.step)
        self.writer.close()
        self._write_summary()
        if status in ("completed", "stalled"):
            s = self.summary
            log.info("%s %d steps: val loss %.4f (best %.4f, unigram baseline %.4f), %s tokens/s, %.0f s -> %s",
                     status, self.step,
                     s["final_val_loss"] or float("nan"), s["best_val_loss"] or float("nan"),
                     s.get("baseline_loss") or float("nan"), f"{self.tps:,.0f}" if self.tps else "?", s["wall_seconds"], self.run_dir)
        return self.summary


@torch.no_grad()
def block_outputs(model: GPT, x: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream leaving each block, for the optional histograms."""
    was = model.training
    model.eval()
    _, trace = model.hidden(x, record=True)
    model.train(was)
    return [t.float().cpu() for t in trace["block"]]
