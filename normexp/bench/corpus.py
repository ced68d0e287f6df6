"""The bench's own text: random lowercase words. The bench times steps, so the text only
needs enough tokens; data=text holds out its last 10 % for validation."""

from __future__ import annotations

import random
from pathlib import Path

CORPUS_BYTES = 400_000
MAX_SEQ_LEN = CORPUS_BYTES // 10 - 2  # a validation batch needs seq_len + 1 bytes of the held-out 10 %


def make_corpus(folder: Path, n_bytes: int = CORPUS_BYTES, seed: int = 0) -> Path:
    rng = random.Random(seed)
    words = ["".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 9))) for _ in range(500)]
    text, size = [], 0
    while size < n_bytes:
        line = " ".join(rng.choice(words) for _ in range(12)) + ".\n"
        text.append(line)
        size += len(line)
    path = folder / "bench_corpus.txt"
    path.write_text("".join(text))
    return path
