"""Record (or check) the per-step training losses of every norm × placement.

The fixture tests/fixtures/numerics.json pins what training computes, so a refactor that
moves a single number is caught (tests/test_numerics.py). It was first written by the code
*before* the placement/norm redesign and must not be re-recorded to make a change pass:
a moved loss is a finding to explain.

    python scripts/numerics_fixture.py            # write tests/fixtures/numerics.json
    python scripts/numerics_fixture.py --check    # compare this code against it

Each run: 4 blocks of width 32, 20 steps of batch 8 × 32 bytes on a generated corpus
(the same generator as the tests'), train/loss at every step read back from TensorBoard.
Mix-LN at 4 blocks with ratio 0.25 has one Post-LN block.
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
NORMS = ("layer", "rms", "batch", "dyt", "none")
PLACEMENTS = ("post", "pre", "deepnorm", "sandwich", "peri", "mix")
STEPS = 20
SETTINGS = ["layers=4", "d_model=32", "heads=2", "seq_len=32", "batch_size=8", "eval_batches=2",
            f"steps={STEPS}", "log_every=1", f"eval_every={STEPS}", "warmup=5", "lr=3e-3",
            "checkpoint_every=0", "log.progress=off", "threads=1"]


def train_losses(norms=NORMS, placements=PLACEMENTS, work: Path | None = None) -> dict[str, list[float]]:
    """{"norm/placement": [train loss at step 0 … STEPS-1]} from one `normexp train -m` sweep."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sys.path.insert(0, str(TESTS))
    from conftest import make_corpus  # the test suite's corpus generator

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(work or tmp)
        corpus = make_corpus(work / "corpus.txt")
        sweep = work / "sweep"
        env = {**os.environ, "NORMEXP_CACHE": str(work / "cache"), "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
        cmd = [sys.executable, "-m", "normexp.cli", "train", "-m", "data=text", f"data.files=[{corpus}]",
               f"norm={','.join(norms)}", f"placement={','.join(placements)}", *SETTINGS,
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare against the fixture instead of writing it")
    args = ap.parse_args()
    losses = train_losses()
    if not args.check:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps({"settings": SETTINGS, "losses": losses}, indent=1) + "\n")
        print(f"wrote {FIXTURE} ({len(losses)} runs × {STEPS} steps)")
        return
    expected = json.loads(FIXTURE.read_text())["losses"]
    worst = max(abs(a - b) for k in expected for a, b in zip(expected[k], losses[k]))
    moved = [k for k in expected if any(abs(a - b) > 1e-6 for a, b in zip(expected[k], losses[k]))]
    print(f"{len(expected)} runs, largest |Δloss| {worst:.3g}; moved beyond 1e-6: {moved or 'none'}")
    raise SystemExit(1 if moved else 0)


if __name__ == "__main__":
    main()
