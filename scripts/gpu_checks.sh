#!/bin/bash
# The checks a lent GPU machine is for, as one timed script (the machine is lent for minutes):
#   1. the environment (card, driver, torch) and a default `normexp train` on CUDA (bf16 autocast);
#   2. the CUDA-relevant tests (resume, RNG state, numerics, instruments, compile) with device=auto -> cuda;
#   3. the depth law's deep end at the 800-step budget (issue 39): a boundary sweep at DEEP_LAYERS,
#      Post-LN and DeepNorm x {xavier, torchscale}, 3 seeds, budget check x2, stopped at the deadline
#      (an unfinished sweep leaves boundary_progress.csv, which the report reads and names as unfinished).
# Everything lands in $OUT as a few archives (the device tool brings back at most 8 files).
# Usage on the device machine, from the repository root (wheels for what its image lacks in .whl/, the
# default corpus and its token cache in .gpu/cache):  bash scripts/gpu_checks.sh
# Session 5 (an H100, 15 min of device time): the default run took 19 s; the tests found resume and the
# GPU's divergence path broken (fixed after); the sweep ran 54 runs of 32 blocks in 408 s.
# Knobs: DEADLINE (seconds after start when the sweep is stopped), DEEP_LAYERS, SWEEP_JOBS, SMOKE=1 (tiny, for a dry run).
set -u
START=$(date +%s)
DEADLINE=${DEADLINE:-470}
DEEP_LAYERS=${DEEP_LAYERS:-32}
SWEEP_JOBS=${SWEEP_JOBS:-12}
OUT=${OUT:-/tmp/gpu_out}
WORK=${WORK:-/tmp/gpu_work}
mkdir -p "$OUT" "$WORK"
elapsed() { echo $(( $(date +%s) - START )); }
say() { echo "=== [$(elapsed) s] $*" | tee -a "$OUT/timeline.txt"; }

if [ -d .whl ] && [ "${SKIP_WHEELS:-0}" != 1 ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "wheel install failed"; exit 1; }
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
[ -e normexp/configs ] || ln -s ../configs normexp/configs  # the package's configs, as an install maps them
export NORMEXP_CACHE=${NORMEXP_CACHE:-$PWD/.gpu/cache} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
NORMEXP="python3 -m normexp"

say "environment"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-', 'bf16', torch.cuda.is_available() and torch.cuda.is_bf16_supported())"
  nproc; } 2>&1 | tee "$OUT/environment.txt"

if [ "${SMOKE:-0}" = 1 ]; then
  DEFAULT_ARGS="steps=20 eval_every=10 log_every=10"
  SWEEP_ARGS="steps=16 warmup=8 eval_every=4 log_every=4 seq_len=16"
  TEST_SELECT="tests/train/test_resume_rng.py"
else
  DEFAULT_ARGS=""
  SWEEP_ARGS="steps=800 warmup=400"
  TEST_SELECT="tests/runs/test_resume.py tests/train/test_resume_rng.py tests/train/test_numerics.py tests/train/test_instruments.py tests/train/test_learning.py tests/train/test_tensorboard.py tests/model/test_compile.py tests/model/test_model.py"
fi

say "default run (normexp train, device=auto)"
/usr/bin/time -f "wall %e s, max RSS %M KB" timeout 150 $NORMEXP train $DEFAULT_ARGS hydra.run.dir=$WORK/default \
  > "$OUT/default_run.log" 2>&1
say "default run rc=$?"
tail -5 "$OUT/default_run.log"

# alone on the machine: beside the sweep (session 5) they had done 51 of 56 when their 200 s ran out
say "CUDA-relevant tests (device=auto)"
XDIST=$(python3 -c "import xdist" 2>/dev/null && echo "-n 12")
BENCH=$(python3 -c "import pytest_benchmark" 2>/dev/null && echo "-p no:benchmark")
PER_TEST=$(python3 -c "import pytest_timeout" 2>/dev/null && echo "--timeout 150")
timeout 220 python3 -m pytest -q -rfE --tb=short $XDIST $BENCH $PER_TEST -p no:cacheprovider $TEST_SELECT \
  > "$OUT/tests.log" 2>&1
say "tests rc=$?"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/tests.log" | tail -20

say "depth-law deep end: layers=$DEEP_LAYERS, $SWEEP_ARGS, budget check x2, $SWEEP_JOBS joblib slots"
SWEEP_DIR=$WORK/law800_deep$DEEP_LAYERS
timeout -s INT $(( DEADLINE - $(elapsed) )) $NORMEXP train -m experiment=depth_law placement=post,deepnorm \
  init=xavier,torchscale layers=$DEEP_LAYERS $SWEEP_ARGS hydra.sweeper.upper=0.03 hydra.sweeper.budget_check=2 \
  hydra/launcher=joblib hydra.launcher.n_jobs=$SWEEP_JOBS hydra.sweep.dir=$SWEEP_DIR > "$OUT/sweep.log" 2>&1
say "sweep rc=$? (124/130 = stopped at the deadline)"
tail -3 "$OUT/sweep.log"

say "packing"
tar czf "$OUT/runs.tar.gz" -C "$WORK" --exclude=checkpoints --exclude=.normexp_claim . 2>/dev/null
ls -la "$OUT"
say "done"
