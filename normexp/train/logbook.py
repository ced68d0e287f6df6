"""What a run shows and writes as it goes: the TensorBoard event file (scalars, the
custom-scalars layout, the HParams row); the console progress is progress.py's."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

from ..runs import schema as n
from ..runs.schema import HPARAM_METRICS, HPARAMS
from .distributed import NullWriter
from .layer_signals import signals

log = logging.getLogger("normexp")


def _import_summary_writer():
    """torch's SummaryWriter, imported with boto3 hidden: TensorBoard's file layer imports boto3
    (for s3:// logdirs) whenever it is installed, ~0.2-0.5 s of every run's start-up, and run
    folders are local paths. Hiding it makes that optional `import boto3` fail as if absent."""
    hide = "boto3" not in sys.modules
    if hide:
        sys.modules["boto3"] = None  # `import boto3` now raises ImportError
    try:
        from torch.utils.tensorboard import SummaryWriter  # why here: while boto3 is hidden
    finally:
        if hide and sys.modules.get("boto3", 0) is None:
            del sys.modules["boto3"]  # later imports of boto3 work as usual
    return SummaryWriter


# per-layer charts draw at most this many blocks each (evenly spaced, first and last included):
# a line per block is readable for a few blocks, a 1,000-line chart is not
LAYERS_PER_CHART = 8


def charted_layers(layers: int, most: int = LAYERS_PER_CHART) -> list[int]:
    """The blocks a per-layer chart draws: all of them up to `most`, else `most` evenly spaced
    ones from the first to the last (every block is still logged; this is only the chart)."""
    if layers <= most:
        return list(range(layers))
    return sorted({round(i * (layers - 1) / (most - 1)) for i in range(most)})


def exactly(tag: str) -> str:
    """The Custom Scalars pattern of one tag: TensorBoard matches a chart's pattern at the start
    of each tag (re.match), so a bare "train/loss" would also chart train/loss_spike."""
    return "^" + re.escape(tag) + "$"


def plain_charts() -> dict:
    """{category: {chart title: ["Multiline", [tag, ...]]}}: the charts of named tags, read top
    down: "across a sweep" first (one tag per chart, so one line per run: a run's colour is the
    only key there is, readable over many runs), then training and stability."""
    return {
        "across a sweep": {
            "validation loss": ["Multiline", [n.VAL_LOSS]],
            # first and last block apart: together they drew two lines per run, told apart only
            # by TensorBoard's marker shapes
            "activation std: first block": ["Multiline", [n.ACT_STD_FIRST]],
            "activation std: last block": ["Multiline", [n.ACT_STD_LAST]],
            # log10: across a sweep they span 8 decades, a linear axis drew the vanishing ones as 0
            "log10 gradient norm: first block (-8: 1e-8)": ["Multiline", [n.GRAD_NORM_LOG10_FIRST]],
            "log10 gradient norm: last block": ["Multiline", [n.GRAD_NORM_LOG10_LAST]],
            "log10 gradient norm last/first (0: equal, 1: last ×10)": ["Multiline", [n.GRAD_NORM_LOG10_LAST_OVER_FIRST]],
            "model update (DeepNet)": ["Multiline", [n.MODEL_UPDATE]],
        },
        "training": {
            "loss": ["Multiline", [n.TRAIN_LOSS, n.VAL_LOSS]],
            "loss spikes: train loss, the rule's threshold": ["Multiline", [n.TRAIN_LOSS, n.TRAIN_LOSS_SPIKE_THRESHOLD]],
            "loss spike flag (1 at a spike's first step)": ["Multiline", [n.TRAIN_LOSS_SPIKE]],
            "loss = cross-entropy + z_loss × z-loss": ["Multiline", [n.TRAIN_LOSS, n.TRAIN_CROSS_ENTROPY]],
            "lr": ["Multiline", [n.TRAIN_LR]],
            "global grad norm": ["Multiline", [n.TRAIN_GRAD_NORM]],
        },
        "stability": {
            "activation std max": ["Multiline", [n.ACT_STD_MAX]],
            "gradient norm max": ["Multiline", [n.GRAD_NORM_MAX]],
            "model update (DeepNet)": ["Multiline", [n.MODEL_UPDATE]],
            "output log Z and z-loss (log Z)²": ["Multiline", [n.GROUP_TAGS["output_log_z"],
                                                               n.GROUP_TAGS["output_z_loss"]]],
        },
    }


def custom_scalars_layout(layers: int):
    """The Custom Scalars dashboard, read top down: "across a sweep" first (one line per run,
    readable over many runs), then training and stability, then "per layer" (closed until
    opened: in a sweep it holds a line per block and run). Returns the layout's Summary."""
    # why here: tensorboard loads once, with the SummaryWriter (boto3 hidden: _import_summary_writer)
    from tensorboard.plugins.custom_scalar import layout_pb2
    from torch.utils.tensorboard.summary import custom_scalars

    shown = charted_layers(layers)
    subset = "" if len(shown) == layers else f" (blocks {', '.join(map(str, shown))} of {layers})"
    per_layer = {f"{s.tag}: {s.about}{subset}":
                 ["Multiline", [n.layer_tag_pattern(s.tag) if not subset else
                                "|".join("^" + re.escape(n.layer_tag(s.tag, i)) + "$" for i in shown)]]
                 for s in signals(per_head=False)}
    # per-head signals: a line per head of the charted blocks
    per_layer.update({f"{s.tag}: {s.about}{subset}":
                      ["Multiline", [n.head_tag_pattern(s.tag) if not subset else
                                     "|".join("^" + re.escape(n.layer_tag(s.tag, i)) + r"/head_\d+$" for i in shown)]]
                      for s in signals(per_head=True)})
    layout = {category: {title: [kind, [exactly(tag) for tag in tags]] for title, (kind, tags) in charts.items()}
              for category, charts in plain_charts().items()}
    layout["per layer"] = per_layer
    summary = custom_scalars(layout)
    # torch's helper has no way to say "closed": set it on the serialized layout
    tensor = summary.value[0].tensor
    parsed = layout_pb2.Layout.FromString(tensor.string_val[0])
    for category in parsed.category:
        category.closed = category.title == "per layer"
    tensor.string_val[0] = parsed.SerializeToString()
    return summary


def open_writer(run_dir: Path, purge_step: int | None, main: bool = True, *, layers: int):
    """The run's SummaryWriter (a do-nothing stand-in on torchrun ranks other than 0). A new
    run also gets the custom-scalars layout for its `layers` blocks; a resumed one
    (`purge_step`) keeps its own."""
    if not main:
        return NullWriter()
    writer = _import_summary_writer()(str(run_dir), purge_step=purge_step, flush_secs=30)
    if purge_step is None:
        writer.file_writer.add_summary(custom_scalars_layout(layers))
    return writer


def write_scalars(writer, tags: dict[str, float], step: int) -> None:
    """All of a step's scalars as one TensorBoard event. Read back exactly like add_scalar's
    (a simple_value per tag), but one proto and one queue entry instead of one per tag:
    ~50× cheaper at depth 48, where a logging step writes ~300 tags."""
    # why here: tensorboard loads once, with the SummaryWriter (boto3 hidden: _import_summary_writer)
    from tensorboard.compat.proto.summary_pb2 import Summary

    values = [Summary.Value(tag=tag, simple_value=float(v)) for tag, v in tags.items()]
    writer.file_writer.add_summary(Summary(value=values), step)


def write_hparams(writer, hparams: dict, chosen: set[str] = frozenset()) -> None:
    """The run's HParams row into its own event file (add_hparams would open a second run
    folder), with an experiment summary that declares the table's columns: the `chosen` keys
    (see leading_keys; the study's axes where none is a hyperparameter), then the metrics, the
    outcome first.
    TensorBoard gives each column 10em and ticks the first five hyperparameters, those marked
    varying ("differs") first, then by name: declaring every key filled those five with settings
    no run varied and pushed the metrics off-screen. The row itself keeps every key (the sessions'
    start info). Columns are marked varying, but a seed: a replicate sorts after the settings.
    Integers and values that are not numbers, strings or booleans are written as text:
    TensorBoard shows every number to five significant digits (layers 4 reads `4.0000`), a string
    as it is; metrics get display names."""
    # why here: tensorboard loads once, with the SummaryWriter (boto3 hidden: _import_summary_writer)
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2
    from torch.utils.tensorboard.summary import hparams as hparams_summary

    clean = {k: (v if isinstance(v, (float, str, bool)) else str(v)) for k, v in hparams.items() if v is not None}
    # chosen keys that are no hyperparameter (log_every=10 on the command line): the study's axes
    columns = [k for k in clean if k in chosen] or [k for k in clean if k in leading_keys()]
    kinds = {bool: api_pb2.DATA_TYPE_BOOL, str: api_pb2.DATA_TYPE_STRING}
    experiment = api_pb2.Experiment(
        hparam_infos=[api_pb2.HParamInfo(name=k, type=kinds.get(type(clean[k]), api_pb2.DATA_TYPE_FLOAT64),
                                         differs=k != "seed")
                      for k in columns],
        metric_infos=[api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag), display_name=name)
                      for tag, name, _ in HPARAM_METRICS])
    content = plugin_data_pb2.HParamsPluginData(experiment=experiment, version=metadata.PLUGIN_DATA_VERSION)
    writer.file_writer.add_summary(Summary(value=[Summary.Value(
        tag=metadata.EXPERIMENT_TAG, metadata=metadata.create_summary_metadata(content))]))
    _, start, end = hparams_summary(clean, {m.tag: 0.0 for m in HPARAM_METRICS})
    for s in (start, end):
        writer.file_writer.add_summary(s)


