"""Where the norm sits around each sublayer: each placement a small class in PLACEMENTS,
picked by name (the contract every placement keeps is `Placement`'s docstring).

    PLACEMENTS[name](sublayer, make_norm, index=block, depth=layers, **settings)

`settings` are the constructor's keyword-only parameters (after `*`), written without
defaults: their values live in configs/placement/<name>.yaml only, filled in by
config/registry.py's `variant`. A new placement is one class here and one yaml file.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..config.checks import is_float32, is_integer, is_positive_float32, require
from ..config.registry import register
from .layers import ACT_SCALE, INNER_NORM, K_NORM, Q_NORM, QKV_NORM, CausalSelfAttention


PLACEMENTS: dict[str, type[Placement]] = {}


class Placement(nn.Module):
    """Where the norm sits around one sublayer F (attention, cross-attention or MLP): the
    contract every placement keeps.

        x ──┬── norms and F, as the placement says ──> contribution ──(+)──> new x
            └──────────────── residual (maybe scaled, maybe normed after) ──┘

    * Built as `cls(sublayer, make_norm, index=l, depth=L, **settings)`: `sublayer` is F, a
      `Sublayer` (it maps width `F.d_model` to itself), `make_norm()` makes a fresh norm of the run's type
      (`make_norm(width)` one of another width), `index` is the block's position
      (0 = nearest the input) and `depth` the number of blocks; `settings` are the
      keyword-only parameters, one per key of configs/placement/<name>.yaml, with no default
      values in the signature (the yaml holds them; `variant` fills them in).
    * `forward(x, *context)` returns (new residual stream, contribution): the contribution is
      F's output as it joins the stream (the attn_out_std / mlp_out_std instruments read it);
      `context` (the encoder output, for cross-attention) goes to F unchanged.
    * `needs_final_norm`: whether the stream leaving this sublayer is unnormalized, so that
      the model must add a Norm after the last block (Pre-LN does, Post-LN does not).
    * `init_gain`: the Xavier gain the placement wants for F's value, output and MLP
      matrices (query and key keep gain 1); DeepNorm's β.
    * `resolved()`: the numbers it actually uses ("auto" worked out), for summary.json.
    * `needs_calibration`: whether it is set by a profiling forward pass at initialisation
      (`GPT.calibrate`): then `start_calibration()` readies it for that pass and
      `calibrate(variance)` sets it from the variance of the stream entering it.
    * The stream between blocks is a tensor unless the placement says otherwise: the model
      calls `enter(x)` of the first block's first placement once on the embedded input, and
      `make_final(make_norm)` of the last block's last placement once for the module that maps
      the last block's stream to the final hidden state; `residual(stream)` is the tensor the
      instruments read as the residual stream (act_std). The defaults: the stream is the
      tensor, and the final module is a Norm where `needs_final_norm` says so, else the identity.
    * `param_groups(model, lr, eps)`: the optimizer's parameter groups, each {"params", "lr",
      "lr_scale", "eps"} (lr = the run's lr × lr_scale; the lr schedule keeps each group's
      lr_scale): one group of every parameter at lr and ε by default; depth_mup scales the
      blocks' lr and ε with depth. The model asks its first placement (`GPT.param_groups`);
      the training loop splits each group into decaying and non-decaying parameters.
    * `after_optimizer_step(model)`: runs after every optimizer step, and once when the model's
      weights are drawn (nGPT renormalizes every matrix there); nothing by default.
    * `make_logit_scale(vocab_size)`: a module the logits pass through before the loss (nGPT's
      learned s_z), or None (the default: no call).
    * `sublayer` is a `Sublayer` (layers.py): its `norm_slots` declare where a placement may
      put norms of its own inside F (INNER_NORM, before the output projection; QKV_NORM, on
      queries, keys and values), filled with `sublayer.fill_slot(slot, norms)`; a placement
      reads the declaration, never probes attributes. An unfilled slot is None and costs one
      `is None` test and no call.
    """

    needs_final_norm = True
    needs_calibration = False
    init_gain = 1.0

    def resolved(self) -> dict:
        return {}

    def param_groups(self, model: nn.Module, lr: float, eps: float) -> list[dict]:
        return [{"params": list(model.parameters()), "lr": lr, "lr_scale": 1.0, "eps": eps}]

    def after_optimizer_step(self, model: nn.Module) -> None:
        pass

    def make_logit_scale(self, vocab_size: int) -> nn.Module | None:
        return None

    def enter(self, x: torch.Tensor):
        return x

    def make_final(self, make_norm) -> nn.Module:
        return make_norm() if self.needs_final_norm else nn.Identity()

    @staticmethod
    def residual(stream) -> torch.Tensor:
        return stream


@register(PLACEMENTS, "post")
class PostNorm(Placement):
    """Post-LN (Vaswani et al. 2017): x ← Norm(x + F(x)). No final norm is needed."""

    needs_final_norm = False

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__()
        self.sublayer = sublayer
        self.norm = make_norm()

    def forward(self, x, *context):
        out = self.sublayer(x, *context)
        return self.norm(x + out), out


@register(PLACEMENTS, "pre")
class PreNorm(Placement):
    """Pre-LN (Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"):
    x ← x + F(Norm(x)); the model adds one final Norm after the last block."""

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__()
        self.norm = make_norm()
        self.sublayer = sublayer

    def forward(self, x, *context):
        out = self.sublayer(self.norm(x), *context)
        return x + out, out


def deepnorm_constants(layers: int) -> tuple[float, float]:
    """DeepNorm's α = (2N)^(1/4) and β = (8N)^(-1/4) for a decoder-only stack of N blocks
    (Wang et al. 2022, "DeepNet: Scaling Transformers to 1,000 Layers", Table 1)."""
    return (2 * layers) ** 0.25, (8 * layers) ** -0.25


@register(PLACEMENTS, "lns")
class LayerNormScaling(Placement):
    """LayerNorm Scaling (Sun et al. 2025, "The Curse of Depth in Large Language Models";
    lmsdss/LayerNorm-Scaling): Pre-LN with the norm's output scaled down by the square root
    of the block's depth, x ← x + F(Norm(x)/√ℓ), ℓ = index + 1 the 1-based block index, on
    both sublayers. It damps the growth of the Pre-LN stream's variance with depth that
    leaves the deeper blocks close to the identity. The model adds a final Norm as Pre-LN
    does. Its authors report that a depth-scaled init (gpt2's 1/√(2L), mitchell's) weakens
    it; the default xavier has none."""

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__()
        self.norm = make_norm()
        self.sublayer = sublayer
        self.scale = 1.0 / math.sqrt(index + 1)

    def forward(self, x, *context):
        out = self.sublayer(self.norm(x) * self.scale, *context)
        return x + out, out


@register(PLACEMENTS, "reordered")
class ReorderedNorm(Placement):
    """OLMo 2's "reordered norm" (Team OLMo 2024, "2 OLMo 2 Furious"; allenai/OLMo's
    `norm_after`): the norm moves from the sublayer's input to its output, x ← x + Norm(F(x)),
    with no norm on the input. The stream itself is never normalized, so the model adds a
    final Norm. (OLMo 2 also normalizes q and k, over the full width, and uses z-loss 1e-5:
    here `qk_norm`, per head, and `z_loss` are switches of their own.)"""

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__()
        self.sublayer = sublayer
        self.norm = make_norm()

    def forward(self, x, *context):
        out = self.norm(self.sublayer(x, *context))
        return x + out, out


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
    (gpt2's 1/√(2L), mitchell's) would scale it twice. The model adds a final Norm."""

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, exponent: float, base_depth: int):
        super().__init__()
        require(is_float32(exponent) and 0.5 <= exponent <= 1, "placement.exponent", exponent,
                "must be a number in [0.5, 1] (0.5 = Depth-μP, 1 = CompleteP)")
        require(is_integer(base_depth) and base_depth >= 1, "placement.base_depth", base_depth,
                "must be a whole number of blocks >= 1 (the depth the lr was tuned at)")
        self.exponent, self.base_depth = float(exponent), base_depth
        ratio = depth / base_depth
        self.branch_scale = ratio ** -self.exponent
        self.lr_scale = ratio ** (self.exponent - 1)
        self.eps_scale = ratio ** -self.exponent
        self.norm = make_norm()
        self.sublayer = sublayer

    def forward(self, x, *context):
        out = self.branch_scale * self.sublayer(self.norm(x), *context)
        return x + out, out

    def param_groups(self, model: nn.Module, lr: float, eps: float) -> list[dict]:
        hidden = list(model.blocks.parameters())
        inside = {id(p) for p in hidden}
        outside = [p for p in model.parameters() if id(p) not in inside]
        return [{"params": outside, "lr": lr, "lr_scale": 1.0, "eps": eps},
                {"params": hidden, "lr": lr * self.lr_scale, "lr_scale": self.lr_scale, "eps": eps * self.eps_scale}]

    def resolved(self) -> dict:
        return {"exponent": self.exponent, "base_depth": self.base_depth, "branch_scale": self.branch_scale,
                "lr_scale": self.lr_scale, "eps_scale": self.eps_scale}


