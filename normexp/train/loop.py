"""The training loop: runs from resolved configs into their run folders, one loop for a run
alone (a list of one) and for a pack's members alike.

A run alone starts at train/alone.py's `train()`, a pack at train/pack.py's `train_pack()`;
both are `train_runs()`, which reads top to bottom: build a `Trainer` per run (its `Run` part: data, model,
optimizer, instruments, resume, the run's log), then step until each is done (`Runs.step`),
each finishing on its own. One run's step (`Trainer.train_step`), on one screen:

    lr for this update → next batch → forward/backward (recorded by the instruments on a
    logging step) → the instruments before the update → divergence check → optional clipping
    → optimizer step → the instruments after it, and logging

and after it (`Trainer.after_step`): throughput, evaluation, checkpoint, progress. A
divergence raises `Diverged`, which ends that run with status "diverged". A pack
(train/pack.py) supplies one thing, the plain steps of its members as one model; their
checks, updates and everything after are the members' own, through the same Trainer methods.
What a run leaves behind (summary.json, events, checkpoints, every status change) is its
RunLog's (run_log.py); resuming is resume.py's. The loop's parts have names of their own:
`is_logging_step` (the one logging-step rule), `SEED_STREAMS` (the random streams),
`DivergenceGuard`, `ThroughputMeter`, `make_optimizer`, `build_parts`.
"""

from __future__ import annotations

import contextlib
import contextvars
import gc
import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Callable

import numpy as np
import torch
from omegaconf import DictConfig

from ..data.batches import get_batch, load_corpus
from ..runs import checkpoint as ckpt
from . import resume
from . import distributed
from .config import TrainConfig
from .flat_adamw import FlatAdamW
from .instruments import Instruments, StepWatch, recording
from ..model import GPT
from ..runs import schema
from ..runs.record import read_record
from ..runs.settings import result_settings
from ..runs.summary import summary_record
from .schedules import lr_multiplier
from .run_log import RunLog
from .threads import set_threads
from .signals import Interrupted, StopSignals
from ..config.checks import ConfigError
from ..config.run_config import OptimizerConfig
from ..runs.schema import Status

log = logging.getLogger("normexp")


@dataclass(frozen=True)
class JobContext:
    """What the launcher knows about this job that training needs: `train(cfg)` reads nothing
    global (launch/hydra_state.py builds this from Hydra's job state; outside Hydra the defaults).

    launcher       the sweep launcher's config (n_jobs, cpus_per_task) for threads=auto; None
                   for a single run
    swept_keys     the keys this job's command or sweep varies (TensorBoard's HParams columns)
    resume         the command that continues this run ("": `resume_command(run_dir)` alone)
    label          a sweep job's label (`#3 placement=post`): its progress bar's, and its bar
                   gives way to log lines (the sweep keeps the terminal's one redrawn line);
                   "" for a single run"""

    launcher: Mapping | None = None
    swept_keys: frozenset[str] = frozenset()
    resume: str = ""
    label: str = ""


@dataclass
class Hooks:
    """Ways in for tools that measure the loop (the bench) without changing it."""

    on_start: Callable[[], None] | None = None      # set-up done, step 0 next
    on_step: Callable[[int], None] | None = None    # a step finished (its index)


# A first signal waits for the next step boundary this many times the longest step so far (at
# least signals.GRACE_SECONDS) before the loop stops at once: a step's time varies with
# evaluations, checkpoints and load, and a pack's step is K members'.
STEP_GRACE_FACTOR = 3.0

# the run whose code runs now (None: the loop's own), for the packed launcher's per-member logs
current_member: contextvars.ContextVar[int | None] = contextvars.ContextVar("current_member", default=None)


@contextlib.contextmanager
def as_member(i: int):
    token = current_member.set(i)
    try:
        yield
    finally:
        current_member.reset(token)


