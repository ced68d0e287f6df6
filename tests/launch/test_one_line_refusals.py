"""Refusals of issue 59 item 6: each one line, exit 2, before anything is created (the sweep
folder, its claim, multirun.yaml), in the dry run (`--cfg job`) as in the real one."""

import re

import pytest
from conftest import run_cli

TINY = ["layers=2", "d_model=32", "heads=2", "seq_len=16", "batch_size=4", "threads=1", "steps=2"]


def refused(args, cli_env, tmp_path) -> str:
    """The one line `normexp train ARGS` exits 2 with; nothing was created under tmp_path/sw."""
    proc = run_cli(["train", *args], cli_env, check=False, timeout=600, cwd=tmp_path)
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
