"""hydra/sweeper=grid, for large sweeps (`normexp train -m hydra/sweeper=grid ...`): Hydra's basic sweeper (every
combination of the swept values, the same jobs, order, numbers and batches) without its second
composition of each job before the launch. Hydra's basic sweeper composes every job once to
check it and the launcher composes it again to run it; normexp's pre-flight has composed and
checked every job already (normexp/launch/preflight.py, _check_sweep), before any folder was
made, so the sweeper's check repeated ~0.3-0.5 s of work a job (a 1,000-job sweep: minutes).
Not the default: as an `override hydra/sweeper` in train.yaml it won over the presets' own
`override /hydra/sweeper: boundary` (Hydra keeps the primary config's override), so the
boundary presets composed with this sweeper."""

from dataclasses import dataclass

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper, BasicSweeperConf
from hydra.core.config_store import ConfigStore


@dataclass
class GridSweeperConf(BasicSweeperConf):
    _target_: str = "hydra_plugins.normexp_grid_sweeper.grid_sweeper.GridSweeper"


ConfigStore.instance().store(group="hydra/sweeper", name="grid", node=GridSweeperConf, provider="normexp")


class GridSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch) -> None:
        """Nothing to do: normexp's pre-flight composed each job of the sweep before it started."""
