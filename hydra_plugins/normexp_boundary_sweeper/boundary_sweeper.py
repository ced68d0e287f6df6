"""`hydra/sweeper=boundary`: normexp's boundary search (normexp/boundary.py) as a Hydra sweeper,
so every launcher (basic, joblib, SLURM) runs its rounds and `resume=true` continues it.

    normexp train -m hydra/sweeper=boundary placement=post,pre seed=0,1,2 \\
        hydra.sweeper.key=lr hydra.sweeper.lower=1e-4 hydra.sweeper.upper=0.1

Every swept key but `seed` spans the settings; `seed` gives the replicates; the searched key
(`key`) must not be swept itself. Each round launches the next point of every unfinished
setting × every seed as one batch. After each round boundary.csv and boundary_points.csv are
written into the sweep folder (`normexp report` reads them).
"""


import itertools
import logging
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import OmegaConf

from normexp import boundary

log = logging.getLogger("normexp")


@dataclass
class BoundarySweeperConf:
    _target_: str = "hydra_plugins.normexp_boundary_sweeper.boundary_sweeper.BoundarySweeper"
    key: str = "lr"               # the key searched: lr or layers (log scale)
    lower: Any = 1.0e-4           # the bracket to search in, both probed first
    upper: Any = 1.0e-1
    ratio: float = 1.25           # stop when first unstable / last stable <= ratio
    initial_points: int = 4       # log-spaced points of round 0, the bounds included
    params: Optional[Dict[str, str]] = None  # the other swept keys, as the basic sweeper's params


ConfigStore.instance().store(group="hydra/sweeper", name="boundary", node=BoundarySweeperConf, provider="normexp")


class BoundarySweeper(Sweeper):
    def __init__(self, key: str, lower, upper, ratio: float, initial_points: int,
                 params: Optional[Dict[str, str]] = None) -> None:
        super().__init__()
        problem = boundary.check_settings(key, lower, upper, ratio, initial_points)
        if problem:
            raise ValueError(problem)
        self.key, self.lower, self.upper, self.ratio = key, lower, upper, ratio
        self.initial_points, self.params = initial_points, dict(params or {})
        self.hydra_context = self.config = self.launcher = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config)

    def _axes(self, arguments: List[str]) -> "OrderedDict":
        """key -> its values, params first, the command line replacing a key it repeats."""
        parser = OverridesParser.create(config_loader=self.hydra_context.config_loader)
        axes: OrderedDict = OrderedDict()
        for o in parser.parse_overrides([*(f"{k}={v}" for k, v in self.params.items()), *arguments]):
            key = o.get_key_element()
            axes[key] = list(o.sweep_string_iterator()) if o.is_sweep_override() else [o.get_value_element_as_str()]
        if self.key in axes and len(axes[self.key]) > 1:
            raise ValueError(f"{self.key} is what the boundary sweeper searches (between hydra.sweeper.lower and "
                             f"hydra.sweeper.upper); do not sweep it too")
        axes.pop(self.key, None)
        return axes

    def sweep(self, arguments: List[str]) -> Any:
        axes = self._axes(arguments)
        seeds = axes.pop("seed", [str(self.config.seed)])
        swept = [k for k, v in axes.items() if len(v) > 1]
        settings = [dict(zip(axes, values)) for values in itertools.product(*axes.values())]
        integer = boundary.SEARCHABLE[self.key]
        searches = [boundary.Search(tuple((k, s[k]) for k in swept), self.lower, self.upper, self.ratio, integer)
                    for s in settings]
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        returns, next_idx = [], [0]

        def launch(batch):
            jobs = [[*(f"{k}={v}" for k, v in settings[i].items()), f"{self.key}={x:g}", f"seed={seed}"]
                    for i, x, seed in batch]
            log.info("boundary search: %d runs (%d settings × %d seeds)", len(jobs),
                     len({i for i, _, _ in batch}), len(seeds))
            self.validate_batch_is_legal(jobs)
            results = self.launcher.launch(jobs, initial_job_idx=next_idx[0])
            next_idx[0] += len(jobs)
            returns.append(results)
            return [r._return_value if r.status == JobStatus.COMPLETED else None for r in results]

        first = boundary.initial_points(self.lower, self.upper, self.initial_points, integer)
        rounds = boundary.search_all(searches, seeds, first, launch,
                                     after_round=lambda k: boundary.write_tables(searches, self.key, sweep_dir))
        boundary.write_tables(searches, self.key, sweep_dir)
        for line in boundary.summary_lines(searches, self.key, len(seeds), rounds):
            log.info("%s", line)
        return returns
