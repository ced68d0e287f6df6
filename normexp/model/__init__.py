"""The model: a small decoder-only Transformer whose normalization type and placement are
swappable. It stands on torch and the config's checks alone (no Hydra, no run folder).

    config.py           ModelConfig: the shape, and which norm, placement and init
    norms.py            NORMS: what normalizes (LayerNorm, RMSNorm, ...)
    placements/         PLACEMENTS: where the norm sits around each sublayer (Post-LN, Pre-LN, ...),
                        one module per placement, each with its helpers and its model-level policy
    inits.py            INITS: how the weights start (xavier, gpt2, small, torchscale)
    layers.py           the sublayers a placement wraps: attention, cross-attention, MLP
    gpt.py              Block and GPT, read top to bottom
    readouts.py         what an instrument may read, and the hooks that read it
    encoder_decoder.py  the encoder-decoder of `normexp probe --encoder-decoder`

A new norm or init is one class in its registry's module and one yaml file in configs/<group>/;
a new placement is one module in placements/ (found there, no list to edit) and one yaml file.
"""

from ..config.model_config import ModelConfig
from .gpt import GPT, IGNORE_TARGET, check_settings
from .inits import INITS
from .norms import NORMS
from .placements import PLACEMENTS
from .readouts import Readout, read_outputs

__all__ = ["GPT", "IGNORE_TARGET", "INITS", "NORMS", "PLACEMENTS", "ModelConfig", "Readout", "check_settings",
           "read_outputs"]