def train_runs(configs: Sequence[DictConfig | TrainConfig], run_dirs: Sequence[Path], stop: StopSignals | None = None,
               jobs: Sequence[JobContext] | None = None, hooks: Hooks | None = None,
               stepping: Callable[[list[Trainer]], Runs] | None = None) -> list[dict]:
    """The one training loop: the runs `configs` describe, each into its run folder, stepped
    together until each has finished (a run alone: a list of one). Returns their summaries.

        each run at step 0: the initial evaluation
        while some run is running:
            a signal since the last step? each running run checkpoints, records "interrupted"
                (or "requeued"), and `Interrupted` is raised
            one step of every running run (`Runs.step`: its update, then evaluation,
                checkpoint, progress; a run that diverged or reached its last step finishes)

    `stepping` builds what steps them from their Trainers: `Runs` (each its own step), or a
    pack (train/pack.py) whose plain steps are one model. The first signal waits for the next
    step boundary up to STEP_GRACE_FACTOR × the longest step so far (`stop.grace` raised to
    it); a stop that cannot wait (a second signal, the grace spent) is `stop`'s on_hard_stop's
    to record (the launcher's). The set-up's objects are out of the garbage collector's sight
    while the runs train (set_up_objects_frozen); a write the disk refuses names its file
    (RunLog.full_disk_named)."""
    configs = [c if isinstance(c, TrainConfig) else TrainConfig.from_composed(c) for c in configs]
    jobs = [j or JobContext() for j in (jobs or [None] * len(configs))]
    trainers = []
    for i, (config, run_dir, job) in enumerate(zip(configs, run_dirs, jobs)):
        with as_member(i):
            trainers.append(Trainer(config, Path(run_dir), hooks or Hooks(), job))
    runs = (stepping or Runs)(trainers)
    with contextlib.ExitStack() as stack:
        stop = stop or stack.enter_context(StopSignals())
        stack.enter_context(set_up_objects_frozen())
        try:
            with stop.deferred():
                for i in runs.running():
                    if trainers[i].step == 0:
                        runs.guarded(i, trainers[i].evaluate_initial)
                longest = 0.0
                while runs.running():
                    stop.check()
                    began = time.monotonic()
                    runs.step()
                    longest = max(longest, time.monotonic() - began)
                    stop.grace = max(stop.grace, STEP_GRACE_FACTOR * longest)
        except Interrupted as e:
            for i in runs.running():
                with as_member(i):
                    trainers[i].stop_interrupted(e)
            raise
    return [s if s is not None else t.summary for s, t in zip(runs.summaries, trainers)]


@contextlib.contextmanager
def set_up_objects_frozen():
    """The Python objects of the set-up (modules, parameters, config, compiled code) moved out
    of the garbage collector's sight for the run (gc.freeze), after one collection. They live
    as long as the run, yet every full collection walked all of them: at 1,000 blocks under
    compile=true (whose calls make many short-lived objects) every third step took ~250 ms
    more. Unfrozen at the end, so a process that runs several jobs (joblib) can free them."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


# ------------------------------------------------------------ the loop's named parts

def is_logging_step(step: int, log_every: int, steps: int) -> bool:
    """The logging-step rule: steps 0, log_every, 2·log_every, ... and the last (steps − 1).
    The instruments run on these steps only, and tokens/s is reported at them."""
    return step % log_every == 0 or step == steps - 1


# The random streams of a run, as offsets from the run's seed: each its own generator, so drawing
# from one never shifts another. Fixed: checkpoints and the numerics fixture depend on them.
SEED_STREAMS = {"data": 0, "reference_batch": 1, "evaluation": 2, "calibration": 3}


def generator(seed: int, stream: str) -> torch.Generator:
    """The CPU generator of one of SEED_STREAMS for the run's seed."""
    return torch.Generator().manual_seed(seed + SEED_STREAMS[stream])


