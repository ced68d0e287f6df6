"""The encoder-decoder Transformer of `normexp probe --encoder-decoder` (Xiong et al.'s Fig. 3)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ..config.model_config import ModelConfig
from .gpt import GPT


class EncoderDecoder(nn.Module):
    """The Transformer of Vaswani et al. 2017, the model Xiong et al. measure in Fig. 3:
    an encoder (self-attention both ways) reads a source segment; each decoder block runs
    causal self-attention, cross-attention to the encoder's output, then the MLP, each
    sublayer wrapped in the same placement. Encoder and decoder are normexp GPTs (same
    embeddings, blocks and init); the cross-attention matrices get the same Xavier init.

    Why the probe offers it: a decoder-only stack does not show Fig. 3's per-layer shapes
    (module docstring), this does. Cross-attention adds variance to the decoder's stream
    but passes no gradient back along it, so under Post-LN every block's norm shrinks the
    gradient on its way down and the W₂ gradient grows towards the output, while Pre-LN's
    stream grows faster than its sublayers' Jacobians and its per-layer gradients even out."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.encoder = GPT(cfg, causal=False)
        self.decoder = GPT(cfg, cross_attention=True)  # self-attention, cross-attention, MLP per block

    def forward(self, src: torch.Tensor, idx: torch.Tensor, targets: torch.Tensor):
        """(the decoder's logits, its mean cross-entropy), as GPT.forward."""
        return self.decoder(idx, targets, memory=self.encoder.hidden(src))