def leading_keys(swept: set[str] | frozenset[str] = frozenset()) -> set[str]:
    """The HParams table's columns (write_hparams): the keys this job's command or sweep varies
    (`swept`, see train.loop.JobContext), or the study's axes (placement, norm, layers, warmup,
    lr) where it varies none but the seed. A swept seed stays a column (it tells replicates
    apart), never one of the varied keys."""
    varied = set(swept) - {"seed"}
    return (varied or set(HPARAMS[:5])) | (set(swept) & {"seed"})


# the depth-profile image, in pixels: wider than TensorBoard's cards, so that "Show actual image
# size" (Images tab) stacks a sweep's runs one under another at full size, every tick legible (at
# 648 × 187 px the text could not be read); no wider than a card of a 1,440 px window (1,030 px
# beside the sidebar: at 1,040 px the right panel's edge was cut off)
DEPTH_FIGURE_PIXELS = (1000, 280)
DEPTH_FIGURE_DPI = 80


def depth_profile_figure(values: dict, step: int):
    """The signals with a profile_title (train/layer_signals/: act_std, grad_norm, update_ratio) against
    layer index at one logging step, from the values the instruments already read (no extra
    sync), side by side in one DEPTH_FIGURE_PIXELS image per logging step that the Images tab's
    step slider plays through training."""
    import matplotlib  # why here: ~0.3 s, paid only by runs that draw profiles (log.profiles_every)

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    panels = {s.tag: s for s in signals(per_head=False) if s.profile_title}
    width, height = DEPTH_FIGURE_PIXELS
    fig = Figure(figsize=(width / DEPTH_FIGURE_DPI, height / DEPTH_FIGURE_DPI), dpi=DEPTH_FIGURE_DPI)
    for ax, (key, family) in zip(fig.subplots(1, len(panels)), panels.items()):
        ys = values.get(key) or []
        ax.plot(range(len(ys)), ys, marker="o" if len(ys) <= 64 else None, ms=4)  # a dot per block while they can be told apart
        readable_y_axis(ax, ys, family.log_scale)
        ax.set_title(f"{family.profile_title} (step {step})", fontsize=12)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("layer", fontsize=11)
        ax.tick_params(labelsize=10)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# a log axis only where the values span this factor: below it a log axis has one labelled
