"""HParams across a whole logdir (issue 58): with `tensorboard --logdir runs/` over a sweep of
placement and a sweep of lr, every key either sweep varies is a column for every run, read the
way TensorBoard's HParams plugin reads them (its backend_context on each run's plugin data)."""

from pathlib import Path

from conftest import TINY, cli_environment, make_corpus, run_cli


def hparams_content(logdir: Path) -> dict:
    """{run (relative to the logdir): {tag: hparams plugin content}}, as TensorBoard's data
    provider hands them to the HParams plugin (each folder with event files is a run)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = {}
    for folder in sorted({p.parent for p in logdir.rglob("events.out.tfevents.*")}):
        acc = EventAccumulator(str(folder))
        acc.Reload()
        try:
            content = acc.PluginTagToContent("hparams")
        except KeyError:  # no hparams data in this run
            content = {}
        if content:
            out[str(folder.relative_to(logdir))] = content
    return out


def test_two_sweeps_under_one_logdir_show_both_swept_keys(tmp_path):
    from tensorboard.plugins.hparams import backend_context, metadata

    from normexp.runs.schema import HPARAM_METRICS

    corpus = make_corpus(tmp_path / "corpus.txt", n_bytes=20_000)
    env = cli_environment(tmp_path / "cache")
    logdir = tmp_path / "runs"
    common = ["train", "-m", *TINY, "layers=1", "d_model=16", "seq_len=16", "batch_size=2", "eval_batches=1",
              "data=text", f"data.files=[{corpus}]", "steps=3", "hydra/launcher=basic"]
    run_cli([*common, "placement=pre,post", f"hydra.sweep.dir={logdir / 'multirun' / '2026-11-28' / '10-00-00'}"], env)
    run_cli([*common, "lr=1e-3,3e-3", f"hydra.sweep.dir={logdir / 'multirun' / '2026-11-28' / '11-00-00'}"], env)

    content = hparams_content(logdir)
    sessions = {run: tags for run, tags in content.items() if metadata.SESSION_START_INFO_TAG in tags}
    assert len(sessions) == 4 and all(run.endswith("/hparams") for run in sessions), sorted(content)
    context = backend_context.Context.__new__(backend_context.Context)  # the plugin's own column logic
    # no run declares the table (TensorBoard would take the first declaration as every run's columns)
    assert context._find_experiment_tag(content, include_metrics=True) is None
    infos = {h.name: h for h in context._compute_hparam_infos(content)}
    assert infos["placement"].differs and infos["lr"].differs
    assert not infos["layers"].differs and not infos["d_model"].differs
    ranked = sorted(infos.values(), key=lambda h: (not h.differs, h.name))  # the plugin's order; the first five ticked
    assert {"placement", "lr"} <= {h.name for h in ranked[:5]}
    starts = [metadata.parse_session_start_info_plugin_data(tags[metadata.SESSION_START_INFO_TAG])
              for tags in sessions.values()]
    for start in starts:  # every run has both columns: an lr run says its placement, and back
        assert {"placement", "lr", "layers", "warmup", "seed"} <= set(start.hparams)
    # trial IDs: short, unique, the sweep's date/time and the job's label
    ids = sorted(s.group_name for s in starts)
    assert ids == ["2026-11-28/10-00-00 #0 placement=pre", "2026-11-28/10-00-00 #1 placement=post",
                   "2026-11-28/11-00-00 #0 lr=0.001", "2026-11-28/11-00-00 #1 lr=0.003"]
    # the metrics are the sub-run's scalars: HPARAM_METRICS only, not the run's ~100 training tags
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    for run in sessions:
        acc = EventAccumulator(str(logdir / run))
        acc.Reload()
        assert set(acc.Tags()["scalars"]) <= {m.tag for m in HPARAM_METRICS}
        assert "hparams/status" in acc.Tags()["scalars"]
