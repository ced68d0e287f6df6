"""The names a run writes and the tools read back, each defined here once.

    TensorBoard scalars   `train/loss`, `val/loss`, ...; per-layer families `<family>/layer_XX`
    HParams metrics       the `hparams/...` columns of TensorBoard's HParams table
    summary.json          its fields: the outcome, where and how it ran (EXECUTION_FACTS), the hyperparameters
    config keys           EXECUTION_SETTINGS: how to run, not what is computed

Training writes with these names, train/logbook.py lays them out in TensorBoard, runs/reading.py
and analysis/report/ read them back. Per-layer signals (`<tag>/layer_XX`) are registered classes
in train/layer_signals/.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple

# ----------------------------------------------------------------- TensorBoard scalars

TRAIN_LOSS = "train/loss"
TRAIN_LR = "train/lr"
TRAIN_GRAD_NORM = "train/grad_norm"              # global gradient norm, before clipping
TRAIN_CROSS_ENTROPY = "train/cross_entropy"      # the cross-entropy alone, when z_loss > 0 adds c·z to train/loss
TRAIN_LOSS_SPIKE = "train/loss_spike"            # 1 at a logging step the loss-spike rule flags, else 0
TRAIN_LOSS_SPIKE_THRESHOLD = "train/loss_spike_threshold"  # the rule's threshold at that step (once it has a window)
VAL_LOSS = "val/loss"
VAL_LOSS_PER_BYTE = "val/loss_per_byte"          # only when a token is not one byte
TOKENS_PER_SECOND = "perf/tokens_per_second"
MODEL_UPDATE = "stability/model_update"          # DeepNet's ‖f(x;θ_t) − f(x;θ_0)‖ / ‖f(x;θ_0)‖
ACT_STD_MAX = "stability/act_std_max"
ACT_STD_FIRST = "stability/act_std_first"
ACT_STD_LAST = "stability/act_std_last"
GRAD_NORM_MAX = "stability/grad_norm_max"
GRAD_NORM_FIRST = "stability/grad_norm_first"
GRAD_NORM_LAST = "stability/grad_norm_last"
GRAD_NORM_TOP_OVER_BOTTOM = "stability/grad_norm_top_over_bottom"
# its log10: Custom Scalars has no per-chart log axis, and the ratio spans decades across a sweep
# (a linear axis to 1.2e5 flattened every other run to 0)
GRAD_NORM_LOG10_LAST_OVER_FIRST = "stability/log10_grad_norm_last_over_first"
# the first and the last block's gradient norms as log10, for the same reason: across a sweep they
# span 8 decades (Post-LN's first block at 2.5e-8 against Pre-LN's 0.19 at step 199), which a
# linear axis (and its smoothing) draws as 0
GRAD_NORM_LOG10_FIRST = "stability/log10_grad_norm_first"
GRAD_NORM_LOG10_LAST = "stability/log10_grad_norm_last"
DEPTH_PROFILE = "depth_profile"                  # image: act_std, grad_norm, update_ratio over depth
ACT_HIST = "act_hist"                            # histograms act_hist/layer_XX (log.histograms)
CONFIG_TEXT = "config"                           # text: the resolved config
DIVERGENCE_TEXT = "divergence"                   # text: why and where a run diverged

# The instruments' one-group values (not per layer) -> their tags
GROUP_TAGS = {
    "embedding_std": "act_std/embedding",
    "grad_norm_embedding": "grad_norm/embedding",
    "grad_norm_final_norm": "grad_norm/final_norm",
    "update_ratio_embedding": "update_ratio/embedding",
    "update_ratio_final_norm": "update_ratio/final_norm",
    "model_update": MODEL_UPDATE,
    "output_log_z": "output/log_z",
    "output_z_loss": "output/z_loss",
    "grad_norm_global": TRAIN_GRAD_NORM,
    "cross_entropy": TRAIN_CROSS_ENTROPY,
}


def layer_tag(family: str, layer: int) -> str:
    """`act_std/layer_03`: a family's tag for one block."""
    return f"{family}/layer_{layer:02d}"


def head_tag(family: str, layer: int, head: int) -> str:
    """`attn_entropy_head/layer_03/head_01`: a per-head family's tag for one head of one block."""
    return f"{layer_tag(family, layer)}/head_{head:02d}"


def head_tag_pattern(family: str) -> str:
    """A regular expression matching every head's tag of a per-head `family`, and nothing else
    (anchored: TensorBoard's Custom Scalars match a pattern at the start of a tag only)."""
    return rf"^{family}/layer_\d+/head_\d+$"


def layer_index(tag: str) -> int:
    """The block a per-layer tag belongs to: 143 for `act_std/layer_143` (tags sort as text, so
    beyond 100 blocks `layer_100` would come before `layer_11`: order by this instead)."""
    return int(tag.rsplit("_", 1)[1])


def layer_tag_pattern(family: str) -> str:
    """A regular expression matching every block's tag of `family` (TensorBoard's layout), and
    nothing else: anchored at both ends, so `act_std` does not also chart its per-head tags."""
    return rf"^{family}/layer_\d+$"


