"""Issue 50 items 2, 5, 6: a preset's group (arm, width) and a plain key that sets the same thing
cannot both be given (a job folder labelled arm=pre trained placement=post); the group without its
preset, and a launcher _target_ that is no launcher, are one line and exit 2. Dry runs (--cfg job):
nothing trains."""

import pytest

from conftest import SAFETY_NET_S, run_cli


def test_what_a_group_option_sets_is_read_from_its_yaml():
    from normexp.launch.validate import option_settings

    assert option_settings("arm", "completep") == {"placement": "depth_mup", "placement.exponent": "1"}
    assert option_settings("arm", "post") == {"placement": "post"}
    assert option_settings("width", "w64") == {"d_model": "64", "heads": "4"}
    assert option_settings("placement", "deepnorm") == {}  # packaged under its group: sets placement.* only


@pytest.mark.parametrize("args, first_words, fix", [
    (["-m", "experiment=depth_transfer", "arm=pre,sandwich", "placement=post"],
     "placement=post: arm=pre,sandwich sets placement too, so the job labelled arm=pre would train placement=post",
     "drop placement=post (or give arm=post alone: it sets placement=post)"),
    (["-m", "experiment=width_proxies", "width=w32,w64", "d_model=32", "heads=2"],
     "d_model=32: width=w32,w64 sets d_model too, so the job labelled width=w64 would train d_model=32",
     "drop d_model=32 heads=2 (or give width=w32 alone: it sets d_model=32 heads=2)"),
    (["-m", "experiment=depth_transfer", "placement.exponent=0.7"],  # the preset's own sweep of arm
     "placement.exponent=0.7: experiment=depth_transfer's sweep arm=pre,depth_mup,completep,post,deepnorm,sandwich",
     "drop placement.exponent=0.7, or choose the arm options that set what you want (configs/arm/)"),
    (["+width=w32", "d_model=64"], "d_model=64: +width=w32 sets d_model too",
     "(or give width=w64 alone: it sets d_model=64 heads=4)"),
])
def test_a_group_and_a_plain_key_that_set_the_same_thing_are_one_line(cli_env, args, first_words, fix):
    proc = run_cli(["train", *args, "--cfg", "job"], cli_env, check=False, timeout=SAFETY_NET_S)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"normexp: error: {first_words}"), proc.stderr
    assert lines[0].endswith(fix), lines[0]


def test_a_preset_adjusted_by_keys_its_groups_do_not_set_still_runs(cli_env):
    proc = run_cli(["train", "-m", "experiment=depth_transfer", "arm=pre,completep", "layers=2,4", "d_model=32",
                    "heads=2", "--cfg", "job"], cli_env, check=False, timeout=SAFETY_NET_S)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("normexp train -m: 120 jobs")  # 2 arms × 2 depths × 10 lrs × 3 seeds


@pytest.mark.parametrize("args, line", [
    (["arm=post"], "normexp: error: arm=post: arm is a group of the depth_transfer preset (normexp train -m "
                   "experiment=depth_transfer arm=post); without the preset, give placement=post (or +arm=post)"),
    (["width=w64"], "normexp: error: width=w64: width is a group of the width_proxies preset (normexp train -m "
                    "experiment=width_proxies width=w64); without the preset, give d_model=64 heads=4 (or +width=w64)"),
])
def test_a_preset_group_without_its_preset_says_whose_it_is(cli_env, args, line):
    proc = run_cli(["train", *args, "--cfg", "job"], cli_env, check=False, timeout=SAFETY_NET_S)
    assert proc.returncode == 2 and proc.stderr.strip() == line, proc.stderr


def test_a_launcher_target_that_is_no_launcher_is_one_line(cli_env, tmp_path):
    proc = run_cli(["train", "-m", "hydra.launcher._target_=builtins.print", "seed=0,1", "--cfg", "job"], cli_env,
                   check=False, timeout=SAFETY_NET_S)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("normexp: error: hydra.launcher._target_=builtins.print: names no installed Hydra "
                               "launcher; pick one with hydra/launcher=NAME")
    assert "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher" in lines[0]
