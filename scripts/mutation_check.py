#!/usr/bin/env python
"""Mutation check: would the tests notice the bugs that silently corrupt a study?

Each mutant is one plausible bug — a text replacement in one file of normexp — and the tests
that should catch it. For each, this script copies the repository (without runs/, .git and
caches) to a temporary folder, applies the replacement (the old text must occur exactly once,
else the mutant is STALE: update this list), and runs the named tests there with

    python -m pytest -x -q -p no:cacheprovider TESTS      (cwd = the copy, PYTHONPATH = the copy)

so the copy's normexp is the one imported (checked once before the mutants run). A mutant is
killed when the tests fail. First the tests run once on an unmutated copy: they must pass, or
every "kill" would mean nothing.

    python scripts/mutation_check.py              # all mutants, two at a time
    python scripts/mutation_check.py -k deepnorm  # the mutants whose name contains "deepnorm"
    python scripts/mutation_check.py --jobs 1 --keep
    python scripts/mutation_check.py --head        # the last commit, without uncommitted work

Prints a table; exits 1 if any mutant survives (or is stale, or the baseline fails). Not
part of the test suite: it takes minutes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_IGNORE_ANYWHERE = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".pytest_cache", ".ruff_cache",
                                         "*.pyc", "multirun", "outputs")


def IGNORE(folder: str, names: list[str]) -> set[str]:
    """What the copy leaves out: caches anywhere, and the output folder runs/ at the top only
    (normexp/runs/ and tests/runs/ are code)."""
    top = {"runs"} & set(names) if Path(folder).resolve() == REPO else set()
    return set(_IGNORE_ANYWHERE(folder, names)) | top


@dataclass(frozen=True)
class Mutant:
    name: str
    file: str   # relative to the repository
    old: str    # must occur exactly once
    new: str
    tests: tuple[str, ...]  # pytest targets: files or node ids


M = Mutant
MUTANTS = [
    # ---- learning-rate schedules: the variable of the warmup studies
    M("warmup one step late", "normexp/train/schedules.py",
      "        return (step + 1) / warmup", "        return step / warmup",
      ("tests/train/test_schedules.py",)),
    M("cosine floor ignored", "normexp/train/schedules.py",
      "return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * progress))",
      "return 0.5 * (1 + math.cos(math.pi * progress))",
      ("tests/train/test_schedules.py",)),
    M("decay never reaches the floor", "normexp/train/schedules.py",
      "max(1, steps - warmup - 1)", "max(1, steps - warmup)",
      ("tests/train/test_schedules.py",)),
    M("inverse_sqrt counts from 0", "normexp/train/schedules.py",
      "math.sqrt(start / max(step + 1, start))", "math.sqrt(start / max(step, start))",
      ("tests/train/test_schedules.py",)),
    M("warmup not clamped to steps", "normexp/config/run_config.py",
      "    return min(warmup, steps)", "    return warmup",
      ("tests/train/test_schedules.py",)),
    # ---- config -> model wiring
    M("LayerNorm eps ignored", "normexp/model/norms/layer.py",
      "return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)",
      "return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, 1e-5)",
      ("tests/model/test_wiring.py",)),
    M("RMSNorm eps ignored", "normexp/model/norms/rms.py",
      "x32.pow(2).mean(-1, keepdim=True) + self.eps)", "x32.pow(2).mean(-1, keepdim=True) + 1e-5)",
      ("tests/model/test_wiring.py",)),
    M("BatchNorm momentum ignored", "normexp/model/norms/batch.py",
      "nn.BatchNorm1d(d, eps=self.settings.eps, momentum=self.settings.momentum)",
      "nn.BatchNorm1d(d, eps=self.settings.eps)",
      ("tests/model/test_wiring.py",)),
    M("DyT alpha init ignored", "normexp/model/norms/dyt.py",
      "self.alpha = nn.Parameter(torch.tensor(float(self.init_alpha)))", "self.alpha = nn.Parameter(torch.tensor(0.5))",
      ("tests/model/test_wiring.py",)),
    M("Mix-LN floor -> ceil", "normexp/config/variants/placements/mix.py",
      "math.floor(round(self.ratio * depth, 9))", "math.ceil(round(self.ratio * depth, 9))",
      ("tests/model/placements/test_mix.py",)),
    M("Mix-LN float floor (0.58*50 -> 28)", "normexp/config/variants/placements/mix.py",
      "math.floor(round(self.ratio * depth, 9))", "math.floor(self.ratio * depth)",
      ("tests/model/placements/test_mix.py",)),
    M("DeepNorm alpha on F(x) instead of x", "normexp/model/placements/deepnorm.py",
      "return self.norm(self.alpha * x + out), out", "return self.norm(x + self.alpha * out), out",
      ("tests/model/placements/test_deepnorm.py",)),
    M("DeepNorm beta not applied in init", "normexp/model/gpt.py",
      "wrapper.sublayer.init_weights(wrapper.init_gain", "wrapper.sublayer.init_weights(1.0",
      ("tests/model/placements/test_deepnorm.py",)),
    M("DeepNorm custom beta ignored", "normexp/config/variants/placements/deepnorm.py",
      '"beta": auto_beta if self.beta == "auto" else float(self.beta)', '"beta": auto_beta',
      ("tests/model/placements/test_deepnorm.py",)),
    M("LayerScale init_scale ignored", "normexp/model/placements/layerscale.py",
      "torch.full((sublayer.d_model,), self.init_scale)", "torch.full((sublayer.d_model,), 0.1)",
      ("tests/model/placements/test_layerscale.py",)),
    # ---- optimizer
    M("weight decay on biases and norms", "normexp/train/loop.py",
      'return p.dim() >= 2 and "emb" not in name', 'return p.dim() >= 1 and "emb" not in name',
      ("tests/train/test_optimizer.py",)),
    M("weight decay on embeddings", "normexp/train/loop.py",
      'return p.dim() >= 2 and "emb" not in name', "return p.dim() >= 2",
      ("tests/train/test_optimizer.py",)),
    M("grad_clip ignored", "normexp/train/loop.py",
      "torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.config.optim.grad_clip, foreach=True)", "pass",
      ("tests/train/test_optimizer.py",)),
    # ---- instruments
    M("per-layer grad norm of the wrong group", "normexp/train/instruments.py",
      "self.per_block, self.per_tensor, self.ratio = per_group[: self.layers], per_tensor, ratio",
      "self.per_block, self.per_tensor, self.ratio = per_group[1: self.layers + 1], per_tensor, ratio",
      ("tests/train/test_instruments.py::test_logged_values_equal_a_hand_computation",)),
    # ---- data split
    M("validation fraction halved", "normexp/data/sources.py",
      "cut = chars - round(chars * fraction)", "cut = chars - round(chars * fraction / 2)",
      ("tests/data/test_data.py::test_byte_tokenizer_val_fraction",)),
    M("train and validation overlap", "normexp/data/sources.py",
      "train_text, val_text = _split_at_char(text, cut)", "train_text, val_text = text, _split_at_char(text, cut)[1]",
      ("tests/data/test_data.py::test_byte_tokenizer_val_fraction",)),
    # ---- resume
    M("resume does not restore RNG states", "normexp/train/resume.py",
      '    ckpt.restore_rng(state["rng"])\n', "",
      ("tests/train/test_resume_rng.py",)),
    # ---- report statistics (more for the new statistics to come)
    M("report: seed counts as a varied key (replicates not pooled)", "normexp/analysis/report/tables.py",
      "keys = sorted({k for r in runs for k in r.config} - set(EXECUTION_SETTINGS) - set(study.REPLICATE_KEYS))",
      "keys = sorted({k for r in runs for k in r.config} - set(EXECUTION_SETTINGS))",
      ("tests/analysis/test_report.py::test_varied_keys_follow_the_overrides_and_drop_group_details",)),
    M("report: a diverged run is dropped, not counted as its initial loss", "normexp/analysis/study.py",
      'v = m.get("initial_loss") if r.status == Status.DIVERGED else', 'v = None if r.status == Status.DIVERGED else',
      ("tests/analysis/test_study.py",)),
    M("report: z quantile instead of Student's t", "normexp/analysis/study.py",
      "half = t975(len(x) - 1) * float(x.std(ddof=1)) / math.sqrt(len(x))",
      "half = 1.959964 * float(x.std(ddof=1)) / math.sqrt(len(x))",
      ("tests/analysis/test_study.py",)),
    M("report: LR sensitivity without the min(l, l0) clip", "normexp/analysis/study.py",
      'out[r.config.get("seed")] = min(v, l0) if l0 is not None and math.isfinite(l0) else v',
      'out[r.config.get("seed")] = v',
      ("tests/analysis/test_study.py::test_lr_sensitivity_clips_a_run_that_ended_above_its_initial_loss",)),
    M("report: max stable lr where any seed learned", "normexp/analysis/study.py",
      "and all(map(counts_as_learned, kept))]", "and any(map(counts_as_learned, kept))]",
      ("tests/analysis/test_study.py",)),
    # ---- baseline and the stall rule
    M("unigram baseline in bits, not nats", "normexp/data/batches.py",
      "return float(-(p * np.log(p)).sum())", "return float(-(p * np.log2(p)).sum())",
      ("tests/analysis/test_study.py::test_baseline_is_the_unigram_entropy_and_a_tiny_lr_stalls",)),
    M("stall margin ignored", "normexp/runs/summary.py",
      "return baseline_loss is None or final_val_loss <= (1 - margin) * baseline_loss",
      "return baseline_loss is None or final_val_loss <= baseline_loss",
      ("tests/analysis/test_study.py::test_the_stall_rule_by_hand",)),
    # ---- warning signals
    M("attention entropy over the masked (future) positions too", "normexp/train/instruments.py",
      'logp = torch.log_softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)',
      "logp = torch.log_softmax(scores, dim=-1)",
      ("tests/train/test_instruments.py::test_logged_values_equal_a_hand_computation",)),
    # ---- SLURM requeue (needs a cluster: scripts/slurm_local.sh; skipped, so "survives", without one)
    M("a requeued job starts over instead of resuming", "normexp/launch/job.py",
      "        cfg.resume = True\n", "        pass\n",
      ("tests/launch/test_slurm.py::test_preempted_run_is_requeued_and_resumes_to_the_losses_of_an_uninterrupted_run",)),
]


FROM_HEAD = False  # --head: copy the last commit instead of the working tree


def make_copy(root: Path) -> Path:
    """The repository without runs/, .git and caches (the working tree, or with --head the
    last commit, leaving out work in progress), with its configs where the copy's normexp
    looks for them (normexp.configs is configs/ through the editable install, which would
    otherwise point back at the original repository)."""
    copy = root / "repo"
    if FROM_HEAD:
        copy.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", "HEAD"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(copy)], input=archive, check=True)
    else:
        shutil.copytree(REPO, copy, ignore=IGNORE, symlinks=True)
    link = copy / "normexp" / "configs"
    if not link.exists():
        link.symlink_to(copy / "configs", target_is_directory=True)
    return copy


def env_for(copy: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(copy), *filter(None, [env.get("PYTHONPATH")])])
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", PYTHONDONTWRITEBYTECODE="1")
    return env


def head_commit() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          check=True).stdout.strip()


def check_imports_the_copy(copy: Path) -> None:
    code = "import normexp, normexp.configs, normexp.model; print(normexp.model.__file__); print(list(normexp.configs.__path__)[0])"
    out = subprocess.run([sys.executable, "-c", code], cwd=copy, env=env_for(copy), capture_output=True, text=True,
                         check=True).stdout.split()
    for path in out:
        if not Path(path).resolve().is_relative_to(copy.resolve()):
            raise SystemExit(f"mutation_check: the copy imports {path}, not its own normexp: PYTHONPATH does not win")


def run_tests(copy: Path, tests: tuple[str, ...], timeout: float) -> tuple[bool, str, float]:
    """(passed, the first failing test or the last line, seconds)."""
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests],
                              cwd=copy, env=env_for(copy), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False, f"timed out after {timeout:.0f} s", time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    if proc.returncode == 0:
        return True, "", seconds
    failed = re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)
    lines = [ln for ln in proc.stdout.strip().splitlines() if ln.strip()] or ["(no output)"]
    return False, failed[0] if failed else lines[-1][:100], seconds


def check_mutant(m: Mutant, timeout: float, keep: bool) -> tuple[str, str, float]:
    """(verdict, detail, seconds): killed / SURVIVED / STALE."""
    with tempfile.TemporaryDirectory(prefix="mutant_") as tmp:
        copy = make_copy(Path(tmp))
        path = copy / m.file
        text = path.read_text()
        count = text.count(m.old)
        if count != 1:
            return "STALE", f"old text occurs {count} times in {m.file}", 0.0
        path.write_text(text.replace(m.old, m.new))
        passed, detail, seconds = run_tests(copy, m.tests, timeout)
        if keep:
            slug = re.sub(r"\W+", "_", m.name)
            shutil.copytree(copy, Path(tempfile.gettempdir()) / f"mutant_{slug}", dirs_exist_ok=True)
    return ("SURVIVED", "tests pass", seconds) if passed else ("killed", detail, seconds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", default="", help="only mutants whose name contains this")
    parser.add_argument("--jobs", type=int, default=2, help="mutants checked at once (default 2)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per test run")
    parser.add_argument("--skip-baseline", action="store_true", help="do not run the tests on an unmutated copy first")
    parser.add_argument("--keep", action="store_true", help="keep each mutated copy in the temp folder")
    parser.add_argument("--head", action="store_true",
                        help="mutate the last commit, not the working tree (others' uncommitted work left out)")
    args = parser.parse_args()
    global FROM_HEAD
    FROM_HEAD = args.head
    mutants = [m for m in MUTANTS if args.k.lower() in m.name.lower()]
    if not mutants:
        print(f"no mutant matches {args.k!r}")
        return 2
    t0 = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="mutant_baseline_") as tmp:
        copy = make_copy(Path(tmp))
        check_imports_the_copy(copy)
        print(f"copies of {REPO} ({'HEAD ' + head_commit() if FROM_HEAD else 'working tree'}) "
              "import their own normexp (checked)")
        if not args.skip_baseline:
            targets = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
            passed, detail, seconds = run_tests(copy, targets, args.timeout * 2)
            print(f"baseline: the {len(targets)} test targets pass on the unmutated copy: "
                  f"{'yes' if passed else 'NO'} ({seconds:.0f} s)")
            if not passed:
                print(f"  failing: {detail}")
                return 1

    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(lambda m: check_mutant(m, args.timeout, args.keep), mutants))

    width = max(len(m.name) for m in mutants)
    print()
    print(f"{'#':>2}  {'mutant':<{width}}  {'file':<22}  {'verdict':<8}  {'s':>4}  killed by")
    print(f"{'-' * 2}  {'-' * width}  {'-' * 22}  {'-' * 8}  {'-' * 4}  {'-' * 40}")
    for i, (m, (verdict, detail, seconds)) in enumerate(zip(mutants, results), 1):
        print(f"{i:>2}  {m.name:<{width}}  {m.file:<22}  {verdict:<8}  {seconds:>4.0f}  {detail}")
    bad = [m.name for m, (verdict, _, _) in zip(mutants, results) if verdict != "killed"]
    killed = len(mutants) - len(bad)
    print(f"\n{killed} of {len(mutants)} mutants killed in {time.perf_counter() - t0:.0f} s"
          + (f"; not killed: {', '.join(bad)}" if bad else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
