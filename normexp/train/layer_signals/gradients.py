"""Gradient norms per block, before clipping."""

from .base import GRADIENTS, LayerSignal, layer_signal


@layer_signal
class GradNorm(LayerSignal):
    tag, order, phase = "grad_norm", 40, GRADIENTS
    about = "gradient norm of each block's parameters"
    in_report, profile_title = True, "gradient norm"

    def compute(self, reading):
        return reading.per_block


@layer_signal
class GradNormMlpOut(LayerSignal):
    """Xiong et al. 2020 (Fig. 3): under Post-LN the last blocks' W₂ gradients are the largest."""

    tag, order, phase = "grad_norm_mlp_out", 50, GRADIENTS
    about = "gradient norm of each block's second MLP matrix (Xiong et al. Fig. 3)"

    def compute(self, reading):
        return reading.per_tensor[reading.mlp_out_index]
