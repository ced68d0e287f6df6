"""Refusals of issue 59 item 6: each one line, exit 2, before anything is created (the sweep
folder, its claim, multirun.yaml), in the dry run (`--cfg job`) as in the real one."""

import re

import pytest
from conftest import SAFETY_NET_S, run_cli

TINY = ["layers=2", "d_model=32", "heads=2", "seq_len=16", "batch_size=4", "threads=1", "steps=2"]


def refused(args, cli_env, tmp_path) -> str:
    """The one line `normexp train ARGS` exits 2 with; nothing was created under tmp_path/sw."""
    proc = run_cli(["train", *args], cli_env, check=False, timeout=SAFETY_NET_S, cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert not (tmp_path / "sw").exists()
    return lines[0]


@pytest.mark.parametrize("value", ["abc", "null", "'[1,2]'", "1.5", "true", "0"])
@pytest.mark.parametrize("dry", [True, False])
def test_a_max_members_that_is_no_pack_size_is_refused_up_front(tmp_path, cli_env, value, dry):
    """hydra.launcher.max_members takes auto or a whole number >= 1; before, abc/null/'[1,2]'
    crashed after the sweep folder existed and 1.5/true silently meant 1, and `--cfg job` took
    them all. (Break caught: without preflight.check_max_members each exits 0 under --cfg job.)"""
    line = refused(["-m", *TINY, "seed=0,1", "hydra/launcher=packed", f"hydra.launcher.max_members={value}",
                    "hydra.sweep.dir=sw", *(["--cfg", "job"] if dry else [])], cli_env, tmp_path)
    assert line.startswith("normexp: error: hydra.launcher.max_members=") and "whole number >= 1" in line, line


def test_a_job_folder_outside_the_sweep_folder_is_refused(tmp_path, cli_env):
    """`data.text_field=text,../../../outside_esc` would put the second job's run at sw/outside_esc,
    beside the sweep's folder. (Break caught: without folder_names._check_inside the dry run lists
    both jobs, rc 0.)"""
    (tmp_path / "d.jsonl").write_text('{"text": "hello world"}\n' * 300)
    line = refused(["-m", "data=jsonl", f"data.files=[{tmp_path / 'd.jsonl'}]", *TINY,
                    "data.text_field=text,../../../outside_esc", "hydra.sweep.dir=sw/esc", "--cfg", "job"],
                   cli_env, tmp_path)
    assert "data.text_field=../../../outside_esc: the job's folder would be" in line and "outside the sweep" in line
    assert not (tmp_path / "outside_esc").exists()


def test_a_job_folder_name_over_255_bytes_is_refused(tmp_path, cli_env):
    """A one-job sweep names its folder by all its overrides: 28 of them make a 300-odd-byte name,
    which Hydra would fail to create with `File name too long` midway. (Break caught: without the
    NAME_MAX check the dry run lists the job, rc 0.)"""
    many = ["lr=0.0011", "warmup=1", "seed=7", "optim.weight_decay=0.05", "grad_clip=0.75", "eval_batches=2",
            "eval_every=1", "z_loss=0.0001", "optim.betas=[0.85,0.97]", "optim.eps=1e-7", "stall_margin=0.03",
            "outcome.learned_margin=0.06", "loss_spike.window=11", "loss_spike.k=4.5", "loss_spike.floor=0.02",
            "loss_spike.min_points=6", "divergence.max_loss=21.0", "keep_checkpoints=3", "checkpoint_every=400",
            "norm.eps=1e-6", "mlp_ratio=3", "schedule.min_lr_ratio=0.2"]
    line = refused(["-m", *TINY, *many, "hydra.sweep.dir=sw", "--cfg", "job"], cli_env, tmp_path)
    assert "hydra.sweep.subdir=batch_size=4,d_model=32," in line and "file systems allow 255" in line, line
    size = int(re.search(r"would be (\d+) bytes", line).group(1))
    assert size > 255, line


def test_a_launcher_config_of_ones_own_that_names_no_launcher_is_one_line(tmp_path, cli_env):
    """--config-dir with hydra/launcher=mine whose _target_ is os.system: refused in one line naming
    the file, not by Hydra's traceback after the sweep began. (Break caught: without
    preflight._check_own_launcher, rc 1 and Hydra's `Invalid plugin 'os.system'` traceback.)"""
    own = tmp_path / "own" / "hydra" / "launcher"
    own.mkdir(parents=True)
    (own / "mine.yaml").write_text("_target_: os.system\n")
    line = refused(["-m", "--config-dir", str(tmp_path / "own"), "hydra/launcher=mine", *TINY, "seed=0,1",
                    "hydra.sweep.dir=sw"], cli_env, tmp_path)
    assert "hydra/launcher=mine" in line and "hydra.launcher._target_=os.system: names no installed Hydra launcher" \
        in line, line


def test_a_failure_inside_a_pack_is_one_line_and_the_sweep_closes(tmp_path, cli_env):
    """seq_len=512 on a 300-token validation split fails inside the pack: `pack failed: ...` once,
    then the sweep's own closing lines, no traceback. (Break caught: members returned as FAILED, as
    before, make Hydra's sweeper raise the error again with its full traceback, and no closing line.)"""
    (tmp_path / "small.txt").write_text(("the king and queen speak to the ghost at night. " * 70)[:3000])
    proc = run_cli(["train", "-m", "data=text", f"data.files=[{tmp_path / 'small.txt'}]", "layers=2", "d_model=32",
                    "heads=2", "seq_len=512", "batch_size=2", "threads=1", "steps=2", "seed=0,1",
                    "hydra/launcher=packed", "hydra.sweep.dir=sw"], cli_env, check=False, timeout=SAFETY_NET_S, cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert "Traceback" not in out, out[-3000:]
    assert sum("pack failed: seq_len=512" in line for line in out.splitlines()) == 1, out[-3000:]
    assert "normexp: sweep finished: 2 jobs (2 failed)" in out and proc.returncode == 1, out[-3000:]
