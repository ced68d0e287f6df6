"""Shared test set-up: offline, a private cache, small corpora made on the spot, and a
helper that runs the real `normexp` command line in a subprocess."""

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach the Hub


def pytest_configure(config):
    config.addinivalue_line("markers", "network: needs the Python package index (skipped with NORMEXP_SKIP_NETWORK=1)")
    config.addinivalue_line("markers", "slow: an end-to-end run of a minute or more")
    config.addinivalue_line("markers", "slurm: needs a SLURM cluster (scripts/slurm_local.sh); skipped without one "
                                       "unless NORMEXP_REQUIRE_SLURM=1")


def make_corpus(path: Path, n_bytes: int = 60_000, seed: int = 0) -> Path:
    """A small deterministic English-like text: enough structure for the loss to fall."""
    import random

    rng = random.Random(seed)
    words = ("the king and queen of denmark speak to the ghost at night while horatio "
             "keeps watch upon the castle wall and the players rehearse a scene").split()
    lines, size = [], 0
    while size < n_bytes:
        line = " ".join(rng.choice(words) for _ in range(rng.randint(4, 12))).capitalize() + ".\n"
        lines.append(line)
        size += len(line)
    path.write_text("".join(lines)[:n_bytes])
    return path


@pytest.fixture
def corpus(tmp_path) -> Path:
    return make_corpus(tmp_path / "corpus.txt")


def cli_environment(cache: Path) -> dict[str, str]:
    """Environment for CLI subprocesses: a private cache, offline, one thread, unbuffered output."""
    return {**os.environ, "NORMEXP_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def cli_env(tmp_path, monkeypatch):
    """cli_environment for one test; this process uses the same private cache."""
    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "cache"))
    return cli_environment(tmp_path / "cache")


TINY = ["layers=2", "d_model=32", "heads=2", "seq_len=32", "batch_size=4", "eval_batches=2",
        "log.progress=lines", "threads=1"]

# How a plumbing run of a few steps may end: every step ran, and it either beat the unigram
# baseline ("completed") or did not ("stalled"). A run meant to learn must be "completed".
RAN_TO_THE_END = ("completed", "stalled")


def read_summary(run_dir: Path) -> dict:
    """The run folder's summary.json (fails the test if it is missing or not JSON)."""
    return json.loads((Path(run_dir) / "summary.json").read_text())


def sweep_summaries(sweep: Path) -> list[dict]:
    """The summary of every run below `sweep`, in path order."""
    return [json.loads(p.read_text()) for p in sorted(Path(sweep).rglob("summary.json"))]


def read_csv(path: Path) -> list[dict]:
    """The rows of a CSV file that normexp wrote, as {column: text}."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def load_events(run_dir: Path):
    """TensorBoard's EventAccumulator over the run folder, every scalar and image kept."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "images": 0})
    acc.Reload()
    return acc


def scalar_events(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} as TensorBoard shows it: all event files of the folder merged,
    the events a resumed run purged (steps >= its purge_step in the older file) left out."""
    acc = load_events(run_dir)
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def read_scalars(run_dir: Path) -> dict[str, dict[int, float]]:
    """{tag: {step: value}}: scalar_events by step."""
    return {tag: dict(points) for tag, points in scalar_events(run_dir).items()}


# A subprocess's time limit in the tests: a safety net against a hung process, never a speed limit
# (a command of seconds idle takes minutes at load 6-9 on 2 cores, or on the scalar CPU path), so
# no test fails because the machine is slow or busy.
SAFETY_NET_S = 3600


def run_cli(args, env, timeout=SAFETY_NET_S, check=True, **kw) -> subprocess.CompletedProcess:
    """Run `normexp ARGS` as a user would (python -m normexp.cli, so no PATH is assumed)."""
    proc = subprocess.run([sys.executable, "-m", "normexp.cli", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"normexp {' '.join(args)} exited {proc.returncode}\n{proc.stderr[-3000:]}")
    return proc


def import_script(monkeypatch, name: str):
    """A module of scripts/ (a tool, not part of the package) imported for one test; forgotten after it."""
    import importlib

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "scripts"))
    monkeypatch.delitem(sys.modules, name, raising=False)
    module = importlib.import_module(name)
    monkeypatch.setitem(sys.modules, name, module)
    return module


def pytest_terminal_summary(terminalreporter):
    """One line per slurm-marked test and its outcome, so a CI log shows they ran."""
    for outcome in ("passed", "failed", "skipped", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if "slurm" in getattr(report, "keywords", {}) and report.when in ("call", "setup"):
                if outcome == "passed" and report.when != "call":
                    continue
                terminalreporter.write_line(f"slurm test {outcome.upper()}: {report.nodeid}")


PLACEMENT_TESTS = Path(__file__).resolve().parent / "model" / "placements"


def placement_expectations() -> dict:
    """{placement: its test module} from tests/model/placements/test_<name>.py: each declares
    SHAPE (norms per block, final norm?) and SETTINGS (resolved at 2 blocks), worked out by
    hand. The tests every placement passes read them here, so a new placement is its class,
    its yaml and its own test file; one without a test file fails those tests by name."""
    import importlib.util

    out = {}
    for path in sorted(PLACEMENT_TESTS.glob("test_*.py")):
        spec = importlib.util.spec_from_file_location(f"placement_expectations_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        out[path.stem[len("test_"):]] = module
    return out


class Recorder:
    """A SummaryWriter stand-in: keeps what write_hparams adds."""

    def __init__(self):
        self.file_writer = self
        self.summaries = []

    def add_summary(self, summary, step=None):
        self.summaries.append(summary)
