"""Corpora, tokenizers and the token cache.

`load_corpus` turns a `data` + `tokenizer` config into two 1-D token arrays
(train, val). Tokenized splits are cached under `cache_root()/tokens/<key>/`
as raw .bin files and reopened with `np.memmap`, so a second run spends
milliseconds here. The cache key is computed from the corpus identity (names,
config values, the sha256 of local files' contents) and the tokenizer config, so a
cache hit tokenizes nothing, and a file changed in place never gets stale tokens.
Local files are read once: the key hashes the bytes that are tokenized (sources.py).

Memory is bounded by the input (issue 50): the files' bytes are held once and tokenized a piece
at a time into the cache files (the byte tokenizer writes the bytes themselves, one byte a
token), and their sizes are checked against free memory and disk before they are read.

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
from ..config.resources import DEGENERATE_ENTROPY, data_problem
from .files import CHUNK, atomic_write_bytes, cache_root
from .sources import DataError, _local_paths, _nbytes, file_lock, short, source_for, temp_dir, tokenizer_for, with_defaults  # noqa: F401 - DataError re-exported

log = logging.getLogger(__name__)

_CACHE_FORMAT = "normexp-tokens-v1"  # bump when the on-disk format or tokenization changes


@dataclass
class TokenizedCorpus:
    train: np.ndarray  # 1-D token ids (np.memmap): uint8 for bytes (uint16 in caches built before), else uint16/32
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
    return _entropy(token_counts(tokens), len(tokens))


def token_counts(tokens) -> np.ndarray:
    """np.bincount of the tokens (an array or bytes-like pieces), a piece at a time: the int64
    copy bincount makes of its input is a piece's, not the split's (8 bytes a token)."""
    pieces = [tokens] if isinstance(tokens, np.ndarray) else [np.frombuffer(t, dtype=np.uint8) for t in tokens]
    counts = np.zeros(0, dtype=np.int64)
    for piece in pieces:
        for start in range(0, len(piece), CHUNK // 4):
            c = np.bincount(piece[start:start + CHUNK // 4])
            counts = np.pad(counts, (0, max(0, len(c) - len(counts))))
            counts[:len(c)] += c
    return counts


def _entropy(counts: np.ndarray, n: int) -> float:
    p = counts[counts > 0] / n
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
    fits = {"files": source.sizes(), "tokenizer": tokenizer.name, "vocab_size": tokenizer.vocab_size,
            "cache_dir": root / "tokens"}
    problem = data_problem(**fits, build=False)  # before reading: the bytes must fit in memory
    if problem:
        raise DataError(problem)
    identity, key = _identity(source, tokenizer)
    files = source.files_read()  # the bytes identity() hashed; splits() tokenizes the same bytes
    if expect_files is not None:
        _check_expected(files, expect_files, source)
    entry = root / "tokens" / key
    built = False
    if not (entry / "meta.json").is_file():
        problem = data_problem(**fits, read=False)  # held now: tokenizing them and their tokens' disk
        if problem:
            raise DataError(problem)
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
    if meta["baseline_loss"] < DEGENERATE_ENTROPY:  # an entry built before the text itself was checked
        raise DataError(f"{meta['description']}: the validation tokens are nearly one symbol repeated (unigram "
                        f"entropy {meta['baseline_loss']:.4f} nats): no model can beat the baseline; train on real text")
    if not built:
        log.info("data: cached tokens %s (train %s, val %s tokens)", key[:8], _count(len(train)), _count(len(val)))
    return TokenizedCorpus(train, val, meta["vocab_size"], meta["bytes_per_token"], meta["description"],
                           meta["baseline_loss"], files)


def _identity(source, tokenizer) -> tuple[dict, str]:
    """The token cache entry's identity and key (its folder name under tokens/)."""
    identity = {"format": _CACHE_FORMAT, "corpus": source.identity(),
                "tokenizer": {"name": tokenizer.name, "vocab_size": tokenizer.vocab_size}}
    return identity, hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def is_cached(data_cfg, tokenizer_cfg, cache_dir: str | Path | None = None) -> bool:
    """Whether the configs' tokens are in the cache: the pre-flight asks, before refusing a file
    whose tokens would not fit on the disk. Hashes the local files a piece at a time."""
    data_cfg, tokenizer_cfg = with_defaults("data", data_cfg), with_defaults("tokenizer", tokenizer_cfg)
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root()
    source, tokenizer = source_for(data_cfg, root), tokenizer_for(tokenizer_cfg)
    source.stream_hashes = True
    try:
        return (root / "tokens" / _identity(source, tokenizer)[1] / "meta.json").is_file()
    except OSError:
        return False


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


def _check_not_degenerate(what: str, split: str, text: list) -> None:
    """Refuse a split whose bytes are (nearly) one symbol repeated (a file of NUL bytes): there
    is nothing to learn, the unigram baseline is ~0 and no run can beat it, so a study over it
    would only report stalls. Real text has 2 to 5 nats a byte; the limit is 0.1."""
    counts = token_counts(text)
    entropy = _entropy(counts, _nbytes(text))
    if entropy < DEGENERATE_ENTROPY:
        top = int(np.argmax(counts))
        raise DataError(f"{what}: the {split} text is {counts[top] / counts.sum():.2%} one byte ({top:#04x}; "
                        f"unigram entropy {abs(entropy):.4f} nats a byte): there is nothing to learn and no baseline to "
                        "beat; train on real text")


def _build_entry(entry: Path, identity: dict, source, tokenizer, progress: bool) -> None:
    start = time.perf_counter()
    train_text, val_text, description = source.splits(progress)  # UTF-8 pieces, views of the files' bytes
    for split, text in (("training", train_text), ("validation", val_text)):
        if not _nbytes(text):
            raise DataError(f"{description}: the {split} split is empty; add text or change the split settings")
    what = ", ".join(source.local_files()) or description
    for split, text in (("training", train_text), ("validation", val_text)):
        _check_not_degenerate(what, split, text)
    with temp_dir(entry.parent, f".tmp-{entry.name[:8]}-") as tmp:
        dtype = tokenizer.encode(train_text, val_text, tmp, progress)
        train = np.memmap(tmp / "train.bin", dtype=dtype, mode="r")
        val = np.memmap(tmp / "val.bin", dtype=dtype, mode="r")
        meta = {
            "train_tokens": len(train), "val_tokens": len(val), "dtype": np.dtype(dtype).name,
            "vocab_size": tokenizer.vocab_size, "bytes_per_token": _nbytes(val_text) / len(val),
            "baseline_loss": unigram_entropy(val),
            "description": f"{description}, {tokenizer.description()}", "identity": identity,
        }
        del train, val  # the memmaps: Windows cannot move a folder with open files
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        try:
            os.replace(tmp, entry)  # atomic: readers see a complete entry or none
        except OSError:
            if not (entry / "meta.json").is_file():  # else another process won the race: use theirs
                raise
    log.info("data: built tokens %s in %.1f s (train %s, val %s tokens)",
             entry.name[:8], time.perf_counter() - start, _count(meta["train_tokens"]), _count(meta["val_tokens"]))


# ---------------------------------------------------------------------------------------------
# small helpers


def _count(n: int) -> str:
    return f"{n / 1e6:.1f}M" if n >= 100_000 else f"{n / 1e3:.1f}k" if n >= 1000 else str(n)
