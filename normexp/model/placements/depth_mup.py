"""Depth-μP / CompleteP: Pre-LN with a depth-scaled branch multiplier; its policy gives the
blocks' parameters an lr and an Adam ε scaled to match."""

from __future__ import annotations

import torch.nn as nn

from ...config.registry import register
from ...config.variants.placements.depth_mup import DepthMuPSettings
from .base import PLACEMENTS, ModelPolicy, Placement


class DepthScaledGroups(ModelPolicy):
    """Depth-μP's optimizer groups: every parameter inside the blocks at lr·m^(α−1) and Adam
    ε·m^-α, the rest (the embeddings, the head tied to them, the final norm) at the run's lr
    and ε (`DepthMuP` works out both scales for its depth)."""

    def __init__(self, last: DepthMuP):
        super().__init__(last)
        self.lr_scale, self.eps_scale = last.lr_scale, last.eps_scale

    def param_groups(self, model: nn.Module, lr: float, eps: float) -> list[dict]:
        hidden = list(model.blocks.parameters())
        inside = {id(p) for p in hidden}
        outside = [p for p in model.parameters() if id(p) not in inside]
        return [{"params": outside, "lr": lr, "lr_scale": 1.0, "eps": eps},
                {"params": hidden, "lr": lr * self.lr_scale, "lr_scale": self.lr_scale, "eps": eps * self.eps_scale}]


@register(PLACEMENTS, "depth_mup")
class DepthMuP(Placement):
    """Depth-μP (Yang et al. 2023, "Tensor Programs VI: Feature Learning in Infinite-Depth
    Neural Networks"; Bordelon et al. 2023) and CompleteP (Dey et al. 2025, "Don't be lazy:
    CompleteP enables compute-efficient deep transformers", arXiv 2505.01618): Pre-LN with a
    branch multiplier that shrinks with depth, and the learning rate and Adam ε of the blocks'
    parameters scaled to match. With m = L/L₀ (L = depth, L₀ = base_depth) and α = exponent,

        x ← x + m^-α·F(Norm(x))                         on every sublayer,
        lr ← lr·m^(α−1),  ε ← ε·m^-α                     for every parameter inside the blocks,

    while the embeddings (and the head tied to them) and the final norm keep the run's lr and
    ε: the groups of EleutherAI/nanoGPT-mup (branch `completep`, `configure_optimizers`, with
    width multiplier 1; its January 2025 fix scales ε of the hidden groups only). α = ½ is
    Depth-μP, α = 1 CompleteP (every block keeps learning features as L grows). At L = L₀ it
    is Pre-LN exactly; L₀ defaults to train.yaml's depth (6), the depth the default lr was
    set at, so the lr transfers from there. Weight decay is the run's, on matrices only.
    The branch multiplier already scales each block's output with depth: a depth-scaled init
    (gpt2's 1/√(2L), mitchell's) would scale it twice. The model adds a final Norm. Its policy,
    `DepthScaledGroups`, gives the optimizer the scaled groups."""

    Settings = DepthMuPSettings
    model_policy = DepthScaledGroups

    def __init__(self, sublayer, make_norm, index: int, depth: int, **settings):
        super().__init__(depth, **settings)
        self.branch_scale, self.lr_scale, self.eps_scale = (self.numbers[k] for k in ("branch_scale", "lr_scale", "eps_scale"))
        self.norm = make_norm()
        self.sublayer = sublayer

    def forward(self, x, *context):
        out = self.branch_scale * self.sublayer(self.norm(x), *context)
        return x + out, out
