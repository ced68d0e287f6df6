"""The Custom Scalars layout stays readable across a sweep and at 1,000 blocks; the HParams table
leads with what a sweep varies and its outcome; the depth profile is drawn at a readable size."""

import re

import pytest
from conftest import Recorder
from tensorboard.plugins.custom_scalar import layout_pb2

from normexp.runs import schema as names
from normexp.train.layer_signals import HEAD_FAMILIES, LAYER_FAMILIES
from normexp.train.logbook import LAYERS_PER_CHART, charted_layers, custom_scalars_layout


def layout(layers: int) -> layout_pb2.Layout:
    return layout_pb2.Layout.FromString(custom_scalars_layout(layers).value[0].tensor.string_val[0])


def test_charted_layers_are_all_blocks_when_few_else_evenly_spaced_ends_included():
    assert charted_layers(6) == [0, 1, 2, 3, 4, 5]
    assert charted_layers(8) == list(range(8))
    # 9 blocks, 8 lines: i·8/7 rounded for i = 0..7 (by hand: 0, 1.14, 2.29, 3.43, 4.57, 5.71, 6.86, 8)
    assert charted_layers(9) == [0, 1, 2, 3, 5, 6, 7, 8]
    # 1,000 blocks: i·999/7 = 0, 142.7, 285.4, 428.1, 570.9, 713.6, 856.3, 999
    assert charted_layers(1000) == [0, 143, 285, 428, 571, 714, 856, 999]


def test_sweep_charts_come_first_and_per_layer_charts_start_closed():
    cats = layout(6).category
    assert [c.title for c in cats] == ["across a sweep", "training", "stability", "per layer"]
    assert [c.closed for c in cats] == [False, False, False, True]
    assert len(cats[-1].chart) == len(LAYER_FAMILIES) + len(HEAD_FAMILIES)


def test_a_per_layer_chart_at_1000_blocks_draws_exactly_its_chosen_blocks():
    every_tag = [names.layer_tag(family, i) for family in LAYER_FAMILIES for i in range(1000)]
    per_layer = layout(1000).category[-1]
    for family, chart in zip(LAYER_FAMILIES, per_layer.chart):
        (pattern,) = chart.multiline.tag
        drawn = [t for t in every_tag if re.search(pattern, t)]
        assert drawn == [f"{family}/layer_{i:02d}" for i in (0, 143, 285, 428, 571, 714, 856, 999)]
        assert len(drawn) <= LAYERS_PER_CHART
        assert "of 1000" in chart.title


def test_a_per_head_chart_at_1000_blocks_draws_every_head_of_its_chosen_blocks_only():
    family = next(iter(HEAD_FAMILIES))
    every_tag = [names.head_tag(family, i, h) for i in range(1000) for h in range(4)]
    chart = next(c for c in layout(1000).category[-1].chart if c.title.startswith(f"{family}:"))
    (pattern,) = chart.multiline.tag
    drawn = [t for t in every_tag if re.search(pattern, t)]
    assert drawn == [names.head_tag(family, i, h) for i in (0, 143, 285, 428, 571, 714, 856, 999) for h in range(4)]
    shallow = next(c for c in layout(6).category[-1].chart if c.title.startswith(f"{family}:"))
    (pattern,) = shallow.multiline.tag  # a 6-block run: one pattern for all of its heads
    assert all(re.search(pattern, t) for t in every_tag[: 6 * 4])
    assert not re.search(pattern, names.layer_tag("attn_entropy", 0))  # the per-block family is its own chart


def test_a_shallow_run_charts_every_block_with_one_pattern():
    every_tag = [names.layer_tag("act_std", i) for i in range(6)] + ["act_std/embedding", "train/loss"]
    chart = layout(6).category[-1].chart[0]
    (pattern,) = chart.multiline.tag
    assert [t for t in every_tag if re.search(pattern, t)] == every_tag[:6]