@register(PLACEMENTS, "deepnorm")
class DeepNorm(Placement):
    """DeepNorm (Wang et al. 2022, "DeepNet"): x ← Norm(α·x + F(x)), with F's value, output
    and MLP matrices initialised Xavier-normal with gain β (query and key with gain 1).

    α up-weights the residual (not F(x)); with α = (2N)^(1/4), β = (8N)^(-1/4) for N blocks
    ("auto") the model update stays bounded as depth grows. Either may be a number instead.
    No final norm: the stream leaves every block normalized."""

    needs_final_norm = False

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, alpha, beta):
        super().__init__()
        self.sublayer = sublayer
        for key, value in (("alpha", alpha), ("beta", beta)):
            require(value == "auto" or is_positive_float32(value), f"placement.{key}", value, 'must be "auto" or a number > 0')
        auto_alpha, auto_beta = deepnorm_constants(depth)
        self.alpha = auto_alpha if alpha == "auto" else float(alpha)
        self.init_gain = auto_beta if beta == "auto" else float(beta)
        self.norm = make_norm()

    def forward(self, x, *context):
        out = self.sublayer(x, *context)
        return self.norm(self.alpha * x + out), out

    def resolved(self) -> dict:
        return {"alpha": self.alpha, "beta": self.init_gain}


