"""Per-layer stability instruments: activation std, gradient norms, update size.

Everything is computed as device tensors and flattened into one vector, so a logged
step costs a single host–device synchronisation (`.tolist()`), never one per layer.
Nothing here runs on non-logging steps.
"""

from __future__ import annotations

import torch

from . import distributed
from .model import GPT


def _std(tensors: list[torch.Tensor]) -> torch.Tensor:
    """Population std (correction=0) over all elements of each tensor, as one vector.

    One pass, var = E[x²] − E[x]²: E[x²] from one multi-tensor norm, E[x] from sums, combined
    in float64. No temporary per tensor: at depth 48 a logging step needs ~150 of these and
    the two-pass form (mean, subtract, norm) costs ~3× as much. The price is cancellation
    when the mean dwarfs the spread: relative error ≈ 1e-7·(mean/std)², i.e. ≤ 1e-5 while
    |mean| ≤ 10·std; a whole block's activations rarely have a mean that far from zero."""
    ts = [t.detach() for t in tensors]
    sq = torch.stack(torch._foreach_norm(ts)).double().pow(2)
    sums = torch.stack([t.sum() for t in ts]).double()
    n = torch.tensor([t.numel() for t in ts], dtype=torch.float64, device=sq.device)
    return ((sq - sums * sums / n) / n).clamp_min(0).sqrt().float()


