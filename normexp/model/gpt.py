"""A small decoder-only Transformer whose normalization type and placement are swappable.

Read top to bottom: norms (what normalizes), placements (where it sits around each
sublayer), the sublayers (attention, cross-attention, MLP), the block, and the GPT itself.
One `ModelConfig` drives everything. A norm or a placement is a small class picked by name
from `NORMS` or `PLACEMENTS`; its settings are the keys of its own config file
(configs/norm/<name>.yaml, configs/placement/<name>.yaml), passed to its constructor:

    NORMS[name](d_model, **settings)
    PLACEMENTS[name](sublayer, make_norm, index=block, depth=layers, **settings)

(`make_norm(width=d_model)` makes a fresh norm of the run's type.)

A new variant is one class here and one yaml file there.
"""

from __future__ import annotations

import contextlib
import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config.checks import ConfigError


@dataclass
class ModelConfig:
    """The model's shape, and which norm and placement it uses. `norm` and `placement` are a
    registry name or the config node `{"name": ..., **settings}` (settings are the variant's
    own: eps, momentum, alpha, ratio, ...)."""

    vocab_size: int = 256
    seq_len: int = 128
    layers: int = 6
    d_model: int = 128
    heads: int = 4
    mlp_ratio: int = 4
    norm: str | Mapping = "layer"
    placement: str | Mapping = "pre"
    init: str | Mapping = "xavier"   # an INITS name (configs/init/)
    qk_norm: bool = False            # normalize queries and keys per head with the run's norm type
    attn_softcap: float | None = None   # c in c·tanh(z/c) on the attention logits; None = off (Gemma 2)
    logit_softcap: float | None = None  # the same on the output logits, before the loss


def register(registry: dict, *names: str):
    def add(cls):
        for name in names:
            registry[name] = cls
        return cls
    return add


def variant(registry: dict, group: str, spec: str | Mapping) -> tuple[type, dict]:
    """(class, settings) for a spec: a name, or {"name": ..., **settings}. Settings the class
    does not take are a ConfigError naming the key."""
    spec = {"name": spec} if isinstance(spec, str) else dict(spec)
    name = spec.pop("name")
    if name not in registry:
        raise ConfigError(group, name, f"choose from {', '.join(sorted(registry))}")
    cls = registry[name]
    names = {p.name for p in inspect.signature(cls.__init__).parameters.values() if p.default is not p.empty}
    for key, value in spec.items():
        if key not in names:
            raise ConfigError(f"{group}.{key}", value, f"{group} {name} takes {', '.join(sorted(names)) or 'no settings'}")
    return cls, spec


def _check(ok: bool, key: str, value, allowed: str) -> None:
    if not ok:
        raise ConfigError(key, value, allowed)


# the largest float32: a setting beyond it becomes inf in the model's parameters
FLOAT32_MAX = 3.4028234663852886e38


def _finite_number(value) -> bool:
    """A real number the model's float32 tensors can hold (nan, inf and 1e308 cannot)."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and abs(value) <= FLOAT32_MAX)


def _positive_number(value) -> bool:
    return _finite_number(value) and value > 0


def softcap(z: torch.Tensor, cap: float) -> torch.Tensor:
    """Soft-capping (Gemma Team 2024, "Gemma 2"): c·tanh(z/c), about z while |z| ≪ c and never
    beyond ±c; Gemma 2 caps attention logits at 50 and output logits at 30."""
    return cap * torch.tanh(z / cap)


# --------------------------------------------------------------------------- norms
# Each norm: NORMS[name](d, **settings); `resolved()` gives the settings it was built with.

NORMS: dict[str, type[nn.Module]] = {}


@register(NORMS, "layer")
class LayerNorm(nn.Module):
    """LayerNorm (Ba et al. 2016): y = γ·(x−μ)/√(σ²+ε) + β, μ and biased σ² over the feature dim."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        _check(_positive_number(eps), "norm.eps", eps, "must be a number > 0")
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

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        _check(_positive_number(eps), "norm.eps", eps, "must be a number > 0")
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.type_as(x) * self.weight

    def resolved(self) -> dict:
        return {"eps": self.eps}


