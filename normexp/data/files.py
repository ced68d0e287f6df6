"""Where normexp's files live and how they are written: the cache folder (`cache_root`:
downloaded corpora, token caches), and files written whole or not at all (the token cache,
summary.json, checkpoints and the run record all go through `atomic_write_bytes`, so a
crash or a full disk never leaves half a file). Standard library only."""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_folder(folder: Path) -> None:
    """Make a rename durable (a crash right after os.replace could otherwise lose it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open folders
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, mid_write: Callable[[], None] | None = None) -> None:
    """Write to a temp file in the same folder, fsync, rename over `path`, fsync the folder:
    a reader (or a kill at any moment) sees either the old file or the new one, never half
    of one. The file gets the permissions of a plain `open(path, "w")` (mkstemp's temp
    files are private, 0600), so others on a shared cluster can read a run's outputs.
    `mid_write`, if given, runs between the two halves of the data (a test hook)."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            half = len(data) // 2 if mid_write else len(data)
            f.write(data[:half])
            if mid_write:
                f.flush()
                mid_write()
            f.write(data[half:])
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def cache_root() -> Path:
    """Where downloaded corpora and token caches live: $NORMEXP_CACHE, else
    $XDG_CACHE_HOME/normexp, else ~/.cache/normexp."""
    if os.environ.get("NORMEXP_CACHE"):
        return Path(os.environ["NORMEXP_CACHE"]).expanduser()
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]).expanduser() / "normexp"
    return Path.home() / ".cache" / "normexp"


CHUNK = 4 << 20  # bytes read, hashed or tokenized at a time: memory stays O(file), never a multiple of it


def file_content_id(path) -> dict:
    """content_id of a file's bytes, read in CHUNK pieces (the run's record hashes a data file
    without holding it in memory)."""
    digest, size = hashlib.sha256(), 0
    with open(path, "rb") as f:
        while piece := f.read(CHUNK):
            digest.update(piece)
            size += len(piece)
    return {"bytes": size, "sha256": digest.hexdigest()}


def content_id(data: bytes) -> dict:
    """{bytes, sha256} of the bytes given: the identity of a local file in the cache key and in
    the run's record. By content, not path, size and mtime: a file edited in place with its size
    and mtime kept gets a new key (stale tokens are never served), a copy reuses its tokens.
    It hashes bytes already read, never the file: what is hashed is what is tokenized."""
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