# ----------------------------------------------------------------------- summary.json

class Status(str, Enum):
    """A run's status: what summary.json says (the first seven, written by training and the
    launch layer through runs.summary.write_summary) and what the reader derives from it
    (runs.reading.Run.status). A str, so it compares equal to the text in summary.json.

    stalled      completed, but the final validation loss is not `stall_margin` below the
                 unigram baseline (runs.summary.beat_baseline): it learned nothing beyond
                 token frequencies
    requeued     SLURM stopped the job (time limit, preemption) after a checkpoint, and
                 submitit queued it again; it resumes from the checkpoint when it next runs
    killed       (derived) it says "running" but its process is gone from this host
    malformed    (derived) summary.json is there but not readable as a summary
    unknown      (derived) no summary.json yet
    """

    RUNNING = "running"
    COMPLETED = "completed"
    STALLED = "stalled"
    DIVERGED = "diverged"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    REQUEUED = "requeued"
    KILLED = "killed"
    MALFORMED = "malformed"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __hash__(self) -> int:  # as the text's: a dict or set keyed by "running" finds Status.RUNNING
        return str.__hash__(self)


# The statuses summary.json may hold, in the order of their HParams index (hparams/status)
STATUSES = tuple(Status)[:7]
# The ones that end a run for good, and the ones a run holds while it may still go on
FINISHED = (Status.COMPLETED, Status.STALLED, Status.DIVERGED)
UNFINISHED = (Status.RUNNING, Status.KILLED, Status.REQUEUED)

# The status changes summary.json may see (runs.summary.write_summary refuses any other), from
# no summary (None) or a written status. Writing the status a run already has is always allowed.
#   None         a job begins: training starts ("running"); refused or broken before it trained
#                ("failed"); stopped before training ("interrupted"; "requeued" under SLURM)
#   running      training ends (completed, stalled, diverged), is stopped (interrupted,
#                requeued), or the job breaks (failed, when it trained nothing)
#   interrupted, requeued, failed
#                resumed or started again ("running"), or stopped or refused again before training
#   completed, stalled, diverged
#                none: a finished run is final (a re-run of its sweep skips it)
STARTS_AGAIN = (Status.RUNNING, Status.FAILED, Status.INTERRUPTED, Status.REQUEUED)
TRANSITIONS: dict[Status | None, tuple[Status, ...]] = {
    None: STARTS_AGAIN,
    Status.RUNNING: (*FINISHED, Status.INTERRUPTED, Status.REQUEUED, Status.FAILED),
    Status.INTERRUPTED: STARTS_AGAIN,
    Status.REQUEUED: STARTS_AGAIN,
    Status.FAILED: STARTS_AGAIN,
    **{finished: () for finished in FINISHED},
}


class StatusChangeRefused(ValueError):
    """A status change TRANSITIONS does not allow: a bug in whatever asked for it."""


def check_status_change(old: str | None, new: str) -> None:
    """Raise StatusChangeRefused unless summary.json may go from `old` (None: no summary yet, or
    one without a status) to `new`."""
    new = Status(new)
    old = Status(old) if old is not None else None
    if new == old:
        return
    if old not in TRANSITIONS:
        raise StatusChangeRefused(f"status {old} is not one summary.json may hold")
    if new not in TRANSITIONS[old]:
        where = old or "no summary"
        why = f"{where} is final" if not TRANSITIONS[old] else f"from {where}: {', '.join(map(str, TRANSITIONS[old]))}"
        raise StatusChangeRefused(f"a run's status may not change from {where} to {new} ({why})")


class Field(NamedTuple):
    about: str
    header: str | None = None  # the report's table column (None: not in the table)
    csv: bool = False          # a column of the report's runs.csv
    number: bool = True        # a number (or null); anything else makes summary.json malformed


