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
