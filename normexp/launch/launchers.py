"""How runs are started beyond one process: whether the chosen Hydra launcher can run here
(SLURM needs a cluster), and torchrun's ranks joining one run (the data-parallel training
itself is train/distributed.py's)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from ..config.compose import compose_config
from ..config.keys import hydra_quoted
from .plan import LaunchPlan


def launcher_problem(launcher) -> str | None:
    """Why the chosen Hydra launcher cannot run here, in one line; None if it can."""
    target = str(launcher.get("_target_", ""))
    if target.endswith("SlurmLauncher") and shutil.which("srun") is None:
        return ("a SLURM launcher (hydra/launcher=slurm or submitit_slurm) needs a SLURM cluster "
                "(no `srun` on PATH): start the sweep on the cluster's login node, "
                "or try the same path here with hydra/launcher=submitit_local")
    return None


def launched_by_torchrun() -> bool:
    """torchrun (and other launchers of the env:// kind) set WORLD_SIZE for each process."""
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def join_run(plan: LaunchPlan) -> LaunchPlan:
    """Join torchrun's process group and return the plan of this rank.

    Raises ConfigError (the caller says it in one line) when the batch does not split over
    the ranks. Each rank would otherwise resolve `runs/<date>/<time>` on its own clock and may land in
    another second, so rank 0 resolves the folder and sends it to the others. Ranks other
    than 0 keep Hydra from writing there: no `.hydra/` copy and no logging (no train.log)."""
    import torch  # here, not at the top: a sweep's pre-flight asks launcher_problem without torch

    from ..train import distributed

    distributed.init_from_env()
    cfg = compose_config(list(plan.overrides), hydra=True)
    distributed.local_batch_size(cfg.batch_size)  # raises ConfigError before Hydra makes a run folder
    if plan.override("hydra.run.dir") is None:
        run_dir = [str(Path(cfg.hydra.run.dir)) if distributed.is_main() else None]  # `${now:...}` on rank 0's clock
        torch.distributed.broadcast_object_list(run_dir, src=0, device=torch.device("cpu"))
        plan = plan.with_overrides(f"hydra.run.dir={hydra_quoted(run_dir[0])}")  # its name may hold `=`, `,`
    if not distributed.is_main():
        plan = plan.with_overrides("hydra.output_subdir=null", "hydra/job_logging=disabled",
                                   "hydra/hydra_logging=disabled")
    return plan