# What a run did, in the order the report's table and runs.csv show them
OUTCOME_FIELDS = {
    "status": Field("one of STATUSES", header="status", csv=True, number=False),
    "steps_completed": Field("optimizer steps taken", header="steps done", csv=True),
    "final_val_loss": Field("validation loss at the last evaluation", header="final val", csv=True),
    "best_val_loss": Field("lowest validation loss of any evaluation", header="best val", csv=True),
    "final_train_loss": Field("training loss at the last checked step", csv=True),
    "diverged_at_step": Field("the step whose loss or gradient was not finite or above the ceiling",
                              header="diverged at", csv=True),
    "tokens_per_second": Field("training throughput (training steps only)", header="tok/s", csv=True),
    "wall_seconds": Field("wall-clock time from set-up to the end", csv=True),
    "parameters": Field("the model's parameter count", csv=True),
    "error": Field("why the run failed (one line)", csv=True, number=False),
    "initial_loss": Field("ℓ₀, the training loss at step 0"),
    "baseline_loss": Field("the unigram baseline: the loss of predicting token frequencies"),
    "stall_margin": Field("the fraction below the baseline a completed run must end at to count as learned"),
    "requeues": Field("the times SLURM requeued the job"),
    "outcome": Field("learned / slow / stuck / collapsed / diverged (normexp.runs.outcomes.classify; never_learned: "
                     "slow or stuck, undecided, in old summaries or with < 3 val points); null while "
                     "unfinished", csv=True, number=False),
    "learned_margin": Field("the fraction below the baseline some loss must reach for a run that ended above it to "
                            "count as collapsed rather than slow or stuck"),
    "loss_spikes": Field("how many logged train losses the loss-spike rule flagged (normexp.train.spikes); the "
                         "steps are in loss_spike_steps; null where the rule never judged (fewer than "
                         "loss_spike.min_points + 1 logged losses: it could not look, which is not 0)"),
    "loss_spikes_judged_from": Field("the first logging step the loss-spike rule judged, or \"never\" (then "
                                     "loss_spikes is null); absent in summaries written before it", number=False),
    "loss_spike_steps": Field("the logging steps the loss-spike rule flagged, in order", number=False),
    "loss_trajectory": Field("{train: [[step, loss], ...] at logging steps, val: [[step, loss], ...] at evaluations}",
                             number=False),
}
LOSS_TRAJECTORY = "loss_trajectory"

# How a run is executed, in two kinds, side by side:
# - EXECUTION_FACTS: summary.json fields that record where and how it ran (written by training;
#   `normexp report` reads pid, host, pid_start and boot_id to tell a killed run: runs.process.process_alive);
# - EXECUTION_SETTINGS: config keys that choose how to run, not what is computed: a resumed run
#   may change them, the report never calls them "varied", a setting's identity
#   (folder.result_settings) and run names leave them out (train.yaml's exclude_keys holds them
#   too, with the path keys; tests/runs/test_runfolder.py checks the two agree).
EXECUTION_FACTS = ("device", "threads", "cuda_graph", "peak_gpu_mib", "pid", "host", "pid_start", "boot_id")
# log.extra_signals and loss_spike only add to what is logged: checkpoints written before they existed resume.
EXECUTION_SETTINGS = ("resume", "threads", "device", "compile", "cuda_graph", "log.progress", "checkpoint_every", "keep_checkpoints",
                      "log.extra_signals", "loss_spike.window", "loss_spike.k", "loss_spike.floor", "loss_spike.min_points")


def is_execution_setting(key: str) -> bool:
    """A key of EXECUTION_SETTINGS or below one (log.progress, ...): how to run, not what to compute."""
    return any(key == k or key.startswith(k + ".") for k in EXECUTION_SETTINGS)

# The hyperparameters every summary records (and TensorBoard's HParams shows), most often
# varied first; a variant's own settings follow from SETTINGS_FIELDS as placement.<key> / norm.<key>.
HPARAMS = ("placement", "norm", "layers", "warmup", "lr", "seed", "d_model", "heads", "steps", "batch_size",
           "seq_len", "schedule", "grad_clip", "data", "tokenizer", "init", "qk_norm", "z_loss", "attn_softcap",
           "logit_softcap", "scale_embeddings")
SETTINGS_FIELDS = {"placement": "placement_settings", "norm": "norm_settings"}

NUMERIC_FIELDS = tuple(k for k, f in OUTCOME_FIELDS.items() if f.number)
CSV_FIELDS = tuple(k for k, f in OUTCOME_FIELDS.items() if f.csv)
TABLE_FIELDS = {k: f.header for k, f in OUTCOME_FIELDS.items() if f.header}


# ---------------------------------------------------------------- HParams metrics

class HParamMetric(NamedTuple):
    tag: str
    display_name: str
    field: str  # the summary field it shows


# The HParams table's metric columns, written once at the end of a run from its summary, the
# outcome first: TensorBoard puts them after the hyperparameter columns in this order, each
# 10em wide, so at 1,600 px the fourth one (the status, once) was off-screen
HPARAM_METRICS = (
    HParamMetric("hparams/status", "status: " + ", ".join(f"{i} {s.value}" for i, s in enumerate(STATUSES)), "status"),
    HParamMetric("hparams/final_val_loss", "final val loss", "final_val_loss"),
    HParamMetric("hparams/best_val_loss", "best val loss", "best_val_loss"),
    HParamMetric("hparams/diverged_at_step", "diverged at step", "diverged_at_step"),
    HParamMetric("hparams/final_train_loss", "final train loss", "final_train_loss"),
    # not written where the rule never judged (summary.json's loss_spikes null): blank, not 0
    HParamMetric("hparams/loss_spikes", "loss spikes (blank: not evaluated)", "loss_spikes"),
)


def hparam_metric_values(summary: dict) -> dict[str, float | None]:
    """{tag: value} of HPARAM_METRICS from a summary; the status as its index in STATUSES."""
    value = lambda f: float(STATUSES.index(summary[f])) if f == "status" else summary.get(f)  # noqa: E731
    return {m.tag: value(m.field) for m in HPARAM_METRICS}
