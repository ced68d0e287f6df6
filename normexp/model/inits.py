"""How the weights start: each init scheme a small class in INITS, picked by name."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ..config.registry import register
from ..config.variants import InitSettings

# INITS[name](d_model, layers, **settings), settings (InitSettings's: config/variants/base.py) from
# configs/init/<name>.yaml through config/registry.py's `variant`: `embedding(w)`, `matrix(w, gain, role, block)` and
# `bias(b, w, gain, role, block)` draw the initial weights. `role` names the matrix: query, key,
# value, attn_out, mlp_in, mlp_out (attn_out and mlp_out are the residual outputs, whose output
# joins the stream); `block` is the 0-based index of the block it belongs to (mitchell's std
# depends on it). `gain` is the placement's init_gain (DeepNorm's β) on value, attn_out and both
# MLP matrices, 1 on query and key.

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

    Settings = InitSettings

    def __init__(self, d_model: int, layers: int, **settings):
        self.settings = self.Settings(**settings)
        self.d_model, self.layers, self.scale_positions = d_model, layers, self.settings.scale_positions

    def embedding(self, w: torch.Tensor) -> None:
        nn.init.normal_(w, std=self.d_model ** -0.5)

    def matrix(self, w: torch.Tensor, gain: float = 1.0, role: str = "query", block: int = 0) -> None:
        nn.init.xavier_normal_(w, gain=gain)

    def bias(self, b: torch.Tensor, w: torch.Tensor, gain: float = 1.0, role: str = "query", block: int = 0) -> None:
        nn.init.zeros_(b)


@register(INITS, "gpt2")
class GPT2Init(XavierInit):
    """GPT-2 (Radford et al. 2019): every matrix and embedding N(0, 0.02²); the residual
    output projections N(0, (0.02/√(2L))²), L blocks (two residual additions per block).
    The placement's gain (DeepNorm's β) multiplies the std."""

    def embedding(self, w: torch.Tensor) -> None:
        nn.init.normal_(w, std=0.02)

    def matrix(self, w: torch.Tensor, gain: float = 1.0, role: str = "query", block: int = 0) -> None:
        nn.init.normal_(w, std=gain * 0.02 / (math.sqrt(2 * self.layers) if role in RESIDUAL_OUTPUTS else 1.0))


@register(INITS, "small")
class SmallInit(XavierInit):
    """SmallInit (Nguyen & Salazar 2019, "Transformers without Tears"): every matrix
    N(0, 2/(5d)), i.e. std √(2/(5d)), times the placement's gain; embeddings as xavier's."""

    def matrix(self, w: torch.Tensor, gain: float = 1.0, role: str = "query", block: int = 0) -> None:
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

    def matrix(self, w: torch.Tensor, gain: float = 1.0, role: str = "query", block: int = 0) -> None:
        nn.init.kaiming_uniform_(w, a=math.sqrt(5))  # nn.Linear's default: U(±1/√fan_in)
        w.mul_(gain)

    def bias(self, b: torch.Tensor, w: torch.Tensor, gain: float = 1.0, role: str = "query", block: int = 0) -> None:
        bound = gain / math.sqrt(w.shape[1])
        nn.init.uniform_(b, -bound, bound)


@register(INITS, "mitchell")
class MitchellInit(XavierInit):
    """OLMo's "mitchell" init (Groeneveld et al. 2024, "OLMo"; allenai/OLMo's `InitFnType.mitchell`):
    every matrix N(0, 1/d_in), the residual output projections (attention output, W₂) with the
    std shrinking with the block's depth, 1/√(2·d_in·(ℓ+1)), ℓ the 0-based block index (d_in =
    d for the attention output, 4d for W₂); each draw truncated at ±3σ, biases 0. The
    placement's gain multiplies the std (and the cut). Embeddings as xavier's, N(0, 1/d)."""

    def matrix(self, w: torch.Tensor, gain: float = 1.0, role: str = "query", block: int = 0) -> None:
        fan_in = w.shape[1]
        std = gain / math.sqrt(2 * fan_in * (block + 1) if role in RESIDUAL_OUTPUTS else fan_in)
        nn.init.trunc_normal_(w, mean=0.0, std=std, a=-3 * std, b=3 * std)
