"""What a user sees in TensorBoard: the HParams columns (what the command line chose first,
variant settings only where the run has them, metrics with names), the depth-profile
images at the expected steps, and the sweep-level custom-scalar charts."""

import pytest
from conftest import TINY, cli_environment, load_events, make_corpus, read_summary, run_cli

from normexp.train.layer_signals import HEAD_FAMILIES, LAYER_FAMILIES
from normexp.runs.schema import STATUSES

pytestmark = pytest.mark.slow  # every test reads the runs of one module fixture (a sweep and two runs)


def events(run_dir):
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    (path,) = run_dir.glob("events.out.tfevents.*")
    return list(EventFileLoader(str(path)).Load())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tb")
    corpus = make_corpus(root / "corpus.txt")
    env = cli_environment(root / "cache")
    common = ["train", "data=text", f"data.files=[{corpus}]", *TINY, "layers=4", "steps=30", "log_every=10",
              "eval_every=10"]
    run_cli([common[0], "-m", *common[1:], "placement=pre,deepnorm", "lr=1e-3", f"hydra.sweep.dir={root / 'sweep'}",
             "hydra.sweep.subdir=${hydra:runtime.choices.placement}"], env)
    # the two profile cadences in one sweep (one process start-up): profiles/20 and profiles/0
    run_cli([common[0], "-m", *common[1:], "log.profiles_every=20,0", f"hydra.sweep.dir={root / 'profiles'}",
             "hydra.sweep.subdir=${log.profiles_every}"], env)
    return root


def start_info(run_dir):
    """The session start info of a run's HParams sub-run (logbook.HPARAMS_RUN)."""
    from tensorboard.plugins.hparams import metadata

    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    # the sub-run has two event files: the session's (at the start) and the metrics' (at the end)
    [start] = [metadata.parse_session_start_info_plugin_data(v.metadata.plugin_data.content)
               for path in sorted((run_dir / "hparams").glob("events.out.tfevents.*"))
               for e in EventFileLoader(str(path)).Load() for v in e.summary.value
               if v.tag == metadata.SESSION_START_INFO_TAG]
    return start


def test_hparams_rows_keep_every_key_and_leave_out_unused_settings(runs):
    # each row keeps every value: Pre-LN has no settings (no 0 written), DeepNorm its alpha and beta
    pre_row, deepnorm_row = set(start_info(runs / "sweep" / "pre").hparams), set(start_info(runs / "sweep" / "deepnorm").hparams)
    assert {"placement", "norm", "layers", "warmup", "lr", "seed", "d_model"} <= pre_row
    assert not any(k.startswith("placement.") for k in pre_row)
    assert {"placement.alpha", "placement.beta"} <= deepnorm_row
    assert start_info(runs / "sweep" / "pre").group_name.endswith(" #0 placement=pre")


def test_hparams_show_integers_as_integers(runs):
    """TensorBoard writes every numeric hparam to five significant digits (layers 4 read
    `4.0000`): integers go as text, which it shows as written; floats stay numbers."""
    start = start_info(runs / "sweep" / "pre")
    summary = read_summary(runs / "sweep" / "pre")
    for key in ("layers", "warmup", "d_model", "seed"):
        assert start.hparams[key].string_value == str(summary[key])
    assert start.hparams["lr"].number_value == pytest.approx(1e-3)


def test_validation_loss_starts_at_step_0(runs):
    """The initial model is evaluated before the first step (val/loss at step 0), so a curve starts
    where training does; summary.json's trajectory has the same points (the outcome rule's slope
    leaves step 0 out)."""
    run = runs / "sweep" / "pre"
    val = load_events(run).Scalars("val/loss")
    assert [e.step for e in val] == [0, 10, 20, 30]
    assert [s for s, _ in read_summary(run)["loss_trajectory"]["val"]] == [0, 10, 20, 30]
    assert val[0].value > val[-1].value  # the untrained model's loss, above where training took it


def test_hparams_metrics_hold_the_final_numbers_and_the_status_code(runs):
    run = runs / "sweep" / "pre"
    summary = read_summary(run)
    acc = load_events(run / "hparams")  # the HParams sub-run: the metrics beside the session
    last = lambda tag: acc.Scalars(tag)[-1].value  # noqa: E731
    assert last("hparams/final_val_loss") == pytest.approx(summary["final_val_loss"], rel=1e-6)
    assert STATUSES[int(last("hparams/status"))] == summary["status"]
    assert "hparams/diverged_at_step" not in acc.Tags()["scalars"]  # nothing diverged: no value, not a 0