@register(NORMS, "batch")
class BatchNorm(nn.Module):
    """BatchNorm (Ioffe & Szegedy 2015) over all batch×time tokens, per feature:
    y = γ·(x−μ_B)/√(σ²_B+ε) + β in training, running statistics in eval.

    Caution: in a causal LM the batch statistics mix information across positions and
    samples during training (a token "sees" the future through μ_B, σ²_B). It is kept as a
    study option (Shen et al. 2020, "PowerNorm", discuss why it fails in Transformers)."""

    def __init__(self, d: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        _check(_positive_number(eps), "norm.eps", eps, "must be a number > 0")
        _check(_positive_number(momentum) and momentum <= 1, "norm.momentum", momentum, "must be a number in (0, 1]")
        self.bn = nn.BatchNorm1d(d, eps=eps, momentum=momentum)

    def forward(self, x):
        return self.bn(x.reshape(-1, x.shape[-1])).view_as(x)

    def resolved(self) -> dict:
        return {"eps": self.bn.eps, "momentum": self.bn.momentum}


@register(NORMS, "dyt")
class DynamicTanh(nn.Module):
    """DyT (Zhu et al. 2025, "Transformers without Normalization"): y = γ·tanh(a·x) + β,
    with one learnable scalar a (initialised to init_alpha, 0.5 in the paper) and per-feature γ, β."""

    def __init__(self, d: int, init_alpha: float = 0.5):
        super().__init__()
        _check(_positive_number(init_alpha), "norm.init_alpha", init_alpha, "must be a number > 0")
        self.init_alpha = init_alpha
        self.alpha = nn.Parameter(torch.tensor(float(init_alpha)))
        self.weight = nn.Parameter(torch.ones(d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return torch.tanh(self.alpha * x) * self.weight + self.bias

    def resolved(self) -> dict:
        return {"init_alpha": self.init_alpha}


@register(NORMS, "scale")
class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears"): y = g·x / max(‖x‖, ε),
    ‖x‖ the L2 norm over the feature dim, with one learnable scalar g initialised to √d (so
    the output's entries have unit RMS, as LayerNorm's do). Computed in float32 and cast back,
    as RMSNorm is."""

    def __init__(self, d: int, eps: float = 1e-5):
        super().__init__()
        _check(_positive_number(eps), "norm.eps", eps, "must be a number > 0")
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


# ---------------------------------------------------------------------- placements

PLACEMENTS: dict[str, type[Placement]] = {}


class Placement(nn.Module):
    """Where the norm sits around one sublayer F (attention, cross-attention or MLP): the
    contract every placement keeps.

        x ──┬── norms and F, as the placement says ──> contribution ──(+)──> new x
            └──────────────── residual (maybe scaled, maybe normed after) ──┘

    * Built as `cls(sublayer, make_norm, index=l, depth=L, **settings)`: `sublayer` is F
      (it maps width `F.d_model` to itself), `make_norm()` makes a fresh norm of the run's type
      (`make_norm(width)` one of another width), `index` is the block's position
      (0 = nearest the input) and `depth` the number of blocks; `settings` are the keys of
      configs/placement/<name>.yaml.
    * `forward(x, *context)` returns (new residual stream, contribution): the contribution is
      F's output as it joins the stream (the attn_out_std / mlp_out_std instruments read it);
      `context` (the encoder output, for cross-attention) goes to F unchanged.
    * `needs_final_norm`: whether the stream leaving this sublayer is unnormalized, so that
      the model must add a Norm after the last block (Pre-LN does, Post-LN does not).
    * `init_gain`: the Xavier gain the placement wants for F's value, output and MLP
      matrices (query and key keep gain 1); DeepNorm's β.
    * `resolved()`: the numbers it actually uses ("auto" worked out), for summary.json.
    * The stream between blocks is a tensor unless the placement says otherwise: the model
      calls `enter(x)` of the first block's first placement once on the embedded input, and
      `make_final(make_norm)` of the last block's last placement once for the module that maps
      the last block's stream to the final hidden state; `residual(stream)` is the tensor the
      instruments read as the residual stream (act_std). The defaults: the stream is the
      tensor, and the final module is a Norm where `needs_final_norm` says so, else the identity.
    * A sublayer may offer slots a placement fills with norms it makes (`inner_norm`, before
      the output projection; `qkv_norm`, on queries, keys and values): None by default, so an
      unused slot costs one `is None` test and no call.
    """

    needs_final_norm = True
    init_gain = 1.0

    def resolved(self) -> dict:
        return {}

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

    def __init__(self, sublayer, make_norm, *, index: int, depth: int):
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

    def __init__(self, sublayer, make_norm, *, index: int, depth: int):
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


@register(PLACEMENTS, "deepnorm")
class DeepNorm(Placement):
    """DeepNorm (Wang et al. 2022, "DeepNet"): x ← Norm(α·x + F(x)), with F's value, output
    and MLP matrices initialised Xavier-normal with gain β (query and key with gain 1).

    α up-weights the residual (not F(x)); with α = (2N)^(1/4), β = (8N)^(-1/4) for N blocks
    ("auto") the model update stays bounded as depth grows. Either may be a number instead.
    No final norm: the stream leaves every block normalized."""

    needs_final_norm = False

    def __init__(self, sublayer, make_norm, *, index: int, depth: int, alpha="auto", beta="auto"):
        super().__init__()
        self.sublayer = sublayer
        for key, value in (("alpha", alpha), ("beta", beta)):
            _check(value == "auto" or _positive_number(value), f"placement.{key}", value, 'must be "auto" or a number > 0')
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

    def __init__(self, sublayer, make_norm, *, index: int, depth: int):
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

    def __init__(self, sublayer, make_norm, *, index: int, depth: int, ratio: float = 0.25):
        super().__init__()
        _check(_finite_number(ratio) and 0 <= ratio < 1,
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

    def __init__(self, sublayer, make_norm, *, index: int, depth: int, init_alpha: float = 0.0):
        super().__init__()
        _check(_finite_number(init_alpha), "placement.init_alpha", init_alpha, "must be a finite number")
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

    def __init__(self, sublayer, make_norm, *, index: int, depth: int):
        super().__init__()
        self.sublayer = sublayer
        self.omega = nn.Parameter(torch.ones(sublayer.d_model))
        self.norm = make_norm()

    def forward(self, x, *context):
        out = self.sublayer(x, *context)
        return self.norm(self.omega * x + out), out


def check_settings(norm: str | Mapping, placement: str | Mapping, layers: int) -> None:
    """Build the norm, and the placement around a stand-in sublayer, once: a bad setting
    raises ConfigError naming its key, before any data is loaded."""
    norm_cls, norm_settings = variant(NORMS, "norm", norm)
    placement_cls, placement_settings = variant(PLACEMENTS, "placement", placement)
    stand_in = nn.Identity()
    stand_in.d_model = 8
    placement_cls(stand_in, lambda width=8: norm_cls(width, **norm_settings), index=0, depth=layers, **placement_settings)


@register(PLACEMENTS, "layerscale")
class LayerScale(Placement):
    """LayerScale (Touvron et al. 2021, "Going deeper with Image Transformers", CaiT):
    x ← x + diag(λ)·F(Norm(x)), a learnable per-channel scale λ initialised to ε, so every
    block starts close to the identity; the model adds a final Norm as Pre-LN does.
    init_scale "auto" is CaiT's rule for the depth: ε = 0.1 up to 18 blocks, 1e-5 up to 24,
    1e-6 deeper; or a number."""

    def __init__(self, sublayer, make_norm, *, index: int, depth: int, init_scale="auto"):
        super().__init__()
        # above 1 the branch starts larger than Pre-LN's, the opposite of what LayerScale is for
        _check(init_scale == "auto" or (_positive_number(init_scale) and init_scale <= 1), "placement.init_scale",
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
    mlp_ratio·d), filled into the sublayer's `inner_norm` slot (a sublayer without the slot,
    cross-attention, runs as Pre-LN). The value, attention output and both MLP matrices are
    initialised with gain γ = √(ln 2N) for N blocks, query and key with 1 (torchscale's
    `subln` multiplies their weights and biases by γ after drawing). The model adds a final
    Norm, as Pre-LN does."""

    def __init__(self, sublayer, make_norm, *, index: int, depth: int):
        super().__init__()
        self.norm = make_norm()
        if hasattr(sublayer, "inner_norm"):
            sublayer.inner_norm = make_norm(sublayer.inner_width)
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

    def __init__(self, sublayer, make_norm, *, index: int, depth: int):
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


@register(PLACEMENTS, "hybrid")
class HybridNorm(Placement):
    """HybridNorm (Zhuo et al. 2025, "HybridNorm: Towards Stable and Efficient Transformer
    Training via Hybrid Normalization"), the plain variant (not HybridNorm*, whose first block
    is Pre-Norm): per block, with X the stream entering it,

        Y = X + Attn_QKV(X),   X' = Norm(Y) + FFN(Norm(Y)),
        Attn_QKV: softmax(Norm(Q)·Norm(K)ᵀ/√d_h)·Norm(V), then W_O,

    i.e. no norm on the attention's input, QKV normalization inside it (filled into the
    attention's `qkv_norm` slot), and the FFN in the Post-Norm form whose residual is the
    normalized stream. The model adds a final Norm (X' is not normalized). Q, K and V are
    each normalized over the full width d before the split into heads, as in OLMo 2's QK-norm
    that the authors' code extends with V; the paper's text could not be read here, the form
    follows their released config (attn_norm false, use_query/key/value_norm true, ffn_norm
    true, ffn_residual_after_norm true). A sublayer without the `qkv_norm` slot (the MLP,
    cross-attention) gets the FFN form."""

    def __init__(self, sublayer, make_norm, *, index: int, depth: int):
        super().__init__()
        self.attention_form = hasattr(sublayer, "qkv_norm")
        if self.attention_form:
            sublayer.qkv_norm = nn.ModuleList(make_norm() for _ in ("q", "k", "v"))
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
    contribution is the change it makes, g − x. GTrXL also puts a ReLU on F's output before
    the gate; this follows the formula above (as x-transformers does) and leaves it out.
    The model adds a final Norm, as Pre-LN does."""

    def __init__(self, sublayer, make_norm, *, index: int, depth: int, gate_bias: float = 2.0):
        super().__init__()
        _check(_finite_number(gate_bias), "placement.gate_bias", gate_bias, "must be a finite number (GTrXL uses 2)")
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
        wr, wz, wg = self.from_y(y).chunk(3, dim=-1)
        ur, uz = self.from_x(x).chunk(2, dim=-1)
        r = torch.sigmoid(wr + ur)
        z = torch.sigmoid(wz + uz - self.bias)
        h = torch.tanh(wg + self.from_reset(r * x))
        out = z * (h - x)  # (1 − z)·x + z·ĥ = x + z·(ĥ − x)
        return x + out, out

    def resolved(self) -> dict:
        return {"gate_bias": self.gate_bias}


# -------------------------------------------------------------------- init schemes
# INITS[name](d_model, layers): `embedding(w)`, `matrix(w, gain, role)` and `bias(b, w, gain, role)`
# draw the initial weights. `role` names the matrix: query, key, value, attn_out, mlp_in, mlp_out
# (attn_out and mlp_out are the residual outputs, whose output joins the stream). `gain` is the
# placement's init_gain (DeepNorm's β) on value, attn_out and both MLP matrices, 1 on query and key.

INITS: dict[str, type] = {}
RESIDUAL_OUTPUTS = ("attn_out", "mlp_out")


@register(INITS, "xavier")
class XavierInit:
    """Xavier-normal matrices (Glorot & Bengio 2010), std = gain·√(2/(fan_in+fan_out)): the
    setting Xiong et al. 2020 analyse, and the default. Embeddings N(0, 1/d) (scaled by √d
    on the way in, so the stream starts at unit scale).

    `scale_positions`, a setting of every init (its yaml): what the √d embedding scale
    multiplies. true (xavier, gpt2, small): the sum of token and position embeddings,
    (tok + pos)·√d, as Vaswani et al. 2017 state it; false (torchscale): the token embedding
    only, tok·√d + pos, as fairseq and torchscale's `Decoder.forward_embedding` do."""

    def __init__(self, d_model: int, layers: int, scale_positions: bool = True):
        _check(isinstance(scale_positions, bool), "init.scale_positions", scale_positions, "must be true or false")
        self.d_model, self.layers, self.scale_positions = d_model, layers, scale_positions

    def embedding(self, w: torch.Tensor) -> None:
        nn.init.normal_(w, std=self.d_model ** -0.5)

    def matrix(self, w: torch.Tensor, gain: float = 1.0, role: str = "query") -> None:
        nn.init.xavier_normal_(w, gain=gain)

    def bias(self, b: torch.Tensor, w: torch.Tensor, gain: float = 1.0, role: str = "query") -> None:
        nn.init.zeros_(b)


@register(INITS, "gpt2")
class GPT2Init(XavierInit):
    """GPT-2 (Radford et al. 2019): every matrix and embedding N(0, 0.02²); the residual
    output projections N(0, (0.02/√(2L))²), L blocks (two residual additions per block).
    The placement's gain (DeepNorm's β) multiplies the std."""

    def embedding(self, w: torch.Tensor) -> None:
        nn.init.normal_(w, std=0.02)

    def matrix(self, w: torch.Tensor, gain: float = 1.0, role: str = "query") -> None:
        nn.init.normal_(w, std=gain * 0.02 / (math.sqrt(2 * self.layers) if role in RESIDUAL_OUTPUTS else 1.0))


@register(INITS, "small")
class SmallInit(XavierInit):
    """SmallInit (Nguyen & Salazar 2019, "Transformers without Tears"): every matrix
    N(0, 2/(5d)), i.e. std √(2/(5d)), times the placement's gain; embeddings as xavier's."""

    def matrix(self, w: torch.Tensor, gain: float = 1.0, role: str = "query") -> None:
        nn.init.normal_(w, std=gain * math.sqrt(2 / (5 * self.d_model)))


@register(INITS, "torchscale")
class TorchscaleInit(XavierInit):
    """The init of the DeepNet reference code as it runs (torchscale 0.3's `Decoder`, built as
    its fairseq language-model example builds it), so its numbers can be reproduced (Wang et al.
    2022). Every matrix and every bias keeps `nn.Linear`'s default, kaiming-uniform with
    a = √5, i.e. U(±1/√fan_in) (std 1/√(3d) for q, k, v, the attention output and the first MLP
    matrix, 1/√(12d) for the second), biases U(±1/√fan_in), the attention output's included:
    torchscale's `MultiheadAttention.reset_parameters` (fairseq's Xavier-uniform, gain 1/√2 on
    q, k, v, out bias 0) is never called by the Decoder. Embeddings N(0, 1/d), token and
    learned position alike (fairseq's `Embedding` and `PositionalEmbedding`), and the √d
    scale multiplies the token embedding only (`scale_positions: false` in its yaml:
    tok·√d + pos, `Decoder.forward_embedding`). The placement's gain multiplies weights *and*
    biases: under DeepNorm, torchscale divides those of value, attention output and both MLP
    matrices by (8N)^¼, i.e. multiplies by β."""

    def __init__(self, d_model: int, layers: int, scale_positions: bool = False):
        super().__init__(d_model, layers, scale_positions)

    def matrix(self, w: torch.Tensor, gain: float = 1.0, role: str = "query") -> None:
        nn.init.kaiming_uniform_(w, a=math.sqrt(5))  # nn.Linear's default: U(±1/√fan_in)
        w.mul_(gain)

    def bias(self, b: torch.Tensor, w: torch.Tensor, gain: float = 1.0, role: str = "query") -> None:
        bound = gain / math.sqrt(w.shape[1])
        nn.init.uniform_(b, -bound, bound)


# ----------------------------------------------------------------------- sublayers
# Each sublayer's `init_weights(gain, init)`: matrices, then biases, drawn by the init scheme
# (`_draw`); `gain` scales the value, output and MLP matrices (the placement's init_gain),
# queries and keys keep 1.


def _draw(init: XavierInit, parts) -> None:
    """parts: (weight, bias, gain, role) each; every matrix first, then every bias, so an
    init with zero biases draws exactly what it drew before biases had a say."""
    for w, _, gain, role in parts:
        init.matrix(w, gain, role)
    for w, b, gain, role in parts:
        init.bias(b, w, gain, role)


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection; causal unless built with
    causal=False (the encoder of `normexp probe --encoder-decoder`)."""

    def __init__(self, cfg: ModelConfig, causal: bool = True, make_qk_norm=None):
        super().__init__()
        self.d_model, self.heads, self.causal = cfg.d_model, cfg.heads, causal
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        # QK-norm (Henry et al. 2020; Dehghani et al. 2023; Wortsman et al. 2023): queries and
        # keys normalized per head, over d_head, before the dot product
        self.q_norm, self.k_norm = (make_qk_norm(), make_qk_norm()) if make_qk_norm else (None, None)
        # slots a placement may fill (None: unused, no call): HybridNorm's norms on q, k and v
        # over the full width, Sub-LN's norm on the heads' output before `proj`
        self.qkv_norm: nn.ModuleList | None = None
        self.inner_norm: nn.Module | None = None
        self.inner_width = cfg.d_model
        self.softcap = cfg.attn_softcap or None  # None (or 0): the fused scaled_dot_product_attention path

    def split_heads(self, qkv: torch.Tensor) -> torch.Tensor:
        """The fused projection's output (B, T, 3C) as q, k, v stacked: (3, B, heads, T, d_head)."""
        B, T, C3 = qkv.shape
        return qkv.view(B, T, 3, self.heads, C3 // (3 * self.heads)).permute(2, 0, 3, 1, 4)

    def one_head_split(self, t: torch.Tensor) -> torch.Tensor:
        """One of q, k, v (B, T, C) as (B, heads, T, d_head)."""
        B, T, C = t.shape
        return t.view(B, T, self.heads, C // self.heads).transpose(1, 2)

    def forward(self, x):
        B, T, C = x.shape
        if self.qkv_norm is None:
            q, k, v = self.split_heads(self.qkv(x))
        else:
            q, k, v = (self.one_head_split(norm(t)) for norm, t in zip(self.qkv_norm, self.qkv(x).split(C, dim=-1)))
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.softcap is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        else:
            y = self.capped_attention(q, k, v)
        y = y.transpose(1, 2).reshape(B, T, C)
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

    def init_weights(self, gain: float, init: XavierInit) -> None:
        d = self.qkv.in_features
        (q, k, v), (bq, bk, bv) = self.qkv.weight.data.split(d), self.qkv.bias.data.split(d)  # views: each d×d on its own
        _draw(init, ((q, bq, 1.0, "query"), (k, bk, 1.0, "key"), (v, bv, gain, "value"),
                     (self.proj.weight.data, self.proj.bias.data, gain, "attn_out")))


class CrossAttention(nn.Module):
    """Multi-head attention from the decoder's stream (queries) to the encoder's output
    `memory` (keys and values), the middle sublayer of an encoder-decoder block."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.d_model, self.heads = cfg.d_model, cfg.heads
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

    def init_weights(self, gain: float, init: XavierInit) -> None:
        d = self.q.in_features
        (k, v), (bk, bv) = self.kv.weight.data.split(d), self.kv.bias.data.split(d)
        _draw(init, ((self.q.weight.data, self.q.bias.data, 1.0, "query"), (k, bk, 1.0, "key"), (v, bv, gain, "value"),
                     (self.proj.weight.data, self.proj.bias.data, gain, "attn_out")))


class MLP(nn.Module):
    """Position-wise feed-forward: fc_out(GELU(fc_in(x)))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.d_model = cfg.d_model
        self.fc_in = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.fc_out = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)
        self.inner_norm: nn.Module | None = None  # a slot: Sub-LN's norm between GELU and fc_out
        self.inner_width = cfg.mlp_ratio * cfg.d_model

    def forward(self, x):
        h = F.gelu(self.fc_in(x))
        if self.inner_norm is not None:
            h = self.inner_norm(h)
        return self.fc_out(h)

    def init_weights(self, gain: float, init: XavierInit) -> None:
        _draw(init, ((self.fc_in.weight.data, self.fc_in.bias.data, gain, "mlp_in"),
                     (self.fc_out.weight.data, self.fc_out.bias.data, gain, "mlp_out")))


class Block(nn.Module):
    """One Transformer block, every sublayer wrapped in the run's placement:

        x ─> placement(self-attention) ─> [placement(cross-attention to memory)] ─> placement(MLP) ─> x

    `readouts()` names what an instrument may read of it (see `Readout`)."""

    def __init__(self, cfg: ModelConfig, wrap, causal: bool = True, cross_attention: bool = False, make_qk_norm=None):
        super().__init__()
        self.attn = wrap(CausalSelfAttention(cfg, causal, make_qk_norm))
        self.cross = wrap(CrossAttention(cfg)) if cross_attention else None
        self.mlp = wrap(MLP(cfg))

    def forward(self, x, memory=None):
        x, _ = self.attn(x)
        if self.cross is not None:
            x, _ = self.cross(x, memory)
        x, _ = self.mlp(x)
        return x

    def sublayers(self) -> list[Placement]:
        return [p for p in (self.attn, self.cross, self.mlp) if p is not None]

    def readouts(self) -> dict[str, Readout]:
        """The stream leaving the block (the placement's `residual` view of it: x_a under
        ResiDual), each sublayer's contribution as it joins the stream (second output of the
        placement), and the self-attention's queries and keys."""
        return {"block": Readout(self, self.mlp.residual), "attn_out": Readout(self.attn, _second), "mlp_out": Readout(self.mlp, _second),
                **self.attn.sublayer.readouts()}

    def residual_output_weights(self) -> dict[str, nn.Parameter]:
        """The matrices whose output joins the stream (init roles attn_out and mlp_out); the
        MLP's second matrix W₂ is the one Xiong et al.'s Fig. 3 plots the gradient of."""
        return {"attn_out": self.attn.sublayer.proj.weight, "mlp_out": self.mlp.sublayer.fc_out.weight}


# ----------------------------------------------------------------------------- GPT

IGNORE_TARGET = -100  # a target position that adds nothing to the loss


class GPT(nn.Module):
    """Token + position embeddings (scaled by √d: their sum, or the token embedding alone as
    the init scheme's `scale_positions` says), `layers` blocks, the final norm where the
    placement needs one, and a head tied to the token embedding. `causal=False` and
    `cross_attention=True` build the encoder and the decoder of an encoder-decoder model."""

    def __init__(self, cfg: ModelConfig, causal: bool = True, cross_attention: bool = False):
        super().__init__()
        norm_cls, norm_settings = variant(NORMS, "norm", cfg.norm)
        placement_cls, placement_settings = variant(PLACEMENTS, "placement", cfg.placement)
        make_norm = lambda width=cfg.d_model: norm_cls(width, **norm_settings)  # noqa: E731
        make_qk_norm = (lambda: norm_cls(cfg.d_model // cfg.heads, **norm_settings)) if cfg.qk_norm else None
        init_cls, init_settings = variant(INITS, "init", cfg.init)
        self.init_scheme = init_cls(cfg.d_model, cfg.layers, **init_settings)
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(
            Block(cfg, lambda f, i=i: placement_cls(f, make_norm, index=i, depth=cfg.layers, **placement_settings),
                  causal, cross_attention, make_qk_norm)
            for i in range(cfg.layers))
        self.final_norm = self.blocks[-1].mlp.make_final(make_norm)  # a Norm, the identity, or ResiDual's output
        self.register_buffer("positions", torch.arange(cfg.seq_len), persistent=False)
        self.embed_scale = math.sqrt(cfg.d_model)
        self.scale_positions = self.init_scheme.scale_positions  # what √d multiplies: tok + pos, or tok alone
        self._init_weights()

    def _init_weights(self):
        """Embeddings and matrices drawn by the init scheme (xavier by default: embeddings
        N(0, 1/d), multiplied by √d on the way in as in Vaswani et al. 2017, so the stream
        entering block 0 has unit-scale entries as Xiong et al.'s analysis assumes, and
        Xavier-normal matrices; see `embed` for what √d multiplies), zero biases, each placement's gain on value, output and MLP
        matrices. A placement that profiles (Admin) is set afterwards by `calibrate`."""
        self.init_scheme.embedding(self.tok_emb.weight)
        self.init_scheme.embedding(self.pos_emb.weight)
        for block in self.blocks:
            for wrapper in block.sublayers():
                wrapper.sublayer.init_weights(wrapper.init_gain, self.init_scheme)

    @torch.no_grad()
    def calibrate(self, idx: torch.Tensor) -> bool:
        """The profiling forward pass of placements that need one (Admin): each records its
        sublayer's output variance with ω = 1, then ω_i = √(Var[x_0] + Σ_{j<i} Var[F_j]) in the
        order the stream meets them. BatchNorm uses its batch statistics but keeps its running
        ones. Returns whether anything was calibrated."""
        wrappers = [w for b in self.blocks for w in b.sublayers() if getattr(w, "needs_calibration", False)]
        if not wrappers:
            return False
        batch_norms = [m for m in self.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        saved = [{k: v.clone() for k, v in m.state_dict().items()} for m in batch_norms]
        for w in wrappers:
            w.omega.fill_(1.0)
        readouts = {"embed": [self.readouts()["embed"][0]], "added": [Readout(w, _second) for w in wrappers]}
        with read_outputs(readouts) as read:
            self.hidden(idx)
        total = read["embed"][0].float().var(unbiased=False).item()
        for w, added in zip(wrappers, read["added"]):
            w.omega.fill_(math.sqrt(total))
            total += added.float().var(unbiased=False).item()
        for m, state in zip(batch_norms, saved):
            m.load_state_dict(state)
        return True

    def settings(self) -> dict:
        """The norm's and the placement's settings as built ("auto" resolved), read from the
        modules themselves: {"norm": {...}, "placement": {...}}."""
        first = self.blocks[0].mlp
        norms = [m for m in self.modules() if type(m) in NORMS.values()]
        return {"norm": norms[0].resolved() if norms else {}, "placement": first.resolved()}

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """The stream entering block 0: (tok + pos)·√d, or tok·√d + pos where the init scheme's
        `scale_positions` is false (fairseq's and torchscale's order)."""
        tok, pos = self.tok_emb(idx), self.pos_emb(self.positions[: idx.shape[1]])
        if self.scale_positions:
            return (tok + pos) * self.embed_scale
        return tok * self.embed_scale + pos

    def hidden(self, idx: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        """The final hidden state (B, T, d). `memory`: the encoder output, for cross-attention."""
        x = self.embed(idx)
        x = self.blocks[0].attn.enter(x)  # the stream: x itself, or ResiDual's pair
        for block in self.blocks:
            x = block(x, memory)
        return self.final_norm(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                memory: torch.Tensor | None = None, z_loss: float = 0.0):
        """(logits, loss): logits through the tied head, soft-capped (c·tanh(z/c)) when
        logit_softcap is set, so the loss, the z-loss and the log Z signal all see the capped
        logits; with targets, the mean cross-entropy (nats/token) over the targets that are not
        IGNORE_TARGET, plus z_loss·mean((log Z)²) over the same tokens when z_loss > 0 (PaLM,
        Chowdhery et al. 2022; Wortsman et al. 2023), Z = Σ_v e^logit_v; loss None without targets."""
        h = self.hidden(idx, memory)
        logits = h @ self.tok_emb.weight.t()
        if self.cfg.logit_softcap:  # None or 0: off
            logits = softcap(logits, self.cfg.logit_softcap)
        loss = None
        if targets is not None:
            flat = logits.flatten(0, 1).float()
            loss = F.cross_entropy(flat, targets.flatten(), ignore_index=IGNORE_TARGET)
            if z_loss:
                kept = targets.flatten() != IGNORE_TARGET
                loss = loss + z_loss * torch.logsumexp(flat[kept], dim=-1).pow(2).mean()
        return logits, loss

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def readouts(self) -> dict[str, list[Readout]]:
        """What an instrument may read, {name: one Readout per place}: `embed`, the stream
        entering block 0 (embeddings scaled by √d); per block, `block`, `attn_out`, `mlp_out`,
        `queries`, `keys` (see Block.readouts); `final`, the final hidden state; `logits`."""
        per_block = [block.readouts() for block in self.blocks]
        enter_view = self.blocks[0].attn.residual  # ResiDual's block 0 receives the pair (x, x)
        return {"embed": [Readout(self.blocks[0], lambda inputs: enter_view(inputs[0]), read="input")],
                **{name: [r[name] for r in per_block] for name in per_block[0]},
                "final": [Readout(self.final_norm)], "logits": [Readout(self, _first)]}

    def residual_output_weights(self) -> dict[str, list[nn.Parameter]]:
        """{"attn_out": [W_O per block], "mlp_out": [W₂ per block]} (Block.residual_output_weights)."""
        per_block = [block.residual_output_weights() for block in self.blocks]
        return {role: [w[role] for w in per_block] for role in per_block[0]}


# ------------------------------------------------------------------------ readouts
# What the model lets an instrument read, declared by the modules themselves (`readouts()`)
# rather than reached by attribute chains; `read_outputs` attaches forward hooks for the
# length of a `with` block only, so a forward outside one runs no added code.

def _whole(out):
    return out


def _first(out):
    return out[0]


def _second(out):
    return out[1]


def _first_input(inputs):
    return inputs[0]


@dataclass(frozen=True)
class Readout:
    """A tensor an instrument may read: `pick` applied to `module`'s output (read="output")
    or to its positional inputs (read="input") on each forward."""

    module: nn.Module
    pick: Callable = _whole
    read: str = "output"


@contextlib.contextmanager
def read_outputs(readouts: dict[str, list[Readout]]) -> Iterator[dict[str, list]]:
    """Within the block, every forward fills {name: [detached tensor per Readout]} (the last
    forward's, in the Readouts' order); the hooks are removed on leaving it."""
    read = {name: [None] * len(places) for name, places in readouts.items()}
    handles = []

    def keep(name, i, pick):
        def hook(module, inputs, output=None):
            read[name][i] = pick(inputs if output is None else output).detach()
        return hook

    try:
        for name, places in readouts.items():
            for i, r in enumerate(places):
                hook = keep(name, i, r.pick)
                handles.append(r.module.register_forward_pre_hook(hook) if r.read == "input"
                               else r.module.register_forward_hook(hook))
        yield read
    finally:
        for handle in handles:
            handle.remove()
