#!/bin/bash
# The checks a lent GPU machine is for, as one timed script (the machine is lent for minutes; this
# aims at under 5 of them on an H100/H200):
#   1. the environment (card, driver, torch);
#   2. the training stack: Hydra, omegaconf and the ANTLR runtime installed from .whl/ where the image
#      lacks them (scripts/gpu_wheels.sh makes .whl/ here; carry it). Training needs no SciPy or
#      matplotlib (without matplotlib the depth-profile images are left out, with a line);
#   3. the default run (`normexp train`, device=auto);
#   4. the README's usage line alone (`normexp train norm=rms placement=pre layers=48`, 200 steps), as
#      the run takes it by default (cuda_graph=auto: its plain steps one CUDA graph) and eager
#      (cuda_graph=false): tokens/s and peak GPU memory of each, and how far apart their losses end (graph.txt);
#      and the graphed run killed (kill -9) after its step-RESUME_AT checkpoint and resumed, against
#      the straight run (resume.txt: bit for bit or not);
#   5. a packed sweep through the launcher (hydra/launcher=packed): 8 runs of the usage line's shape;
#   6. packs against their members alone: scripts/bench_packs.py at the usage line's shape with 8 and
#      16 members, and at the depth law's small shape (32 x 64, seq 64) with 24.
# Every number lands in $OUT: numbers.txt (one line per check: its tokens/s, val loss, wall), the logs,
# timeline.txt. Usage on the device machine, from the repository root, with .whl/ and the default
# corpus's cache (.gpu/cache) carried:  bash scripts/gpu_checks.sh
# A CPU rehearsal (no GPU; a fresh venv with torch, numpy, PyYAML, typer and TensorBoard only):
#   EXTRA="steps=20 eval_every=10 layers=4 threads=1" SKIP_BENCH=1 bash scripts/gpu_checks.sh
set -u
START=$(date +%s)
OUT=${OUT:-/tmp/gpu_out}
WORK=${WORK:-/tmp/gpu_work}
EXTRA=${EXTRA:-}   # overrides added to every training command (a rehearsal's fewer steps)
mkdir -p "$OUT" "$WORK"
elapsed() { echo $(( $(date +%s) - START )); }
say() { echo "=== [$(elapsed) s] $*" | tee -a "$OUT/timeline.txt"; }
# one line of numbers.txt from a run folder's summary.json: status, steps, val loss, tokens/s, wall
numbers() {
  python3 - "$1" "$2" <<'PY' | tee -a "$OUT/numbers.txt"
import json, pathlib, sys
label, folder = sys.argv[1], pathlib.Path(sys.argv[2])
found = sorted(folder.glob("**/summary.json")) if folder.exists() else []
if not found:
    print(f"{label}: no summary.json under {folder}")
for f in found:
    s = json.loads(f.read_text())
    name = f.parent.name if f.parent != folder else ""
    print(f"{label} {name}: {s.get('status')} {s.get('steps_completed')} steps on {s.get('device')}, val loss "
          f"{s.get('final_val_loss')}, {s.get('tokens_per_second')} tokens/s, {s.get('wall_seconds')} s")
PY
}

