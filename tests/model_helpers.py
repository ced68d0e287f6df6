"""What the model's tests share (tests/model/ and its placements/): the width D, non-trivial
parameters, a stand-in sublayer, LayerNorm and attention written out, and a model built from
command-line overrides the way `normexp train` builds it."""

import math

import torch

from normexp.config.compose import compose_config
from normexp.config.registry import build
from normexp.model import GPT, NORMS, PLACEMENTS, ModelConfig
from normexp.model.layers import Sublayer

D = 16
EPS = 1e-5
SMALL = ["d_model=16", "heads=2", "seq_len=8", "layers=2"]


def randomize(module):
    """Non-trivial γ/β so a test cannot pass on the identity init."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + (1.0 if p.dim() == 1 else 0.0))
    return module


class StandIn(Sublayer):
    """A stand-in sublayer F(x) = tanh(x @ W) with a fixed random W; no norm slots."""

    def __init__(self):
        super().__init__(D)
        self.w = torch.randn(D, D, generator=torch.Generator().manual_seed(7)) / math.sqrt(D)

    def forward(self, x):
        return torch.tanh(x @ self.w)


def by_hand_norm(x):
    """LayerNorm with γ = 1, β = 0, written out (biased variance, ε = 1e-5)."""
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)


def compose_model(*overrides: str) -> GPT:
    """The GPT `normexp train` builds for SMALL and `overrides` (seed 0): the shipped configs
    composed with them (compose_config), turned into a ModelConfig (ModelConfig.from_composed)."""
    cfg = compose_config([*SMALL, *overrides])
    torch.manual_seed(0)
    return GPT(ModelConfig.from_composed(cfg, 256))


def ln(x, norm=None):
    """LayerNorm written out: biased variance, the norm's γ and β if given."""
    y = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + EPS)
    return y if norm is None else y * norm.weight + norm.bias


def make_ln(width=D):
    return randomize(build(NORMS, "norm", "layer", width))


def heads(t, h):
    B, T, C = t.shape
    return t.view(B, T, h, C // h).transpose(1, 2)


def attend(q, k, v, cap=None):
    """softmax(q·kᵀ/√d_h, capped as c·tanh(z/c) if cap, causal) · v, heads merged back."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if cap is not None:
        scores = cap * torch.tanh(scores / cap)
    T = q.shape[-2]
    scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
    y = torch.softmax(scores, -1) @ v
    return y.transpose(1, 2).reshape(q.shape[0], T, -1)


def projections(attn, x):
    return (x @ attn.qkv.weight.t() + attn.qkv.bias).split(attn.d_model, dim=-1)


def randomize_biases(module):
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.copy_(torch.randn_like(p) * 0.1)
    return module


def is_normalized(y: torch.Tensor) -> bool:
    """Every token has mean 0 and variance 1 over its features (a LayerNorm with γ=1, β=0)."""
    mean, var = y.mean(-1), y.var(-1, unbiased=False)
    return bool(mean.abs().max() < 1e-4 and (var - 1).abs().max() < 1e-2)


def init_std_ratio(model: GPT, d: int) -> tuple[float, float, float]:
    """(std of q and k over their Xavier std, std of v, proj, fc_in, fc_out over theirs, the
    relative standard error of the second) pooled over all blocks: gain 1 and gain β."""
    qk, rest = [], []
    for block in model.blocks:
        attn, mlp = block.attn.sublayer, block.mlp.sublayer
        q, k, v = attn.qkv.weight.detach().split(d)
        xavier = lambda fan_in, fan_out: math.sqrt(2.0 / (fan_in + fan_out))  # noqa: E731
        qk += [q.flatten() / xavier(d, d), k.flatten() / xavier(d, d)]
        rest += [v.flatten() / xavier(d, d), attn.proj.weight.detach().flatten() / xavier(d, d),
                 mlp.fc_in.weight.detach().flatten() / xavier(d, 4 * d),
                 mlp.fc_out.weight.detach().flatten() / xavier(4 * d, d)]
    rest = torch.cat(rest)
    return torch.cat(qk).std().item(), rest.std().item(), 1 / math.sqrt(2 * rest.numel())


def sandwich_block_output(name: str):
    """(x, y, out, want) of placement `name` around a StandIn at block 0 of 6, with
    want = LN_out(F(LN_in(x))) by hand: Sandwich-LN's block (peri is the same class)."""
    f = StandIn()
    layer = PLACEMENTS[name](f, lambda: NORMS["layer"](D, eps=1e-5), index=0, depth=6)
    x = torch.randn(2, 5, D, generator=torch.Generator().manual_seed(0)) * 3
    y, out = layer(x)
    return x, y, out, by_hand_norm(f(by_hand_norm(x)))
