"""Corpora, tokenizers and the token cache.

`load_corpus` turns a `data` + `tokenizer` config into two 1-D token arrays
(train, val). Tokenized splits are cached under `cache_root()/tokens/<key>/`
as raw .bin files and reopened with `np.memmap`, so a second run spends
milliseconds here. The cache key is computed from the corpus identity (names,
config values, the sha256 of local files' contents) and the tokenizer config, so a
cache hit tokenizes nothing, and a file changed in place never gets stale tokens.
Local files are read once: the key hashes the bytes that are tokenized (sources.py).

The corpora (`data.name`) and tokenizers (`tokenizer.name`) are the registries SOURCES and
TOKENIZERS of sources.py, one class each; this module caches and serves their tokens.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..config.checks import ConfigError
from .files import atomic_write_bytes, cache_root
from .sources import DataError, _local_paths, file_lock, short, source_for, temp_dir, tokenizer_for, with_defaults  # noqa: F401 - DataError re-exported

log = logging.getLogger(__name__)

_CACHE_FORMAT = "normexp-tokens-v1"  # bump when the on-disk format or tokenization changes


@dataclass
class TokenizedCorpus:
    train: np.ndarray  # 1-D token ids (np.memmap), uint16 if vocab <= 65536 else uint32
    val: np.ndarray
    vocab_size: int
    bytes_per_token: float  # UTF-8 bytes per token of the val split
    description: str
    baseline_loss: float | None = None  # unigram entropy of the val split, nats/token (see unigram_entropy)
    files: list | None = None  # [{path, bytes, sha256}] of the local files read: the text the key names



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
        meta = {**meta, "baseline_loss": unigram_entropy(val)}
        try:
            atomic_write_bytes(entry / "meta.json", json.dumps(meta, indent=1).encode())
        except OSError:  # a read-only cache
            pass
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
    data_cfg, tokenizer_cfg, cache_dir: str | Path | None = None, progress: bool = True,
    expect_files: list[dict] | None = None,
) -> TokenizedCorpus:
    """Tokenized train/val splits for the configs, built once and then read from the cache.
    The configs are checked by validate.py's rules (the same ones `normexp train` applies
    before it starts), so a caller that skips the command line gets the same one-line errors.
    `expect_files`: the run record's data_files ({sha256, ...} in local_files order); a file
    whose bytes read here differ is refused, so a run never trains on a text its record
    does not name."""
    data_cfg, tokenizer_cfg = with_defaults("data", data_cfg), with_defaults("tokenizer", tokenizer_cfg)
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    try:
        source, tokenizer = source_for(data_cfg, root), tokenizer_for(tokenizer_cfg)
        source.check()
        tokenizer.check()
    except ConfigError as e:
        raise DataError(str(e)) from None
    identity = {"format": _CACHE_FORMAT, "corpus": source.identity(),
                "tokenizer": {"name": tokenizer.name, "vocab_size": tokenizer.vocab_size}}
    files = source.files_read()  # the bytes identity() hashed; load() tokenizes the same bytes
    if expect_files is not None:
        _check_expected(files, expect_files, source)
    key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()
    entry = root / "tokens" / key
    built = False
    if not (entry / "meta.json").is_file():
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            with file_lock(entry.parent / f".{key}.lock"):  # parallel sweep jobs build it once
                if not (entry / "meta.json").is_file():
                    _build_entry(entry, identity, source, tokenizer, progress)
                    built = True
        except OSError as e:
            raise _cache_write_error(e, entry.parent) from None
    try:
        meta = json.loads((entry / "meta.json").read_text())
        dtype = np.dtype(meta["dtype"])
        train = np.memmap(entry / "train.bin", dtype=dtype, mode="r", shape=(meta["train_tokens"],))
        val = np.memmap(entry / "val.bin", dtype=dtype, mode="r", shape=(meta["val_tokens"],))
        meta = _with_baseline(entry, meta, val)
    except (OSError, ValueError, KeyError) as e:  # only if someone edited the cache by hand
        raise DataError(f"the token cache {entry} is damaged ({short(e)}); delete that folder and rerun") from None
    if not built:
        log.info("data: cached tokens %s (train %s, val %s tokens)", key[:8], _count(len(train)), _count(len(val)))
    return TokenizedCorpus(train, val, meta["vocab_size"], meta["bytes_per_token"], meta["description"],
                           meta["baseline_loss"], files)


def _check_expected(files: list[dict], expected: list[dict], source) -> None:
    """Refuse a file whose bytes are not those the run's record names (it changed between the
    record and this read: replaced while the run started)."""
    named, n_train = source.local_files(), len(_local_paths(source.cfg.get("files")))
    for i, (now, then) in enumerate(zip(files, expected)):
        if then.get("sha256") != now["sha256"]:
            key = "data.files" if i < n_train else "data.val_files"
            raise DataError(f"{key}: {named[i]} changed while the run started (the run's record names "
                            f"sha256 {str(then.get('sha256'))[:12]}…, it holds {now['sha256'][:12]}… now); "
                            "run again once the file stays as it is")


# ---------------------------------------------------------------------------------------------
# building a cache entry


def _write_tokens(tokens: np.ndarray, path: Path) -> None:
    tokens.tofile(path)


def _cache_write_error(e: OSError, folder: Path) -> DataError:
    """One line for a token cache that cannot be written. numpy's tofile reports a full disk
    as "N requested and M written" with no errno, so a short write counts as a full disk too."""
    full = e.errno in (errno.ENOSPC, errno.EDQUOT) or (e.errno is None and " requested and " in str(e))
    what, fix = {errno.EDQUOT: ("the disk quota is exhausted", "free some space there"),
                 errno.EROFS: ("the file system is read-only", "choose a writable folder"),
                 errno.EACCES: ("permission denied", "make it writable (chmod u+w)"),
                 errno.EPERM: ("operation not permitted", "make it writable (chmod u+w)")}.get(
        e.errno, ("no space left on the device", "free some space there") if full else (short(e), "fix it"))
    return DataError(f"{what} writing the token cache in {folder}; {fix}, or set NORMEXP_CACHE to a folder "
                     "on another disk")


def _build_entry(entry: Path, identity: dict, source, tokenizer, progress: bool) -> None:
    start = time.perf_counter()
    train_text, val_text, description = source.load(progress)
    for split, text in (("training", train_text), ("validation", val_text)):
        if not text:
            raise DataError(f"{description}: the {split} split is empty; add text or change the split settings")
    with temp_dir(entry.parent, f".tmp-{entry.name[:8]}-") as tmp:
        train, val = tokenizer.encode(train_text, val_text, tmp, progress)
        dtype = np.uint16 if tokenizer.vocab_size <= 65536 else np.uint32
        _write_tokens(train.astype(dtype), tmp / "train.bin")
        _write_tokens(val.astype(dtype), tmp / "val.bin")
        meta = {
            "train_tokens": len(train), "val_tokens": len(val), "dtype": np.dtype(dtype).name,
            "vocab_size": tokenizer.vocab_size, "bytes_per_token": len(val_text.encode("utf-8")) / len(val),
            "baseline_loss": unigram_entropy(val),
            "description": f"{description}, {tokenizer.description()}", "identity": identity,
        }
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.replace(tmp, entry)  # atomic: readers see a complete entry or none
        except OSError:
            if not (entry / "meta.json").is_file():  # else another process won the race: use theirs
                raise
    log.info("data: built tokens %s in %.1f s (train %s, val %s tokens)",
             entry.name[:8], time.perf_counter() - start, _count(len(train)), _count(len(val)))


# ---------------------------------------------------------------------------------------------
# small helpers


def _count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 100_000 else f"{n / 1e3:.1f}k" if n >= 1000 else str(n)
