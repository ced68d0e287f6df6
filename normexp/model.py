"""A small decoder-only Transformer whose normalization type and placement are swappable.

Read top to bottom: norms (what normalizes), placements (where it sits around each
sublayer), the two sublayers (attention, MLP), the block, and the GPT itself.
One `ModelConfig` drives everything; norms and placements are picked by name from
the registries `NORMS` and `PLACEMENTS`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class ModelConfig:
    vocab_size: int = 256
    seq_len: int = 128
    layers: int = 6
    d_model: int = 128
    heads: int = 4
    mlp_ratio: int = 4
    norm: str = "layer"          # a key of NORMS
    norm_eps: float = 1e-5
    bn_momentum: float = 0.1     # BatchNorm only
    dyt_init_alpha: float = 0.5  # DyT only
    placement: str = "pre"       # a key of PLACEMENTS
    mix_ratio: float = 0.25      # Mix-LN only: fraction of blocks that are Post-LN
    deepnorm_alpha: float | None = None  # None = (2N)^(1/4)
    deepnorm_beta: float | None = None   # None = (8N)^(-1/4)


def deepnorm_constants(layers: int) -> tuple[float, float]:
    """DeepNorm's α = (2N)^(1/4) and β = (8N)^(-1/4) for a decoder-only stack of N blocks
    (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers", Table 1)."""
    return (2 * layers) ** 0.25, (8 * layers) ** -0.25


# --------------------------------------------------------------------------- norms

NORMS: dict[str, type[nn.Module]] = {}


def register(registry: dict, *names: str):
    def add(cls):
        for name in names:
            registry[name] = cls
        return cls
    return add


@register(NORMS, "layer")
class LayerNorm(nn.Module):
    """LayerNorm (Ba et al. 2016): y = γ·(x−μ)/√(σ²+ε) + β, μ and biased σ² over the feature dim."""

    def __init__(self, d: int, cfg: ModelConfig):
        super().__init__()
        self.eps = cfg.norm_eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)


