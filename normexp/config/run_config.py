"""A training run's settings, typed, all but the model's (train/config.py's TrainConfig adds
ModelConfig), each with its rules beside its data.

    RunConfig         seed, device, batch, data, checkpoints, margins ... and its parts:
      OptimizerConfig AdamW's settings and clipping
      ScheduleConfig  the learning-rate schedule: its name, steps, warmup (the warmup rule)
      LogConfig       the logging, evaluation and instrument cadence
      LossSpikeConfig the loss-spike flag's Hampel rule (train/spikes.py)

Each reads its keys off the composed config once (`from_composed`); its `check` holds its rules
(ranges, cross-key checks) and raises their one-line ConfigError; the pre-flight
(launch/validate.py) calls it. They keep values as written (no conversion that could fail), so
`check` names what the user wrote. Standard library only (with config/'s own leaves), so the
pre-flight builds them before torch loads, and runs/ reads `effective_warmup` from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .checks import ConfigError, is_integer, is_number
from .compose import declared_names
from .keys import plain


def effective_warmup(warmup: int, steps: int) -> int:
    """The warmup a run trains with: a warmup longer than the run warms up over all its steps.
    The one home of this rule: the schedule, summary.json's `warmup` and the report's read it."""
    return min(warmup, steps)


@dataclass(frozen=True)
class OptimizerConfig:
    """AdamW (train/loop.make_optimizer): peak learning rate, betas, ε, decoupled weight decay,
    and the optional global gradient-norm clip (None = off)."""

    lr: float
    betas: tuple
    eps: float
    weight_decay: float
    grad_clip: float | None

    @classmethod
    def from_composed(cls, cfg) -> "OptimizerConfig":
        betas = plain(cfg.optim.betas)  # a list as written; anything else stays for `check` to name
        return cls(lr=cfg.lr, betas=tuple(betas) if isinstance(betas, list) else betas, eps=cfg.optim.eps,
                   weight_decay=cfg.optim.weight_decay, grad_clip=cfg.grad_clip)

    def check(self) -> None:
        if not is_number(self.lr) or self.lr <= 0:
            raise ConfigError("lr", self.lr, "must be a finite number > 0")
        if self.grad_clip is not None and (not is_number(self.grad_clip) or self.grad_clip <= 0):
            raise ConfigError("grad_clip", self.grad_clip, "must be null (off) or a finite number > 0")
        betas = self.betas
        if not isinstance(betas, tuple) or len(betas) != 2 or not all(is_number(b) and 0 <= b < 1 for b in betas):
            shown = list(betas) if isinstance(betas, tuple) else betas  # as the user wrote it: [a,b]
            raise ConfigError("optim.betas", shown, "must be two numbers in [0, 1), e.g. optim.betas=[0.9,0.98]")
        if not is_number(self.eps) or self.eps <= 0:
            raise ConfigError("optim.eps", self.eps, "must be a finite number > 0")
        if not is_number(self.weight_decay) or self.weight_decay < 0:
            raise ConfigError("optim.weight_decay", self.weight_decay, "must be a finite number >= 0")


@dataclass(frozen=True)
class ScheduleConfig:
    """The learning-rate schedule (train/schedules.py): a linear warmup over `warmup` updates,
    then the decay `name` over the rest of `steps`. `settings`: the schedule's own keys
    (configs/schedule/NAME.yaml: cosine's and linear's min_lr_ratio)."""

    name: str
    steps: int
    warmup: int
    settings: dict = field(default_factory=dict)

    @classmethod
    def from_composed(cls, cfg) -> "ScheduleConfig":
        node = plain(cfg.schedule)
        return cls(name=node.get("name"), steps=cfg.steps, warmup=cfg.warmup,
                   settings={k: v for k, v in node.items() if k != "name"})

    @property
    def min_lr_ratio(self) -> float:
        """The final lr as a fraction of lr (the decaying schedules' floor)."""
        return self.settings["min_lr_ratio"]

    @property
    def effective_warmup(self) -> int:
        """The warmup trained with: at most `steps` (effective_warmup)."""
        return effective_warmup(self.warmup, self.steps)

    @property
    def warmup_shortened(self) -> str | None:
        """The warning for a (default) warmup longer than the run, or None."""
        if self.warmup <= self.steps:
            return None
        return f"warmup={self.warmup} is longer than steps={self.steps}: warming up over all {self.steps} steps"

    def check(self, warmup_given: bool = False) -> None:
        """`warmup_given`: the user set warmup on the command line. A default warmup longer than
        a short run is shortened (with a warning, `warmup_shortened`); a given one is refused."""
        w = self.warmup
        if not is_integer(w) or w < 0 or (w > self.steps and warmup_given):
            raise ConfigError("warmup", w, f"must be an integer step count from 0 to steps={self.steps}")
        if self.name not in declared_names("schedule"):  # the shipped options: train/schedules.py's SCHEDULES
            raise ConfigError("schedule", self.name, f"choose from {', '.join(declared_names('schedule'))}")
        floor = self.settings.get("min_lr_ratio")
        if "min_lr_ratio" in self.settings and (not is_number(floor) or not 0 <= floor <= 1):
            raise ConfigError("schedule.min_lr_ratio", floor, "must be a number in [0, 1] (the final lr as a fraction of lr)")


EVALUATIONS_PER_RUN = 20  # eval_every=auto: about this many evaluations a run...
EVALUATION_PERCENT = 10   # ...unless they would cost more than this share of the steps' time


def eval_interval(steps: int, eval_batches: int) -> int:
    """eval_every=auto: steps between evaluations. About EVALUATIONS_PER_RUN a run, so a curve
    has points to draw, but no closer than EVALUATION_PERCENT of the training time allows: an
    evaluation is `eval_batches` forward passes of a training batch, and a step (forward and
    backward) costs about three, so an evaluation costs about eval_batches/3 steps. 600 steps
    with 8 eval batches: every 30 steps; 200 steps: every 27 (a short run gets fewer points)."""
    by_count = -(-steps // EVALUATIONS_PER_RUN)  # ceil without floats
    by_cost = -(-eval_batches * 100 // (3 * EVALUATION_PERCENT))  # ceil(eval_batches / 3 / share), in integers
    return max(1, by_count, by_cost)


@dataclass(frozen=True)
class LogConfig:
    """When the run measures and writes: the instruments and train scalars every `log_every`
    steps (train/loop.is_logging_step), the validation loss every `eval_every` over
    `eval_batches` batches, and train.yaml's log.* settings."""

    log_every: int
    eval_every: int             # a step count: "auto" is resolved on reading (eval_interval)
    eval_batches: int
    histograms: bool
    model_update: bool
    model_update_every: int
    extra_signals: bool
    progress: str
    profiles_every: int | str   # a step count, or "auto" (profile_interval)

    @classmethod
    def from_composed(cls, cfg) -> "LogConfig":
        log = cfg.log
        every = cfg.eval_every
        if every == "auto" and is_integer(cfg.steps) and is_integer(cfg.eval_batches):  # else `check` names it
            every = eval_interval(cfg.steps, cfg.eval_batches)
        return cls(log_every=cfg.log_every, eval_every=every, eval_batches=cfg.eval_batches,
                   histograms=log.histograms, model_update=log.model_update, model_update_every=log.model_update_every,
                   extra_signals=log.extra_signals, progress=log.progress, profiles_every=log.profiles_every)

    def profile_interval(self, steps: int) -> int:
        """Steps between depth-profile images (0 = none). "auto": about five per run, at logging
        steps (a multiple of log_every), plus the last step: each costs ~50-100 ms of matplotlib."""
        if self.profiles_every == "auto":
            return self.log_every * -(-steps // (5 * self.log_every))  # ceil without floats
        return int(self.profiles_every)

    def check(self) -> None:
        if not is_integer(self.eval_every) or self.eval_every <= 0:
            raise ConfigError("eval_every", self.eval_every, 'must be "auto" or a positive integer (steps)')
        every = self.profiles_every
        if every != "auto" and (not is_integer(every) or every < 0):
            raise ConfigError("log.profiles_every", every, 'must be "auto" or a step count >= 0 (0 = no images)')
        if self.progress not in ("auto", "bar", "lines", "off"):
            raise ConfigError("log.progress", self.progress, "choose auto, bar, lines or off")


@dataclass(frozen=True)
class LossSpikeConfig:
    """train.yaml's loss_spike: the Hampel rule's settings (normexp/train/spikes.py says what each means)."""

    window: int
    k: float
    floor: float
    min_points: int

    @classmethod
    def from_composed(cls, cfg) -> "LossSpikeConfig":
        spike = cfg.loss_spike
        return cls(window=spike.window, k=spike.k, floor=spike.floor, min_points=spike.min_points)

    def check(self) -> None:
        """The ranges of k and floor, and min_points against window (window and min_points are
        positive integers: the pre-flight's first checks)."""
        if not is_number(self.k) or self.k <= 0:
            raise ConfigError("loss_spike.k", self.k, "must be a finite number > 0 (robust deviations above the median; 5 = default)")
        if not is_number(self.floor) or self.floor < 0:
            raise ConfigError("loss_spike.floor", self.floor, "must be a finite number >= 0 (a fraction of the median, 0.01 = 1 %)")
        if self.min_points > self.window:
            raise ConfigError("loss_spike.min_points", self.min_points,
                              f"must be at most loss_spike.window={self.window} (the rule looks at most that far back)")


@dataclass(frozen=True)
class RunConfig:
    """A run's settings apart from the model (train/config.py's TrainConfig adds it): the parts
    above and the run's own. `composed`: the composed config itself, kept as the run's record:
    the summary's hyperparameters (runs.summary.summary_record), the checkpoint's settings
    (runs.settings.result_settings) and TensorBoard's config text are made from it exactly as
    before, so old run folders compare equal; training reads only the typed fields."""

    optim: OptimizerConfig
    schedule: ScheduleConfig
    log: LogConfig
    loss_spike: LossSpikeConfig
    seed: int
    device: str                  # auto | cpu | cuda | cuda:N | mps (launch/validate.py checks it is there)
    threads: int | str           # a count, or "auto" (train/threads.py)
    compile: bool
    resume: bool
    batch_size: int
    z_loss: float                # c of the auxiliary loss c·(log Z)² (0 = off)
    max_loss: float              # divergence.max_loss: the divergence guard's ceiling
    divergence_every_step: bool | str  # divergence.every_step: True, False or "auto" (on CPU only)
    checkpoint_every: int        # 0 = only at the end
    keep_checkpoints: int
    stall_margin: float          # a completed run this fraction above the unigram baseline is "stalled"
    learned_margin: float        # outcome.learned_margin (runs/outcomes.py)
    data: dict                   # the data source's node (data/sources.py checks it)
    tokenizer: dict              # the tokenizer's node
    composed: Mapping            # the composed config (a DictConfig): the run's record, see above

    @classmethod
    def fields_of(cls, cfg) -> dict:
        """The constructor's arguments read off a composed config (a DictConfig)."""
        return dict(optim=OptimizerConfig.from_composed(cfg), schedule=ScheduleConfig.from_composed(cfg),
                    log=LogConfig.from_composed(cfg), loss_spike=LossSpikeConfig.from_composed(cfg),
                    seed=cfg.seed, device=str(cfg.device), threads=cfg.threads, compile=cfg.compile, resume=cfg.resume,
                    batch_size=cfg.batch_size, z_loss=cfg.z_loss, max_loss=cfg.divergence.max_loss,
                    divergence_every_step=cfg.divergence.get("every_step", "auto"),
                    checkpoint_every=cfg.checkpoint_every, keep_checkpoints=cfg.keep_checkpoints,
                    stall_margin=cfg.stall_margin, learned_margin=cfg.outcome.learned_margin,
                    data=plain(cfg.data), tokenizer=plain(cfg.tokenizer), composed=cfg)

    @classmethod
    def from_composed(cls, cfg) -> "RunConfig":
        return cls(**cls.fields_of(cfg))

    def divergence_checks_every_step(self, device_type: str) -> bool:
        """divergence.every_step, with auto resolved: every step on a CPU, where reading the loss
        is free; on a GPU only logging steps and evaluations, as reading it waits for the GPU."""
        if self.divergence_every_step == "auto":
            return device_type == "cpu"
        return bool(self.divergence_every_step)

    @property
    def steps(self) -> int:
        """Optimizer updates in the run (the schedule's)."""
        return self.schedule.steps

    def check(self) -> None:
        """The run's own ranges (its parts have their own `check`; the integer counts, the
        switches and the device are the pre-flight's generic checks)."""
        if not is_integer(self.seed) or not 0 <= self.seed < 2**32:  # numpy's generators take seeds below 2³²
            raise ConfigError("seed", self.seed, f"must be an integer from 0 to {2**32 - 1}")
        if not is_number(self.stall_margin) or not 0 <= self.stall_margin < 1:
            raise ConfigError("stall_margin", self.stall_margin,
                              "must be a number from 0 to below 1 (0.02 = 2 % below the unigram baseline)")
        if not is_number(self.learned_margin) or not 0 <= self.learned_margin < 1:
            raise ConfigError("outcome.learned_margin", self.learned_margin,
                              "must be a number from 0 to below 1 (0.05 = 5 % below the unigram baseline)")
        if not is_number(self.z_loss) or self.z_loss < 0:
            raise ConfigError("z_loss", self.z_loss, "must be a finite number >= 0 (0 = off; PaLM uses 1e-4)")
        if not is_number(self.max_loss) or self.max_loss <= 0:
            raise ConfigError("divergence.max_loss", self.max_loss, "must be a finite number > 0")
        if self.divergence_every_step not in (True, False, "auto"):
            raise ConfigError("divergence.every_step", self.divergence_every_step, "choose auto, true or false")
        if not is_integer(self.checkpoint_every) or self.checkpoint_every < 0:
            raise ConfigError("checkpoint_every", self.checkpoint_every, "must be an integer >= 0 (0 = only at the end)")
        if self.threads != "auto" and (not is_integer(self.threads) or self.threads <= 0):
            raise ConfigError("threads", self.threads, 'must be "auto" or a positive integer')
