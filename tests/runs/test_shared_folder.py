"""A shared run folder can only be read (issue 59, items 1, 2 and 8): normexp reads a folder's
records without resolving `${...}`, without following a symbolic link, from regular files of
bounded size, and YAML without aliases; it refuses to write into a folder holding a link."""

import json
import os
from pathlib import Path

import pytest
import yaml

from conftest import SAFETY_NET_S

from normexp.runs import safe_files
from normexp.runs.reading import read_runs

SECRET = "0.0031337"  # what the planted interpolation would resolve to


def write_run(root: Path, name: str, lr, loss: float) -> Path:
    """A finished run folder as `normexp train -m lr=...` leaves it (config, overrides, summary)."""
    run = root / name
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(yaml.safe_dump({
        "placement": {"name": "pre"}, "lr": lr, "seed": 0, "layers": 2,
        "tokenizer": {"name": "byte", "vocab_size": 256}, "data": {"name": "text", "files": ["c.txt"]}}))
    (run / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"lr={lr}"]))
    (run / "summary.json").write_text(json.dumps({
        "status": "completed", "final_val_loss": loss, "best_val_loss": loss, "initial_loss": 6.0,
        "baseline_loss": 7.0, "stall_margin": 0.02, "steps_completed": 10, "diverged_at_step": None}))
    return run


# ------------------------------------------------ item 2: no interpolation resolved


def test_a_planted_interpolation_never_puts_the_environment_into_the_report(tmp_path, monkeypatch):
    """`lr: ${oc.env:NX_SECRET}` in one run's config: no file the report writes (report.md, runs.csv,
    settings.csv, the figure CSVs) holds the variable's value; the run is left out of the statistics
    with its reason, which shows the `${...}` as written. (Breaks caught: load_config resolving with
    OmegaConf as before puts SECRET into runs.csv, settings.csv, final_val_loss.csv and report.md.)"""
    from normexp.analysis.report import make_report

    monkeypatch.setenv("NX_SECRET", SECRET)
    sweep = tmp_path / "sweep"
    for i, lr in enumerate((0.001, 0.003, 0.01)):
        write_run(sweep, f"run{i}", lr, 2.0 + i / 10)
    planted = write_run(sweep, "planted", "${oc.env:NX_SECRET}", 1.5)
    out = tmp_path / "report"
    printed = []
    result = make_report(sweep, out, echo=printed.append)

    written = [p for p in out.rglob("*") if p.is_file()]
    assert {"report.md", "runs.csv", "settings.csv", "final_val_loss.csv"} <= {p.name for p in written}
    for p in written:
        assert SECRET.encode() not in p.read_bytes(), p.name
    assert not any(SECRET in str(line) for line in printed)
    left_out = {r.path: why for r, _, why in result["left_out"]}
    assert "lr holds an interpolation (${oc.env:NX_SECRET})" in left_out[planted], left_out
    assert "${oc.env:NX_SECRET}" in (out / "runs.csv").read_text()


def test_runs_read_as_data_hold_no_resolved_value(tmp_path, monkeypatch):
    """normexp.runs.load (the frame users read) keeps the value out too, and names the problem.
    (Break caught: OmegaConf.load + resolve=True in read_config gives lr == SECRET.)"""
    monkeypatch.setenv("NX_SECRET", SECRET)
    write_run(tmp_path, "planted", "${oc.env:NX_SECRET}", 1.5)
    [run] = read_runs(tmp_path)
    assert run.config["lr"] is None and run.status == "malformed"
    assert "${oc.env:NX_SECRET}" in run.problem and SECRET not in run.problem


# ------------------------------------------------ item 1: no link followed, writes only inside


