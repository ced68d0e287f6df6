"""The command line answers help, `--cfg job` and its refusals without importing torch (seconds
on a small machine) or the report's statistics and figures (scipy, pandas, matplotlib): torch
loads only for a run or the bench. A norm's, placement's or init's settings, their rules and
their "auto" numbers are their settings classes' (config/variants/), asked without torch."""

import subprocess
import sys

import pytest
from conftest import SAFETY_NET_S, cli_environment

from normexp.launch.devices import cuda_driver_loadable

HEAVY = ("torch", "scipy", "pandas", "matplotlib")
# runs `normexp ARGS` as main() does, then names on the last line of stderr the heavy libraries it imported
PROBE = ("import atexit, sys\n"
         f"atexit.register(lambda: print('heavy imports:', [m for m in {HEAVY!r} if m in sys.modules], file=sys.stderr))\n"
         "from normexp.cli import main\n"
         "sys.argv = ['normexp', *sys.argv[1:]]\n"
         "main()\n")


def normexp_without_torch(args, tmp_path) -> subprocess.CompletedProcess:
    env = {**cli_environment(tmp_path / "cache"), "PYTHONUTF8": "1"}
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], env=env, cwd=tmp_path, capture_output=True,
                          text=True, timeout=SAFETY_NET_S)
    assert proc.stderr.splitlines()[-1] == "heavy imports: []", proc.stderr[-2000:]
    return proc


def test_importing_the_command_line_leaves_torch_unloaded(tmp_path):
    proc = subprocess.run([sys.executable, "-c", "import sys, normexp.cli; print('torch' in sys.modules)"],
                          env=cli_environment(tmp_path / "cache"), capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert proc.stdout.strip() == "False", proc.stderr


DEEP_DEEPNORM = ["train", "norm=rms", "placement=deepnorm", "layers=48", "--cfg", "job"]


@pytest.mark.parametrize("args", [["--help"], ["train", "--help"], ["train", "--cfg", "job"], DEEP_DEEPNORM],
                         ids=["--help", "train --help", "--cfg job", "--cfg job deepnorm"])
def test_help_and_the_config_display_leave_torch_unloaded(args, tmp_path):
    proc = normexp_without_torch(args, tmp_path)
    assert proc.returncode == 0
    if args[-1] == "job":  # the display still annotates "auto" (the device's without torch here)
        assert "device: auto  # " in proc.stdout and "threads: auto  # " in proc.stdout
    if args == DEEP_DEEPNORM:  # DeepNorm's α = (2N)^¼, β = (8N)^-¼ for N = 48 (Wang et al. 2022, Table 1)
        assert f"alpha: auto  # {(2 * 48) ** 0.25:.6g} for layers=48" in proc.stdout
        assert f"beta: auto  # {(8 * 48) ** -0.25:.6g} for layers=48" in proc.stdout


REFUSALS = [
    (["train", "placement.alpha=abc"], "placement.alpha=abc: no such setting"),
    (["train", "layers=0"], "layers=0: must be a positive integer"),
    (["train", "-m", "layers=0,-1"], "every one of the 2 jobs of the sweep would fail"),  # a sweep's pre-flight too
    (["report", "runs/nonexistent"], "runs/nonexistent: no such folder"),
    # a variant's own setting, a model setting nothing reads, an init's setting: their settings classes' rules
    (["train", "placement=deepnorm", "placement.alpha=abc"], 'placement.alpha=abc: must be "auto" or a number > 0'),
    (["train", "placement=rezero", "norm=rms"], "norm=rms: placement=rezero builds no norm"),
    (["train", "norm=batch", "norm.momentum=2"], "norm.momentum=2: must be a number in (0, 1]"),
    (["train", "init.scale_positions=1"], "init.scale_positions=1: must be true or false"),
    # the norm reaches ReZero only through QK-norm: its settings are checked all the same (before the
    # settings classes the pre-flight built only the norms a placement made, and this failed at model build)
    (["train", "placement=rezero", "qk_norm=true", "norm.eps=-1"], "norm.eps=-1: must be a number > 0"),
]


@pytest.mark.parametrize("args, says", REFUSALS, ids=[" ".join(a) for a, _ in REFUSALS])
def test_refusals_leave_torch_unloaded(args, says, tmp_path):
    proc = normexp_without_torch(args, tmp_path)
    assert proc.returncode == 2 and says in proc.stderr
    assert not (tmp_path / "runs").exists()  # refused before any folder was written


@pytest.mark.skipif(cuda_driver_loadable(), reason="an NVIDIA driver is here: torch answers whether CUDA works")
def test_device_cuda_is_refused_without_torch_where_no_nvidia_driver_is(tmp_path):
    proc = normexp_without_torch(["train", "device=cuda"], tmp_path)
    assert proc.returncode == 2 and "device=cuda: no CUDA device is available here" in proc.stderr


# runs `normexp ARGS` with SciPy and matplotlib made absent (ModuleNotFoundError, as on a bare GPU image)
WITHOUT_REPORT_STACK = (
    "import sys\n"
    "class Absent:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('scipy', 'matplotlib'):\n"
    "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
    "sys.meta_path.insert(0, Absent())\n"
    "from normexp.cli import main\n"
    "sys.argv = ['normexp', *sys.argv[1:]]\n"
    "main()\n")


@pytest.mark.parametrize("packed", [False, True], ids=["single run", "packed sweep"])
def test_training_needs_neither_scipy_nor_matplotlib(tmp_path, packed):
    """What a bare GPU image has is enough to train (scripts/gpu_checks.sh): a run, and a packed
    sweep, finish and judge their outcome without SciPy or matplotlib; the depth-profile images
    are left out with one line saying why."""
    from conftest import TINY, make_corpus, read_summary

    corpus = make_corpus(tmp_path / "corpus.txt")
    out = tmp_path / "out"
    args = ["train", *TINY, "data=text", f"data.files=[{corpus}]", "steps=12", "log_every=4", "eval_every=4"]
    args += ["-m", "hydra/launcher=packed", "lr=1e-3,2e-3", f"hydra.sweep.dir={out}"] if packed else [f"hydra.run.dir={out}"]
    proc = subprocess.run([sys.executable, "-c", WITHOUT_REPORT_STACK, *args], env=cli_environment(tmp_path / "cache"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "depth-profile images off: matplotlib is not installed" in proc.stderr, proc.stderr[-2000:]
    folders = [out / "lr=0.001", out / "lr=0.002"] if packed else [out]
    for folder in folders:
        summary = read_summary(folder)
        assert summary["status"] in ("completed", "stalled") and summary["steps_completed"] == 12
        assert summary["outcome"] is not None  # judged: a stalled run's curve rule used the t quantile
