"""The sublayers a placement wraps (`Sublayer`: its width and the norm slots it declares):
causal self-attention, cross-attention, the MLP; and the soft-cap they share with the output
logits."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config.model_config import ModelConfig
from .inits import XavierInit
from .readouts import Readout


def softcap(z: torch.Tensor, cap: float) -> torch.Tensor:
    """Soft-capping (Gemma Team 2024, "Gemma 2"): c·tanh(z/c), about z while |z| ≪ c and never
    beyond ±c; Gemma 2 caps attention logits at 50 and output logits at 30."""
    return cap * torch.tanh(z / cap)


# Each sublayer's `init_weights(gain, init, block)`: matrices, then biases, drawn by the init
# scheme (`_draw`); `gain` scales the value, output and MLP matrices (the placement's
# init_gain), queries and keys keep 1; `block` is the sublayer's block index (0-based).


def _draw(init: XavierInit, parts, block: int) -> None:
    """parts: (weight, bias, gain, role) each; every matrix first, then every bias, so an
    init with zero biases draws exactly what it drew before biases had a say."""
    for w, _, gain, role in parts:
        init.matrix(w, gain, role, block)
    for w, b, gain, role in parts:
        init.bias(b, w, gain, role, block)


# The slots a sublayer may declare, places inside F where a placement puts norms of its own
INNER_NORM = "inner_norm"  # one norm right before the output projection, width `inner_width` (Sub-LN)
QKV_NORM = "qkv_norm"      # three norms, on q, k and v over the full width (HybridNorm), an nn.ModuleList
Q_NORM, K_NORM = "q_norm", "k_norm"  # one module each on the queries and keys per head, (B, heads, T, d_head):
                                     # the run's QK-norm, or nGPT's scaled unit vectors
ACT_SCALE = "act_scale"    # one module on the MLP's hidden pre-activation, before GELU (nGPT's s_v·√d)


class Sublayer(nn.Module):
    """What a placement wraps: F, mapping width `d_model` to itself. `norm_slots` declares
    the slots (INNER_NORM, QKV_NORM) a placement may fill with `fill_slot`; each starts as
    None, so an unused slot costs one `is None` test in `forward` and no call. A placement
    reads the declaration (`slot in sublayer.norm_slots`) rather than probing attributes."""

    norm_slots: frozenset[str] = frozenset()

    def __init__(self, d_model: int):
        super().__init__()
        self.d_model = d_model
        for slot in self.norm_slots:
            setattr(self, slot, None)

    def fill_slot(self, slot: str, norms: nn.Module) -> None:
        if slot not in self.norm_slots:
            raise ValueError(f"{type(self).__name__} has no slot {slot!r}; it declares {sorted(self.norm_slots)}")
        setattr(self, slot, norms)


class CausalSelfAttention(Sublayer):
    """Multi-head self-attention with one fused QKV projection; causal unless built with
    causal=False (the encoder of `normexp probe --encoder-decoder`). Slots: HybridNorm's norms
    on q, k and v over the full width (QKV_NORM), Sub-LN's norm on the heads' output before
    `proj` (INNER_NORM), a module each on the queries and keys per head (Q_NORM, K_NORM: the
    run's `qk_norm`, or nGPT's scaled unit vectors)."""

    norm_slots = frozenset({QKV_NORM, INNER_NORM, Q_NORM, K_NORM})

    def __init__(self, cfg: ModelConfig, causal: bool = True, make_qk_norm=None):
        super().__init__(cfg.d_model)
        self.heads, self.causal = cfg.heads, causal
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        # QK-norm (Henry et al. 2020; Dehghani et al. 2023; Wortsman et al. 2023): queries and
        # keys normalized per head, over d_head, before the dot product
        self.q_norm, self.k_norm = (make_qk_norm(), make_qk_norm()) if make_qk_norm else (None, None)
        self.inner_width = cfg.d_model
        self.softcap = cfg.attn_softcap or None  # None (or 0): the fused scaled_dot_product_attention path

    # Shapes are written for any leading dims (`...`): a run's (B, T, C), and a pack's
    # (members, B, T, C) (model/packed.py), whose members then share one attention call.

    def split_heads(self, qkv: torch.Tensor) -> torch.Tensor:
        """The fused projection's output (..., T, 3C) as q, k, v stacked: (3, ..., heads, T, d_head)."""
        *lead, T, C3 = qkv.shape
        return qkv.view(*lead, T, 3, self.heads, C3 // (3 * self.heads)).movedim(-3, 0).transpose(-3, -2)

    def one_head_split(self, t: torch.Tensor) -> torch.Tensor:
        """One of q, k, v (..., T, C) as (..., heads, T, d_head)."""
        *lead, T, C = t.shape
        return t.view(*lead, T, self.heads, C // self.heads).transpose(-3, -2)

    def forward(self, x):
        *lead, T, C = x.shape
        if self.qkv_norm is None:
            q, k, v = self.split_heads(self.qkv(x))
        else:
            q, k, v = (self.one_head_split(norm(t)) for norm, t in zip(self.qkv_norm, self.qkv(x).split(C, dim=-1)))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.softcap is None:
            # one batch dim: a pack's (members, B) folded, the fused kernel's 4-D case
            y = F.scaled_dot_product_attention(*(t.flatten(0, -4) for t in (q, k, v)), is_causal=self.causal)
            y = y.view(q.shape)
        else:
            y = self.capped_attention(q, k, v)
        y = y.transpose(-3, -2).reshape(*lead, T, C)
        if self.inner_norm is not None:
            y = self.inner_norm(y)
        return self.proj(y)

    def capped_attention(self, q, k, v):
        """softmax(c·tanh(q·kᵀ/(√d_h·c)) + causal mask)·v, written out: the fused kernel has no
        soft-cap (Gemma 2 caps the logits before the mask and the softmax)."""
        scores = softcap((q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5, self.softcap)
        if self.causal:
            T = q.shape[-2]
            future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        return torch.softmax(scores.float(), dim=-1).type_as(v) @ v

    def readouts(self) -> dict[str, Readout]:
        """The queries and keys as the dot product sees them (after QK-norm, if any), each
        (B, heads, T, d_head): the outputs of the QK-norms, of HybridNorm's q and k norms, or of
        the fused projection. (Under attn_softcap the signals cap the logits they compute.)"""
        if self.q_norm is not None:
            return {"queries": Readout(self.q_norm), "keys": Readout(self.k_norm)}
        if self.qkv_norm is not None:
            return {"queries": Readout(self.qkv_norm[0], self.one_head_split),
                    "keys": Readout(self.qkv_norm[1], self.one_head_split)}
        return {"queries": Readout(self.qkv, lambda out: self.split_heads(out)[0]),
                "keys": Readout(self.qkv, lambda out: self.split_heads(out)[1])}

    def init_weights(self, gain: float, init: XavierInit, block: int = 0) -> None:
        d = self.qkv.in_features
        (q, k, v), (bq, bk, bv) = self.qkv.weight.data.split(d), self.qkv.bias.data.split(d)  # views: each d×d on its own
        _draw(init, ((q, bq, 1.0, "query"), (k, bk, 1.0, "key"), (v, bv, gain, "value"),
                     (self.proj.weight.data, self.proj.bias.data, gain, "attn_out")), block)


class CrossAttention(Sublayer):
    """Multi-head attention from the decoder's stream (queries) to the encoder's output
    `memory` (keys and values), the middle sublayer of an encoder-decoder block. No slots."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.d_model)
        self.heads = cfg.heads
        self.q = nn.Linear(cfg.d_model, cfg.d_model)
        self.kv = nn.Linear(cfg.d_model, 2 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)

    def forward(self, x, memory):
        B, T, C = x.shape
        S = memory.shape[1]
        q = self.q(x).view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k, v = self.kv(memory).view(B, S, 2, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def init_weights(self, gain: float, init: XavierInit, block: int = 0) -> None:
        d = self.q.in_features
        (k, v), (bk, bv) = self.kv.weight.data.split(d), self.kv.bias.data.split(d)
        _draw(init, ((self.q.weight.data, self.q.bias.data, 1.0, "query"), (k, bk, 1.0, "key"), (v, bv, gain, "value"),
                     (self.proj.weight.data, self.proj.bias.data, gain, "attn_out")), block)


class MLP(Sublayer):
    """Position-wise feed-forward: fc_out(GELU(fc_in(x))). Slots: Sub-LN's norm between GELU and
    fc_out (INNER_NORM, width mlp_ratio·d); nGPT's scale on fc_in's output (ACT_SCALE)."""

    norm_slots = frozenset({INNER_NORM, ACT_SCALE})

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg.d_model)
        self.fc_in = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.fc_out = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)
        self.inner_width = cfg.mlp_ratio * cfg.d_model

    def forward(self, x):
        h = self.fc_in(x)
        if self.act_scale is not None:
            h = self.act_scale(h)
        h = F.gelu(h)
        if self.inner_norm is not None:
            h = self.inner_norm(h)
        return self.fc_out(h)

    def init_weights(self, gain: float, init: XavierInit, block: int = 0) -> None:
        _draw(init, ((self.fc_in.weight.data, self.fc_in.bias.data, gain, "mlp_in"),
                     (self.fc_out.weight.data, self.fc_out.bias.data, gain, "mlp_out")), block)
