"""How a command that cannot go on says so: one line on stderr and a non-zero exit."""

from __future__ import annotations

import os
import sys

import typer

EXIT_BAD_INPUT = 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """One line on stderr and a non-zero exit; the traceback only with HYDRA_FULL_ERROR=1."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1" and sys.exc_info()[0] is not None:
        raise
    typer.echo(f"normexp: error: {message}", err=True)
    raise SystemExit(code)