@torch.no_grad()
def attention_signals(qk: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Per block, from the queries and keys of the first rows of the batch (see
    model.SIGNAL_ROWS), as the dot product saw them (after QK-norm, if any):
    attn_logit_max, the largest |q·k|/√d_head over heads and causal positions (attention-logit
    growth: Dehghani et al. 2023; Wortsman et al. 2023), and attn_entropy, the mean over heads
    and query positions of −Σ_j A_tj log A_tj (entropy collapse: Zhai et al. 2023)."""
    maxima, entropies = [], []
    for q, k in qk:
        T = q.shape[-2]
        scores = (q.float() @ k.float().transpose(-1, -2)) * q.shape[-1] ** -0.5
        causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
        maxima.append(scores.abs().masked_fill(~causal, 0).amax())
        logp = torch.log_softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
        entropies.append(-(logp.exp() * logp.masked_fill(~causal, 0)).sum(-1).mean())
    return {"attn_logit_max": torch.stack(maxima), "attn_entropy": torch.stack(entropies)}


class Instruments:
    """Collects the per-layer scalars of one step into {tag: tensor}; `read` syncs once.

    Parameter groups: `layer_XX` for each block, `embedding` (token + position tables,
    including the tied head) and `final_norm` where the placement has one."""

    def __init__(self, model: GPT, model_update: bool = True, model_update_every: int = 1):
        self.model = model
        self.layers = len(model.blocks)
        self.group_names = [f"layer_{i:02d}" for i in range(self.layers)] + ["embedding", "final_norm"]
        params, groups = [], []
        for i, block in enumerate(model.blocks):
            for p in block.parameters():
                params.append(p)
                groups.append(i)
        for p in (model.tok_emb.weight, model.pos_emb.weight):
            params.append(p)
            groups.append(self.layers)
        for p in model.final_norm.parameters():
            params.append(p)
            groups.append(self.layers + 1)
        self.has_final_norm = any(g == self.layers + 1 for g in groups)
        self.params = params
        self.group_index = torch.tensor(groups, device=params[0].device)
        mlp_out = {id(b.mlp_output_matrix) for b in model.blocks}
        self.mlp_out_index = torch.tensor([i for i, p in enumerate(params) if id(p) in mlp_out], device=params[0].device)
        # the blocks' matrices, for update_rms: their index into params and their sizes per block
        matrices = [i for i, p in enumerate(params) if p.dim() >= 2 and groups[i] < self.layers]
        self.matrix_index = torch.tensor(matrices, device=params[0].device)
        self.matrix_group = torch.tensor([groups[i] for i in matrices], device=params[0].device)
        self.matrix_numel = torch.zeros(self.layers, device=params[0].device).index_add_(
            0, self.matrix_group, torch.tensor([float(params[i].numel()) for i in matrices], device=params[0].device))
        self.model_update = model_update
        self.model_update_every = model_update_every
        # only BatchNorm behaves differently in eval mode; switching just those modules
        # costs nothing, model.eval() walks all ~700 modules of a 48-layer model (~6 ms)
        self.batch_norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        self.probe_idx = None
        self.probe_h0 = None
        self._before = None

    def _group_norms(self, tensors: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(L2 norm of each parameter group, L2 norm of each tensor): one multi-tensor norm,
        the groups' norms are the roots of their summed squared tensor norms."""
        per_tensor = torch.stack(torch._foreach_norm(tensors)).float()
        sums = torch.zeros(len(self.group_names), device=per_tensor.device).index_add_(0, self.group_index, per_tensor.pow(2))
        return sums.sqrt(), per_tensor

    def collect(self, loss: torch.Tensor, trace: dict, rows: int | None = None) -> dict[str, torch.Tensor]:
        """A logging step's scalars as device tensors (loss, activations of the first `rows`
        rows, gradients); `read` turns them into numbers with one sync."""
        return {"loss": distributed.mean(loss.detach().float()), **self.activations(trace, rows), **self.gradients()}

    # ---- activations (from the trace of a forward with record=True)
    def activations(self, trace: dict, rows: int | None = None) -> dict[str, torch.Tensor]:
        """Stats of the first `rows` batch rows (all by default): the rows after them are the
        model-update probe when it rides along in the training forward (`fused_probe_rows`)."""
        rows = slice(rows)  # slice(None): all rows
        return {
            "act_std": _std([t[rows] for t in trace["block"]]),
            "attn_out_std": _std([t[rows] for t in trace["attn_out"]]),
            "mlp_out_std": _std([t[rows] for t in trace["mlp_out"]]),
            "embedding_std": trace["embed"][rows].detach().float().std(correction=0),
            **attention_signals([(q[rows], k[rows]) for q, k in trace["qk"]]),
            "output_log_z": trace["log_z"][rows].mean(),
        }

    # ---- gradients (after backward, before clipping and the optimizer step)
    def gradients(self) -> dict[str, torch.Tensor]:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        per_group, per_tensor = self._group_norms(grads)
        out = {
            "grad_norm": per_group[: self.layers],
            "grad_norm_mlp_out": per_tensor[self.mlp_out_index],
            "grad_norm_embedding": per_group[self.layers],
            "grad_norm_global": per_group.pow(2).sum().sqrt(),
        }
        if self.has_final_norm:
            out["grad_norm_final_norm"] = per_group[self.layers + 1]
        return out

    # ---- update size ‖Δθ‖/‖θ‖ per group over one optimizer step
    @torch.no_grad()
    def before_step(self):
        # one foreach copy into buffers kept from one logged step to the next: a clone per
        # tensor costs ~5 ms a step at depth 48, this a fraction of a millisecond
        if self._before is None:
            self._before = [torch.empty_like(p) for p in self.params]
        torch._foreach_copy_(self._before, self.params)
        self._before_norms = self._group_norms(self._before)[0]

    @torch.no_grad()
    def after_step(self) -> dict[str, torch.Tensor]:
        """update_ratio ‖Δθ‖/‖θ‖ per group, and update_rms: the RMS of the optimizer's update of
        each block's matrices, √(Σ‖ΔW‖² / Σ numel) (update-size spikes precede loss spikes)."""
        torch._foreach_sub_(self._before, self.params)  # in place: θ_before − θ_after = −Δθ, same norm
        per_group, per_tensor = self._group_norms(self._before)
        ratio = per_group / self._before_norms.clamp_min(1e-30)
        matrix_sq = torch.zeros(self.layers, device=per_tensor.device).index_add_(
            0, self.matrix_group, per_tensor[self.matrix_index].pow(2))
        out = {"update_ratio": ratio[: self.layers], "update_ratio_embedding": ratio[self.layers],
               "update_rms": (matrix_sq / self.matrix_numel).sqrt()}
        if self.has_final_norm:
            out["update_ratio_final_norm"] = ratio[self.layers + 1]
        return out

    # ---- DeepNet's model update ‖f(x;θ_t) − f(x;θ_0)‖ / ‖f(x;θ_0)‖ on a fixed probe batch
    @torch.no_grad()
    def _probe_hidden(self, autocast) -> torch.Tensor:
        modes = [m.training for m in self.batch_norms]
        for m in self.batch_norms:  # running statistics, and no running-stat updates from the probe
            m.training = False
        with autocast():
            h = self.model.hidden(self.probe_idx).float()
        for m, mode in zip(self.batch_norms, modes):
            m.training = mode
        return h

    def set_probe(self, idx: torch.Tensor, autocast):
        if self.model_update:
            self.probe_idx = idx
            self.probe_h0 = self._probe_hidden(autocast)

    def model_update_due(self, step: int, log_every: int, last_step: int) -> bool:
        """Whether logging step `step` measures the model update: when its last log_every
        steps hold a multiple of model_update_every (every logging step when log_every is at
        least that), and at the last step. A rule of the step alone, so a resumed run
        measures where the uninterrupted one would."""
        every = self.model_update_every
        return self.probe_h0 is not None and (step == last_step or step // every > (step - log_every) // every)

    def fused_probe_rows(self) -> torch.Tensor | None:
        """The probe batch, to append to a logging step's training batch, or None.

        A separate probe forward costs ~10 % of a step at depth 48 (a batch of one is all
        per-op overhead); riding along in the training forward costs only its share of the
        FLOPs. The probe rows get target −100 (ignored by the loss), so loss and gradients
        are those of the training rows alone. Not with BatchNorm, whose batch statistics
        would mix the rows: there the probe runs on its own, in eval mode."""
        if self.probe_h0 is None or self.batch_norms:
            return None
        return self.probe_idx

    def model_update_size(self, autocast, probe_hidden: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """‖h − h₀‖/‖h₀‖ with h the final hidden state on the probe at the current weights:
        `probe_hidden` if the training forward computed it, else a forward of its own."""
        if self.probe_h0 is None:
            return {}
        h = self._probe_hidden(autocast) if probe_hidden is None else probe_hidden.detach().float()
        return {"model_update": (h - self.probe_h0).norm() / self.probe_h0.norm().clamp_min(1e-30)}

    # ---- one sync for everything collected this step
    @staticmethod
    def read(collected: dict[str, torch.Tensor]) -> dict[str, float | list[float]]:
        keys = list(collected)
        flat = [collected[k].reshape(-1).float() for k in keys]
        values = torch.cat(flat).tolist()
        out, pos = {}, 0
        for k, t in zip(keys, flat):
            n = t.numel()
            out[k] = values[pos] if collected[k].dim() == 0 else values[pos: pos + n]
            pos += n
        return out


def scalar_tags(values: dict[str, float | list[float]]) -> dict[str, float]:
    """TensorBoard tags: per-layer vectors become `<family>/layer_XX`; summaries go under
    `stability/`, `grad_norm/`, `update_ratio/`, `act_std/`."""
    tags: dict[str, float] = {}
    for key, v in values.items():
        if isinstance(v, list):
            for i, x in enumerate(v):
                tags[f"{key}/layer_{i:02d}"] = x
    single = {
        "embedding_std": "act_std/embedding",
        "grad_norm_embedding": "grad_norm/embedding",
        "grad_norm_final_norm": "grad_norm/final_norm",
        "update_ratio_embedding": "update_ratio/embedding",
        "update_ratio_final_norm": "update_ratio/final_norm",
        "model_update": "stability/model_update",
        "output_log_z": "output/log_z",
        "grad_norm_global": "train/grad_norm",
    }
    for key, tag in single.items():
        if key in values:
            tags[tag] = values[key]
    if "act_std" in values:
        tags["stability/act_std_max"] = max(values["act_std"])
        tags["stability/act_std_first"], tags["stability/act_std_last"] = values["act_std"][0], values["act_std"][-1]
    if "grad_norm" in values:
        g = values["grad_norm"]
        tags["stability/grad_norm_max"] = max(g)
        tags["stability/grad_norm_first"], tags["stability/grad_norm_last"] = g[0], g[-1]
        tags["stability/grad_norm_top_over_bottom"] = g[-1] / g[0] if g[0] > 0 else float("inf")
    return tags


LAYOUT_FAMILIES = {
    "act_std": "residual stream std leaving each block",
    "attn_out_std": "attention output std (before the residual)",
    "mlp_out_std": "MLP output std (before the residual)",
    "grad_norm": "gradient norm of each block",
    "grad_norm_mlp_out": "gradient norm of each block's second MLP matrix (Xiong et al. Fig. 3)",
    "update_ratio": "‖Δθ‖/‖θ‖ of each block per step",
    "update_rms": "RMS of the optimizer's update of each block's matrices",
    "attn_logit_max": "largest attention logit |q·k|/√d_head (first rows of the batch)",
    "attn_entropy": "mean attention entropy over heads and queries (first rows of the batch)",
}