@register(NORMS, "rms")
class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019): y = γ·x·rsqrt(mean(x²)+ε).

    Computed in float32 and cast back, so bf16 activations do not lose the statistic."""

    def __init__(self, d: int, cfg: ModelConfig):
        super().__init__()
        self.eps = cfg.norm_eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight


@register(NORMS, "batch")
class BatchNorm(nn.Module):
    """BatchNorm (Ioffe & Szegedy 2015) over all batch×time tokens, per feature:
    y = γ·(x−μ_B)/√(σ²_B+ε) + β in training, running statistics in eval.

    Caution: in a causal LM the batch statistics mix information across positions and
    samples during training (a token "sees" the future through μ_B, σ²_B). It is kept as a
    study option (Shen et al. 2020, "PowerNorm", discuss why it fails in Transformers)."""

    def __init__(self, d: int, cfg: ModelConfig):
        super().__init__()
        self.bn = nn.BatchNorm1d(d, eps=cfg.norm_eps, momentum=cfg.bn_momentum)

    def forward(self, x):
        return self.bn(x.reshape(-1, x.shape[-1])).view_as(x)


@register(NORMS, "dyt")
class DynamicTanh(nn.Module):
    """DyT (Zhu et al. 2025, "Transformers without Normalization"): y = γ·tanh(a·x) + β,
    with one learnable scalar a (initialised to 0.5) and per-feature γ, β."""

    def __init__(self, d: int, cfg: ModelConfig):
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(cfg.dyt_init_alpha)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.tanh(self.alpha * x) * self.weight + self.bias


@register(NORMS, "none")
class NoNorm(nn.Identity):
    """No normalization (identity): the control."""

    def __init__(self, d: int, cfg: ModelConfig):
        super().__init__()


# ---------------------------------------------------------------------- placements
# Each placement wraps one sublayer F (attention or MLP) and the residual stream x.
# forward returns (new residual stream, the sublayer's contribution before it joins the
# residual); the second value feeds the `attn_out_std` / `mlp_out_std` instruments.

PLACEMENTS: dict[str, type[nn.Module]] = {}


@register(PLACEMENTS, "post")
class PostNorm(nn.Module):
    """Post-LN (Vaswani et al. 2017): x ← Norm(x + F(x)). No final norm is needed."""

    final_norm = False

    def __init__(self, sublayer: nn.Module, make_norm, cfg: ModelConfig):
        super().__init__()
        self.sublayer = sublayer
        self.norm = make_norm()

    def forward(self, x):
        out = self.sublayer(x)
        return self.norm(x + out), out


@register(PLACEMENTS, "pre")
class PreNorm(nn.Module):
    """Pre-LN (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"):
    x ← x + F(Norm(x)); the model adds one final Norm after the last block."""

    final_norm = True

    def __init__(self, sublayer: nn.Module, make_norm, cfg: ModelConfig):
        super().__init__()
        self.norm = make_norm()
        self.sublayer = sublayer

    def forward(self, x):
        out = self.sublayer(self.norm(x))
        return x + out, out


@register(PLACEMENTS, "deepnorm")
class DeepNorm(nn.Module):
    """DeepNorm (Wang et al. 2022, "DeepNet"): x ← Norm(α·x + F(x)).

    α up-weights the residual (not F(x)); with α = (2N)^(1/4) and the β-scaled init of
    the value, output and MLP matrices (see `GPT._init_weights`) the model update stays
    bounded as depth N grows. No final norm: the stream leaves every block normalized."""

    final_norm = False

    def __init__(self, sublayer: nn.Module, make_norm, cfg: ModelConfig):
        super().__init__()
        self.sublayer = sublayer
        self.norm = make_norm()
        self.alpha = cfg.deepnorm_alpha

    def forward(self, x):
        out = self.sublayer(x)
        return self.norm(self.alpha * x + out), out


@register(PLACEMENTS, "sandwich", "peri")
class SandwichNorm(nn.Module):
    """Sandwich-LN (Ding et al. 2021, CogView) / Peri-LN (Kim et al. 2025):
    x ← x + Norm_out(F(Norm_in(x))); the model adds a final Norm as Pre-LN does."""

    final_norm = True

    def __init__(self, sublayer: nn.Module, make_norm, cfg: ModelConfig):
        super().__init__()
        self.norm_in = make_norm()
        self.sublayer = sublayer
        self.norm_out = make_norm()

    def forward(self, x):
        out = self.norm_out(self.sublayer(self.norm_in(x)))
        return x + out, out


def block_placements(cfg: ModelConfig) -> list[type[nn.Module]]:
    """The placement class of each block. "mix" is Mix-LN (Li et al. 2024): Post-LN for the
    first ⌊ρ·L⌋ blocks, Pre-LN for the rest (ρ = cfg.mix_ratio)."""
    if cfg.placement == "mix":
        n_post = math.floor(cfg.mix_ratio * cfg.layers)
        return [PostNorm] * n_post + [PreNorm] * (cfg.layers - n_post)
    return [PLACEMENTS[cfg.placement]] * cfg.layers


PLACEMENT_NAMES = sorted([*PLACEMENTS, "mix"])


# ----------------------------------------------------------------------- sublayers

class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention with one fused QKV projection. (`causal = False`
    attends both ways: the encoder of `normexp probe --encoder-decoder`.)"""

    causal = True

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class MLP(nn.Module):
    """Position-wise feed-forward: fc_out(GELU(fc_in(x)))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.fc_in = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.fc_out = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)

    def forward(self, x):
        return self.fc_out(F.gelu(self.fc_in(x)))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig, placement: type[nn.Module]):
        super().__init__()
        make_norm = lambda: NORMS[cfg.norm](cfg.d_model, cfg)  # noqa: E731
        self.attn = placement(CausalSelfAttention(cfg), make_norm, cfg)
        self.mlp = placement(MLP(cfg), make_norm, cfg)

    def forward(self, x):
        x, attn_out = self.attn(x)
        x, mlp_out = self.mlp(x)
        return x, attn_out, mlp_out


# ----------------------------------------------------------------------------- GPT

IGNORE_TARGET = -100  # a target position that adds nothing to the loss


class GPT(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if cfg.norm not in NORMS:
            raise ValueError(f"unknown norm {cfg.norm!r}; choose from {sorted(NORMS)}")
        if cfg.placement not in PLACEMENT_NAMES:
            raise ValueError(f"unknown placement {cfg.placement!r}; choose from {PLACEMENT_NAMES}")
        if cfg.placement == "deepnorm":
            alpha, beta = deepnorm_constants(cfg.layers)
            cfg.deepnorm_alpha = alpha if cfg.deepnorm_alpha is None else float(cfg.deepnorm_alpha)
            cfg.deepnorm_beta = beta if cfg.deepnorm_beta is None else float(cfg.deepnorm_beta)
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        placements = block_placements(cfg)
        self.blocks = nn.ModuleList(Block(cfg, p) for p in placements)
        self.final_norm = NORMS[cfg.norm](cfg.d_model, cfg) if placements[-1].final_norm else nn.Identity()
        self.register_buffer("positions", torch.arange(cfg.seq_len), persistent=False)
        self.embed_scale = math.sqrt(cfg.d_model)
        self._init_weights()

    def _init_weights(self):
        """Xavier-normal matrices and zero biases (the setting Xiong et al. analyse).
        Embeddings N(0, 1/d), multiplied by √d on the way in (Vaswani et al. 2017), so the
        stream entering block 0 has unit-scale entries as the analysis assumes, and the tied
        head starts with unit-scale logits. DeepNorm: gain β for the value, attention-output
        and both MLP matrices, gain 1 for query and key (Wang et al. 2022, Fig. 2)."""
        beta = self.cfg.deepnorm_beta if self.cfg.placement == "deepnorm" else 1.0
        nn.init.normal_(self.tok_emb.weight, std=self.cfg.d_model ** -0.5)
        nn.init.normal_(self.pos_emb.weight, std=self.cfg.d_model ** -0.5)
        d = self.cfg.d_model
        for block in self.blocks:
            attn, mlp = block.attn.sublayer, block.mlp.sublayer
            q, k, v = attn.qkv.weight.data.split(d)  # views: init each d×d matrix on its own
            nn.init.xavier_normal_(q, gain=1.0)
            nn.init.xavier_normal_(k, gain=1.0)
            nn.init.xavier_normal_(v, gain=beta)
            for w in (attn.proj.weight, mlp.fc_in.weight, mlp.fc_out.weight):
                nn.init.xavier_normal_(w, gain=beta)
            for lin in (attn.qkv, attn.proj, mlp.fc_in, mlp.fc_out):
                nn.init.zeros_(lin.bias)

    def hidden(self, idx: torch.Tensor, record: bool = False):
        """The final hidden state (B, T, d). With record=True also returns per-block tensors
        for the instruments: the residual stream leaving each block, each sublayer's output,
        and the final hidden state itself."""
        x = (self.tok_emb(idx) + self.pos_emb(self.positions[: idx.shape[1]])) * self.embed_scale
        trace = {"embed": x, "block": [], "attn_out": [], "mlp_out": []} if record else None
        for block in self.blocks:
            x, attn_out, mlp_out = block(x)
            if record:
                trace["block"].append(x)
                trace["attn_out"].append(attn_out)
                trace["mlp_out"].append(mlp_out)
        h = self.final_norm(x)
        if record:
            trace["final"] = h
        return (h, trace) if record else h

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None, record: bool = False):
        """Logits through the tied head; with targets, the mean cross-entropy (nats/token)
        over the targets that are not IGNORE_TARGET."""
        out = self.hidden(idx, record)
        h, trace = out if record else (out, None)
        logits = h @ self.tok_emb.weight.t()
        loss = None if targets is None else F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(),
                                                       ignore_index=IGNORE_TARGET)
        return (logits, loss, trace) if record else (logits, loss)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