def reference_batch(val_tokens, config: TrainConfig) -> torch.Tensor:
    """The model update's fixed input: a sixteenth of the batch (1 to 8 sequences) of
    validation text. It joins every logging step's forward and backward, so its size is
    paid for at every logging step."""
    x, _ = get_batch(val_tokens, min(8, max(1, config.batch_size // 16)), config.seq_len,
                     generator(config.seed, "reference_batch"))
    return x


class Diverged(Exception):
    """The run must end here: a non-finite or too-large training loss, a non-finite gradient,
    or a non-finite validation loss. `step`: where it was found; str(e): why."""

    def __init__(self, step: int, why: str):
        super().__init__(why)
        self.step = step


class DivergenceGuard:
    """The divergence rule: a finite loss under the ceiling and a finite gradient. The ceiling
    is divergence.max_loss, raised to twice the initial loss once that is known, so a model
    that starts high (norm=none) has not diverged. `every_step`: check plain steps too
    (divergence.every_step; auto = on CPU, where reading the loss costs nothing; on GPUs only
    logging steps and evaluations, as reading the loss waits for the GPU)."""

    def __init__(self, max_loss: float, every_step: bool, initial_loss: float | None = None):
        self.max_loss, self.every_step, self.initial_loss = max_loss, every_step, initial_loss
        if initial_loss is not None:
            self.set_initial_loss(initial_loss)

    def set_initial_loss(self, loss: float) -> None:
        self.max_loss = max(self.max_loss, 2 * loss)

    def check(self, step: int, loss: float, grad_finite: bool) -> str | None:
        """`problem`, after step 0's finite loss has set the ceiling."""
        if step == 0 and math.isfinite(loss):
            self.initial_loss = loss
            self.set_initial_loss(loss)
        return self.problem(loss, grad_finite)

    def problem(self, loss: float, grad_finite: bool) -> str | None:
        """None if the step is healthy, else what is wrong with it."""
        if not math.isfinite(loss):
            return f"loss {loss:.4g}"
        if loss > self.max_loss:
            return f"loss {loss:.4g} above the ceiling {self.max_loss:.4g} (divergence.max_loss, or twice the initial loss)"
        return None if grad_finite else "non-finite gradient"


class ThroughputMeter:
    """tokens/s of the training steps alone: each step is timed from its start (`restart`) to
    `step_done`, less the seconds it is told to `exclude` (drawing images and histograms);
    evaluation, checkpoints, progress and hooks fall between steps. `window_rate` is the rate
    over the steps since the last call."""

    def __init__(self, tokens_per_step: int, tokens_per_second: float | None = None):
        self.tokens_per_step = tokens_per_step
        self.tokens_per_second = tokens_per_second  # the last rate reported (a resumed run's, at first)
        self.seconds, self.steps = 0.0, 0
        self.restart()

    def restart(self) -> None:
        """The next step starts now."""
        self.began, self.excluded = time.perf_counter(), 0.0

    def exclude(self, seconds: float) -> None:
        self.excluded += seconds

    def step_done(self) -> None:
        self.seconds += time.perf_counter() - self.began - self.excluded
        self.steps += 1

    def window_rate(self, report: bool = True) -> float | None:
        """tokens/s over the window, which then starts afresh; report=False drops it (warm-up)."""
        if report:
            self.tokens_per_second = round(self.steps * self.tokens_per_step / max(self.seconds, 1e-9), 1)
        self.seconds, self.steps = 0.0, 0
        return self.tokens_per_second if report else None


def load_data(config: TrainConfig, run_dir: Path | None = None):
    """The corpus, with both splits long enough for one sequence and its target. The data files
    must hold what the run's record (written as the run began) names: a file replaced since is
    refused, not trained on (load_corpus's expect_files)."""
    record = read_record(run_dir) if run_dir is not None else None
    corpus = load_corpus(config.data, config.tokenizer, progress=config.log.progress != "off",
                         expect_files=(record or {}).get("data_files"))
    for split, tokens in (("train", corpus.train), ("val", corpus.val)):
        if len(tokens) < config.seq_len + 2:
            raise ConfigError("seq_len", config.seq_len, f"the {split} split has only {len(tokens)} tokens; "
                              "use a smaller seq_len or a larger corpus")
    log.info("%s", corpus.description)
    return corpus


def build_model(config: TrainConfig, corpus, device: torch.device) -> GPT:
    """The model on `device`, for the corpus's tokenizer, calibrated where the placement
    profiles (Admin) on a batch of its own stream, so the training batches are untouched."""
    model = GPT(config.model.with_vocab_size(corpus.vocab_size)).to(device)
    calibration_batch, _ = get_batch(corpus.train, config.batch_size, config.seq_len,
                                     generator(config.seed, "calibration"))
    model.calibrate(calibration_batch.to(device))
    return model


@torch.no_grad()
def validation_loss(model: GPT, val_tokens, config: TrainConfig, device: torch.device, autocast) -> float:
    """Mean validation loss over `eval_batches` fixed batches (the same every time: the
    evaluation stream restarts), in eval mode; each rank its rows, averaged over ranks."""
    gen = generator(config.seed, "evaluation")
    batches = config.log.eval_batches
    model.eval()
    total = torch.zeros((), device=device)
    with autocast():
        for _ in range(batches):
            x, y = (distributed.my_rows(t) for t in get_batch(val_tokens, config.batch_size, config.seq_len, gen))
            total += model(x.to(device), y.to(device))[1].float()
    model.train()
    return distributed.mean(total / batches).item()


def decays(name: str, p: torch.nn.Parameter) -> bool:
    """Weight decay on matrices only: not on norms, biases or embeddings."""
    return p.dim() >= 2 and "emb" not in name


def make_optimizer(model: GPT, optim: OptimizerConfig) -> torch.optim.AdamW:
    """AdamW over the placement's parameter groups (`GPT.param_groups`: one group, or
    depth_mup's depth-scaled lr and ε for the blocks), each split into the parameters that
    decay and those that do not (`decays`); empty groups left out. Fused, on one flat buffer
    per group (FlatAdamW: the same numbers as torch's per-tensor fused step, in one kernel call
    per group, each group's own lr, ε and weight decay) where the build has the fused kernel,
    else foreach. Checkpoints keep torch.optim.AdamW's format."""
    names = {id(p): n for n, p in model.named_parameters()}
    groups = []
    for group in model.param_groups(optim.lr, optim.eps):
        params, hyper = group["params"], {k: v for k, v in group.items() if k != "params"}
        for decay, weight_decay in ((True, optim.weight_decay), (False, 0.0)):
            chosen = [p for p in params if decays(names[id(p)], p) == decay]
            if chosen:  # a placement's own weight_decay (nGPT: none) wins
                groups.append({"params": chosen, "weight_decay": weight_decay, **hyper})
    kwargs = dict(lr=optim.lr, betas=tuple(optim.betas), eps=optim.eps)
    try:
        return FlatAdamW(groups, **kwargs)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, **kwargs, foreach=True)


def run_environment(config: TrainConfig, job: JobContext) -> tuple[int, torch.device, bool]:
    """Threads (set again for each job: joblib reuses its workers), the global seed, the device
    (this rank's under torchrun), and whether this process writes the run folder (rank 0)."""
    threads = set_threads(config.threads, job.launcher)
    seed_everything(config.seed)
    device = distributed.rank_device(select_device(config.device))
    distributed.local_batch_size(config.batch_size)  # the global batch must split evenly over ranks
    if config.schedule.warmup_shortened:
        log.warning("%s", config.schedule.warmup_shortened)
    return threads, device, distributed.is_main()


def build_parts(config: TrainConfig, corpus, device: torch.device, autocast):
    """A run's model (blocks compiled under compile=true), its optimizer, the DDP wrapper (the
    model itself outside torchrun) and its instruments, reference batch set."""
    model = build_model(config, corpus, device)
    optimizer = make_optimizer(model, config.optim)
    if config.compile:
        model.compile_blocks()
    instruments = Instruments(model, config.log.model_update, config.log.model_update_every,
                              extra_signals=config.log.extra_signals)
    instruments.set_reference_batch(reference_batch(corpus.val, config).to(device), autocast)
    return model, optimizer, distributed.wrap(model, device), instruments


class Run:
    """One run's objects, built once (data, model, optimizer, instruments; resumed from its newest
    checkpoint under resume=true) and its record: a checkpoint of them, its end. What it leaves
    behind is written by its RunLog. `Trainer` steps it."""

    in_pack = False  # one member of a pack (train/pack.py)

    def __init__(self, config: TrainConfig, run_dir: Path, hooks: Hooks, job: JobContext | None = None):
        self.config, self.run_dir, self.hooks, self.job = config, run_dir, hooks, job or JobContext()
        self.settings = result_settings(config.composed)  # what this run computes; each checkpoint keeps it
        threads, self.device, self.main = run_environment(config, self.job)
        self.autocast = autocast_for(self.device)
        self.summary = summary_record(config.composed, device=str(self.device), threads=threads)
        self.log = RunLog(config, run_dir, self.job, self.main, self.summary)
        self.corpus = load_data(config, run_dir)
        self.log.bytes_per_token = self.corpus.bytes_per_token
        self.summary.update(baseline_loss=self.corpus.baseline_loss)
        self.model, self.optimizer, self.ddp_model, self.instruments = build_parts(config, self.corpus, self.device,
                                                                                   self.autocast)
        built = self.model.settings()  # read from the modules: what was built, "auto" resolved
        self.summary.update(parameters=self.model.num_parameters(), placement_settings=built["placement"],
                            norm_settings=built["norm"])
        self.data_gen = generator(config.seed, "data")
        self.step, self.best_val, self.last_train_loss = 0, math.inf, None
        state = resume.checkpoint_to_resume(run_dir, self.settings) if config.resume else None
        if state is not None:
            resume.restore(state, run_dir, self.model, self.optimizer, self.data_gen, self.instruments)
            self.step, self.best_val = state["step"], state["best_val"]
            self.summary.update(state["summary"])
            self.last_train_loss = self.summary.get("final_train_loss")
            log.info("resumed from step %d", self.step)
        self.start_step = self.step
        self.log.start(self.step if state is not None else None, self.step)  # a resumed run's events restart here
        # a resumed run keeps the ceiling set at its step 0
        self.guard = DivergenceGuard(config.max_loss, every_step=config.divergence_checks_every_step(self.device.type),
                                     initial_loss=self.summary.get("initial_loss"))
        self.meter = ThroughputMeter(config.batch_size * config.seq_len, self.summary.get("tokens_per_second"))
        self.model.train()
        if hooks.on_start:
            hooks.on_start()

    def save_checkpoint(self) -> None:
        model = self.model.state_dict()
        if self.in_pack:  # its weights are views of the pack's: saved alone, not with the other members'
            model = {k: v.clone() for k, v in model.items()}
        self.log.save_checkpoint({
            "model": model, "optimizer": self.optimizer.state_dict(), "step": self.step,
            "data_generator": self.data_gen.get_state(), "rng": ckpt.capture_rng(), "best_val": self.best_val,
            "instruments": self.instruments.state_dict()}, self.settings)

    def results(self) -> dict:
        return {"best_val": self.best_val, "last_train_loss": self.last_train_loss,
                "tokens_per_second": self.meter.tokens_per_second}

    def stop_interrupted(self, e: Interrupted) -> None:
        """Checkpoint at this step boundary, then status "interrupted" or "requeued" (RunLog.interrupted)."""
        self.log.interrupted(e, self.step, self.save_checkpoint, self.results())

    def finish(self, status: str, **extra) -> dict:
        if self.device.type == "cuda":  # this process's peak: a pack's (all members), a resumed run's last part
            extra.setdefault("peak_gpu_mib", round(torch.cuda.max_memory_allocated(self.device) / 2**20))
        return self.log.finish(status, self.step, **self.results(), **extra)

    # what tools and tests reach through the run, owned by its log
    writer = property(lambda self: self.log.writer)
    progress = property(lambda self: self.log.progress)


class Trainer(Run):
    """A run's step (`train_step`, on one screen) and what follows it (`after_step`:
    throughput, evaluation, checkpoint, progress). `alone.train()` drives a Trainer; a pack drives several."""

    # ------------------------------------------------------------------ one step

    def train_step(self) -> None:
        """One optimizer update, in nanoGPT's order. On a logging step (is_logging_step) the
        instruments watch it: one call before the update, one after. Raises Diverged if the run ends here."""
        lr = self.set_lr(self.step)
        x, y = self.next_batch()
        config, step = self.config, self.step
        watch = StepWatch(self.instruments, self.autocast, measure_update=self.instruments.model_update_due(
            step, config.log.log_every, config.steps - 1)) if is_logging_step(step, config.log.log_every, config.steps) else None
        loss = self.forward_backward(x, y, watch)
        values = watch.before_update(loss, targets=y, z_loss=self.config.z_loss) if watch else None  # one sync
        self.update(x, y, loss, lr, values, watch)

    def update(self, x, y, loss: torch.Tensor, lr: float, values: dict | None = None, watch: StepWatch | None = None) -> None:
        """The step after its backward: divergence check, clipping, optimizer step, the
        instruments after it. A pack's plain step (train/pack.py) calls this after its backward."""
        self.check_health(x, y, loss, values)
        if self.config.optim.grad_clip is not None:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.optim.grad_clip, foreach=True)
        self.optimizer.step()
        self.advance()
        if watch:
            values = {**values, **watch.after_update(self.optimizer)}
            drawing = self.log.log_step(values, lr, self.step - 1, lambda: block_outputs(self.model, x))
            self.meter.exclude(drawing)  # drawing histograms is not training

    def advance(self) -> None:
        """The update applied (here, or by a pack for all its members at once): the model's own
        after-step (nGPT's renormalization), then the step count."""
        self.model.after_optimizer_step()
        self.step += 1

    def set_lr(self, step: int) -> float:
        schedule = self.config.schedule
        lr = self.config.optim.lr * lr_multiplier(step, schedule.steps, schedule.effective_warmup, schedule)
        for group in self.optimizer.param_groups:  # each group keeps its placement's lr scale (Depth-μP's)
            group["lr"] = lr * group.get("lr_scale", 1.0)
        return lr

    def next_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Every rank draws the same global batch and trains on its own rows of it."""
        batch = get_batch(self.corpus.train, self.config.batch_size, self.config.seq_len, self.data_gen)
        x, y = (distributed.my_rows(t) for t in batch)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def forward_backward(self, x, y, watch: StepWatch | None = None) -> torch.Tensor:
        """The loss, after its backward; a `watch` records the forward, its reference rows riding along."""
        self.optimizer.zero_grad(set_to_none=True)
        if watch is not None:
            x, y = watch.with_reference_rows(x, y)
        with self.autocast(), watch.recording() if watch else contextlib.nullcontext():
            _, loss = self.ddp_model(x, y, z_loss=self.config.z_loss)
        loss.backward()
        return loss

    def check_health(self, x, y, loss: torch.Tensor, values: dict | None) -> None:
        """The divergence guard on this step's loss and (logging step) gradient; step 0's loss sets
        its ceiling first. Raises Diverged, after logging every layer's scalars at this step
        (a plain step redone with the trace). Plain steps are checked only where the guard checks
        every step (CPU)."""
        if values is None and not self.guard.every_step:
            return
        loss_value = values["loss"] if values else distributed.mean(loss.detach()).item()
        why = self.guard.check(self.step, loss_value, math.isfinite(values["grad_norm_global"]) if values else True)
        if self.step == 0 and self.guard.initial_loss is not None:  # the outcome rule compares to it
            self.summary["initial_loss"] = self.guard.initial_loss
        if why is not None:
            self.diverged(x, y, values, why, self.step)
        self.last_train_loss = loss_value

    def diverged(self, x, y, values: dict | None, why: str, step: int):
        """Log every layer's scalars at the step that diverged, then raise Diverged."""
        if values is None:
            watch = StepWatch(self.instruments, self.autocast)
            values = watch.scalars(self.forward_backward(x, y, watch))
        self.log.log_divergence(values, why, step)
        raise Diverged(step, why)

    # ---------------------------------------------------------------- after a step

    def after_step(self) -> None:
        """Throughput, evaluation, checkpoint and progress after the step just taken."""
        config, step = self.config, self.step
        logged = is_logging_step(step - 1, config.log.log_every, config.steps)
        self.meter.step_done()
        if logged and (tps := self.meter.window_rate(report=step - 1 > self.start_step)) is not None:
            self.log.writer.add_scalar(schema.TOKENS_PER_SECOND, tps, step - 1)  # the first window is warm-up
        if step % config.log.eval_every == 0 or step == config.steps:
            self.evaluate(step)
        if config.checkpoint_every and step % config.checkpoint_every == 0 and step < config.steps:
            self.save_checkpoint()
        self.log.progress.update(step - 1, logged, self.last_train_loss, self.optimizer.param_groups[0]["lr"],
                                 self.meter.tokens_per_second)
        if self.hooks.on_step:
            self.hooks.on_step(step - 1)
        self.meter.restart()  # evaluation, checkpoint, progress and the hook are not the next step's time

    def evaluate(self, step: int) -> None:
        """The validation loss at `step`, into the summary and TensorBoard. Not finite: Diverged
        (where plain steps go unchecked, on GPUs, the evaluation finds it first)."""
        val = validation_loss(self.model, self.corpus.val, self.config, self.device, self.autocast)
        self.summary["final_val_loss"] = val
        self.summary[schema.LOSS_TRAJECTORY]["val"].append([step, val])
        self.best_val = min(self.best_val, val)
        self.log.log_val(val, step)
        if not math.isfinite(val):
            self.diverged(*self.next_batch(), None, f"validation loss {val}", step)

    def evaluate_initial(self) -> None:
        """The initial model's validation loss at step 0, so a curve starts where training does: in
        TensorBoard and as the first point of summary.json's val trajectory (the same points as
        TensorBoard's; the outcome rule's slope leaves step 0 out, runs/outcomes.curve). It reads
        the evaluation stream alone and changes no state; final and best val loss stay the
        trained model's."""
        val = validation_loss(self.model, self.corpus.val, self.config, self.device, self.autocast)
        self.summary[schema.LOSS_TRAJECTORY]["val"].append([0, val])
        self.log.log_val(val, 0)
        self.meter.restart()



