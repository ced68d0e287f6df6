"""What a run needs of the machine, from its settings alone: the memory of one float32 step
(train's pre-flight and the probe check it against what is free) and BatchNorm's need for more
than one token a batch. A leaf of the config floor (the stdlib, and psutil when asked for the
free memory), so the launch layer and the probe both stand on it without importing each other."""

from __future__ import annotations


def memory_parts(cfg, optimizer: bool = True) -> tuple[int, int]:
    """An estimate of the memory one float32 training step needs, from the settings, in two
    parts (model, per batch): what batch_size and seq_len cannot change, and what they can.

        P = 2·V·d + T·d + L·(4 + 2r)·d²            parameters (embedding, head, positions, blocks)
        16·P                                         weights, gradients, AdamW's two moments (4 B each);
                                                     8·P without an optimizer (the probe)
        4·L·B·T·(16 + 2r)·d                          activations kept for backward, per block
        + 4·L·B·H·T²  (only with attn_softcap)       the written-out attention scores
        + 12·B·T·V                                   logits, their log-softmax and its gradient

    (V vocabulary, d d_model, T seq_len, L layers, r mlp_ratio, B batch_size, H heads.) The fused
    attention kernel keeps no T×T scores. The count of kept activations per block is an upper
    estimate (norm outputs, q, k, v, attention output, residuals, the MLP's two r·d tensors)."""
    V, d, T, L = cfg.tokenizer.vocab_size, cfg.d_model, cfg.seq_len, cfg.layers
    r, B, H = cfg.mlp_ratio, cfg.batch_size, cfg.heads
    params = 2 * V * d + T * d + L * (4 + 2 * r) * d * d
    activations = 4 * L * B * T * (16 + 2 * r) * d + (4 * L * B * H * T * T if cfg.get("attn_softcap") else 0)
    return int((16 if optimizer else 8) * params), int(activations + 12 * B * T * V)


def training_memory_bytes(cfg) -> int:
    """memory_parts(cfg), added up: one AdamW training step."""
    return sum(memory_parts(cfg))


def available_memory_bytes() -> int | None:
    """The memory a new process can use without swapping (psutil: MemAvailable on Linux, free +
    inactive pages on macOS, the available physical memory on Windows); None if unreadable."""
    import psutil

    try:
        return int(psutil.virtual_memory().available)
    except (OSError, RuntimeError):  # a sandbox that hides the system's counters
        return None


def memory_problem(cfg, available: int | None = None, optimizer: bool = True, names: dict | None = None) -> str | None:
    """Why a step of `cfg` would not fit in the free memory, naming what actually helps, or None.
    `names`: how to call the settings (the probe's --depths for layers ...)."""
    available = available if available is not None else available_memory_bytes()
    model, batch = memory_parts(cfg, optimizer)
    if available is None or model + batch <= available:
        return None
    n = {"layers": "layers", "d_model": "d_model", "batch_size": "batch_size", "seq_len": "seq_len", **(names or {})}
    gib = 2 ** 30
    what = "weights, gradients and AdamW's moments" if optimizer else "weights and gradients"
    head = (f"one {'training step' if optimizer else 'forward and backward pass'} needs about {(model + batch) / gib:.1f} GiB ({what}: {model / gib:.1f} GiB; activations for "
            f"{n['batch_size']}={cfg.batch_size} × {n['seq_len']}={cfg.seq_len}: {batch / gib:.1f} GiB; the estimate is "
            f"in docs/usage.md) and {available / gib:.1f} GiB is free")
    if model >= available or cfg.batch_size * cfg.seq_len == 1:  # no batch or sequence is small enough
        return (f"{head}; lower {n['layers']} or {n['d_model']} (now {cfg.layers} and {cfg.d_model}): a smaller "
                "batch or sequence cannot make it fit")
    return f"{head}; lower {n['batch_size']} or {n['seq_len']} (or {n['layers']} or {n['d_model']})"


