"""HybridNorm: QKV normalization inside attention, a Post-Norm-residual FFN."""

from __future__ import annotations

import torch.nn as nn

from ...config.registry import register
from ...config.variants.placements.hybrid import HybridNormSettings
from ..layers import QKV_NORM
from .base import PLACEMENTS, Placement


class PerHead(nn.Module):
    """A norm over each head's features: (B, T, C) seen as (B, T, heads, C/heads), the norm
    over the last axis (its weight, d_head wide, shared by the heads), then back to (B, T, C)."""

    def __init__(self, norm: nn.Module, heads: int):
        super().__init__()
        self.norm, self.heads = norm, heads

    def forward(self, t):
        B, T, C = t.shape
        return self.norm(t.view(B, T, self.heads, C // self.heads)).view(B, T, C)


@register(PLACEMENTS, "hybrid")
class HybridNorm(Placement):
    """HybridNorm (Zhuo et al. 2025, "HybridNorm: Towards Stable and Efficient Transformer
    Training via Hybrid Normalization"), the plain variant (not HybridNorm*, whose first block
    is Pre-Norm): per block, with X the stream entering it,

        Y = X + Attn_QKV(X),   X' = Norm(Y) + FFN(Norm(Y)),
        Attn_QKV: softmax(Norm(Q)·Norm(K)ᵀ/√d_h)·Norm(V), then W_O,

    i.e. no norm on the attention's input, QKV normalization inside it (filled into the
    attention's QKV_NORM slot), and the FFN in the Post-Norm form whose residual is the
    normalized stream. The model adds a final Norm (X' is not normalized). The form follows
    the authors' released config (attn_norm false, use_query/key/value_norm true, ffn_norm
    true, ffn_residual_after_norm true). A sublayer that declares no QKV_NORM slot (the MLP,
    cross-attention) gets the FFN form.

    Where Q, K and V are normalized is a setting, `qkv_norm`, because the default differs from
    the authors' code: "full" (the default, as shipped before issue 29, so recorded runs stay
    comparable) normalizes each of Q, K, V over the full width d before the split into heads,
    as OLMo 2's QK-norm does; "per_head" is the authors' (BryceZhuo/HybridNorm): each head's
    d_head features normalized on their own, the norm's weight d_head wide, shared by the heads."""

    Settings = HybridNormSettings

    def __init__(self, sublayer, make_norm, index: int, depth: int, **settings):
        super().__init__(depth, **settings)
        self.attention_form = QKV_NORM in sublayer.norm_slots
        if self.attention_form and self.settings.qkv_norm == "full":
            sublayer.fill_slot(QKV_NORM, nn.ModuleList(make_norm() for _ in ("q", "k", "v")))
        elif self.attention_form:
            heads = sublayer.heads
            sublayer.fill_slot(QKV_NORM, nn.ModuleList(PerHead(make_norm(sublayer.d_model // heads), heads)
                                                       for _ in ("q", "k", "v")))
        else:
            self.norm = make_norm()
        self.sublayer = sublayer

    def forward(self, x, *context):
        if self.attention_form:
            out = self.sublayer(x, *context)
            return x + out, out
        h = self.norm(x)
        out = self.sublayer(h, *context)
        return h + out, out