@register(PLACEMENTS, "sandwich", "peri")
class SandwichNorm(Placement):
    """Sandwich-LN (Ding et al. 2021, CogView) / Peri-LN (Kim et al. 2025):
    x ← x + Norm_out(F(Norm_in(x))); the model adds a final Norm as Pre-LN does."""

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__()
        self.norm_in = make_norm()
        self.sublayer = sublayer
        self.norm_out = make_norm()

    def forward(self, x, *context):
        out = self.norm_out(self.sublayer(self.norm_in(x), *context))
        return x + out, out


@register(PLACEMENTS, "mix")
class MixNorm(Placement):
    """Mix-LN (Li et al. 2024, "Mix-LN: Unleashing the Power of Deeper Layers by Combining
    Pre-LN and Post-LN"): Post-LN, x ← Norm(x + F(x)), in the first ⌊ρ·L⌋ blocks; Pre-LN,
    x ← x + F(Norm(x)), in the rest (ρ = ratio, 0.25 in the paper). The last block is
    Pre-LN for any ρ < 1, so the model has a final norm."""

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, ratio: float):
        super().__init__()
        require(is_float32(ratio) and 0 <= ratio < 1,
               "placement.ratio", ratio, "must be a number in [0, 1)")
        # ⌊ρ·L⌋ of the decimal the user wrote: 0.58·50 is 28.999999999999996 in floating point, 29 blocks
        self.ratio, self.post_blocks = ratio, math.floor(round(ratio * depth, 9))
        self.post = index < self.post_blocks
        self.needs_final_norm = not self.post
        self.sublayer = sublayer
        self.norm = make_norm()

    def forward(self, x, *context):
        if self.post:
            out = self.sublayer(x, *context)
            return self.norm(x + out), out
        out = self.sublayer(self.norm(x), *context)
        return x + out, out

    def resolved(self) -> dict:
        return {"ratio": self.ratio, "post_blocks": self.post_blocks}


