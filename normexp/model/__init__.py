"""The model: a decoder-only Transformer whose normalization type and placement are
swappable. It stands on torch and the config's checks alone (no Hydra, no run folder)."""

from .gpt import (GPT, IGNORE_TARGET, INITS, NORMS, PLACEMENTS, ModelConfig, Readout, check_settings,  # noqa: F401
                  read_outputs, softcap, variant)
