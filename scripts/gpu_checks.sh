#!/bin/bash
# The checks a lent GPU machine is for, as one timed script (the machine is lent for minutes):
#   1. the environment (card, driver, torch);
#   2. packs (issue 48): scripts/bench_packs.py at the README's usage line (48 x 128, seq 128, batch 16,
#      RMSNorm, Pre-LN) with 8 members, and at the depth law's small shape (32 x 64, seq 64, batch 16) with
#      24 members: solo vs pack tokens/s, peak memory per member, first-step loss pack vs solo (bf16);
#   3. where the machine has normexp's whole stack (hydra, tensorboard, scipy, matplotlib: the image lacks
#      some, and the wheels that would fill it are larger than what travels), the default `normexp train`
#      and a packed sweep through hydra/launcher=packed; else it says so.
# Everything lands in $OUT. Usage on the device machine, from the repository root (wheels for what its
# image lacks in .whl/, the default corpus's cache in .gpu/cache):  bash scripts/gpu_checks.sh
# Session 5 (an H100): the default run took 19 s. Session 6: see docs/speed.md#packs.
set -u
START=$(date +%s)
OUT=${OUT:-/tmp/gpu_out}
WORK=${WORK:-/tmp/gpu_work}
mkdir -p "$OUT" "$WORK"
elapsed() { echo $(( $(date +%s) - START )); }
say() { echo "=== [$(elapsed) s] $*" | tee -a "$OUT/timeline.txt"; }

if [ -d .whl ] && [ "${SKIP_WHEELS:-0}" != 1 ]; then
  for w in .whl/*.whl; do  # only what the image lacks: its own numpy (built for its torch) wins
    name=$(basename "$w" | cut -d- -f1 | tr 'A-Z' 'a-z')
    mod=$([ "$name" = pyyaml ] && echo yaml || echo "$name")
    python3 -c "import $mod" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --target /tmp/site "$w" || echo "wheel install failed: $w"
  done
  export PYTHONPATH=/tmp/site:$PWD
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
[ -e normexp/configs ] || ln -s ../configs normexp/configs  # the package's configs, as an install maps them
export NORMEXP_CACHE=${NORMEXP_CACHE:-$PWD/.gpu/cache} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1

say "environment"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-')"
  nproc; } 2>&1 | tee "$OUT/environment.txt"

say "packs"
for setting in "--layers 48 --d-model 128 --seq-len 128 --batch 16 --members 8" \
               "--layers 48 --d-model 128 --seq-len 128 --batch 16 --members 16" \
               "--layers 32 --d-model 64 --heads 4 --seq-len 64 --batch 16 --members 24"; do
  timeout 120 python3 scripts/bench_packs.py $setting --steps ${BENCH_STEPS:-10} 2>&1 | tail -2 | tee -a "$OUT/packs.txt"
done
say "packs done"

if python3 -c "import hydra, tensorboard, scipy, matplotlib, typer" 2>/dev/null; then
  say "default run (normexp train, device=auto)"
  /usr/bin/time -f "wall %e s, max RSS %M KB" timeout 120 python3 -m normexp train hydra.run.dir=$WORK/default \
    > "$OUT/default_run.log" 2>&1
  say "default run rc=$?"; tail -3 "$OUT/default_run.log"
  say "a packed sweep: 8 runs of 48 x 128 (lr x seed), 200 steps"
  /usr/bin/time -f "wall %e s" timeout 200 python3 -m normexp train -m hydra/launcher=packed norm=rms layers=48 \
    steps=200 lr=1e-3,2e-3,3e-3,5e-3 seed=0,1 hydra.sweep.dir=$WORK/packed > "$OUT/packed_sweep.log" 2>&1
  say "packed sweep rc=$?"; tail -4 "$OUT/packed_sweep.log"
else
  say "normexp's whole stack is not on this machine (hydra, tensorboard, scipy, matplotlib, typer): no default run, no sweep"
fi
say "done"
