"""The reference model: the plain eager GPT a user writes by hand (nanoGPT style).

It is the bench's baseline (same shape, same data, run interleaved with normexp), and an
independent check of normexp's Pre-LN model: tests/bench/test_bench.py loads a normexp
`GPT.state_dict()` into it through NORMEXP_KEYS and compares loss and gradients. That table
is the only place that knows normexp's parameter names; nothing here walks normexp's modules.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from .shapes import Shape


class MinimalBlock(nn.Module):
    """x + attn(LN(x)), then x + MLP(LN(x)): the textbook Pre-LN block."""

    def __init__(self, d: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, mlp_ratio * d)
        self.fc2 = nn.Linear(mlp_ratio * d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class MinimalGPT(nn.Module):
    """Learned positions, embeddings scaled by √d (Vaswani et al. 2017, as normexp does),
    Pre-LN blocks, a final LayerNorm and a head tied to the token embedding. Always Pre-LN:
    at a DeepNorm shape it is the same-size baseline (same matmuls, norms and residual adds
    per block; DeepNorm only moves the norm and scales the residual)."""

    def __init__(self, shape: Shape):
        super().__init__()
        d = shape.d_model
        self.tok = nn.Embedding(shape.vocab_size, d)
        self.pos = nn.Embedding(shape.seq_len, d)
        self.blocks = nn.ModuleList(MinimalBlock(d, shape.heads, shape.mlp_ratio) for _ in range(shape.layers))
        self.ln_f = nn.LayerNorm(d)
        self.scale = d ** 0.5

    def forward(self, idx, targets):
        x = (self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))) * self.scale
        for block in self.blocks:
            x = block(x)
        logits = self.ln_f(x) @ self.tok.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


# normexp's GPT.state_dict() key → this model's, for norm=layer placement=pre; "{i}" is the block.
NORMEXP_KEYS = {
    "tok_emb.weight": "tok.weight",
    "pos_emb.weight": "pos.weight",
    "blocks.{i}.attn.norm.{p}": "blocks.{i}.ln1.{p}",
    "blocks.{i}.attn.sublayer.qkv.{p}": "blocks.{i}.qkv.{p}",
    "blocks.{i}.attn.sublayer.proj.{p}": "blocks.{i}.proj.{p}",
    "blocks.{i}.mlp.norm.{p}": "blocks.{i}.ln2.{p}",
    "blocks.{i}.mlp.sublayer.fc_in.{p}": "blocks.{i}.fc1.{p}",
    "blocks.{i}.mlp.sublayer.fc_out.{p}": "blocks.{i}.fc2.{p}",
    "final_norm.{p}": "ln_f.{p}",
}


def normexp_key_map(layers: int) -> dict[str, str]:
    """NORMEXP_KEYS spelled out for every block and for weight and bias."""
    out = {}
    for theirs, mine in NORMEXP_KEYS.items():
        for i in range(layers) if "{i}" in theirs else [None]:
            for p in ("weight", "bias") if "{p}" in theirs else [None]:
                out[theirs.format(i=i, p=p)] = mine.format(i=i, p=p)
    return out


def from_normexp(shape: Shape, state_dict: dict[str, torch.Tensor]) -> MinimalGPT:
    """A MinimalGPT holding the weights of a normexp Pre-LN `GPT.state_dict()`. Every key on
    either side must be matched (strict), so a renamed normexp parameter fails loudly."""
    model = MinimalGPT(shape)
    keys = normexp_key_map(shape.layers)
    unmatched = sorted(set(state_dict) - set(keys))
    if unmatched:
        raise KeyError(f"normexp parameters with no counterpart in MinimalGPT: {unmatched[:5]}")
    model.load_state_dict({keys[k]: v for k, v in state_dict.items()}, strict=True)
    return model