@pytest.mark.parametrize("run, steps", [("sweep/pre", [0, 10, 20, 29]), ("profiles/20", [0, 20, 29]), ("profiles/0", [])])
def test_depth_profile_images_at_the_expected_steps(runs, run, steps):
    assert read_summary(runs / run)["steps_completed"] == 30  # a run is there: no images means none written
    acc = load_events(runs / run)
    found = acc.Images("depth_profile") if "depth_profile" in acc.Tags()["images"] else []
    assert [e.step for e in found] == steps
    for e in found:  # 12.5 × 3.5 inches at 80 dpi: wide enough to read at actual size, PNG
        assert (e.width, e.height) == (1000, 280)
        assert e.encoded_image_string[:8] == b"\x89PNG\r\n\x1a\n"


def test_sweep_charts_read_the_first_and_last_block(runs):
    acc = load_events(runs / "sweep" / "pre")
    act = {t: acc.Scalars(f"act_std/layer_0{i}")[-1].value for t, i in (("first", 0), ("last", 3))}
    for which, value in act.items():
        assert acc.Scalars(f"stability/act_std_{which}")[-1].value == value
    grads = {t: acc.Scalars(f"grad_norm/layer_0{i}")[-1].value for t, i in (("first", 0), ("last", 3))}
    for which, value in grads.items():
        assert acc.Scalars(f"stability/grad_norm_{which}")[-1].value == value


def test_every_per_layer_family_is_described_and_charted(runs):
    """A run logs <family>/layer_XX for exactly the signals train/layer_signals/ registers, and
    TensorBoard's custom-scalars layout has one "per layer" chart per family, titled with its
    description: a signal's tag and description are written in its class and nowhere else."""
    import re

    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.plugins.custom_scalar import metadata as custom_scalar

    run = runs / "sweep" / "pre"
    logged = {m[1] for tag in load_events(run).Tags()["scalars"] if (m := re.fullmatch(r"(\w+)/layer_\d\d", tag))}
    assert logged == set(LAYER_FAMILIES)
    [layout] = [layout_pb2.Layout.FromString(v.tensor.string_val[0]) for e in events(run) for v in e.summary.value
                if v.tag == custom_scalar.CONFIG_SUMMARY_TAG]
    [per_layer] = [c for c in layout.category if c.title == "per layer"]
    described = {**LAYER_FAMILIES, **HEAD_FAMILIES}
    assert sorted(chart.title for chart in per_layer.chart) == sorted(f"{name}: {f.about}" for name, f in described.items())
    heads = {m[1] for tag in load_events(run).Tags()["scalars"] if (m := re.fullmatch(r"(\w+)/layer_\d\d/head_\d\d", tag))}
    assert heads == set(HEAD_FAMILIES)
    act_std = next(chart for chart in per_layer.chart if chart.title.startswith("act_std:"))
    assert list(act_std.multiline.tag) == [r"^act_std/layer_\d+$"]


def test_every_custom_scalars_chart_matches_exactly_the_tags_it_names(runs):
    """Each chart's patterns, matched as TensorBoard's Custom Scalars plugin matches them (re.match:
    anchored at the start only), against every tag a real run logged: a chart of named tags
    gets those tags and no other ("loss" once also drew train/loss_spike and its threshold), a
    per-layer chart gets its family's blocks, a per-head one its family's heads."""
    import re

    from tensorboard.plugins.custom_scalar import layout_pb2
    from tensorboard.plugins.custom_scalar import metadata as custom_scalar

    run = runs / "sweep" / "pre"
    logged = set(load_events(run).Tags()["scalars"])
    # 4 logged losses: the spike rule never judged, so its tags are absent here (issue 58); a judged
    # run logs them, and they are the tags the old pattern mixed up
    assert "train/loss_spike" not in logged
    logged |= {"train/loss_spike", "train/loss_spike_threshold"}
    assert {"train/loss", "train/loss_spike", "val/loss"} <= logged
    [layout] = [layout_pb2.Layout.FromString(v.tensor.string_val[0]) for e in events(run) for v in e.summary.value
                if v.tag == custom_scalar.CONFIG_SUMMARY_TAG]
    [loss] = [c for cat in layout.category if cat.title == "training" for c in cat.chart if c.title == "loss"]
    assert {t for t in logged if any(re.match(p, t) for p in loss.multiline.tag)} == {"train/loss", "val/loss"}
    charted = 0
    for category in layout.category:
        for chart in category.chart:
            matched = {t for t in logged if any(re.match(p, t) for p in chart.multiline.tag)}
            if category.title == "per layer":
                family = chart.title.split(":")[0]
                parts = 3 if family in HEAD_FAMILIES else 2
                expected = {t for t in logged if t.split("/")[0] == family and len(t.split("/")) == parts
                            and t.split("/")[1].startswith("layer_")}  # (not act_std/embedding: no block)
                assert expected, chart.title
            else:  # a chart of named tags: each pattern, unanchored, is the tag it names
                named = {p.strip("^$").replace("\\", "") for p in chart.multiline.tag}
                assert named & logged, chart.title  # every chart draws something of a real run
                expected = named & logged
            assert matched == expected, f"{category.title} / {chart.title}"
            charted += 1
    assert charted >= 15 + len(LAYER_FAMILIES) + len(HEAD_FAMILIES)
