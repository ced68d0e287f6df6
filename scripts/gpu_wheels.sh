#!/bin/bash
# The wheels a bare GPU image lacks for normexp's training stack, into .whl/ (git-ignored; carried to the
# device machine beside the tree, where scripts/gpu_checks.sh installs those the image does not have).
# The lent H200's image holds torch, numpy, PyYAML, typer, TensorBoard, SciPy and matplotlib
# (/work/.library/device/KINDS.md), not Hydra: hydra-core, omegaconf and the ANTLR runtime Hydra's
# override parser needs (4.9.3, an sdist: built into a wheel here). All are pure Python (any Python 3).
# Training itself needs neither SciPy nor matplotlib (tests/launch/test_torch_free_start.py).
set -eu
cd "$(dirname "$0")/.."
mkdir -p .whl
pip download --quiet --no-deps --only-binary=:all: -d .whl "hydra-core==1.3.*" "omegaconf==2.3.*"
pip wheel --quiet --no-deps -w .whl "antlr4-python3-runtime==4.9.3"
ls -l .whl
du -sh .whl