def test_layer_profiles_run_in_block_order_beyond_100_blocks():
    from types import SimpleNamespace

    from normexp.analysis.report.figures import layer_profile

    # block i logs the value i at step 0; as text, layer_100 sorts before layer_11
    run = SimpleNamespace(scalars={names.layer_tag("act_std", i): [(0, float(i))] for i in range(120)})
    assert layer_profile(run, "act_std") == {0: [float(i) for i in range(120)]}


# the per-block signals that declare a depth-profile panel (a profile_title), in chart order: the
# image draws one panel for each, so a newly profiled signal is expected here without a count to edit
PROFILED = [s for s in LAYER_FAMILIES.values() if s.profile_title]


def profile_values(written: dict[str, list[float]]) -> dict[str, list[float]]:
    """Six blocks' values for every profiled signal: those written by the test where it wrote them
    (each for a signal that is still profiled), else a plain profile from 0.5 growing 30% a block."""
    assert set(written) <= {s.tag for s in PROFILED}, "values written for a signal the image no longer draws"
    return {s.tag: written.get(s.tag, [0.5 * 1.3 ** i for i in range(6)]) for s in PROFILED}


def assert_one_panel_per_profiled_signal(fig, step: int) -> None:
    """A panel for each profiled signal, in chart order, each under its own title: one too few or
    too many fails."""
    assert [ax.get_title() for ax in fig.axes] == [f"{s.profile_title} (step {step})" for s in PROFILED]


def test_depth_profile_panels_label_every_y_axis_in_plain_numbers():
    """The Images tab's depth profile at step 0: every block's activation std 0.9999955 (to 1e-8),
    gradient norms within one decade, update ratios near 5e-5. Each panel's y axis has at least
    two tick labels, each a plain number that reads back as its tick's position (to half a
    step), all different, and no offset or ×10^k text (it read `1e-8+9.999955e-1`; the gradient
    and update panels, log axes under a decade, had no labels at all)."""
    from normexp.train.logbook import depth_profile_figure

    values = profile_values({"act_std": [0.9999955 + 1e-9 * i for i in range(6)],
                             "grad_norm": [0.02 * 1.5 ** i for i in range(6)],
                             "update_ratio": [3e-5 * (1 + 0.2 * i) for i in range(6)]})
    fig = depth_profile_figure(values, step=0)
    fig.canvas.draw()
    assert_one_panel_per_profiled_signal(fig, step=0)
    for ax in fig.axes:
        low, high = ax.get_ylim()
        ticks = [(t.get_position()[1], t.get_text()) for t in ax.get_yticklabels() if low <= t.get_position()[1] <= high]
        assert len(ticks) >= 2 and all(text for _, text in ticks), (ax.get_title(), ticks)
        assert len({text for _, text in ticks}) == len(ticks)
        step = min(b[0] - a[0] for a, b in zip(ticks, ticks[1:]))
        for position, text in ticks:
            assert abs(float(text.replace("\u2212", "-")) - position) <= step / 2, (ax.get_title(), text, position)
        assert ax.yaxis.get_offset_text().get_text() == "", ax.get_title()


def sweep_charts() -> dict[str, list[str]]:
    """{title: [pattern, ...]} of the "across a sweep" category of a 6-block run's layout."""
    (sweep,) = [c for c in layout(6).category if c.title == "across a sweep"]
    return {chart.title: list(chart.multiline.tag) for chart in sweep.chart}


def drawn(patterns: list[str], tags: list[str]) -> list[str]:
    """The tags a chart draws, matched as TensorBoard's Custom Scalars matches (re.match)."""
    return [t for t in tags if any(re.match(p, t) for p in patterns)]


SWEEP_TAGS = ["val/loss", "stability/act_std_first", "stability/act_std_last", "stability/grad_norm_first",
              "stability/grad_norm_last", "stability/grad_norm_top_over_bottom",
              "stability/log10_grad_norm_last_over_first", "stability/model_update", "stability/act_std_max",
              "stability/log10_grad_norm_first", "stability/log10_grad_norm_last"]


