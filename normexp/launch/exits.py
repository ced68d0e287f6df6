"""How a command that cannot go on says so: one line on stderr and a non-zero exit; and the
one mapping of any exception to that line and its exit code (`describe_error`), used by the
command line's top level and by each training job."""

from __future__ import annotations

import errno
import os
import sys

import typer

from ..config.checks import ConfigError

EXIT_BAD_INPUT = 2


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """One line on stderr and a non-zero exit; the traceback only with HYDRA_FULL_ERROR=1."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1" and sys.exc_info()[0] is not None:
        raise
    typer.echo(f"normexp: error: {message}", err=True)
    raise SystemExit(code)


# errno values that mean the machine, not normexp, stopped a write: (what, what to do)
_ENVIRONMENT_ERRNOS = {
    errno.ENOSPC: ("no space left on the device", "free some space"),
    errno.EDQUOT: ("the disk quota is exhausted", "free some space"),
    errno.EROFS: ("the file system is read-only", "choose a writable folder"),
    errno.EACCES: ("permission denied", "make it writable (chmod u+w) or choose another folder"),
    errno.EPERM: ("operation not permitted", "make it writable (chmod u+w) or choose another folder"),
    errno.ENAMETOOLONG: ("a name in the path is longer than the file system allows (255 bytes on most)",
                         "choose a shorter folder or file name"),
}


def environment_refusal(e: BaseException) -> tuple[str, str] | None:
    """(what happened, what to do) when `e` is the machine refusing a write (a full disk, a
    read-only folder...), else None."""
    if isinstance(e, OSError) and e.errno in _ENVIRONMENT_ERRNOS:
        return _ENVIRONMENT_ERRNOS[e.errno]
    return None


def folder_refusal(e: OSError, key: str, folder, resumable: bool = False) -> str:
    """The one line for a folder the machine would not let a run start in: the setting and
    folder, what happened and to which file, and the fix (free space, or another folder)."""
    what, fix = environment_refusal(e)
    where = f" (writing {e.filename})" if e.filename else ""
    kept = ("; the run is left as it was: resume=true continues it then" if resumable
            else "; nothing was written")
    return f"{key}={folder}: {what}{where}; {fix}, or choose another folder ({key}=PATH){kept}"


def describe_error(e: BaseException) -> tuple[str, int]:
    """The one line and exit code for an exception nothing more specific caught: the single
    top-level mapping (cli.main and each training job use it). Exit 2 when the cause is
    outside normexp (a full disk, a read-only folder, a name too long, memory), 1 when it is
    normexp's own bug (the traceback then only with HYDRA_FULL_ERROR=1)."""
    if isinstance(e, ConfigError):
        return str(e), 2
    if isinstance(e, OSError) and e.errno in _ENVIRONMENT_ERRNOS:
        what, fix = _ENVIRONMENT_ERRNOS[e.errno]
        where = f" writing {e.filename}" if e.filename else ""
        then = f", {e.then}" if getattr(e, "then", None) else ""  # a run stopped mid-way says how it continues
        return f"{what}{where}; {fix}{then}", 2
    if isinstance(e, MemoryError):
        return "out of memory; lower batch_size, seq_len or d_model", 2
    text = " ".join(f"{type(e).__name__}: {e}".split())[:500]
    return (f"internal error (a bug in normexp; please report it): {text}; "
            "HYDRA_FULL_ERROR=1 shows the traceback"), 1
