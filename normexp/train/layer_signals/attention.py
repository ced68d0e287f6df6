"""What attention does, from the queries and keys of the first rows of the batch
(instruments.SIGNAL_ROWS) as the dot product saw them (after QK-norm): attention-logit growth
(Dehghani et al. 2023; Wortsman et al. 2023) and entropy collapse (Zhai et al. 2023). A growing
max logit with flat ‖q‖, ‖k‖ is alignment of q and k; with growing norms it is scale (what
QK-norm removes). `reading.attention()` computes them all in one batched pass."""

from .base import FORWARD, LayerSignal, layer_signal


@layer_signal
class AttnLogitMax(LayerSignal):
    tag, order, phase = "attn_logit_max", 80, FORWARD
    about = "largest attention logit |q·k|/√d_head, soft-capped when attn_softcap is set (first rows of the batch)"
    in_report = True

    def compute(self, reading):
        return reading.attention()["attn_logit_max"]


@layer_signal
class AttnEntropy(LayerSignal):
    tag, order, phase = "attn_entropy", 90, FORWARD
    about = "mean attention entropy over heads and queries (first rows of the batch)"
    in_report = True

    def compute(self, reading):
        return reading.attention()["attn_entropy"]


@layer_signal
class QueryNorm(LayerSignal):
    tag, order, phase, extra = "query_norm", 100, FORWARD, True
    about = "mean ‖q‖ over heads and positions, as the dot product sees it (first rows of the batch)"

    def compute(self, reading):
        return reading.attention()["query_norm"]


@layer_signal
class KeyNorm(LayerSignal):
    tag, order, phase, extra = "key_norm", 110, FORWARD, True
    about = "mean ‖k‖ over heads and positions, as the dot product sees it (first rows of the batch)"

    def compute(self, reading):
        return reading.attention()["key_norm"]


@layer_signal
class AttnEntropyHead(LayerSignal):
    tag, order, phase, extra, per_head = "attn_entropy_head", 140, FORWARD, True, True
    about = "attention entropy of each head, mean over queries (first rows of the batch)"

    def compute(self, reading):
        return reading.attention()["attn_entropy_head"]
