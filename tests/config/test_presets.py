"""The preset studies and the whole norm × placement grid, end to end through the CLI.

Every experiment preset composes (`normexp train --cfg job experiment=X`) into the values it
documents, and a shrunken copy of its sweep grid (the same names, fewer and smaller numbers,
a tiny model, 2 steps) runs as `normexp train -m experiment=X` to one finished run folder
per combination. Then every norm (under Pre-LN) and every placement (with the default norm)
trains 5 steps in `-m` sweeps: all finish with finite losses and record the settings their model
was built with (a norm's settings are its own whatever the placement; the whole norm × placement
product trains in tests/train/test_numerics.py, to its recorded losses).
Each command runs when a test first needs it (a sweep is one process of ~10-40 s idle, a
--cfg job ~3 s), with a time limit only as a safety net against a hang. Placements that build no
norm (its settings class's `reads`) train the default norm only: another norm is refused there.
"""

import itertools
import math
import subprocess
from pathlib import Path

import pytest
import yaml
from conftest import (RAN_TO_THE_END, TINY, cli_environment, make_corpus, placement_expectations, read_csv, run_cli,
                      sweep_summaries)

from normexp.config.compose import compose_config
from normexp.config.defaults import group_default
from normexp.model import NORMS as REGISTERED_NORMS
from normexp.model import PLACEMENTS as REGISTERED_PLACEMENTS


CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def written_values(path: Path) -> dict:
    """What a `# @package _global_` config file sets, as `--cfg job` keys: its body flattened
    (`log.model_update`), a group's option in its defaults (`override /group: option`) as
    `group.name`, and a `/group: option` default (an arm) as what that file sets."""
    text = yaml.safe_load(path.read_text()) or {}
    values = {}
    for entry in text.get("defaults", []):
        for group, option in (entry.items() if isinstance(entry, dict) else []):
            plain = group.removeprefix("override /").removeprefix("override ")
            if isinstance(option, str) and "/" not in plain and not group.startswith("/"):
                values[f"{plain}.name"] = option
            elif group.startswith("/"):
                values.update(written_values(CONFIGS / group[1:] / f"{option}.yaml"))

    def flatten(node: dict, prefix: str = ""):
        for key, value in node.items():
            if isinstance(value, dict):
                flatten(value, f"{prefix}{key}.")
            else:
                values[f"{prefix}{key}"] = value

    flatten({k: v for k, v in text.items() if k not in ("defaults", "hydra")})
    return values


TRAIN_DEFAULTS = written_values(CONFIGS / "train.yaml")
# What each preset sets, read from its file: key → value in `--cfg job`; the schedule is always checked
PRESET_VALUES = {p.stem: {"schedule.name": TRAIN_DEFAULTS["schedule.name"], **written_values(p)}
                 for p in sorted((CONFIGS / "experiment").glob("*.yaml"))}
# Presets searched by the boundary sweeper (not a grid): the key searched, and a shrunken search
# (two settings, one seed, the two bounds only) that a 2-step tiny run cannot learn, so each
# setting's lower bound fails and the search ends after round 0: settings × 2 runs.
BOUNDARY = {"lr_boundary": "lr", "depth_boundary": "layers", "depth_law": "lr"}
BOUNDARY_SHRINK = ["hydra.sweeper.params.placement=post", "hydra.sweeper.params.init='xavier,torchscale'",
                   "hydra.sweeper.params.seed=0", "hydra.sweeper.initial_points=2"]
# The shrunken copy of a preset's grid: its names (placements, norms) kept, its numbers
# replaced by values small enough for 2 steps of a tiny model.
SHRINK = {"layers": [1, 2], "warmup": [0, 2], "lr": [1e-3, 1e-2], "seed": [0], "width": ["w32", "w64"],
          "qk_norm": [False, True], "z_loss": [0, 1e-4]}
# Swept config groups that set several keys at once (configs/arm/, configs/width/): the option a
# run's summary.json shows, and the tiny-model keys the option sets (left off the command line)
DEPTH_MUP_ARMS = {0.5: "depth_mup", 1: "completep"}
GROUP_SWEEPS = {
    "arm": (lambda s: DEPTH_MUP_ARMS[s["placement_settings"]["exponent"]] if s["placement"] == "depth_mup"
            else s["placement"], ()),
    "width": (lambda s: f"w{s['d_model']}", ("d_model", "heads")),
}


def swept_value(summary: dict, key: str):
    """A swept key's value as a run's summary.json records it (a group option: what its keys show)."""
    return GROUP_SWEEPS[key][0](summary) if key in GROUP_SWEEPS else summary[key]
STEPS = 2

