"""What normalizes: each norm a small class in NORMS, picked by name.

    NORMS[name](d, **settings)

`settings` are the constructor's keyword-only parameters, written without defaults: their
values live in configs/norm/<name>.yaml only, and config/registry.py's `variant` (or `build`)
fills the ones a caller leaves out from there. `resolved()` gives the settings the norm was
built with (summary.json). A new norm is one class here and one yaml file with exactly its
settings (tests/config/test_registry.py walks every registry for drift).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config.checks import is_float32, is_positive_float32, require
from ..config.registry import register

NORMS: dict[str, type[nn.Module]] = {}


@register(NORMS, "layer")
class LayerNorm(nn.Module):
    """LayerNorm (Ba et al. 2016): y = γ·(x−μ)/√(σ²+ε) + β, μ and biased σ² over the feature dim."""

    def __init__(self, d: int, *, eps: float):
        super().__init__()
        require(is_positive_float32(eps), "norm.eps", eps, "must be a number > 0")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, self.eps)

    def resolved(self) -> dict:
        return {"eps": self.eps}


@register(NORMS, "rms")
class RMSNorm(nn.Module):
    """RMSNorm (Zhang & Sennrich 2019): y = γ·x·rsqrt(mean(x²)+ε).

    Computed in float32 and cast back, so bf16 activations do not lose the statistic."""

    def __init__(self, d: int, *, eps: float):
        super().__init__()
        require(is_positive_float32(eps), "norm.eps", eps, "must be a number > 0")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def normalized(self, x: torch.Tensor) -> torch.Tensor:
        """x·rsqrt(mean(x²)+ε), in float32."""
        x32 = x.float()
        return x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)

    def forward(self, x):
        return self.normalized(x).type_as(x) * self.weight

    def resolved(self) -> dict:
        return {"eps": self.eps}


@register(NORMS, "rms_gemma")
class GemmaRMSNorm(RMSNorm):
    """Gemma's RMSNorm (Gemma Team 2024, "Gemma: Open Models Based on Gemini Research and
    Technology"; google-deepmind/gemma): y = x·rsqrt(mean(x²)+ε)·(1 + w), the learned weight
    stored as an offset w from 1 and initialised at 0, so the norm starts as the plain RMSNorm
    and weight decay pulls the scale towards 1, not 0. Computed in float32 (the (1 + w) factor
    too) and cast back, as Gemma does; ε = 1e-6 there. Gemma's other half, the √d scale on
    the token embeddings, is the model's `scale_embeddings` (on by default)."""

    def __init__(self, d: int, *, eps: float):
        super().__init__(d, eps=eps)
        self.weight = nn.Parameter(torch.zeros(d))  # the offset w from 1

    def forward(self, x):
        return (self.normalized(x) * (1.0 + self.weight.float())).type_as(x)


@register(NORMS, "batch")
class BatchNorm(nn.Module):
    """BatchNorm (Ioffe & Szegedy 2015) over all batch×time tokens, per feature:
    y = γ·(x−μ_B)/√(σ²_B+ε) + β in training, running statistics in eval.

    Caution: in a causal LM the batch statistics mix information across positions and
    samples during training (a token "sees" the future through μ_B, σ²_B). It is kept as a
    study option (Shen et al. 2020, "PowerNorm", discuss why it fails in Transformers)."""

    def __init__(self, d: int, *, eps: float, momentum: float):
        super().__init__()
        require(is_positive_float32(eps), "norm.eps", eps, "must be a number > 0")
        require(is_positive_float32(momentum) and momentum <= 1, "norm.momentum", momentum, "must be a number in (0, 1]")
        self.bn = nn.BatchNorm1d(d, eps=eps, momentum=momentum)

    def forward(self, x):
        return self.bn(x.reshape(-1, x.shape[-1])).view_as(x)

    def resolved(self) -> dict:
        return {"eps": self.bn.eps, "momentum": self.bn.momentum}


@register(NORMS, "dyt")
class DynamicTanh(nn.Module):
    """DyT (Zhu et al. 2025, "Transformers without Normalization"): y = γ·tanh(a·x) + β,
    with one learnable scalar a (initialised to init_alpha, 0.5 in the paper) and per-feature γ, β."""

    def __init__(self, d: int, *, init_alpha: float):
        super().__init__()
        require(is_positive_float32(init_alpha), "norm.init_alpha", init_alpha, "must be a number > 0")
        self.init_alpha = init_alpha
        self.alpha = nn.Parameter(torch.tensor(float(init_alpha)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.tanh(self.alpha * x) * self.weight + self.bias

    def resolved(self) -> dict:
        return {"init_alpha": self.init_alpha}


@register(NORMS, "derf")
class DynamicErf(nn.Module):
    """Derf (Chen et al. 2025, "Stronger Normalization-Free Transformers", arXiv 2512.10938):
    y = γ·erf(α·x + s) + β, a point-wise, DyT-like replacement for the norm: one learnable
    scalar α (initialised to init_alpha, 0.5) and one learnable scalar shift s (from
    init_shift, 0), as DyT's α is one scalar, and per-feature γ (from 1) and β (from 0).
    No statistics over the token: each element is mapped on its own."""

    def __init__(self, d: int, *, init_alpha: float, init_shift: float):
        super().__init__()
        require(is_positive_float32(init_alpha), "norm.init_alpha", init_alpha, "must be a number > 0")
        require(is_float32(init_shift), "norm.init_shift", init_shift, "must be a finite number (the paper starts s at 0)")
        self.init_alpha, self.init_shift = init_alpha, init_shift
        self.alpha = nn.Parameter(torch.tensor(float(init_alpha)))
        self.shift = nn.Parameter(torch.tensor(float(init_shift)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.erf(self.alpha * x + self.shift) * self.weight + self.bias

    def resolved(self) -> dict:
        return {"init_alpha": self.init_alpha, "init_shift": self.init_shift}


@register(NORMS, "scale")
class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears"): y = g·x / max(‖x‖, ε),
    ‖x‖ the L2 norm over the feature dim, with one learnable scalar g initialised to √d (so
    the output's entries have unit RMS, as LayerNorm's do). Computed in float32 and cast back,
    as RMSNorm is."""

    def __init__(self, d: int, *, eps: float):
        super().__init__()
        require(is_positive_float32(eps), "norm.eps", eps, "must be a number > 0")
        self.eps = eps
        self.scale = nn.Parameter(torch.tensor(math.sqrt(d)))

    def forward(self, x):
        x32 = x.float()
        y = x32 / x32.norm(dim=-1, keepdim=True).clamp_min(self.eps)
        return y.type_as(x) * self.scale

    def resolved(self) -> dict:
        return {"eps": self.eps}


@register(NORMS, "none")
class NoNorm(nn.Identity):
    """No normalization (identity): the control."""

    def __init__(self, d: int):
        super().__init__()

    def resolved(self) -> dict:
        return {}
