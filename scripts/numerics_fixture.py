"""Record (or check) the per-step training losses of every norm × placement.

The fixture tests/fixtures/numerics.json pins what training computes, so a refactor that
moves a single number is caught (tests/train/test_numerics.py). Its runs are every registered norm
× every registered placement (read from the model's registries, so a new variant is a run
the fixture lacks until it is recorded). The first 30 runs (5 norms × 6 placements) were
written by the code *before* the placement/norm redesign; the rest by the code before the
package layout (issue 28). No recorded loss may be re-recorded to make a change pass: a moved
loss is a finding to explain. A new variant's runs are added with `--record-missing`, which
trains only the runs the fixture lacks and measures their tolerances, leaving every
recorded run as it is.

Each run: 4 blocks of width 32, 20 steps of batch 8 × 32 bytes on a generated corpus
(the same generator as the tests'), train/loss at every step read back from TensorBoard.
Mix-LN at 4 blocks with ratio 0.25 has one Post-LN block.

Tolerances (issue 32). Another CPU (another ISA, another BLAS kernel) rounds differently, so
an exact match holds only on the recording machine. Each run's tolerance at step s is
measured, not guessed: the sweep is trained once per CPU code path this machine offers
(CODE_PATHS: torch's kernels for AVX-512, AVX2 and no vector ISA; MKL and oneDNN held to AVX2)
and `spread[s]` is the largest |loss − recorded loss| over those paths at steps ≤ s (a
running max: a rounding difference does not reliably shrink later). Then

    tolerance[s] = max(FLOOR_ULPS · ulp32(recorded loss[s]), SAFETY · spread[s])

and a step whose tolerance would exceed MAX_TOLERANCE is not checked, nor any after it (a
chaotic run's rounding differences grow to O(1): beyond that horizon it pins nothing).

    python scripts/numerics_fixture.py --check        # compare this code against the fixture
    python scripts/numerics_fixture.py --tolerances   # measure the spread, write the tolerances
    python scripts/numerics_fixture.py --record-missing  # add the runs of a new norm or placement
    python scripts/numerics_fixture.py --record       # (re)write the losses: only for a new fixture
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent / "tests"
FIXTURE = TESTS / "fixtures" / "numerics.json"
STEPS = 20
# the CPU code paths the tolerances are measured over: environment variables torch, MKL and
# oneDNN read at start-up (a path this CPU lacks falls back to the best one it has)
CODE_PATHS = {"native": {}, "aten-avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
              "aten-default": {"ATEN_CPU_CAPABILITY": "default"}, "mkl-avx2": {"MKL_ENABLE_INSTRUCTIONS": "AVX2"},
              "onednn-avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2"}}
FLOOR_ULPS = 16        # float32 ulps of the loss: the normalized runs move ≤ 3 between code paths
SAFETY = 10            # × the measured spread, for CPUs not measured (ARM, other BLAS builds)
MAX_TOLERANCE = 1e-2   # a tolerance above this pins nothing: the run is not checked from there on
SETTINGS = ["layers=4", "d_model=32", "heads=2", "seq_len=32", "batch_size=8", "eval_batches=2",
            f"steps={STEPS}", "log_every=1", f"eval_every={STEPS}", "warmup=5", "lr=3e-3",
            "checkpoint_every=0", "log.progress=off", "threads=1"]
# added to SETTINGS when training, not part of the record: no depth-profile images (they change no
# loss; drawing them at log_every=1 was most of this check's time)
UNRECORDED = ["log.profiles_every=0"]


def registered_runs() -> list[str]:
    """"norm/placement" for every registered norm × placement that trains a run of its own, in
    registry order: a placement that builds no norm takes the default norm only (any other is
    refused, normexp.config.variants.check_settings_read; same_run_as)."""
    from normexp.model import NORMS, PLACEMENTS

    runs = [f"{norm}/{placement}" for norm in NORMS for placement in PLACEMENTS]
    return [run for run in runs if same_run_as(run) is None]


def same_run_as(run: str) -> str | None:
    """The registered run that `run` trains exactly, when its placement builds no norm (declares
    no "norm" in its `reads`) and its norm is not the default; None for a run of its own. The
    fixture's first record holds such runs too: their losses equal the default norm's bit for bit."""
    from normexp.config.defaults import group_default
    from normexp.model import PLACEMENTS

    norm, placement = run.split("/")
    default = group_default("norm")
    return f"{default}/{placement}" if "norm" not in PLACEMENTS[placement].Settings.reads and norm != default else None


def sweeps_for(runs: list[str]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """The runs as few norm × placement grids as their shape allows: the norms that lack the
    same placements share one grid (one `normexp train -m` sweep each)."""
    by_norm: dict[str, list[str]] = {}
    for run in runs:
        norm, placement = run.split("/")
        by_norm.setdefault(norm, []).append(placement)
    grids: dict[tuple[str, ...], list[str]] = {}
    for norm, placements in by_norm.items():
        grids.setdefault(tuple(placements), []).append(norm)
    return [(tuple(norms), placements) for placements, norms in grids.items()]


def train_losses(runs: list[str] | None = None, work: Path | None = None, env: dict | None = None,
                 extra: tuple[str, ...] = ()) -> dict[str, list[float]]:
    """{"norm/placement": [train loss at step 0 … STEPS-1]} for `runs` (all registered runs if
    None) from as few `normexp train -m` sweeps as their grid allows (`env`: variables added to
    the children's environment, `extra`: overrides added)."""
    runs = registered_runs() if runs is None else runs
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(work or tmp)
        out = {}
        for i, (norms, placements) in enumerate(sweeps_for(runs)):
            out.update(_sweep_losses(norms, placements, work / f"grid{i}", env, extra))
        return {run: out[run] for run in runs}


def _sweep_losses(norms, placements, work: Path, env: dict | None, extra: tuple[str, ...]) -> dict[str, list[float]]:
    """One `normexp train -m` sweep of norms × placements: {"norm/placement": losses}."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sys.path.insert(0, str(TESTS))
    from conftest import make_corpus  # the test suite's corpus generator

    work.mkdir(parents=True, exist_ok=True)
    corpus = make_corpus(work / "corpus.txt")
    sweep = work / "sweep"
    env = {**os.environ, "NORMEXP_CACHE": str(work / "cache"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1",
           **(env or {})}
    cmd = [sys.executable, "-m", "normexp.cli", "train", "-m", "data=text", f"data.files=[{corpus}]",
           f"norm={','.join(norms)}", f"placement={','.join(placements)}", *SETTINGS, *UNRECORDED, *extra,
           "device=cpu",  # the recorded losses are float32 CPU numbers; auto picks a GPU's bf16 (an H100: 1e-4 off)
           f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=${norm.name}-${hydra:runtime.choices.placement}"]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the sweep failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    out = {}
    for norm in norms:
        for placement in placements:
            acc = EventAccumulator(str(sweep / f"{norm}-{placement}"), size_guidance={"scalars": 0})
            acc.Reload()
            losses = {e.step: e.value for e in acc.Scalars("train/loss")}
            out[f"{norm}/{placement}"] = [losses[s] for s in range(STEPS)]
    return out


def ulp32(x: float) -> float:
    """The float32 spacing at x (the loss is a float32)."""
    import numpy as np

    return float(np.spacing(np.float32(abs(x))))


def tolerances(recorded: dict[str, list[float]], measured: list[dict[str, list[float]]]) -> dict[str, list]:
    """{run: [tolerance at step s, or None from the horizon on]} by the rule in the docstring."""
    out = {}
    for run, losses in recorded.items():
        spread, tol, horizon = 0.0, [], False
        for s, loss in enumerate(losses):
            spread = max([spread, *(abs(m[run][s] - loss) for m in measured)])
            t = max(FLOOR_ULPS * ulp32(loss), SAFETY * spread)
            horizon = horizon or t > MAX_TOLERANCE
            tol.append(None if horizon else t)
        out[run] = tol
    return out


def compare(expected: dict, got: dict[str, list[float]]) -> list[str]:
    """One line per step whose loss is outside its tolerance."""
    bad = []
    for run, losses in expected["losses"].items():
        if run not in got and same_run_as(run):  # not trained: a copy of same_run_as(run)'s (checked in the tests)
            continue
        for s, (want, tol) in enumerate(zip(losses, expected["tolerances"][run])):
            if tol is not None and not abs(got[run][s] - want) <= tol:
                bad.append(f"{run} step {s}: {got[run][s]!r} != {want!r} (recorded) ± {tol:.3g}, "
                           f"off by {abs(got[run][s] - want) / ulp32(want):.0f} ulps")
    return bad


def _write(fixture: dict) -> None:
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    FIXTURE.write_text(json.dumps(fixture, indent=1) + "\n")


def missing_runs(fixture: dict) -> list[str]:
    """The registered runs the fixture has no losses for (a new norm or placement)."""
    return [run for run in registered_runs() if run not in fixture["losses"]]


def measure_tolerances(recorded: dict[str, list[float]]) -> dict[str, list]:
    """Train `recorded`'s runs under every CODE_PATHS entry: their tolerances by the rule above."""
    measured = {}
    for name, env in CODE_PATHS.items():
        measured[name] = train_losses(list(recorded), env=env)
        worst = max(abs(a - b) for k in recorded for a, b in zip(recorded[k], measured[name][k]))
        print(f"{name} {env}: largest |Δloss| against the recorded losses {worst:.3g}", flush=True)
    return tolerances(recorded, list(measured.values()))


def _rule() -> dict:
    import torch

    return {"floor_ulps": FLOOR_ULPS, "safety": SAFETY, "max_tolerance": MAX_TOLERANCE, "code_paths": CODE_PATHS,
            "measured_with": f"torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()} CPU"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compare this code against the fixture (the default)")
    mode.add_argument("--tolerances", action="store_true",
                      help="train under every CODE_PATHS entry and write the tolerances (the losses stay)")
    mode.add_argument("--record-missing", action="store_true",
                      help="record the losses and tolerances of the registered runs the fixture lacks (the rest stay)")
    mode.add_argument("--record", action="store_true", help="write the losses anew (only for a new fixture)")
    args = ap.parse_args()
    if args.record:
        _write({"settings": SETTINGS, "losses": train_losses()})
        print(f"wrote {FIXTURE} ({len(registered_runs())} runs × {STEPS} steps); now run --tolerances")
        return
    fixture = json.loads(FIXTURE.read_text())
    if args.record_missing:
        runs = missing_runs(fixture)
        if not runs:
            print(f"{FIXTURE} has every registered run ({len(fixture['losses'])})")
            return
        print(f"recording {len(runs)} runs: {', '.join(runs)}", flush=True)
        recorded = train_losses(runs)
        fixture["losses"].update(recorded)
        fixture["tolerances"].update(measure_tolerances(recorded))
        fixture.setdefault("recorded_later", []).append({"runs": runs, "tolerance_rule": _rule()})
        _write(fixture)
        print(f"wrote {len(runs)} runs into {FIXTURE}")
        return
    if args.tolerances:
        fixture["tolerances"].update(measure_tolerances({run: losses for run, losses in fixture["losses"].items()
                                                         if same_run_as(run) is None}))
        fixture["tolerance_rule"] = _rule()
        _write(fixture)
        checked = {k: sum(t is not None for t in v) for k, v in fixture["tolerances"].items()}
        print(f"wrote the tolerances into {FIXTURE}; steps checked per run: {checked}")
        return
    bad = compare(fixture, train_losses([run for run in fixture["losses"] if same_run_as(run) is None]))
    print(f"{len(fixture['losses'])} runs: {len(bad)} steps outside their tolerance" + "".join(f"\n  {b}" for b in bad))
    raise SystemExit(1 if bad else 0)


if __name__ == "__main__":
    main()