class Runs:
    """The runs one loop steps (`train_runs`), each a Trainer; a run alone is a list of one.
    Each step: the runs at a logging step take their own `train_step` (the instruments watch
    it); the others their plain step (`plain_step`: here each its own `train_step`; a pack,
    train/pack.py, computes them as one model); then each its `after_step`, and a run that
    reached its last step saves its checkpoint and finishes. A run that diverges finishes
    alone (status "diverged"); the others go on."""

    def __init__(self, trainers: Sequence[Trainer]):
        self.trainers = list(trainers)
        self.summaries: list[dict | None] = [None] * len(self.trainers)  # a finished run's
        for t in self.trainers:
            t.summary["cuda_graph"] = False  # a pack whose plain steps are a graph says True

    def running(self) -> list[int]:
        return [i for i, t in enumerate(self.trainers) if self.summaries[i] is None and t.step < t.config.steps]

    def step(self) -> None:
        running = self.running()
        plain = []
        for i in running:
            t = self.trainers[i]
            if is_logging_step(t.step, t.config.log.log_every, t.config.steps):
                self.guarded(i, t.train_step)
            else:
                plain.append(i)
        if plain:
            self.plain_step(plain)
        for i in running:
            t = self.trainers[i]
            if self.summaries[i] is None:
                self.guarded(i, t.after_step)
            if self.summaries[i] is None and t.step >= t.config.steps:
                self.guarded(i, lambda i=i, t=t: self.completed(i, t))

    def plain_step(self, runs: list[int]) -> None:
        """One update of each listed run at a step that is not a logging step."""
        for i in runs:
            self.guarded(i, self.trainers[i].train_step)

    def completed(self, i: int, trainer: Trainer) -> None:
        trainer.save_checkpoint()
        self.summaries[i] = trainer.finish(Status.COMPLETED)

    def guarded(self, i: int, action: Callable[[], None]) -> None:
        """One run's action, its log lines its own (`as_member`), a write the disk refuses named
        (RunLog.full_disk_named); a divergence finishes that run alone."""
        t = self.trainers[i]
        with as_member(i), t.log.full_disk_named(lambda: t.step):
            try:
                action()
            except Diverged as e:
                self.summaries[i] = t.finish(Status.DIVERGED, diverged_at_step=e.step)


@torch.no_grad()
def block_outputs(model: GPT, x: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream leaving each block, for the optional histograms."""
    was = model.training
    model.eval()
    with recording(model, only=("block",)) as trace:
        model.hidden(x)
    model.train(was)
    return [t.float().cpu() for t in trace["block"]]
