"""The shapes the bench times, picked by name (`--only A,B,deep`), and their FLOPs per token.

FLOPs per token (Kaplan et al. 2020, "Scaling Laws for Neural Language Models", §2.1;
Chowdhery et al. 2022, "PaLM", App. B): 6·N + 12·L·T·d for forward + backward, where N
counts the weights of the matmuls (12·d² per block plus the tied V×d head) and 12·L·T·d the
attention scores and weighted values (no discount for the causal mask). Norms, GELU,
softmax, the optimizer and embedding lookups are not counted: MFU here is the fraction of
the machine's matmul peak that goes into the model's matmuls.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import BenchError
from ..config.defaults import bench_default
from .corpus import MAX_SEQ_LEN


@dataclass(frozen=True)
class Shape:
    name: str
    layers: int
    d_model: int
    seq_len: int
    batch_size: int
    heads: int = 4
    mlp_ratio: int = 4
    vocab_size: int = 256           # the byte tokenizer
    placement: str | None = None    # None: the config's default (pre); the minimal GPT is Pre-LN either way

    @property
    def label(self) -> str:
        return f"{self.name}: {self.layers}×{self.d_model} T{self.seq_len} B{self.batch_size}"

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def matmul_params(self) -> int:
        """Weights that enter a matmul: QKV (3d²), attention output (d²), MLP (2·r·d²) per
        block, and the tied head (V·d). Biases, norms and the position table are excluded."""
        d, r = self.d_model, self.mlp_ratio
        return self.layers * (4 + 2 * r) * d * d + self.vocab_size * d

    def flops_per_token(self) -> float:
        """6·N + 12·L·T·d (forward + backward), see the module docstring."""
        return 6 * self.matmul_params() + 12 * self.layers * self.seq_len * self.d_model

    def overrides(self) -> list[str]:
        """The `normexp train` overrides that build this shape."""
        out = [f"layers={self.layers}", f"d_model={self.d_model}", f"heads={self.heads}",
               f"mlp_ratio={self.mlp_ratio}", f"seq_len={self.seq_len}", f"batch_size={self.batch_size}"]
        return out + ([f"placement={self.placement}"] if self.placement else [])


def default_shape() -> Shape:
    """(C): the model `normexp train` trains with no overrides."""
    from ..config.compose import compose_config

    cfg = compose_config([])
    return Shape("C", cfg.layers, cfg.d_model, cfg.seq_len, cfg.batch_size, cfg.heads, cfg.mlp_ratio)


# The named shapes. `deep` is DeepNet's question at laptop scale (issue 23: 1,000 DeepNorm
# blocks, narrow); at ~1-2 s a step it is not in the default set.
SHAPES = {
    "A": lambda: Shape("A", 6, 256, 256, 16),
    "B": lambda: Shape("B", 48, 64, 64, 16),
    "C": default_shape,
    "deep": lambda: Shape("deep", 1000, 32, 32, 8, placement="deepnorm"),
}
DEFAULT_ONLY = bench_default("only")  # configs/bench.yaml


def parse_shape(text: str) -> Shape:
    """NAME=LAYERSxWIDTH,SEQ,BATCH, e.g. tiny=2x32,32,4; a shape no model can have is a BenchError."""
    try:
        name, spec = text.split("=")
        size, seq, batch = spec.split(",")
        layers, width = size.lower().split("x")
        shape = Shape(name.strip(), int(layers), int(width), int(seq), int(batch), heads=2 if int(width) < 64 else 4)
    except ValueError:
        raise BenchError(f"--shape {text!r}: write NAME=LAYERSxWIDTH,SEQ,BATCH, e.g. tiny=2x32,32,4") from None
    if not shape.name:
        raise BenchError(f"--shape {text!r}: the shape needs a NAME before '=', e.g. tiny=2x32,32,4")
    sizes = {"layers": shape.layers, "width": shape.d_model, "sequence length": shape.seq_len, "batch": shape.batch_size}
    bad = [f"{what} {v}" for what, v in sizes.items() if v < 1]
    if bad:
        raise BenchError(f"--shape {text!r}: {', '.join(bad)} must be at least 1, e.g. tiny=2x32,32,4")
    if shape.seq_len > MAX_SEQ_LEN:
        raise BenchError(f"--shape {text!r}: sequence length {shape.seq_len} is longer than the bench's validation "
                         f"text allows; use at most {MAX_SEQ_LEN}")
    if shape.d_model % shape.heads:
        raise BenchError(f"--shape {text!r}: width {shape.d_model} must be a multiple of its {shape.heads} attention "
                         f"heads (2 below width 64, else 4), e.g. {shape.name}={shape.layers}x"
                         f"{shape.heads * max(1, round(shape.d_model / shape.heads))},{shape.seq_len},{shape.batch_size}")
    return shape


def select_shapes(only: str, extra: list[str]) -> tuple[dict[str, Shape], list[Shape]]:
    """({name: Shape} of every shape known, the shapes `only` names, in its order). Named
    shapes are built only when asked for (C composes the config); --shape adds or replaces."""
    given = {s.name: s for s in map(parse_shape, extra)}
    names = [n.strip() for n in only.split(",") if n.strip() and n.strip() != "none"]
    choices = list(dict.fromkeys([*SHAPES, *given]))
    unknown = [n for n in names if n not in choices]
    if unknown:
        raise BenchError(f"unknown shape {', '.join(unknown)} in --only; "
                         f"choose from {', '.join(choices)} or add one with --shape NAME=LxD,SEQ,BATCH")
    known = {n: given[n] if n in given else SHAPES[n]() for n in names}
    return {**known, **given}, [known[n] for n in names]


def find_shape(name: str, known: dict[str, Shape], flag: str) -> Shape:
    """A shape by name for options other than --only (e.g. --sweep-shape)."""
    if name in known:
        return known[name]
    if name in SHAPES:
        return SHAPES[name]()
    raise BenchError(f"{flag} {name}: unknown; choose from {', '.join([*SHAPES, *known])} "
                     "or add one with --shape NAME=LxD,SEQ,BATCH")