@register(PLACEMENTS, "rezero")
class ReZero(Placement):
    """ReZero (Bachlechner et al. 2020, "ReZero is All You Need"): x ← x + α·F(x), one
    learnable scalar α per sublayer initialised to init_alpha (0 in the paper, so every
    block starts as the identity). No norm anywhere: the run's norm type is not used and the
    model has no final norm."""

    needs_final_norm = False

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, init_alpha: float):
        super().__init__()
        require(is_float32(init_alpha), "placement.init_alpha", init_alpha, "must be a finite number")
        self.sublayer = sublayer
        self.alpha = nn.Parameter(torch.tensor(float(init_alpha)))
        self.init_alpha = float(init_alpha)

    def forward(self, x, *context):
        out = self.alpha * self.sublayer(x, *context)
        return x + out, out

    def resolved(self) -> dict:
        return {"init_alpha": self.init_alpha}


@register(PLACEMENTS, "admin")
class Admin(Placement):
    """Admin (Liu et al. 2020, "Understanding the Difficulty of Training Transformers"):
    Post-LN with a learnable per-channel residual weight, x ← Norm(ω·x + F(x)).

    ω is set by a profiling forward pass at initialisation (`GPT.calibrate`): with ω = 1,
    each sublayer i records Var[F_i(x)] (over all its outputs); then, counting sublayers
    in the order the stream meets them, ω_i = √(Var[x_0] + Σ_{j<i} Var[F_j]), the variance
    the stream has gathered before sublayer i (x_0, the embedded input, is the first term:
    without it the first ω would be 0 and the first sublayer would drop its input). Deep
    stacks so lean on the residual as their outputs add up, the paper's fix for Post-LN's
    amplified output changes. No final norm."""

    needs_final_norm = False
    needs_calibration = True

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__()
        self.sublayer = sublayer
        self.omega = nn.Parameter(torch.ones(sublayer.d_model))
        self.norm = make_norm()

    def forward(self, x, *context):
        out = self.sublayer(x, *context)
        return self.norm(self.omega * x + out), out

    def start_calibration(self) -> None:
        self.omega.fill_(1.0)

    def calibrate(self, variance: float) -> None:
        """ω = √(the variance the stream has gathered before this sublayer)."""
        self.omega.fill_(math.sqrt(variance))


@register(PLACEMENTS, "layerscale")
class LayerScale(Placement):
    """LayerScale (Touvron et al. 2021, "Going deeper with Image Transformers", CaiT):
    x ← x + diag(λ)·F(Norm(x)), a learnable per-channel scale λ initialised to ε, so every
    block starts close to the identity; the model adds a final Norm as Pre-LN does.
    init_scale "auto" is CaiT's rule for the depth: ε = 0.1 up to 18 blocks, 1e-5 up to 24,
    1e-6 deeper; or a number."""

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, init_scale):
        super().__init__()
        # above 1 the branch starts larger than Pre-LN's, the opposite of what LayerScale is for
        require(init_scale == "auto" or (is_positive_float32(init_scale) and init_scale <= 1), "placement.init_scale",
               init_scale, 'must be "auto" or a number in (0, 1] (CaiT uses 0.1 to 1e-6)')
        self.init_scale = (0.1 if depth <= 18 else 1e-5 if depth <= 24 else 1e-6) if init_scale == "auto" else float(init_scale)
        self.norm = make_norm()
        self.sublayer = sublayer
        self.scale = nn.Parameter(torch.full((sublayer.d_model,), self.init_scale))

    def forward(self, x, *context):
        out = self.scale * self.sublayer(self.norm(x), *context)
        return x + out, out

    def resolved(self) -> dict:
        return {"init_scale": self.init_scale}


def subln_gain(layers: int) -> float:
    """Sub-LN's init gain √(ln 2N) for a decoder-only stack of N blocks (Wang et al. 2022,
    "Foundation Transformers", §2.2; torchscale's `subln`: √(ln 3N) for encoder-decoder)."""
    return math.sqrt(math.log(2 * layers))