# decade or none (a gradient norm from 0.02 to 0.3 showed no y labels at all)
LOG_AXIS_SPAN = 100.0
# the least y range of a linear axis, relative to its values: a flat profile (every block's
# activation std 0.99999 at step 0) otherwise gets ticks 1e-8 apart and an offset label
LEAST_RELATIVE_SPAN = 0.02


def readable_y_axis(ax, ys, log_scale: bool) -> None:
    """Labelled y ticks in plain numbers: a log axis (decades, labelled 10^k) where `log_scale`
    and the positive values span LOG_AXIS_SPAN, else a linear one without offset notation and
    at least LEAST_RELATIVE_SPAN of its values wide, so ticks read as e.g. 0.995 and 1.005."""
    import math

    from matplotlib.ticker import FuncFormatter, MaxNLocator, NullFormatter

    finite = [float(y) for y in ys if y is not None and math.isfinite(y)]
    if not finite:
        return
    low, high = min(finite), max(finite)
    if log_scale and low > 0 and high / low >= LOG_AXIS_SPAN:
        ax.set_yscale("log")
        ax.yaxis.set_minor_formatter(NullFormatter())
        return
    middle = (low + high) / 2
    least = LEAST_RELATIVE_SPAN * abs(middle) or 1.0
    if high - low < least:
        ax.set_ylim(middle - least / 2, middle + least / 2)
    ax.yaxis.set_major_locator(MaxNLocator(nbins=4))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda x, pos: plain_tick(x, ax.yaxis.get_majorticklocs())))


def plain_tick(x: float, ticks) -> str:
    """A tick as a plain number with the fewest significant digits that tell it from its
    neighbours `ticks` (0.995, 1, 1.005; 3e-05, 4.5e-05): no offset and no ×10^k label above the
    axis, which the panel's title would cover."""
    import math

    ticks = sorted(ticks)
    step = min((b - a for a, b in zip(ticks, ticks[1:]) if b > a), default=0.0)
    largest = max((abs(v) for v in ticks), default=0.0)
    if x == 0 or (step > 0 and abs(x) < step * 1e-6):  # 0, or 0 with rounding noise
        return "0"
    digits = 1 if step <= 0 or largest <= 0 else max(1, math.ceil(math.log10(largest / step)) + 1)
    if abs(x) >= 1:  # 120, not 1.2e+02
        digits = max(digits, math.floor(math.log10(abs(x))) + 1)
    return f"{x:.{digits}g}"