if [ -d .whl ] && [ "${SKIP_WHEELS:-0}" != 1 ]; then
  export PYTHONPATH=/tmp/site:$PWD
  for w in .whl/*.whl; do  # only what the image lacks: its own packages (built for its torch) win
    case "$(basename "$w" | cut -d- -f1 | tr 'A-Z' 'a-z')" in
      hydra_core) mod=hydra ;; antlr4_python3_runtime) mod=antlr4 ;; pyyaml) mod=yaml ;; *) mod=$(basename "$w" | cut -d- -f1) ;;
    esac
    python3 -c "import $mod" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --no-compile \
      --no-cache-dir --target /tmp/site "$w" || echo "wheel install failed: $w"
  done
else
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
[ -e normexp/configs ] || ln -s ../configs normexp/configs  # the package's configs, as an install maps them
export NORMEXP_CACHE=${NORMEXP_CACHE:-$PWD/.gpu/cache} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1

say "environment"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '-')"
  python3 -c "import importlib.util as u; print('scipy', bool(u.find_spec('scipy')), 'matplotlib', bool(u.find_spec('matplotlib')))"
  nproc; } 2>&1 | tee "$OUT/environment.txt"

if python3 -c "import hydra, omegaconf, antlr4, typer, yaml, tensorboard, torch" 2>"$OUT/stack_missing.txt"; then
  say "default run (normexp train, device=auto)"
  /usr/bin/time -f "wall %e s, max RSS %M KB" timeout 150 python3 -m normexp train hydra.run.dir=$WORK/default $EXTRA \
    > "$OUT/default_run.log" 2>&1
  say "default run rc=$?"; tail -3 "$OUT/default_run.log"; numbers "default run" $WORK/default

  say "the usage line alone: norm=rms placement=pre layers=48, 200 steps"
  /usr/bin/time -f "wall %e s" timeout 120 python3 -m normexp train norm=rms placement=pre layers=48 steps=200 \
    hydra.run.dir=$WORK/usage $EXTRA > "$OUT/usage_line.log" 2>&1
  say "usage line rc=$?"; tail -2 "$OUT/usage_line.log"; numbers "usage line alone (cuda_graph=auto)" $WORK/usage

  say "the usage line alone, eager: cuda_graph=false"
  /usr/bin/time -f "wall %e s" timeout 120 python3 -m normexp train norm=rms placement=pre layers=48 steps=200 \
    cuda_graph=false hydra.run.dir=$WORK/usage_eager $EXTRA > "$OUT/usage_line_eager.log" 2>&1
  say "usage line eager rc=$?"; tail -2 "$OUT/usage_line_eager.log"; numbers "usage line alone (cuda_graph=false)" $WORK/usage_eager
  python3 - $WORK/usage $WORK/usage_eager <<'PY' 2>&1 | tee "$OUT/graph.txt"
import json, pathlib, sys
graphed, eager = (json.loads((pathlib.Path(d) / "summary.json").read_text()) for d in sys.argv[1:3])
print("graphed:", graphed.get("cuda_graph"), "eager:", eager.get("cuda_graph"))
print("tokens/s graphed / eager:", round(graphed["tokens_per_second"] / eager["tokens_per_second"], 2))
print("peak GPU MiB graphed:", graphed.get("peak_gpu_mib"), "eager:", eager.get("peak_gpu_mib"))
for part in ("train", "val"):
    a, b = graphed["loss_trajectory"][part], eager["loss_trajectory"][part]
    worst = max(abs(x - y) / abs(y) for (_, x), (_, y) in zip(a, b))
    print(f"{part} loss, largest relative difference over {len(a)} points: {worst:.3g}; final {a[-1][1]:.5f} vs {b[-1][1]:.5f}")
PY

  AT=${RESUME_AT:-100}
  say "resume: the graphed usage line killed (-9) after its step-$AT checkpoint, then normexp resume"
  python3 -m normexp train norm=rms placement=pre layers=48 steps=200 checkpoint_every=$AT \
    hydra.run.dir=$WORK/usage_resume $EXTRA > "$OUT/usage_resume.log" 2>&1 &
  pid=$!
  for _ in $(seq 1200); do
    [ -e "$WORK/usage_resume/checkpoints/step_$(printf %08d "$AT").pt" ] && break; kill -0 $pid 2>/dev/null || break; sleep 0.1
  done
  kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
  timeout 120 python3 -m normexp resume $WORK/usage_resume >> "$OUT/usage_resume.log" 2>&1
  say "resume rc=$?"; tail -2 "$OUT/usage_resume.log"; numbers "usage line killed and resumed" $WORK/usage_resume
  python3 - $WORK/usage $WORK/usage_resume <<'PY' 2>&1 | tee "$OUT/resume.txt"
import json, pathlib, sys
straight, resumed = (json.loads((pathlib.Path(d) / "summary.json").read_text()) for d in sys.argv[1:3])
print("resumed run:", resumed.get("status"), resumed.get("steps_completed"), "steps, cuda_graph", resumed.get("cuda_graph"))
print("final val loss straight", straight["final_val_loss"], "resumed", resumed["final_val_loss"],
      "bit for bit" if straight["loss_trajectory"] == resumed["loss_trajectory"] else "trajectories DIFFER")
PY

  say "a packed sweep through the launcher: 8 runs of 48 x 128 (lr x seed), 200 steps"
  /usr/bin/time -f "wall %e s" timeout 200 python3 -m normexp train -m hydra/launcher=packed norm=rms layers=48 \
    steps=200 lr=1e-3,2e-3,3e-3,5e-3 seed=0,1 hydra.sweep.dir=$WORK/packed $EXTRA > "$OUT/packed_sweep.log" 2>&1
  say "packed sweep rc=$?"; tail -4 "$OUT/packed_sweep.log"; numbers "packed sweep member" $WORK/packed
else
  say "the training stack is not complete here (see stack_missing.txt; scripts/gpu_wheels.sh makes .whl/): no training"
  cat "$OUT/stack_missing.txt"
fi

if [ "${SKIP_BENCH:-0}" != 1 ]; then
  say "packs against their members alone (scripts/bench_packs.py)"
  for setting in "--layers 48 --d-model 128 --seq-len 128 --batch 16 --members 8" \
                 "--layers 48 --d-model 128 --seq-len 128 --batch 16 --members 16" \
                 "--layers 32 --d-model 64 --heads 4 --seq-len 64 --batch 16 --members 24"; do
    timeout 90 python3 scripts/bench_packs.py $setting --steps ${BENCH_STEPS:-10} 2>&1 | tail -2 | tee -a "$OUT/packs.txt"
  done
fi
say "done"
