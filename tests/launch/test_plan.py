"""The command line of `normexp train` is parsed once, into a LaunchPlan (issue 40, item 3)."""

import ast
import random

import pytest

from normexp.launch import plan as plan_module
from normexp.launch.plan import FLAGS_WITH_VALUE, LaunchPlan

BARE_FLAGS = ["-m", "--multirun", "--help", "-h", "--hydra-help", "--resolve", "-sc", "--version", "--run", "-r"]
OVERRIDES = ["layers=2", "placement=pre,post", "+x.y=1", "~seed", "++lr=0.1", "hydra.sweep.dir=/tmp/a b",
             "warmup=range(0,10,5)", "data.files=[a.txt,b.txt]", "hydra/launcher=joblib"]
VALUES = {"--cfg": ["job", "hydra", "all"], "-c": ["job"], "--package": ["_global_", "norm"],
          "--config-name": ["train", "other"], "-cd": ["/tmp/configs"], "--info": ["searchpath", "all"]}


def random_command(rng: random.Random):
    """An argument list and the flags (each a tuple: the flag, then its value if separate) and
    overrides it was made of, in order: the expectation the parse is compared with."""
    pieces = []
    for _ in range(rng.randint(0, 8)):
        kind = rng.random()
        if kind < 0.45:
            pieces.append(("override", rng.choice(OVERRIDES)))
        elif kind < 0.7:
            pieces.append(("flag", (rng.choice(BARE_FLAGS),)))
        else:
            flag = rng.choice(sorted(VALUES))
            value = rng.choice(VALUES[flag])
            pieces.append(("flag", (f"{flag}={value}",) if rng.random() < 0.3 else (flag, value)))
    args = [a for kind, p in pieces for a in ((p,) if kind == "override" else p)]
    flags = [a for kind, p in pieces if kind == "flag" for a in p]
    overrides = [p for kind, p in pieces if kind == "override"]
    return args, flags, overrides


@pytest.mark.parametrize("seed", range(300))
def test_the_plan_splits_any_command_into_its_flags_and_overrides(seed):
    args, flags, overrides = random_command(random.Random(seed))
    plan = LaunchPlan.parse(args)
    assert list(plan.flags) == flags and list(plan.overrides) == overrides
    assert plan.args == flags + overrides  # Hydra's order: the flags first
    assert LaunchPlan.parse(plan.args) == plan  # the command Hydra gets means the same
    assert plan.multirun == any(f in ("-m", "--multirun") for f in flags)
    cfg = next((f.split("=", 1)[1] if "=" in f else flags[i + 1]
                for i, f in enumerate(flags) if f.split("=")[0] in ("--cfg", "-c")), None)
    assert plan.cfg == cfg
    assert plan.folder_key == ("hydra.sweep.dir" if plan.multirun else "hydra.run.dir")


def test_a_value_flag_given_last_has_an_empty_value_and_takes_no_override():
    plan = LaunchPlan.parse(["layers=2", "--cfg", "seed=1"])
    assert plan.flags == ("--cfg",) and plan.overrides == ("layers=2", "seed=1") and plan.cfg == ""
    assert set(VALUES) <= FLAGS_WITH_VALUE


def test_with_overrides_pins_a_folder_in_place_of_the_given_one():
    plan = LaunchPlan.parse(["-m", "seed=0,1", "hydra.sweep.dir=a"])
    pinned = plan.with_overrides("hydra.sweep.dir='/abs/a'", dropping="hydra.sweep.dir")
    assert pinned.args == ["-m", "seed=0,1", "hydra.sweep.dir='/abs/a'"]
    assert pinned.override("hydra.sweep.dir") == "hydra.sweep.dir='/abs/a'" and plan.override("seed") == "seed=0,1"


@pytest.mark.parametrize("args", [["--cfg", "job", "layers=2", "placement=deepnorm"],
                                  ["-m", "placement=pre,post", "--cfg", "job", "layers=2"]])