def test_sweep_charts_draw_one_tag_each_first_and_last_block_apart():
    """Each "across a sweep" chart draws one tag, so a run is one line of its own colour: the first
    and the last block are separate charts (together, 12 lines of a 6-run sweep were told apart
    by marker shape only), and the gradient ratio is charted as its log10, not on a linear axis."""
    charts = {title: drawn(patterns, SWEEP_TAGS) for title, patterns in sweep_charts().items()}
    assert all(len(tags) == 1 for tags in charts.values()), charts
    by_tag = {tags[0]: title for title, tags in charts.items()}
    assert set(by_tag) == {"val/loss", "stability/act_std_first", "stability/act_std_last",
                           "stability/log10_grad_norm_first", "stability/log10_grad_norm_last",
                           "stability/log10_grad_norm_last_over_first", "stability/model_update"}
    assert "first block" in by_tag["stability/log10_grad_norm_first"] and "log10" in by_tag["stability/log10_grad_norm_first"]
    assert "first block" in by_tag["stability/act_std_first"] and "last block" in by_tag["stability/act_std_last"]
    assert "log10" in by_tag["stability/log10_grad_norm_last_over_first"]
    # the linear ratio and norms are charted nowhere (still logged: the Scalars tab shows them)
    every_chart = [list(c.multiline.tag) for cat in layout(6).category for c in cat.chart]
    linear = ["stability/grad_norm_top_over_bottom", "stability/grad_norm_first", "stability/grad_norm_last"]
    assert not any(drawn(p, linear) for p in every_chart)


def test_the_log10_ratio_is_the_log10_of_last_over_first():
    import math

    from normexp.train.instruments import scalar_tags

    def tags(grads):
        return scalar_tags({"grad_norm": grads, "act_std": [1.0] * len(grads)})

    # 0.002 → 240: the ratio 1.2e5 of the issue, 5.079… decades (by hand: log10(1.2) + 5)
    got = tags([0.002, 1.0, 3.0, 240.0])
    # the first and last block's norms: log10(0.002) = log10(2) − 3, log10(240) = log10(2.4) + 2
    assert got["stability/log10_grad_norm_first"] == pytest.approx(-2.6989700, abs=1e-6)
    assert got["stability/log10_grad_norm_last"] == pytest.approx(2.3802112, abs=1e-6)
    assert tags([2.5e-8, 1.0])["stability/log10_grad_norm_first"] == pytest.approx(-7.6020600, abs=1e-6)
    assert tags([0.0, 1.0])["stability/log10_grad_norm_first"] == -math.inf
    assert got["stability/grad_norm_top_over_bottom"] == pytest.approx(1.2e5)
    assert got["stability/log10_grad_norm_last_over_first"] == pytest.approx(5.0791812, abs=1e-6)
    assert tags([0.5, 0.05])["stability/log10_grad_norm_last_over_first"] == pytest.approx(-1.0)
    assert tags([0.0, 1.0])["stability/log10_grad_norm_last_over_first"] == math.inf   # the ratio's inf
    assert tags([1.0, 0.0])["stability/log10_grad_norm_last_over_first"] == -math.inf
    assert math.isnan(tags([1.0, math.nan])["stability/log10_grad_norm_last_over_first"])


def test_the_hparams_session_declares_no_table_and_keeps_every_key():
    """write_hparams writes the run's session start info only (no experiment summary, which
    TensorBoard would take as every run's columns): every key, integers as text (TensorBoard
    shows numbers to five digits), floats as numbers, booleans as booleans, None left out; the
    trial ID as the session's group name."""
    from tensorboard.plugins.hparams import metadata

    from normexp.train.logbook import write_hparams

    writer = Recorder()
    write_hparams(writer, {"placement": "pre", "warmup": 0, "d_model": 32, "lr": 0.01, "qk_norm": False,
                           "grad_clip": None}, "2026-11-28/10-00-00 #0 placement=pre")
    tags = [v.tag for s in writer.summaries for v in s.value]
    assert tags == [metadata.SESSION_START_INFO_TAG]  # no metadata.EXPERIMENT_TAG
    [start] = [metadata.parse_session_start_info_plugin_data(v.metadata.plugin_data.content)
               for s in writer.summaries for v in s.value]
    assert set(start.hparams) == {"placement", "warmup", "d_model", "lr", "qk_norm"}
    assert start.hparams["d_model"].string_value == "32" and start.hparams["warmup"].string_value == "0"
    assert start.hparams["lr"].number_value == 0.01 and start.hparams["qk_norm"].bool_value is False
    assert start.group_name == "2026-11-28/10-00-00 #0 placement=pre"


