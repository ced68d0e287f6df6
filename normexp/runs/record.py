"""normexp's own record of a run, <run>/normexp_run.json, and the identity of its data files.

Hydra rewrites <run>/.hydra/config.yaml when a job starts, before normexp sees it, so a
resumed sweep job cannot compare against it. normexp keeps its own copy, written once when
the run begins: the job config and overrides as Hydra wrote them, and the identity of the
data files (data.files is left out of sweep folder names, so a changed corpus reuses the folder)."""

from __future__ import annotations

import json
from pathlib import Path

from ..data.files import atomic_write_bytes, file_content_id
from .safe_files import read_json, read_text

RECORD = "normexp_run.json"


def file_identity(path) -> dict:
    """{path (absolute), bytes, mtime_ns, sha256} of a data file (data.files.content_id of its bytes,
    the identity the token cache keys them by)."""
    p = Path(str(path)).expanduser().resolve()
    mtime_ns = p.stat().st_mtime_ns
    return {"path": str(p), **file_content_id(p), "mtime_ns": mtime_ns}  # hashed in pieces: not held in memory


def changed_data_file(recorded: list[dict], given: list[str]) -> tuple[str, str] | None:
    """(file as given, why) for the first data file that is not what the run began on, or None.
    Compares the contents (sha256) of the files the job names *now*, resolved from the working
    folder now and through symlinks as they point now: not the recorded path, which may name
    the same text while the job reads another (a relative path from another folder, a
    retargeted link), nor size and mtime, which an in-place edit can keep."""
    if len(recorded) != len(given):
        return (", ".join(map(str, given)) or "<none>",
                f"names {len(given)} files, the run began on {len(recorded)}")
    for entry, name in zip(recorded, given):
        try:
            now = file_identity(name)
        except OSError as e:
            return str(name), f"cannot be read now ({e.strerror})"
        if now["sha256"] != entry.get("sha256"):
            moved = "" if now["path"] == entry.get("path") else f" (it is {now['path']} now, was {entry.get('path')})"
            return str(name), f"does not hold the text the run began on{moved}"
    return None


def data_files(data) -> list[str]:
    """The local files a data config reads (its source's local_files: data=text's files and
    val_files, ...), as written."""
    from ..data.sources import source_for  # why here: the pre-flight imports this module; data.sources costs ~0.1 s

    return source_for(data).local_files()


def write_record(run_dir: Path, data) -> None:
    """Keep the job config Hydra just wrote into <run>/.hydra, and the data files' identity."""
    hydra_dir = Path(run_dir) / ".hydra"
    record = {name: read_text(run_dir, Path(".hydra") / f"{name}.yaml") for name in ("config", "overrides")
              if (hydra_dir / f"{name}.yaml").is_file()}
    record["data_files"] = [file_identity(f) for f in data_files(data)]
    atomic_write_bytes(Path(run_dir) / RECORD, (json.dumps(record, indent=1) + "\n").encode())


def read_record(run_dir: Path) -> dict | None:
    try:
        record = read_json(run_dir, RECORD)
    except (OSError, ValueError):  # FolderFileRefused (a link, not a regular file, too large) is a ValueError
        return None
    return record if isinstance(record, dict) and isinstance(record.get("config"), str) else None


def restore_hydra_files(run_dir: Path) -> None:
    """Put back the run's own .hydra/config.yaml and overrides.yaml after Hydra rewrote them
    for a job that was then refused."""
    record = read_record(run_dir)
    if record is None:
        return
    (Path(run_dir) / ".hydra").mkdir(parents=True, exist_ok=True)
    for name in ("config", "overrides"):
        if isinstance(record.get(name), str):
            atomic_write_bytes(Path(run_dir) / ".hydra" / f"{name}.yaml", record[name].encode())