@register(PLACEMENTS, "subln")
class SubLN(Placement):
    """Sub-LN / Magneto (Wang et al. 2022, "Foundation Transformers"): x ← x + F'(Norm(x)),
    where F' is F with a second norm right before its output projection (attention: on the
    heads' concatenated output, before W_O; MLP: after the activation, before W₂, width
    mlp_ratio·d), filled into the sublayer's INNER_NORM slot (a sublayer that declares no such
    slot, cross-attention, runs as Pre-LN). The value, attention output and both MLP matrices are
    initialised with gain γ = √(ln 2N) for N blocks, query and key with 1 (torchscale's
    `subln` multiplies their weights and biases by γ after drawing). The model adds a final
    Norm, as Pre-LN does."""

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__()
        self.norm = make_norm()
        if INNER_NORM in sublayer.norm_slots:
            sublayer.fill_slot(INNER_NORM, make_norm(sublayer.inner_width))
        self.sublayer = sublayer
        self.init_gain = subln_gain(depth)

    def forward(self, x, *context):
        out = self.sublayer(self.norm(x), *context)
        return x + out, out

    def resolved(self) -> dict:
        return {"gain": self.init_gain}


class DualOutput(nn.Module):
    """ResiDual's output: y = x_a + Norm(x_d) from the stream (x_a, x_d) leaving the last block."""

    def __init__(self, norm: nn.Module):
        super().__init__()
        self.norm = norm

    def forward(self, stream):
        post, dual = stream
        return post + self.norm(dual)


@register(PLACEMENTS, "residual_dual")
class ResiDual(Placement):
    """ResiDual (Xie et al. 2023, "ResiDual: Transformer with Dual Residual Connections"):
    two streams side by side, a Post-LN one and a Pre-LN-style accumulator of the raw
    sublayer outputs,

        x_a ← Norm(x_a + F(x_a)),   x_d ← x_d + F(x_a),   output y = x_a + Norm(x_d),

    both starting from the embedded input (x_a = x_d = x, as the authors' code does). The
    stream between blocks is the pair (x_a, x_d); the instruments read x_a as the residual
    stream (act_std: a Post-LN stream, so about 1 in every block), F(x_a) as the contribution.
    The final module is the output's Norm(x_d) plus x_a, so the model has a final norm."""

    needs_final_norm = False  # x_a leaves every block normalized; the final module is DualOutput

    def __init__(self, sublayer, make_norm, index: int, depth: int):
        super().__init__()
        self.sublayer = sublayer
        self.norm = make_norm()

    def forward(self, stream, *context):
        post, dual = stream
        out = self.sublayer(post, *context)
        return (self.norm(post + out), dual + out), out

    def enter(self, x):
        return x, x

    def make_final(self, make_norm) -> nn.Module:
        return DualOutput(make_norm())

    @staticmethod
    def residual(stream) -> torch.Tensor:
        return stream[0]


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

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, qkv_norm: str):
        super().__init__()
        require(qkv_norm in ("full", "per_head"), "placement.qkv_norm", qkv_norm,
                "choose full (over the width d) or per_head (each head's d_head features, as the authors' code)")
        self.qkv_norm = qkv_norm
        self.attention_form = QKV_NORM in sublayer.norm_slots
        if self.attention_form and qkv_norm == "full":
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

    def resolved(self) -> dict:
        return {"qkv_norm": self.qkv_norm}