def test_trial_ids_are_the_sweep_folder_and_the_job_label(tmp_path):
    from normexp.train.logbook import trial_id

    job = tmp_path / "multirun" / "2026-11-28" / "10-00-00" / "placement=post,lr=0.01"
    assert trial_id(job, "#3 placement=post") == "2026-11-28/10-00-00 #3 placement=post"
    assert trial_id(tmp_path / "2026-11-28" / "09-59-01") == "2026-11-28/09-59-01"


def test_the_hparams_values_hold_the_config_but_how_it_ran():
    from normexp.config.compose import compose_config
    from normexp.runs.summary import hparams_row, summary_record
    from normexp.train.logbook import hparam_values

    cfg = compose_config(["placement=deepnorm", "threads=1", "log.progress=off"])
    values = hparam_values(hparams_row(summary_record(cfg)), cfg)
    assert {"placement", "lr", "warmup", "optim.weight_decay", "log_every", "eval_every", "z_loss"} <= set(values)
    assert values["placement"] == "deepnorm" and "placement.name" not in values
    assert not {"threads", "device", "log.progress", "resume", "data.files", "hydra.run.dir"} & set(values)


def test_depth_profile_image_is_at_least_1000_pixels_wide():
    """The Images tab draws the figure at its own size ("Show actual image size"): ≥ 1,000 px wide,
    its panels (one per profiled signal) side by side (it was 648 × 187, a thumbnail), its text ≥ 10 pt."""
    from torch.utils.tensorboard._utils import figure_to_image

    from normexp.train.logbook import depth_profile_figure

    values = profile_values({"act_std": [1.0 + 0.1 * i for i in range(6)],
                             "grad_norm": [0.02 * 1.5 ** i for i in range(6)],
                             "update_ratio": [3e-5 * (1 + 0.2 * i) for i in range(6)]})
    fig = depth_profile_figure(values, step=5)
    channels, height, width = figure_to_image(depth_profile_figure(values, step=5)).shape
    assert channels == 3 and width >= 1000 and 250 <= height <= width / 3
    fig.canvas.draw()
    assert_one_panel_per_profiled_signal(fig, step=5)
    boxes = [ax.get_position() for ax in fig.axes]
    # a row, not a column: one baseline, each panel wholly left of the next
    assert len({round(b.y0, 6) for b in boxes}) == 1 and all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:]))
    for ax in fig.axes:
        assert ax.title.get_fontsize() >= 10 and ax.xaxis.label.get_fontsize() >= 10
        assert all(t.get_fontsize() >= 9 for t in ax.get_yticklabels())


def test_a_depth_profile_of_one_profiled_signal_is_one_panel(monkeypatch):
    """With a single profiled signal (a registry that profiles one), the image is that one panel:
    matplotlib hands back one Axes, not a list, for a 1 × 1 grid unless asked not to."""
    from normexp.train import logbook

    only = PROFILED[0]
    monkeypatch.setattr(logbook, "signals", lambda per_head=False: [only])
    fig = logbook.depth_profile_figure({only.tag: [0.5 * 1.3 ** i for i in range(6)]}, step=3)
    assert [ax.get_title() for ax in fig.axes] == [f"{only.profile_title} (step 3)"]
    assert list(fig.axes[0].lines[0].get_ydata()) == [0.5 * 1.3 ** i for i in range(6)]