TRAIN = ["data=text", "layers=2", "d_model=32", "heads=2", "seq_len=32", "batch_size=4", "eval_batches=2",
         "threads=1", "steps=10", "checkpoint_every=5"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny run trained to its end once for the module: (corpus, run folder)."""
    from conftest import cli_environment, make_corpus, run_cli

    tmp = tmp_path_factory.mktemp("trained")
    corpus = make_corpus(tmp / "c.txt")
    run_cli(["train", *TRAIN, f"data.files=[{corpus}]", f"hydra.run.dir={tmp / 'run'}"],
            cli_environment(tmp / "cache"), timeout=SAFETY_NET_S)
    return corpus, tmp / "run"


def interrupted_copy(run: Path, folder: Path) -> Path:
    """A copy of `run` as an interruption at step 5 leaves it: resume=true would train steps 6-10."""
    import shutil

    shutil.copytree(run, folder, symlinks=True)
    (folder / ".normexp_claim").unlink(missing_ok=True)
    (folder / "checkpoints" / "step_00000010.pt").unlink()
    summary = json.loads((folder / "summary.json").read_text())
    (folder / "summary.json").write_text(json.dumps({**summary, "status": "interrupted", "steps_completed": 5}))
    return folder


@pytest.mark.parametrize("planted", ["train.log", "checkpoints", ".hydra", ".hydra/config.yaml"])
def test_resuming_a_folder_that_holds_a_link_is_one_line_and_touches_nothing(tmp_path, cli_env, trained, planted):
    """A shared folder whose train.log (or checkpoints, .hydra, .hydra/config.yaml) is a link:
    `resume=true` into it is refused in one line naming the link, exit 2, before Hydra opens
    train.log or writes .hydra there; the link's target is untouched. (Break caught: without
    runs.resume.refuse_links in check_output_folder the run resumes: Hydra appends its log lines
    to the target of train.log, the target of checkpoints gets step 10 and loses its oldest file.)"""
    from conftest import run_cli

    corpus, source = trained
    run = interrupted_copy(source, tmp_path / "run")
    target = tmp_path / "elsewhere"
    link = run / planted
    if link.is_dir():
        link.rename(target)
        (target / "step_00000001.pt").write_text("not the run's")
    else:
        target.mkdir()
        link.rename(target / link.name)
        target = target / link.name
    link.symlink_to(target)
    before = {p: p.read_bytes() for p in (target.rglob("*") if target.is_dir() else [target]) if p.is_file()}
    proc = run_cli(["train", *TRAIN, f"data.files=[{corpus}]", "resume=true", f"hydra.run.dir={run}"], cli_env,
                   check=False, timeout=SAFETY_NET_S)
    after = {p: p.read_bytes() for p in (target.rglob("*") if target.is_dir() else [target]) if p.is_file()}
    assert after == before
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{link} is a symbolic link (to {target})" in lines[0], lines


def test_checkpoints_are_never_written_or_pruned_through_a_link(tmp_path):
    """checkpoint.save into a run whose checkpoints folder is a link to elsewhere refuses, and the
    file there that pruning would delete (step_00000001.pt, the oldest) stays. (Break caught:
    without the check in save, the new checkpoint lands there and step_00000001.pt is deleted.)"""
    from normexp.runs import checkpoint

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "step_00000001.pt").write_text("not the run's")
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").symlink_to(elsewhere)
    with pytest.raises(safe_files.FolderFileRefused, match="checkpoints: is a symbolic link"):
        checkpoint.save(run, {"step": 20, "model": {}, "optimizer": {}}, keep=1)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["step_00000001.pt"]


def test_a_message_holding_a_newline_is_one_line_of_train_log(tmp_path):
    """train.log's formatter (the job_logging config normexp ships) writes a control character of
    a message as its escape: a folder name holding a newline and an `import` line never starts a
    line. (Break caught: the plain logging.Formatter as before writes `import os` at a line start.)"""
    import logging
    import logging.config

    shipped = Path(__file__).parents[2] / "configs" / "hydra" / "job_logging" / "normexp"
    config = yaml.safe_load(shipped.with_suffix(".yaml").read_text())
    config["handlers"]["file"]["filename"] = str(tmp_path / "train.log")
    config["root"]["handlers"] = ["file"]
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        logging.config.dictConfig(config)
        logging.getLogger("normexp").warning("resume with: hydra.run.dir=%s", "/runs/a\nimport os\r")
        for h in root.handlers:
            h.flush()
    finally:
        for h in root.handlers:
            h.close()
        root.handlers[:], root.level = saved[0], saved[1]
    lines = (tmp_path / "train.log").read_text().splitlines()
    assert len(lines) == 1 and lines[0].endswith(r"hydra.run.dir=/runs/a\nimport os\r"), lines


# ------------------------------------------------ item 8: reads bounded in size and time


def test_a_summary_that_is_dev_zero_a_pipe_or_too_large_is_named_not_read(tmp_path):
    """summary.json as a link to /dev/zero, a named pipe, or a regular file past the limit: each run is
    "malformed" with the reason, read without waiting or filling memory. (Breaks caught: reading
    with Path.read_text as before reads /dev/zero until memory runs out and blocks on the pipe.)"""
    import threading

    runs = {}
    for name in ("zero", "pipe", "large"):
        runs[name] = write_run(tmp_path, name, 0.001, 2.0)
        (runs[name] / "summary.json").unlink()
    (runs["zero"] / "summary.json").symlink_to("/dev/zero")
    os.mkfifo(runs["pipe"] / "summary.json")
    (runs["large"] / "summary.json").write_bytes(b" " * (safe_files.RECORD_LIMIT + 1))
    result = []
    reader = threading.Thread(target=lambda: result.extend(read_runs(tmp_path)), daemon=True)
    reader.start()
    reader.join(timeout=SAFETY_NET_S)  # a safety net only: a pipe read never returns
    assert not reader.is_alive(), "reading a named pipe blocked"
    problems = {r.rel: r.problem for r in result}
    assert "summary.json: is a symbolic link (to /dev/zero)" in problems["zero"], problems
    assert "is not a regular file" in problems["pipe"], problems
    assert f"more than the {safe_files.RECORD_LIMIT}" in problems["large"], problems


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))
# 9 levels of 9 aliases each: 9**9 (387 million) strings once expanded, in 400 bytes


def test_a_yaml_alias_bomb_is_refused_where_it_is_met(tmp_path):
    """A ~400-byte alias bomb as .hydra/config.yaml (report) and inside normexp_run.json (resume's
    settings check) is refused at its first alias, before anything expands. (Break caught: a loader
    that allows aliases hands the report 9**9 strings to flatten and never finishes.)"""
    from normexp.runs.record import RECORD
    from normexp.runs.resume import _recorded_settings

    assert len(BOMB) < 500
    run = write_run(tmp_path, "bomb", 0.001, 2.0)
    (run / ".hydra" / "config.yaml").write_text(BOMB)
    [read] = read_runs(tmp_path)
    assert "holds a YAML alias" in read.problem and read.config == {}
    (run / RECORD).write_text(json.dumps({"config": BOMB, "overrides": "[]"}))
    assert _recorded_settings(run) is None
    with pytest.raises(safe_files.FolderFileRefused, match="holds a YAML alias"):
        safe_files.parse_yaml(BOMB, run / RECORD)
