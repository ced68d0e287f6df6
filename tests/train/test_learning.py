"""A run with the default configuration learns: `normexp train` shrunk in size only (fewer and
narrower layers, shorter sequences, fewer steps) keeps the defaults' placement, norm, init,
schedule, lr and warmup, and on the tests' small corpus must end "completed" with a val loss
far below the unigram baseline (the entropy of the val split's token frequencies)."""

from conftest import make_corpus, read_summary, run_cli

from normexp.config.compose import compose_config

# size only: every other setting is the default (threads=1 and no progress output change no number)
SMALLER = ["layers=2", "d_model=64", "seq_len=64", "batch_size=8", "steps=200", "eval_batches=4",
           "threads=1", "log.progress=off"]


def test_a_default_config_run_learns_well_below_the_unigram_baseline(tmp_path, cli_env):
    corpus = make_corpus(tmp_path / "corpus.txt")
    run = tmp_path / "run"
    run_cli(["train", "data=text", f"data.files=[{corpus}]", *SMALLER, f"hydra.run.dir={run}"], cli_env)
    summary = read_summary(run)

    defaults = compose_config([])
    kept = {"placement": defaults.placement.name, "norm": defaults.norm.name, "init": defaults.init.name,
            "schedule": defaults.schedule.name, "lr": defaults.lr, "warmup": defaults.warmup}
    assert {key: summary[key] for key in kept} == kept  # the defaults' character, not a tuned config
    assert summary["warmup"] < summary["steps"]  # the run gets past its warmup into the decay

    assert summary["status"] == "completed" and summary["steps_completed"] == 200
    # 200 steps reach about half the baseline (1.5 vs 2.9 nats); 0.75 leaves room for other
    # machines' floating point, and is far beyond the 2 % that separates "completed" from "stalled"
    assert summary["final_val_loss"] < 0.75 * summary["baseline_loss"], summary
    assert summary["final_val_loss"] < summary["initial_loss"] / 3
