"""A training run's settings, typed, all but the model's (train/config.py's TrainConfig adds
ModelConfig), each with its rules beside its data.

    RunConfig         seed, device, batch, data, checkpoints, margins ... and its parts:
      OptimizerConfig AdamW's settings and clipping
      ScheduleConfig  the learning-rate schedule: its name, steps, warmup (the warmup rule)
      LogConfig       the logging, evaluation and instrument cadence
      LossSpikeConfig the loss-spike flag's Hampel rule (train/spikes.py)

Each field names its key in configs/train.yaml (config.keys.`setting`): these dataclasses are
the schema of train.yaml's own keys, so one reader builds them (`from_composed`), the pre-flight
refuses a key no field reads, and a count's or a switch's kind is checked from its field
(config.keys.check_kinds). Each class's `check` holds its rules (ranges, cross-key checks) and
raises their one-line ConfigError; the pre-flight (launch/validate.py) calls it. They keep
values as written (no conversion that could fail), so `check` names what the user wrote. Standard library only (with config/'s own leaves), so the
pre-flight builds them before torch loads, and runs/ reads `effective_warmup` from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .checks import ConfigError, is_integer, is_number
from .compose import declared_names
from .data_settings import option_settings
from .keys import POSITIVE, OptionSettings, Settings, plain, setting


def _as_tuple(value, cfg):
    """A list as written becomes a tuple; anything else stays for `check` to name."""
    value = plain(value)
    return tuple(value) if isinstance(value, list) else value


def _option(group: str):
    """The reader of a group's node (data, tokenizer): the typed settings of the option it names."""
    def read(value, cfg):
        return option_settings(group, value)
    return read


def _schedule_settings(value, cfg):
    """The schedule option's own keys (all but its name)."""
    return {k: v for k, v in plain(value).items() if k != "name"}


def _eval_every(value, cfg):
    """eval_every=auto as a step count (eval_interval); as written when `check` must name it."""
    if value == "auto" and is_integer(cfg["steps"]) and is_integer(cfg["eval_batches"]):
        return eval_interval(cfg["steps"], cfg["eval_batches"])
    return value


def _log_every(value, cfg):
    """log_every=auto as a step count (log_interval); as written when `check` must name it."""
    if value == "auto" and is_integer(cfg["steps"]) and cfg["steps"] > 0:
        return log_interval(cfg["steps"])
    return value


def effective_warmup(warmup: int, steps: int) -> int:
    """The warmup a run trains with: a warmup longer than the run warms up over all its steps.
    The one home of this rule: the schedule, summary.json's `warmup` and the report's read it."""
    return min(warmup, steps)


@dataclass(frozen=True)
class OptimizerConfig(Settings):
    """AdamW (train/loop.make_optimizer): peak learning rate, betas, ε, decoupled weight decay,
    and the optional global gradient-norm clip (None = off)."""

    lr: float = setting("lr")
    betas: tuple = setting("optim.betas", read=_as_tuple)
    eps: float = setting("optim.eps")
    weight_decay: float = setting("optim.weight_decay")
    grad_clip: float | None = setting("grad_clip")

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
class ScheduleConfig(Settings):
    """The learning-rate schedule (train/schedules.py): a linear warmup over `warmup` updates,
    then the decay `name` over the rest of `steps`. `settings`: the schedule's own keys
    (configs/schedule/NAME.yaml: cosine's and linear's min_lr_ratio)."""

    name: str = setting("schedule.name", absent=None)
    steps: int = setting("steps", rule=POSITIVE)
    warmup: int = setting("warmup")
    settings: dict = setting("schedule", read=_schedule_settings)

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
        """The warning for a warmup longer than the run, or None."""
        if self.warmup <= self.steps:
            return None
        return f"warmup={self.warmup} is longer than steps={self.steps}: warming up over all {self.steps} steps"

    def check(self, warmup_given: bool = False) -> None:
        """One rule for a warmup longer than the run, default or given (`warmup_given`, kept for
        callers, changes nothing): it warms up over all the steps, with a warning
        (`warmup_shortened`); the same number means the same run, however it was set."""
        w = self.warmup
        if not is_integer(w) or w < 0:
            raise ConfigError("warmup", w, "must be an integer step count >= 0 (0 = none; longer than steps: all of them)")
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


