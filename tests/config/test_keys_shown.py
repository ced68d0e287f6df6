"""How a replayed command is shown: the recorded folder-naming exclude list as a count."""

from normexp.config.keys import DIRNAME_EXCLUDE_KEYS, shown_command


def test_the_resume_line_shows_the_exclude_list_as_a_count():
    keys = [f"key_{i:03d}" for i in range(60)]  # ~900 characters as the issue saw
    args = ["-m", "seed=0,1", f"{DIRNAME_EXCLUDE_KEYS}=[{','.join(keys)}]", "resume=true", "hydra.sweep.dir=/x/s"]
    line = shown_command(args)
    assert line == (f"-m seed=0,1 '{DIRNAME_EXCLUDE_KEYS}=[…60 keys, as recorded…]' resume=true "
                    "hydra.sweep.dir=/x/s")
    assert len(line) < 120
    assert shown_command(["seed=0"]) == "seed=0"


import pytest  # noqa: E402
from conftest import SAFETY_NET_S  # noqa: E402

from normexp.config.checks import did_you_mean  # noqa: E402
from normexp.config.keys import spaced_override  # noqa: E402


@pytest.mark.parametrize("args, written, fix", [
    (["layers", "=", "6"], "layers = 6", "layers=6"),
    (["steps=20", "layers", "=6"], "layers =6", "layers=6"),
    (["layers=", "6", "steps=20"], "layers= 6", "layers=6"),
])
def test_spaces_around_the_equals_sign_get_a_hint(args, written, fix):
    assert spaced_override(args) == (f"'{written}': no spaces around `=` in an override (the shell splits "
                                     f"there); write {fix}")


def test_overrides_without_spaces_get_no_hint():
    assert spaced_override(["layers=6", "norm=rms", "placement.alpha=2", "+x=1", "~grad_clip"]) is None


def test_did_you_mean_ignores_case():
    assert did_you_mean("RMS", ["layer", "rms", "rms_gemma", "derf"]) == "did you mean rms? "
    assert did_you_mean("Rms_Gema", ["layer", "rms", "rms_gemma"]) == "did you mean rms_gemma? "
    assert did_you_mean("DeepNorm", ["post", "pre", "deepnorm"]) == "did you mean deepnorm? "
    assert did_you_mean("xyz", ["layer", "rms"]) == ""


@pytest.mark.parametrize("args, line", [
    (["norm=RMS"], "did you mean rms?"),
    (["layers", "=", "6"], "write layers=6"),
])
def test_the_cli_says_it_in_one_line_exit_2(args, line, cli_env, tmp_path):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "normexp.cli", "train", *args], env=cli_env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=SAFETY_NET_S)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr[-2000:]
    assert line in out.stderr and not (tmp_path / "runs").exists()