NORMS = list(REGISTERED_NORMS)
DEFAULT_NORM = group_default("norm")
EXPECTED = placement_expectations()  # each placement's own test file (tests/model/placements/)
PLACEMENTS = list(EXPECTED)
# the settings each model records: its norm's shipped yaml, read here (a placement's: by hand in its own test file)
NORM_SETTINGS = {name: {k: v for k, v in written_values(CONFIGS / "norm" / f"{name}.yaml").items() if k != "name"}
                 for name in NORMS}
PLACEMENT_SETTINGS = {name: module.SETTINGS for name, module in EXPECTED.items()}


def parse_values(text) -> list:
    return [yaml.safe_load(v) for v in str(text).split(",")]


def preset_grid(preset: str) -> dict[str, list]:
    """The preset's own sweep grid, {key: values}, as Hydra composes it."""
    params = compose_config([f"experiment={preset}"], hydra=True).hydra.sweeper.params
    return {k: parse_values(v) for k, v in params.items()}


# a preset that sweeps seeds only (depth_rung: its lr comes from the command line) is
# shrunk with a command-line grid over these too, so that it still runs a grid
SEED_ONLY_EXTRA = {"layers": [1, 2], "lr": [1e-3, 1e-2]}


def shrunk_grid(preset: str) -> dict[str, list]:
    grid = preset_grid(preset)
    if set(grid) == {"seed"}:
        grid = {**grid, **SEED_ONLY_EXTRA}
    for key, values in grid.items():
        assert all(isinstance(v, str) for v in values) or key in SHRINK, f"{preset}: add a small {key} to SHRINK"
    # names kept whole; of the numbers, the first key with two small values keeps both and the
    # others one: still a product of ≥ 2 keys, at half the jobs or less
    # (the stabilizer switches, qk_norm and z_loss, are names here: both kept)
    varied = next((k for k in grid if len(SHRINK.get(k, [])) >= 2), None)
    return {k: (SHRINK[k] if k in (varied, "qk_norm", "z_loss") else SHRINK[k][:1]) if k in SHRINK else v
            for k, v in grid.items()}


# A command's time limit is a safety net against a hung process, not a speed limit: the suite must
# pass on a slow or busy machine (a sweep here takes ~10-40 s idle, several minutes at load 6-9).
SAFETY_NET_S = 3 * 3600
# placements that read the run's norm type (their settings classes' `reads`) train every norm; the others build
# none, so only the default norm is theirs (another norm would be refused: tests/model/test_settings_read.py)
NORM_READERS = [p for p in PLACEMENTS if "norm" in REGISTERED_PLACEMENTS[p].Settings.reads]
NO_NORM = [p for p in PLACEMENTS if p not in NORM_READERS]
# the sweeps that train every norm and every placement: (norms, placements) of each
GRIDS = {"grid_norms": (NORMS, ["pre"]), "grid_placements": ([DEFAULT_NORM], NORM_READERS),
         "grid_no_norm": ([DEFAULT_NORM], NO_NORM)}


class Commands:
    """The CLI commands of this file, each run when a test first needs it (and kept for the
    others): a test waits for its own command only, and a slow or failed command fails only the
    tests that read it (not every test of the file, as one fixture of all of them did)."""

    def __init__(self, root: Path):
        self.root, self.env = root, cli_environment(root / "cache")
        corpus = make_corpus(root / "corpus.txt", n_bytes=20_000)
        self.data = ["data=text", f"data.files=[{corpus}]", "eval_batches=1", "log.progress=off"]
        self.done: dict[str, object] = {}

    def args(self, name: str) -> tuple[list[str], Path | None]:
        """`normexp` arguments of the command `name`, and the folder it runs in (None: here)."""
        root, data = self.root, self.data
        if name.startswith("cfg_"):  # composes, shows the config, runs nothing: cwd is a fresh folder
            (root / name).mkdir(exist_ok=True)
            return ["train", "--cfg", "job", f"experiment={name[4:]}"], root / name
        if name in GRIDS:
            norms, placements = GRIDS[name]
            return ["train", "-m", *TINY, *data, "steps=5", "warmup=0", f"norm={','.join(norms)}",
                    f"placement={','.join(placements)}", f"hydra.sweep.dir={root / name}"], None
        if name in BOUNDARY:
            key = BOUNDARY[name]
            bounds = ["hydra.sweeper.lower=1", "hydra.sweeper.upper=2"] if key == "layers" else []
            if "layers" in preset_grid(name):  # depth a setting key (depth_law): one depth
                bounds.append("hydra.sweeper.params.layers=1")
            return ["train", "-m", f"experiment={name}", *TINY, *data, f"steps={STEPS}", "warmup=0",
                    *BOUNDARY_SHRINK, *bounds, f"hydra.sweep.dir={root / name}"], None
        grid = shrunk_grid(name)
        set_by_groups = {k for g in grid if g in GROUP_SWEEPS for k in GROUP_SWEEPS[g][1]}
        tiny = [o for o in TINY if o.split("=")[0] not in grid and o.split("=")[0] not in ("eval_batches", "log.progress")
                and o.split("=")[0] not in set_by_groups]
        own = preset_grid(name)
        shrink = [f"{'' if k in own else '+'}hydra.sweeper.params.{k}='{','.join(map(str, v))}'"
                  for k, v in grid.items() if k in SHRINK]
        return ["train", "-m", f"experiment={name}", *tiny, *data, f"steps={STEPS}", *shrink,
                f"hydra.sweep.dir={root / name}"], None

    def run(self, name: str):
        """The finished command `name` (a CompletedProcess; it exited 0)."""
        if name not in self.done:
            args, cwd = self.args(name)
            try:
                self.done[name] = run_cli(args, self.env, SAFETY_NET_S, cwd=cwd)
            except subprocess.TimeoutExpired:
                pytest.fail(f"normexp {' '.join(args[:4])} ... did not end within {SAFETY_NET_S} s: it hung "
                            "(a safety net, far beyond any machine's speed)")
        return self.done[name]