@register(PLACEMENTS, "gated")
class GatedResidual(Placement):
    """Gated residual (Parisotto et al. 2019, "Stabilizing Transformers for Reinforcement
    Learning", GTrXL's GRU-type gate; x-transformers' `gate_residual`): the addition x + y is
    replaced by a gate g(x, y), y = F(Norm(x)) (the identity-map reordering, i.e. Pre-LN):

        r = σ(W_r·y + U_r·x),   z = σ(W_z·y + U_z·x − b_g),   ĥ = tanh(W_g·y + U_g·(r ⊙ x)),
        x ← (1 − z) ⊙ x + z ⊙ ĥ.

    b_g, one per channel and learnable, starts at gate_bias (2, the value GTrXL reports; its
    text could not be re-read here), so z ≈ σ(−2) ≈ 0.12 and each block starts near the identity. The six d×d matrices belong to the
    placement and are drawn Xavier-normal (gain 1) whatever the run's init scheme. The
    contribution is the change it makes, g − x. The model adds a final Norm, as Pre-LN does.

    The authors' code (opendilab/DI-engine's gtrxl.py) also puts a ReLU on the self-attention's
    output before the gate, y = ReLU(Attn(Norm(x))): that is a setting, `attention_relu`,
    false by default (the formula above, as x-transformers does and as shipped before issue 29,
    so recorded runs stay comparable); true is the authors' form. The MLP's y has no ReLU
    either way."""

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, gate_bias: float, attention_relu: bool):
        super().__init__()
        require(is_float32(gate_bias), "placement.gate_bias", gate_bias, "must be a finite number (GTrXL uses 2)")
        require(isinstance(attention_relu, bool), "placement.attention_relu", attention_relu,
                "must be true (the authors' ReLU on the attention output) or false")
        self.attention_relu = attention_relu
        self.relu = attention_relu and isinstance(sublayer, CausalSelfAttention)
        d = sublayer.d_model
        self.norm = make_norm()
        self.sublayer = sublayer
        self.gate_bias = float(gate_bias)
        self.from_y = nn.Linear(d, 3 * d, bias=False)  # W_r, W_z, W_g stacked
        self.from_x = nn.Linear(d, 2 * d, bias=False)  # U_r, U_z stacked
        self.from_reset = nn.Linear(d, d, bias=False)  # U_g
        self.bias = nn.Parameter(torch.full((d,), self.gate_bias))
        for w in (*self.from_y.weight.data.split(d), *self.from_x.weight.data.split(d), self.from_reset.weight.data):
            nn.init.xavier_normal_(w)  # each d×d matrix on its own

    def forward(self, x, *context):
        y = self.sublayer(self.norm(x), *context)
        if self.relu:
            y = torch.relu(y)
        wr, wz, wg = self.from_y(y).chunk(3, dim=-1)
        ur, uz = self.from_x(x).chunk(2, dim=-1)
        r = torch.sigmoid(wr + ur)
        z = torch.sigmoid(wz + uz - self.bias)
        h = torch.tanh(wg + self.from_reset(r * x))
        out = z * (h - x)  # (1 − z)·x + z·ĥ = x + z·(ĥ − x)
        return x + out, out

    def resolved(self) -> dict:
        return {"gate_bias": self.gate_bias, "attention_relu": self.attention_relu}



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
    embedding), and the absence of biases (this model's biases stay, from 0, not renormalized)."""

    needs_final_norm = False

    def __init__(self, sublayer, make_norm, index: int, depth: int, *, alpha_init: float):
        super().__init__()
        require(is_positive_float32(alpha_init) and alpha_init <= 1, "placement.alpha_init", alpha_init,
                "must be a number in (0, 1] (nGPT starts α at 0.05)")
        d = sublayer.d_model
        self.alpha_init = float(alpha_init)
        self.alpha = Scaled((d,), self.alpha_init, d ** -0.5)
        self.sublayer = sublayer
        if Q_NORM in sublayer.norm_slots:  # self-attention (its run-wide qk_norm, if any, is replaced)
            d_head = d // sublayer.heads
            sublayer.fill_slot(Q_NORM, UnitQK(sublayer.heads, d_head, d, extra=float(d_head)))
            sublayer.fill_slot(K_NORM, UnitQK(sublayer.heads, d_head, d))
        if ACT_SCALE in sublayer.norm_slots:  # the MLP
            sublayer.fill_slot(ACT_SCALE, HiddenScale(sublayer.inner_width, d))
        self.unit_matrices: list | None = None  # (matrix, the dim it is unit along); after_optimizer_step fills it

    def forward(self, h, *context):
        target = unit(self.sublayer(h, *context))
        new = unit(h + self.alpha.value().abs() * (target - h))
        return new, new - h

    def enter(self, x):
        return unit(x)

    def make_logit_scale(self, vocab_size: int) -> nn.Module:
        return LogitScale(vocab_size, self.sublayer.d_model)

    @torch.no_grad()
    def after_optimizer_step(self, model: nn.Module) -> None:
        if self.unit_matrices is None:  # found once: the Parameter objects outlive every step (FlatAdamW keeps them)
            outputs = {id(w) for ws in model.residual_output_weights().values() for w in ws}
            self.unit_matrices = [(p, 0 if id(p) in outputs else 1) for p in model.parameters() if p.dim() == 2]
        for p, dim in self.unit_matrices:
            p.copy_(unit(p, dim=dim))

    def param_groups(self, model: nn.Module, lr: float, eps: float) -> list[dict]:
        return [{**group, "weight_decay": 0.0} for group in super().param_groups(model, lr, eps)]

    def resolved(self) -> dict:
        return {"alpha_init": self.alpha_init}
