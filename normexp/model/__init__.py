"""The model: a small decoder-only Transformer whose normalization type and placement are
swappable. It stands on torch, the config's checks and the variants' torch-free settings classes
(config/variants/) alone (no Hydra, no run folder).

    config.py           ModelConfig: the shape, and which norm, placement and init
    norms/              NORMS: what normalizes (LayerNorm, RMSNorm, ...), one module per norm
    placements/         PLACEMENTS: where the norm sits around each sublayer (Post-LN, Pre-LN, ...),
                        one module per placement, each with its helpers and its model-level policy
    inits.py            INITS: how the weights start (xavier, gpt2, small, torchscale)
    layers.py           the sublayers a placement wraps: attention, cross-attention, MLP
    gpt.py              Block and GPT, read top to bottom
    readouts.py         what an instrument may read, and the hooks that read it
    encoder_decoder.py  the encoder-decoder of `normexp probe --encoder-decoder`

A new norm is one module in norms/, a new placement one module in placements/ (each found
there, no list to edit), each with its settings class, one module in config/variants/norms/ or
config/variants/placements/ (torch-free: what the pre-flight asks); a new init one class in
inits.py and its name in config/variants/inits.py; each with one yaml file in configs/<group>/.
"""

from ..config.model_config import ModelConfig
from .gpt import GPT, IGNORE_TARGET
from .inits import INITS
from .norms import NORMS
from .placements import PLACEMENTS
from .readouts import Readout, read_outputs

__all__ = ["GPT", "IGNORE_TARGET", "INITS", "NORMS", "PLACEMENTS", "ModelConfig", "Readout", "read_outputs"]
