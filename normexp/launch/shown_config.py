"""`normexp train --cfg job`: Hydra prints the config; normexp captures that text and gives
each "auto" setting a comment with the value the run will use."""

from __future__ import annotations

import contextlib
import io
import sys

from ..config.compose import annotate, compose_config
from .auto_notes import auto_notes
from .plan import LaunchPlan

# flags under which `--cfg` shows another config than normexp's own (or a part of it)
_OTHER_CONFIG_FLAGS = ("--package", "-p", "--config-name", "-cn", "--config-dir", "-cd", "--config-path", "-cp")


@contextlib.contextmanager
def annotated_cfg(plan: LaunchPlan):
    """Around Hydra's main: `--cfg job`/`all` of normexp's own config is captured and written
    out annotated (annotate_auto) when Hydra is done, also when it exits; any other command
    passes through untouched."""
    if plan.cfg not in ("job", "all") or plan.has_flag(*_OTHER_CONFIG_FLAGS):
        yield
        return
    shown = io.StringIO()
    try:
        with contextlib.redirect_stdout(shown):
            yield
    finally:
        sys.stdout.write(annotate_auto(shown.getvalue(), lambda: compose_config(list(plan.overrides))))


def annotate_auto(text: str, compose) -> str:
    """Each "auto" setting of `text` gets a comment with the value the run will use
    (launch.auto_notes.auto_notes: DeepNorm's α = (2N)^(1/4) at the run's depth, the device, the
    threads, the evaluation and profile cadence, ...). `compose`: the job's config, as Hydra
    composed it for the display. The text is otherwise Hydra's: the config as the run saves it."""
    try:
        cfg = compose()
        if "auto" not in text:
            return text
        notes = auto_notes(cfg)
    except Exception:  # noqa: BLE001 - the pre-flight refused bad settings already; never block the display
        return text
    return annotate(text, notes)