@pytest.fixture(scope="module")
def commands(tmp_path_factory):
    return Commands(tmp_path_factory.mktemp("presets"))


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(PRESET_VALUES))
def test_preset_composes_with_cfg_job(commands, preset):
    root = commands.root
    cfg = yaml.safe_load(commands.run(f"cfg_{preset}").stdout)
    for key, value in PRESET_VALUES[preset].items():
        node = cfg
        for part in key.split("."):
            node = node[part]
        assert node == value, (preset, key)
    assert list((root / f"cfg_{preset}").iterdir()) == []  # no run folder


def test_every_preset_norm_and_placement_is_tested():
    from normexp.config.compose import group_options

    assert "pre" in NORM_READERS
    assert {n for norms, _ in GRIDS.values() for n in norms} == set(NORMS)
    assert {p for _, placements in GRIDS.values() for p in placements} == set(PLACEMENTS)
    assert sorted(PRESET_VALUES) == sorted(group_options("experiment"))
    assert sorted(NORMS) == sorted(group_options("norm")) and sorted(PLACEMENTS) == sorted(group_options("placement"))


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(BOUNDARY))
def test_shrunken_boundary_preset_searches_each_setting(commands, preset):
    root = commands.root
    assert "Traceback" not in commands.run(preset).stderr
    runs = sweep_summaries(root / preset)
    assert sorted(s["init"] for s in runs) == ["torchscale", "torchscale", "xavier", "xavier"]  # 2 settings × 2 bounds
    rows = read_csv(root / preset / "boundary.csv")
    assert sorted(r["init"] for r in rows) == ["torchscale", "xavier"]
    for r in rows:  # 2 steps learn nothing: the lower bound fails, nothing is bisected
        assert r["key"] == BOUNDARY[preset] and r["verdict"] == "none" and r["runs_used"] == "2", r


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(set(PRESET_VALUES) - set(BOUNDARY)))
def test_shrunken_preset_sweep_runs_every_combination(commands, preset):
    root = commands.root
    assert "Traceback" not in commands.run(preset).stderr
    grid = shrunk_grid(preset)
    runs = sweep_summaries(root / preset)
    expected = set(itertools.product(*grid.values()))
    assert len(grid) >= 2 and len(expected) >= 2  # a grid, not a single run
    assert len(runs) == len(expected) == math.prod(len(v) for v in grid.values())
    assert {tuple(swept_value(s, k) for k in grid) for s in runs} == expected
    for s in runs:
        assert s["status"] in RAN_TO_THE_END and s["steps_completed"] == STEPS, s
        assert s["schedule"] == PRESET_VALUES[preset]["schedule.name"]
        if "lr" not in grid:
            assert s["lr"] == PRESET_VALUES[preset].get("lr", TRAIN_DEFAULTS["lr"])


@pytest.mark.slow
@pytest.mark.parametrize("grid", sorted(GRIDS))
def test_every_norm_and_placement_trains_5_steps(commands, grid):
    root = commands.root
    assert "Traceback" not in commands.run(grid).stderr
    runs = sweep_summaries(root / grid)
    expected = itertools.product(*GRIDS[grid])
    assert sorted((s["norm"], s["placement"]) for s in runs) == sorted(expected)
    for s in runs:
        which = (s["norm"], s["placement"])
        assert s["status"] in RAN_TO_THE_END and s["steps_completed"] == 5, which
        assert math.isfinite(s["final_train_loss"]) and math.isfinite(s["final_val_loss"]), which
        # ReZero builds no norm at all (x ← x + α·F(x), no final norm): it records none
        norm_settings = {} if EXPECTED[s["placement"]].SHAPE == (0, False) else NORM_SETTINGS[s["norm"]]  # no norm
        assert s["norm_settings"] == pytest.approx(norm_settings), which
        assert s["placement_settings"] == pytest.approx(PLACEMENT_SETTINGS.get(s["placement"], {})), which
