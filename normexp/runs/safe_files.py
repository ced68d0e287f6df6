"""Reading a run or sweep folder's own files as input from someone else.

Run folders are shared: copied from clusters, unpacked from archives, downloaded with papers.
A file in one may be a symbolic link to anywhere (train.log -> a `.pth` file in site-packages,
summary.json -> /dev/zero, .hydra -> a folder elsewhere), a named pipe, or a YAML alias bomb.
So normexp reads a folder's records only through here:

- never through a symbolic link: no part of the path below the folder may be a link (each part
  is opened with O_NOFOLLOW relative to the one above it, so a link swapped in between the check
  and the read is not followed either);
- regular files only (a pipe, a device or a socket is refused without waiting on it);
- at most a bounded number of bytes (a record normexp writes is kilobytes);
- YAML as plain data: `${...}` is kept as written, never resolved (OmegaConf would read the
  environment as it loads), and aliases (`*name`) are refused: normexp never writes them, and
  a few hundred bytes of them expand to gigabytes.

Each refusal is a `FolderFileRefused`, whose str is one line naming the file and the fix.
`folder_links` finds every link in a folder that a run is about to write into, for the
pre-flight (Hydra and Python's logging open train.log and .hydra/*.yaml following links)."""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

# A record normexp writes (summary.json, .hydra/*.yaml, normexp_run.json, multirun.yaml) is a few
# kilobytes; 16 MiB leaves room for a hand-edited or huge sweep's file and none for /dev/zero.
RECORD_LIMIT = 16 * 2 ** 20


class FolderFileRefused(ValueError):
    """A run folder's file that normexp will not read or write: a symbolic link, not a regular
    file, too large, or YAML it does not read. str(e) is one line naming the file and the fix."""

    def __init__(self, path: Path, why: str, fix: str = "replace it with the file itself, or remove it"):
        super().__init__(printable(f"{path}: {why}; {fix}"))
        self.path = Path(path)


def printable(text: str) -> str:
    """`text` on one line: control characters (a newline in a folder name) as their escapes."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


def link_target(path: Path) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return "?"


def _open_below(folder: Path, relative: str | Path, flags: int) -> int:
    """An fd of `folder/relative` opened with `flags`, no part of `relative` followed as a link
    (the folder itself may be reached through links: the user named it). FolderFileRefused
    for a link; FileNotFoundError when a part is missing."""
    parts = Path(relative).parts
    if not parts or any(p in ("..", "/") for p in parts) or Path(relative).is_absolute():
        raise ValueError(f"{relative}: not a path inside the folder")
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    here = Path(folder)
    try:
        for part in parts[:-1]:
            here = here / part
            try:
                fd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
            except OSError as e:
                if e.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(here):
                    raise FolderFileRefused(here, f"is a symbolic link (to {link_target(here)}); normexp reads and "
                                            "writes a run folder's own files only, never through a link") from None
                raise
            os.close(dir_fd)
            dir_fd = fd
        here = here / parts[-1]
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.EMLINK) and os.path.islink(here):
                raise FolderFileRefused(here, f"is a symbolic link (to {link_target(here)}); normexp reads and "
                                        "writes a run folder's own files only, never through a link") from None
            raise
    finally:
        os.close(dir_fd)


def read_bytes(folder: Path, relative: str | Path, limit: int = RECORD_LIMIT) -> bytes:
    """The bytes of `folder/relative`, read without following links, from a regular file of at
    most `limit` bytes. FileNotFoundError when it is missing; FolderFileRefused otherwise."""
    path = Path(folder) / relative
    # O_NONBLOCK: opening a named pipe must not wait for a writer (it is refused below)
    fd = _open_below(Path(folder), relative, os.O_RDONLY | os.O_NONBLOCK)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise FolderFileRefused(path, "is not a regular file (a pipe, a device or a folder); normexp reads only "
                                    "the files it wrote there")
        if info.st_size > limit:
            raise FolderFileRefused(path, f"holds {info.st_size} bytes, more than the {limit} a record of normexp's "
                                    "can hold", "remove it, or restore the file normexp wrote")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 2 ** 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while read
        raise FolderFileRefused(path, f"holds more than the {limit} bytes a record of normexp's can hold",
                                "remove it, or restore the file normexp wrote")
    return data


def read_text(folder: Path, relative: str | Path, limit: int = RECORD_LIMIT) -> str:
    """read_bytes as UTF-8 text; FolderFileRefused when it is not UTF-8."""
    try:
        return read_bytes(folder, relative, limit).decode("utf-8")
    except UnicodeDecodeError as e:
        raise FolderFileRefused(Path(folder) / relative, f"is not UTF-8 text ({e.reason} at byte {e.start})",
                                "remove it, or restore the file normexp wrote") from None


def read_json(folder: Path, relative: str | Path, limit: int = RECORD_LIMIT):
    """A JSON file of the folder (read_bytes), parsed; ValueError when it is not JSON."""
    return json.loads(read_bytes(folder, relative, limit))


class _PlainYamlLoader:
    """Built on first use (PyYAML and OmegaConf's loader cost an import)."""
    loader = None

    @classmethod
    def get(cls):
        if cls.loader is None:
            import yaml
            from omegaconf._utils import get_yaml_loader  # the number forms OmegaConf.load reads (1e-3 a float)

            class NoAliasLoader(get_yaml_loader()):
                """OmegaConf's YAML reading (its number forms, duplicate keys refused) without
                aliases: `*name` is refused where it is met, before anything expands."""

                def compose_node(self, parent, index):
                    if self.check_event(yaml.AliasEvent):
                        event = self.peek_event()
                        raise yaml.composer.ComposerError(None, None, "holds a YAML alias (*name), which normexp never "
                                                          "writes", event.start_mark)
                    return super().compose_node(parent, index)

            cls.loader = NoAliasLoader
        return cls.loader


def parse_yaml(text: str, source: Path):
    """YAML text as plain data, nothing resolved: `${...}` stays the string written; an alias is
    refused (FolderFileRefused naming `source`), as is anything that does not parse."""
    import yaml

    try:
        return yaml.load(text, Loader=_PlainYamlLoader.get())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as e:
        raise FolderFileRefused(source, f"does not read as YAML ({' '.join(str(e).split())[:160]})",
                                "remove it, or restore the file normexp wrote") from None


def read_yaml(folder: Path, relative: str | Path, limit: int = RECORD_LIMIT):
    """A YAML file of the folder (read_text), as plain data (parse_yaml)."""
    return parse_yaml(read_text(folder, relative, limit), Path(folder) / relative)


def interpolation_in(node, prefix: str = "") -> tuple[str, str] | None:
    """(dotted key, value as written) of the first string in `node` that holds an interpolation
    (`${...}`), or None. normexp never records one (runs.replay refuses them too): loaded by
    OmegaConf it would resolve to another setting or the environment (oc.env)."""
    if isinstance(node, str):
        return (prefix, node) if "${" in node else None
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        found = interpolation_in(v, f"{prefix}.{k}" if prefix else str(k))
        if found:
            return found
    return None


def folder_links(folder: Path, limit: int = 20) -> list[Path]:
    """The symbolic links inside `folder` (links to folders are not followed): what a run about to
    write there would write through. At most `limit` of them."""
    found = []
    if not Path(folder).is_dir():
        return found
    for here, subfolders, files in os.walk(folder, followlinks=False):
        for name in subfolders + files:
            if os.path.islink(os.path.join(here, name)):
                found.append(Path(here) / name)
                if len(found) >= limit:
                    return found
    return found