def test_normexp_train_splits_its_command_line_once(args, monkeypatch, capsys):
    """The pre-flight, the claim and Hydra's start read one plan: the split runs once per command."""
    from normexp.launch.hydra_job import run_train

    calls = []
    real = plan_module.split_args
    monkeypatch.setattr(plan_module, "split_args", lambda a: calls.append(list(a)) or real(a))
    try:
        run_train(args)
    except SystemExit as e:  # the dry run of a sweep ends with exit 0
        assert e.code == 0
    assert calls == [args]
    out = capsys.readouterr().out
    # what each command shows: the job's config (DeepNorm's alpha resolved), or the sweep's jobs
    assert ("layers: 2" in out and "alpha: auto  # 1.41421 for layers=2" in out) or "#1 placement=post" in out


def _exclude_keys(naming_override: str) -> list[str]:
    """The keys of a `hydra.job.config.override_dirname.exclude_keys=[...]` override."""
    key, _, value = naming_override.partition("=")
    assert key == "hydra.job.config.override_dirname.exclude_keys"
    return ast.literal_eval(value)


def test_the_sweeps_job_folder_naming_travels_in_its_plan(tmp_path, corpus, monkeypatch):
    """The pre-flight's naming of a sweep's job folders (leave out the keys every job shares)
    is part of that command's plan, and claim_output hands it to Hydra with the folder: a
    second command checked in the same process in between (a sweep whose shared keys are
    others) changes nothing of the first's."""
    from normexp.launch.preflight import claim_output, preflight

    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    data = ["data=text", f"data.files=[{corpus}]"]
    plan_a, cfg_a = preflight(LaunchPlan.parse(["-m", *data, "layers=2", "seed=0,1", f"hydra.sweep.dir={tmp_path / 'a'}"]))
    plan_b, _ = preflight(LaunchPlan.parse(["-m", *data, "layers=2,3", "seed=0", f"hydra.sweep.dir={tmp_path / 'b'}"]))
    single, _ = preflight(LaunchPlan.parse([*data, "layers=2", f"hydra.run.dir={tmp_path / 'c'}"]))

    (naming_a,), (naming_b,) = plan_a.naming, plan_b.naming
    assert "layers" in _exclude_keys(naming_a) and "seed" not in _exclude_keys(naming_a)  # layers is shared in a
    assert "seed" in _exclude_keys(naming_b) and "layers" not in _exclude_keys(naming_b)  # seed is shared in b
    assert single.naming == ()  # a single run has no job folders to name
    claimed = claim_output(plan_a, cfg_a)
    assert claimed.overrides == (*plan_a.overrides[:-1], f"hydra.sweep.dir={tmp_path / 'a'}", naming_a)
    assert (tmp_path / "a" / ".normexp_claim").is_file()


@pytest.mark.parametrize("layers, seeds", [("2", "0,1,2"), ("2,4", "0,1"), ("2,4,8", "0")])
def test_a_boundary_dry_run_counts_settings_apart_from_seeds(layers, seeds):
    """A boundary search's setting is searched over all its seeds at once, so the dry run counts
    the settings (the grid without seed) and the seeds separately: 2 depths × 3 seeds are
    "2 settings × 3 seeds", not 6 settings."""
    from omegaconf import OmegaConf

    from normexp.launch.preflight import sweep_preview

    jobs = [[f"layers={d}", f"seed={s}", "placement=post"] for d in layers.split(",") for s in seeds.split(",")]
    sweeper = OmegaConf.create({"_target_": "hydra_plugins.normexp_boundary_sweeper.boundary_sweeper.BoundarySweeper",
                                "key": "lr", "lower": 3e-4, "upper": 0.3})
    head = sweep_preview(jobs, sweeper).splitlines()[0]
    n_depths, n_seeds = len(layers.split(",")), len(seeds.split(","))
    expected = f"{n_depths} settings" + (f" × {n_seeds} seeds" if n_seeds > 1 else "")
    assert head.startswith(f"normexp train -m: {expected}, each a search of lr")
    basic = OmegaConf.create({"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"})
    assert sweep_preview(jobs, basic).startswith(f"normexp train -m: {n_depths * n_seeds} jobs")
