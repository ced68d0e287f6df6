"""hydra/sweeper=grid (opt-in): Hydra's basic sweeper without its check that composes
every job a second time. The same jobs, numbers and folders as the basic sweeper; each job
composed once by the launcher (the pre-flight composed and checked it before the sweep)."""

import pytest
import yaml
from conftest import TINY, read_summary

from normexp.runs.reading import find_runs


def sweep_compositions(tmp_path, corpus, monkeypatch, sweeper: list[str], name: str):
    """Run a 3-job sweep in this process; (Hydra's compositions of a job, {placement: (job
    number, steps)})."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    from normexp.launch.hydra_job import run_hydra
    from normexp.launch.plan import LaunchPlan

    real, calls = ConfigLoaderImpl.load_sweep_config, []

    def counted(self, master_config, sweep_overrides):
        calls.append(list(sweep_overrides))
        return real(self, master_config, sweep_overrides)

    monkeypatch.setattr(ConfigLoaderImpl, "load_sweep_config", counted)
    folder = tmp_path / name
    plan = LaunchPlan.parse(["-m", "data=text", f"data.files=[{corpus}]", *TINY, "steps=2", "eval_every=2",
                             "placement=pre,post,deepnorm", *sweeper, f"hydra.sweep.dir={folder}"])
    run_hydra(plan)
    runs = {}
    for run in find_runs(folder):
        summary, hydra = read_summary(run), yaml.safe_load((run / ".hydra" / "hydra.yaml").read_text())["hydra"]
        runs[summary["placement"]] = (hydra["job"]["num"], summary["steps_completed"])
    return len(calls), runs


@pytest.mark.slow
def test_the_grid_sweeper_runs_the_basic_sweepers_jobs_composing_each_once(tmp_path, corpus, monkeypatch):
    monkeypatch.setenv("NORMEXP_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    grid_calls, grid_runs = sweep_compositions(tmp_path, corpus, monkeypatch, ["hydra/sweeper=grid"], "grid")
    basic_calls, basic_runs = sweep_compositions(tmp_path, corpus, monkeypatch, ["hydra/sweeper=basic"], "basic")
    assert grid_runs == basic_runs == {"pre": (0, 2), "post": (1, 2), "deepnorm": (2, 2)}
    assert basic_calls == 6  # Hydra's check, then the launcher: twice a job
    assert grid_calls == 3  # the launcher only
