"""The Custom Scalars layout stays readable across a sweep and at 1,000 blocks."""

import re

from tensorboard.plugins.custom_scalar import layout_pb2

from normexp.runs import schema as names
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
    assert len(cats[-1].chart) == len(names.LAYER_FAMILIES) + len(names.HEAD_FAMILIES)


def test_a_per_layer_chart_at_1000_blocks_draws_exactly_its_chosen_blocks():
    every_tag = [names.layer_tag(family, i) for family in names.LAYER_FAMILIES for i in range(1000)]
    per_layer = layout(1000).category[-1]
    for family, chart in zip(names.LAYER_FAMILIES, per_layer.chart):
        (pattern,) = chart.multiline.tag
        drawn = [t for t in every_tag if re.search(pattern, t)]
        assert drawn == [f"{family}/layer_{i:02d}" for i in (0, 143, 285, 428, 571, 714, 856, 999)]
        assert len(drawn) <= LAYERS_PER_CHART
        assert "of 1000" in chart.title


def test_a_per_head_chart_at_1000_blocks_draws_every_head_of_its_chosen_blocks_only():
    family = next(iter(names.HEAD_FAMILIES))
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


def test_depth_profile_panels_label_every_y_axis_in_plain_numbers():
    """The Images tab's depth profile at step 0: every block's activation std 0.9999955 (to 1e-8),
    gradient norms within one decade, update ratios near 5e-5. Each panel's y axis has at least
    two tick labels, each a plain number that reads back as its tick's position (to half a
    step), all different, and no offset or ×10^k text (it read `1e-8+9.999955e-1`; the gradient
    and update panels, log axes under a decade, had no labels at all)."""
    from normexp.train.logbook import depth_profile_figure

    values = {"act_std": [0.9999955 + 1e-9 * i for i in range(6)], "grad_norm": [0.02 * 1.5 ** i for i in range(6)],
              "update_ratio": [3e-5 * (1 + 0.2 * i) for i in range(6)]}
    fig = depth_profile_figure(values, step=0)
    fig.canvas.draw()
    assert len(fig.axes) == 3
    for ax in fig.axes:
        low, high = ax.get_ylim()
        ticks = [(t.get_position()[1], t.get_text()) for t in ax.get_yticklabels() if low <= t.get_position()[1] <= high]
        assert len(ticks) >= 2 and all(text for _, text in ticks), (ax.get_title(), ticks)
        assert len({text for _, text in ticks}) == len(ticks)
        step = min(b[0] - a[0] for a, b in zip(ticks, ticks[1:]))
        for position, text in ticks:
            assert abs(float(text.replace("\u2212", "-")) - position) <= step / 2, (ax.get_title(), text, position)
        assert ax.yaxis.get_offset_text().get_text() == "", ax.get_title()
