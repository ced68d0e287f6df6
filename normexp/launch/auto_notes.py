"""What `--cfg job` writes beside each "auto": the value the run will use, worked out by the code
the run uses (the model's numbers, the device, the threads, the typed settings), so it sits above
them, on the launch floor, beside the display that shows it (shown_config.py)."""

from __future__ import annotations


def auto_notes(cfg) -> dict[str, str]:
    """`--cfg job`: {dotted key: the value the run will use, and why} for every setting of the job
    config `cfg` left "auto", worked out as the run works it out (the norm's and placement's numbers
    by their settings classes; torch only for the device where a GPU may be)."""
    import os
    import sys

    from omegaconf import OmegaConf

    from ..config.run_config import LogConfig, RunConfig

    notes: dict[str, str] = {}
    groups = ("norm", "placement")
    if any(v == "auto" for g in groups for v in cfg[g].values()):
        from ..config.variants import resolved_settings

        values = resolved_settings(cfg.norm, cfg.placement, cfg.layers)
        for group in groups:
            for key, value in values.get(group, {}).items():
                if cfg[group].get(key) == "auto":
                    notes[f"{group}.{key}"] = f"{value:.6g} for layers={cfg.layers}: what the run uses"
    device_type = str(cfg.device).split(":")[0]
    if cfg.device == "auto":
        from .devices import auto_device_type  # torch only where a GPU may be

        device_type = auto_device_type()
        notes["device"] = f"{device_type} here: cuda if there is one, else mps, else cpu"
    if cfg.threads == "auto":
        from ..train.threads import available_cores, threads_per_job

        notes["threads"] = f"{threads_per_job(None)} here: this process's {available_cores()} cores ÷ 1 job"
    log = LogConfig.from_composed(cfg)
    if cfg.log_every == "auto":
        notes["log_every"] = (f"{log.log_every} for steps={cfg.steps}: "
                              f"{len(range(0, cfg.steps, log.log_every)) + ((cfg.steps - 1) % log.log_every != 0)} logging steps")
    if cfg.eval_every == "auto":
        notes["eval_every"] = (f"{log.eval_every} for steps={cfg.steps}, eval_batches={cfg.eval_batches}: "
                               f"{-(-cfg.steps // log.eval_every)} evaluations after step 0")
    if OmegaConf.select(cfg, "log.profiles_every") == "auto":
        every = log.profile_interval(cfg.steps)
        notes["log.profiles_every"] = f"{every} for steps={cfg.steps}, log_every={log.log_every}"
    if OmegaConf.select(cfg, "log.progress") == "auto":
        try:  # a captured stream (pytest's, a notebook's) has no file descriptor: not a terminal
            terminal = os.isatty(sys.stderr.fileno())
        except (AttributeError, OSError, ValueError):
            terminal = False
        notes["log.progress"] = "bar here (a terminal)" if terminal else "lines here (not a terminal)"
    if OmegaConf.select(cfg, "divergence.every_step") == "auto":
        every_step = RunConfig.from_composed(cfg).divergence_checks_every_step(device_type)
        notes["divergence.every_step"] = f"{str(every_step).lower()} on {device_type}"
    if OmegaConf.select(cfg, "cuda_graph") == "auto":
        notes["cuda_graph"] = _cuda_graph_note(cfg, device_type)
    return notes


def _cuda_graph_note(cfg, device_type: str) -> str:
    """cuda_graph=auto's choice as the run makes it (train/alone.py: alone), from the settings and the device."""
    from ..config.run_config import RunConfig

    run = RunConfig.from_composed(cfg)
    why = run.cuda_graph_refusal(device_type)
    if why is None:
        from .packs import cannot_pack  # imports torch (loaded already: CUDA was asked)

        why = cannot_pack(cfg)
    return f"eager here: {why}" if why else "a graph here: plain steps as one CUDA graph, logging steps eager"
