"""The spread of what each block writes: the residual stream and each sublayer's contribution."""

from .base import FORWARD, LayerSignal, layer_signal


@layer_signal
class ActStd(LayerSignal):
    tag, order, phase = "act_std", 10, FORWARD
    about = "residual stream std leaving each block"
    in_report, profile_title, log_scale = True, "activation std", False

    def compute(self, reading):
        return reading.std("block")


@layer_signal
class AttnOutStd(LayerSignal):
    tag, order, phase = "attn_out_std", 20, FORWARD
    about = "attention output std (before the residual)"

    def compute(self, reading):
        return reading.std("attn_out")


@layer_signal
class MlpOutStd(LayerSignal):
    tag, order, phase = "mlp_out_std", 30, FORWARD
    about = "MLP output std (before the residual)"

    def compute(self, reading):
        return reading.std("mlp_out")