def batch_norm_needs(given: str, product: str, raise_: str) -> str:
    """Why BatchNorm refuses a batch of one token (PyTorch: "Expected more than 1 value per
    channel when training"), and the fix; validate.py and the probe say it alike."""
    return (f"with {given}, norm=batch has one value per channel to normalize over (BatchNorm normalizes each "
            f"feature over all batch×time tokens); {product} must be > 1: raise {raise_}, or choose another norm")


# ---------------------------------------------------------------------------------------------
# the data's share: local text files are read once into memory (the cache key hashes the very
# bytes that are tokenized, issue 38) and tokenized in pieces from there (data/sources.py)

DATA_SLACK = 64 << 20  # the tokenizer's pieces, numpy's temporaries and the hash, beside the text itself
BPE_MEMORY_PER_BYTE = 1.0  # tokenizers' BPE trainer and encoder beside the text (see docs/usage.md#data)
DEGENERATE_ENTROPY = 0.1  # nats per symbol: real text has 2 to 5 (a byte unigram), one symbol repeated 0


def data_needs(n_bytes: int, tokenizer: str, vocab_size: int) -> tuple[int, int, int]:
    """(memory to read, memory to tokenize beside it, disk for the token cache) for n_bytes of
    local text. The byte tokenizer copies the bytes into the cache (1 byte a token); a BPE
    token is 2 (or 4) bytes on disk and never shorter than a byte of text."""
    read = n_bytes + DATA_SLACK
    if tokenizer == "byte":
        return read, 0, n_bytes
    return read, int(BPE_MEMORY_PER_BYTE * n_bytes), (2 if vocab_size <= 65536 else 4) * n_bytes


def free_disk_bytes(folder) -> int | None:
    """Free bytes on the disk that holds `folder` (or would: its nearest existing parent)."""
    import shutil
    from pathlib import Path

    folder = Path(folder).expanduser().absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def size_text(n: float) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.1f} kB"


def data_problem(files: list[tuple[str, str, int]], tokenizer: str, vocab_size: int, cache_dir,
                 model: int = 0, available: int | None = None, free_disk: int | None = None,
                 read: bool = True, build: bool = True) -> str | None:
    """Why local data files ([(config key, path, bytes)]) cannot be read and tokenized here, or
    None. `read`: count the bytes read into memory (False once they are); `build`: count
    tokenizing and the token cache (False for a cache hit); `model`: the run's own memory."""
    if not files:
        return None
    n = sum(size for _, _, size in files)
    key, path, size = max(files, key=lambda f: f[2])
    what = f"{key}: {path} is {size_text(size)}" + (
        f" ({len(files)} files, {size_text(n)} in all)" if len(files) > 1 else "")
    read_mem, build_mem, disk = data_needs(n, tokenizer, vocab_size)
    need = (read_mem if read else 0) + (build_mem if build else 0) + model
    if read or build:
        available = available if available is not None else available_memory_bytes()
    if available is not None and need > available:
        parts = (["reading it takes " + size_text(read_mem)] if read else []) + (
            [f"tokenizer={tokenizer} {size_text(build_mem)} more"] if build and build_mem else []) + (
            [f"the model {size_text(model)}"] if model else [])
        bpe = "; tokenizer=byte needs no more than the file" if build and build_mem else ""
        return (f"{what}; {', '.join(parts)} of memory and {size_text(available)} is free; train on a smaller "
                f"file (split it, or cut it with head -c){bpe}, or free memory")
    if build:
        free_disk = free_disk if free_disk is not None else free_disk_bytes(cache_dir)
        if free_disk is not None and disk > free_disk:
            return (f"{what}; its tokens take {size_text(disk)} in the token cache {cache_dir} and "
                    f"{size_text(free_disk)} is free there; free space there, set NORMEXP_CACHE to a folder on "
                    "a larger disk, or train on a smaller file")
    return None
