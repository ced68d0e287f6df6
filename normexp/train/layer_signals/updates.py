"""The size of the optimizer's update per block: update-size spikes precede loss spikes."""

from .base import MOMENTS, UPDATE, LayerSignal, layer_signal


@layer_signal
class UpdateRatio(LayerSignal):
    tag, order, phase = "update_ratio", 60, UPDATE
    about = "‖Δθ‖/‖θ‖ of each block per step"
    profile_title = "update ‖Δθ‖/‖θ‖"

    def compute(self, reading):
        return reading.ratio[: reading.layers]


@layer_signal
class UpdateRms(LayerSignal):
    """√(Σ‖ΔW‖² / Σ numel) over the block's matrices."""

    tag, order, phase = "update_rms", 70, UPDATE
    about = "RMS of the optimizer's update of each block's matrices"
    in_report = True

    def compute(self, reading):
        squares = reading.per_tensor.new_zeros(reading.layers).index_add_(
            0, reading.matrix_group, reading.per_tensor[reading.matrix_index].pow(2))
        return (squares / reading.matrix_numel).sqrt()


@layer_signal
class AdamMNorm(LayerSignal):
    """As the optimizer stores m (no bias correction); a parameter without state yet counts 0."""

    tag, order, phase, extra = "adam_m_norm", 120, MOMENTS, True
    about = "‖m‖ of AdamW's first moment over the block's parameters, after the step"

    def compute(self, reading):
        return reading.moment_norms("exp_avg")


@layer_signal
class AdamVNorm(LayerSignal):
    tag, order, phase, extra = "adam_v_norm", 130, MOMENTS, True
    about = "‖v‖ of AdamW's second moment over the block's parameters, after the step"

    def compute(self, reading):
        return reading.moment_norms("exp_avg_sq")
