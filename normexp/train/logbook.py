"""What a run shows and writes as it goes: the TensorBoard event file (scalars, the
custom-scalars layout, the HParams row); the console progress is progress.py's."""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path

from ..runs import schema as n

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


# The sub-run (a folder of the run's folder) that holds its HParams session: the start info and
# the HPARAM_METRICS scalars. TensorBoard's HParams takes a session's metrics from the scalar tags
# of its own run and the runs below it: in the run's own folder that was every one of its ~300
# tags; here it is the few HPARAM_METRICS.
HPARAMS_RUN = "hparams"


def hparams_writer(run_dir: Path):
    """A SummaryWriter into the run's HParams sub-run (HPARAMS_RUN)."""
    return _import_summary_writer()(str(Path(run_dir) / HPARAMS_RUN), flush_secs=30)


def write_hparams(writer, hparams: dict, trial_id: str) -> None:
    """The run's HParams session start info: every hyperparameter a user may vary (`hparams`:
    runs.summary's hparams_row and the flattened config, hparam_values) and `trial_id`, the
    short unique name the table's Trial ID column shows (its group name).
    No experiment summary: TensorBoard's HParams takes the first one it finds under the logdir
    as the whole table's columns, so one sweep's columns hid another's (`--logdir runs/` with a
    placement sweep and an lr sweep showed placement alone). Without one it builds the columns
    from every run's start info under the logdir: each key a column, marked varying where the
    runs differ; it sorts the varying ones first and ticks the first five.
    Integers and values that are not numbers, strings or booleans are written as text:
    TensorBoard shows every number to five significant digits (layers 4 reads `4.0000`), a string
    as it is; None (a setting that is off) is left out: a blank cell."""
    # why here: tensorboard loads once, with the SummaryWriter (boto3 hidden: _import_summary_writer)
    import time

    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import metadata, plugin_data_pb2

    start = plugin_data_pb2.SessionStartInfo(group_name=trial_id, start_time_secs=time.time())
    for key, value in hparams.items():
        if value is None:
            continue
        if isinstance(value, bool):
            start.hparams[key].bool_value = value
        elif isinstance(value, float):
            start.hparams[key].number_value = value
        else:
            start.hparams[key].string_value = str(value)
    content = plugin_data_pb2.HParamsPluginData(session_start_info=start, version=metadata.PLUGIN_DATA_VERSION)
    writer.file_writer.add_summary(Summary(value=[Summary.Value(
        tag=metadata.SESSION_START_INFO_TAG, metadata=metadata.create_summary_metadata(content))]))


def hparam_values(row: dict, composed) -> dict:
    """Every key a user may vary, for the HParams session: `row` (runs.summary.hparams_row: the
    hyperparameters as the run used them, the variant's settings) and every other leaf of the
    composed config but how it ran (EXECUTION_SETTINGS: threads, device, ...), the data and
    tokenizer options' own keys (row's `data` and `tokenizer` name them) and Hydra's. A key
    that no run varies costs nothing: TensorBoard lists it unticked after the varying ones."""
    from ..config.keys import dotted, plain
    from ..runs.schema import is_execution_setting

    values = dict(row)
    for key, value in dotted(plain(composed)).items():
        group = key.split(".")[0]
        if key in values or group in ("hydra", "data", "tokenizer", "experiment") or is_execution_setting(key):
            continue
        if key.endswith(".name") and group in values:  # the group's option: row has it as `group`
            continue
        values[key] = value if isinstance(value, (bool, float, str)) or value is None else str(value)
    return values


def trial_id(run_dir: Path, label: str = "") -> str:
    """The HParams Trial ID of a run: short and unique under runs/: a sweep's job as its sweep's
    date/time folder and its label (`2026-11-28/14-05-00 #3 placement=post`), a single run as its
    date/time folder (`2026-11-28/14-05-00`)."""
    folder = Path(run_dir).resolve()
    if label:
        sweep = folder.parent
        return f"{sweep.parent.name}/{sweep.name} {label}"
    return f"{folder.parent.name}/{folder.name}"


# the depth-profile image, in pixels: wider than TensorBoard's cards, so that "Show actual image
# size" (Images tab) stacks a sweep's runs one under another at full size, every tick legible (at
# 648 × 187 px the text could not be read); no wider than a card of a 1,440 px window (1,030 px
# beside the sidebar: at 1,040 px the right panel's edge was cut off)
DEPTH_FIGURE_PIXELS = (1000, 280)
DEPTH_FIGURE_DPI = 80
# room for the y labels (plain_tick: at most ~6 characters), the titles and the x label
DEPTH_FIGURE_MARGINS = {"left": 0.055, "right": 0.99, "bottom": 0.17, "top": 0.9, "wspace": 0.22}


def can_draw() -> bool:
    """Whether matplotlib is installed: the depth-profile images need it, training does not (a
    bare GPU image trains without them: scripts/gpu_checks.sh)."""
    import importlib.util

    try:
        return importlib.util.find_spec("matplotlib") is not None
    except ImportError:
        return False


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
    for ax, (key, family) in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels.items()):
        ys = values.get(key) or []
        ax.plot(range(len(ys)), ys, marker="o" if len(ys) <= 64 else None, ms=4)  # a dot per block while they can be told apart
        readable_y_axis(ax, ys, family.log_scale)
        ax.set_title(f"{family.profile_title} (step {step})", fontsize=12)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_xlabel("layer", fontsize=11)
        ax.tick_params(labelsize=10)
        ax.grid(alpha=0.3)
    # fixed margins for the fixed pixel size: tight_layout measured every label first (0.3 s an image)
    fig.subplots_adjust(**DEPTH_FIGURE_MARGINS)
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

    from matplotlib.ticker import MaxNLocator, NullFormatter

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
    ax.yaxis.set_major_formatter(plain_tick_formatter())


def plain_tick_formatter():
    """A matplotlib formatter that writes each tick with plain_tick against the ticks being
    labelled (the list matplotlib hands it once per drawing, not asked again per label)."""
    from matplotlib.ticker import Formatter

    class _PlainTicks(Formatter):
        ticks: list = []

        def set_locs(self, locs):  # the ticks of this drawing, kept here (Formatter.locs is deprecated)
            self.ticks = list(locs)

        def __call__(self, x, pos=None):
            return plain_tick(x, self.ticks or [x])

    return _PlainTicks()


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