LOGGING_POINTS_PER_RUN = 40  # log_every=auto: at least this many logging steps a run (where it has that many)


def log_interval(steps: int) -> int:
    """log_every=auto: steps between logging steps, steps // LOGGING_POINTS_PER_RUN, at least 1.
    Rounded down, so a run has at least LOGGING_POINTS_PER_RUN points per tag (steps 0, k, 2k, ...
    and the last): 200 steps log every 5 (41 points), the default 600 every 15 (41 points); a
    run under 80 steps logs every step. A sparse curve hides what the instruments are for:
    TensorBoard's smoothing mixes each point with the ones before it (docs/tensorboard.md)."""
    return max(1, steps // LOGGING_POINTS_PER_RUN)


@dataclass(frozen=True)
class LogConfig(Settings):
    """When the run measures and writes: the instruments and train scalars every `log_every`
    steps (train/loop.is_logging_step), the validation loss every `eval_every` over
    `eval_batches` batches, and train.yaml's log.* settings."""

    log_every: int = setting("log_every", read=_log_every)  # a step count: "auto" resolved on reading
    eval_every: int = setting("eval_every", read=_eval_every)  # a step count: "auto" resolved on reading
    eval_batches: int = setting("eval_batches", rule=POSITIVE)
    histograms: bool = setting("log.histograms")
    model_update: bool = setting("log.model_update")
    model_update_every: int = setting("log.model_update_every", rule=POSITIVE)
    extra_signals: bool = setting("log.extra_signals")
    progress: str = setting("log.progress")
    profiles_every: int | str = setting("log.profiles_every")  # a step count, or "auto" (profile_interval)

    def profile_interval(self, steps: int) -> int:
        """Steps between depth-profile images (0 = none). "auto": about five per run, at logging
        steps (a multiple of log_every), plus the last step: each costs ~50-100 ms of matplotlib."""
        if self.profiles_every == "auto":
            return self.log_every * -(-steps // (5 * self.log_every))  # ceil without floats
        return int(self.profiles_every)

    def check(self) -> None:
        if not is_integer(self.log_every) or self.log_every <= 0:
            raise ConfigError("log_every", self.log_every, 'must be "auto" or a positive integer (steps)')
        if not is_integer(self.eval_every) or self.eval_every <= 0:
            raise ConfigError("eval_every", self.eval_every, 'must be "auto" or a positive integer (steps)')
        every = self.profiles_every
        if every != "auto" and (not is_integer(every) or every < 0):
            raise ConfigError("log.profiles_every", every, 'must be "auto" or a step count >= 0 (0 = no images)')
        if self.progress not in ("auto", "bar", "lines", "off"):
            raise ConfigError("log.progress", self.progress, "choose auto, bar, lines or off")


@dataclass(frozen=True)
class LossSpikeConfig(Settings):
    """train.yaml's loss_spike: the Hampel rule's settings (normexp/train/spikes.py says what each means)."""

    window: int = setting("loss_spike.window", rule=POSITIVE)
    k: float = setting("loss_spike.k")
    floor: float = setting("loss_spike.floor")
    min_points: int = setting("loss_spike.min_points", rule=POSITIVE)

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
class RunConfig(Settings):
    """A run's settings apart from the model (train/config.py's TrainConfig adds it): the parts
    above and the run's own. `composed`: the composed config itself, kept as the run's record:
    the summary's hyperparameters (runs.summary.summary_record), the checkpoint's settings
    (runs.settings.result_settings) and TensorBoard's config text are made from it exactly as
    before, so old run folders compare equal; training reads only the typed fields."""

    optim: OptimizerConfig
    schedule: ScheduleConfig
    log: LogConfig
    loss_spike: LossSpikeConfig
    seed: int = setting("seed")
    device: str = setting("device", read=lambda v, cfg: str(v))  # auto | cpu | cuda | cuda:N | mps
    threads: int | str = setting("threads")          # a count, or "auto" (train/threads.py)
    compile: bool = setting("compile")
    cuda_graph: bool | str = setting("cuda_graph", absent="auto")  # True, False or "auto" (train/alone.py)
    resume: bool = setting("resume")
    batch_size: int = setting("batch_size", rule=POSITIVE)
    z_loss: float = setting("z_loss")                # c of the auxiliary loss c·(log Z)² (0 = off)
    max_loss: float = setting("divergence.max_loss")  # the divergence guard's ceiling
    divergence_every_step: bool | str = setting("divergence.every_step", absent="auto")  # True, False or "auto"
    checkpoint_every: int = setting("checkpoint_every")  # 0 = only at the end
    keep_checkpoints: int = setting("keep_checkpoints", rule=POSITIVE)
    stall_margin: float = setting("stall_margin")    # a completed run this fraction above the unigram baseline is "stalled"
    learned_margin: float = setting("outcome.learned_margin")  # runs/outcomes.py
    data: OptionSettings = setting("data", read=_option("data"))  # config/data_settings.py (data/sources.py: its check)
    tokenizer: OptionSettings = setting("tokenizer", read=_option("tokenizer"))
    composed: Mapping = setting(None)                # the composed config (a DictConfig): the run's record, see above

    def divergence_checks_every_step(self, device_type: str) -> bool:
        """divergence.every_step, with auto resolved: every step on a CPU, where reading the loss
        is free; on a GPU only logging steps and evaluations, as reading it waits for the GPU."""
        if self.divergence_every_step == "auto":
            return device_type == "cpu"
        return bool(self.divergence_every_step)

    def cuda_graph_refusal(self, device_type: str | None = None) -> str | None:
        """Why this run's plain steps cannot be a CUDA graph, or None: the one rule for a run alone
        (train/alone.py adds a torchrun launch and its model's pack refusal), `--cfg job`'s note and
        the pre-flight. `device_type`: the device the run got; None before it has one (the
        pre-flight: only device=cpu/mps say no, device=auto may be CUDA)."""
        if device_type is None and self.device in ("cpu", "mps"):
            return f"device={self.device}: a CUDA graph needs CUDA"
        if device_type is not None and device_type != "cuda":
            return "not on CUDA"
        if self.compile is True:
            return "compile=true: the graph records the pack's own (eager) forward"
        if is_number(self.z_loss) and self.z_loss > 0:
            return "z_loss selects tokens by a data-dependent mask"
        if self.divergence_checks_every_step(device_type or "cuda"):
            return "divergence.every_step reads each step's loss"
        return None

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
        for key, value in (("divergence.every_step", self.divergence_every_step), ("cuda_graph", self.cuda_graph)):
            if not (isinstance(value, bool) or value == "auto"):  # not `in (True, False, "auto")`: 0 == False
                raise ConfigError(key, value, "choose auto, true or false")
        if self.cuda_graph is True and (why := self.cuda_graph_refusal()):
            raise ConfigError("cuda_graph", "true", f"{why}; use cuda_graph=auto (a graph where it can be) or false")
        if not is_integer(self.checkpoint_every) or self.checkpoint_every < 0:
            raise ConfigError("checkpoint_every", self.checkpoint_every, "must be an integer >= 0 (0 = only at the end)")
        if self.threads != "auto" and (not is_integer(self.threads) or self.threads <= 0):
            raise ConfigError("threads", self.threads, 'must be "auto" or a positive integer')
