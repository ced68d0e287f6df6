"""nGPT: the stream on the unit sphere; its helper modules (the unit map, learned scales, s_qk,
s_v, s_z) and its policy (the input normalized as it enters, s_z on the logits, no weight decay,
every matrix renormalized after each optimizer step)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.registry import register
from ...config.variants.placements.ngpt import NormalizedTransformerSettings
from ..layers import ACT_SCALE, K_NORM, Q_NORM
from .base import PLACEMENTS, ModelPolicy, Placement


def unit(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """x / ‖x‖ along `dim` (L2), computed in float32 and cast back."""
    x32 = x.float()
    return (x32 / x32.norm(dim=dim, keepdim=True).clamp_min(1e-12)).type_as(x)


class Scaled(nn.Module):
    """A learned per-feature scale s kept as nGPT keeps its scales: the parameter starts at
    `scaling` and is used as param·(init/scaling), so the effective s starts at `init` while
    Adam's step on it is sized by `scaling` (nGPT's init_value / init_scaling pairs)."""

    def __init__(self, shape, init: float, scaling: float):
        super().__init__()
        self.param = nn.Parameter(torch.full(shape, float(scaling)))
        self.factor = init / scaling

    def value(self) -> torch.Tensor:
        return self.param * self.factor


class UnitQK(nn.Module):
    """nGPT's queries or keys, per head (B, heads, T, d_head): s_qk ⊙ n(q), s_qk per head and
    feature from 1. `extra` multiplies the queries by d_head so that the attention's 1/√d_head
    becomes nGPT's softmax scale √d_head (q·k·√d_head for unit q, k)."""

    def __init__(self, heads: int, d_head: int, d_model: int, extra: float = 1.0):
        super().__init__()
        self.s = Scaled((heads, 1, d_head), 1.0, d_model ** -0.5)
        self.extra = extra

    def forward(self, t):
        return unit(t) * self.s.value() * self.extra


class HiddenScale(nn.Module):
    """nGPT's s_v·√d on the MLP's hidden pre-activation (s_v per hidden feature, from 1): with
    unit-norm rows and a unit-norm input, W₁·h is a cosine, O(1/√d) per entry; √d brings it to
    O(1) before the nonlinearity."""

    def __init__(self, width: int, d_model: int):
        super().__init__()
        self.s = Scaled((width,), 1.0, 1.0)
        self.root_d = d_model ** 0.5

    def forward(self, h):
        return h * self.s.value() * self.root_d


class LogitScale(nn.Module):
    """nGPT's s_z: one learned scale per vocabulary entry (from 1) on the logits, which are
    cosines between the unit hidden state and the unit embedding rows."""

    def __init__(self, vocab_size: int, d_model: int):
        super().__init__()
        self.s = Scaled((vocab_size,), 1.0, d_model ** -0.5)

    def forward(self, logits):
        return logits * self.s.value()


class OnTheSphere(ModelPolicy):
    """nGPT's model-level half: the embedded input normalized as it enters, the logits scaled
    by s_z, no weight decay on any parameter, and every matrix renormalized to unit norm along
    d_model after every optimizer step (and once at initialisation): the embeddings' and the
    input projections' rows, the output projections' (W_O, W₂) columns."""

    def __init__(self, last: NormalizedTransformer):
        super().__init__(last)
        self.d_model = last.sublayer.d_model
        self.unit_matrices: list | None = None  # (matrix, the dim it is unit along); after_optimizer_step fills it

    def enter(self, x):
        return unit(x)

    def make_logit_scale(self, vocab_size: int) -> nn.Module:
        return LogitScale(vocab_size, self.d_model)

    def param_groups(self, model: nn.Module, lr: float, eps: float) -> list[dict]:
        return [{**group, "weight_decay": 0.0} for group in super().param_groups(model, lr, eps)]

    @torch.no_grad()
    def after_optimizer_step(self, model: nn.Module) -> None:
        if self.unit_matrices is None:  # found once: the Parameter objects outlive every step (FlatAdamW keeps them)
            outputs = {id(w) for ws in model.residual_output_weights().values() for w in ws}
            self.unit_matrices = [(p, 0 if id(p) in outputs else 1) for p in model.parameters() if p.dim() == 2]
        for p, dim in self.unit_matrices:
            p.copy_(unit(p, dim=dim))


@register(PLACEMENTS, "ngpt")
class NormalizedTransformer(Placement):
    """nGPT, the normalized Transformer (Loshchilov et al. 2024, "nGPT: Normalized Transformer
    with Representation Learning on the Hypersphere"; NVIDIA/ngpt, model.py): the stream lives
    on the unit sphere and every sublayer moves it towards F's normalized output,

        h ← n(h + α ⊙ (n(F(h)) − h)),   n(·) = L2-normalize over the features,

    with α per feature, learned, from alpha_init (0.05; kept as nGPT keeps it, a parameter
    from 1/√d used as |param|·0.05·√d). No norm layers: the run's norm type is not used and
    there is no final norm. The embedded input is normalized as it enters. Queries and keys
    are normalized per head and scaled by a learned s_qk (from 1), with softmax scale √d_head;
    the MLP's hidden pre-activation is scaled by a learned s_v·√d (from 1); the logits by a
    learned s_z per vocabulary entry (from 1). After every optimizer step (and once at
    initialisation) every matrix is renormalized to unit norm along d_model: the embeddings'
    and the input projections' rows, the output projections' (W_O, W₂) columns. No weight
    decay on any parameter (nGPT uses none); nGPT also trains without warmup (warmup=0).

    Left out: nGPT's SwiGLU MLP (this model's is GELU, so nGPT's s_u on the gate branch has
    no place; s_v is kept), RoPE (the learned positions are added and normalized with the
    token embedding), the untied output head (the head is the tied, renormalized token
    embedding), and the absence of biases (this model's biases stay, from 0, not renormalized).
    The model-level parts (entering, s_z, the groups, the renormalization) are its policy,
    `OnTheSphere`."""

    Settings = NormalizedTransformerSettings  # reads nothing of the run's norm settings; unpackable
    model_policy = OnTheSphere
    needs_final_norm = False

    def __init__(self, sublayer, make_norm, index: int, depth: int, **settings):
        super().__init__(depth, **settings)
        d = sublayer.d_model
        self.alpha = Scaled((d,), self.settings.alpha_init, d ** -0.5)
        self.sublayer = sublayer
        if Q_NORM in sublayer.norm_slots:  # self-attention (its run-wide qk_norm, if any, is replaced)
            d_head = d // sublayer.heads
            sublayer.fill_slot(Q_NORM, UnitQK(sublayer.heads, d_head, d, extra=float(d_head)))
            sublayer.fill_slot(K_NORM, UnitQK(sublayer.heads, d_head, d))
        if ACT_SCALE in sublayer.norm_slots:  # the MLP
            sublayer.fill_slot(ACT_SCALE, HiddenScale(sublayer.inner_width, d))

    def forward(self, h, *context):
        target = unit(self.sublayer(h, *context))
        new = unit(h + self.alpha.value().abs() * (target - h))
        return new, new - h
