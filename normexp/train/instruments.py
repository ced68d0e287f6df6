"""Per-layer stability instruments: activation std, gradient norms, update size.

Which per-layer values a step logs is the registry's (train/layer_signals/): each registered
signal computes its value from the reading of its phase built here (`ForwardReading`, ...);
the values of one group (the embedding, the final norm, the output) stay here.

Everything is computed as device tensors and flattened into one vector, so a logged
step costs a single host–device synchronisation (`.tolist()`), never one per layer.
Nothing here runs on non-logging steps: the instruments attach to the model for one forward
(`with recording(model) as trace:`, forward hooks on what the model declares in
`GPT.readouts()`) and detach after it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator

import torch

from . import distributed
from .layer_signals import FORWARD, GRADIENTS, LAYER_SIGNALS, MOMENTS, UPDATE, signals
from ..model import GPT, IGNORE_TARGET, read_outputs
from ..model.layers import softcap as model_softcap
from ..runs.schema import (ACT_STD_FIRST, ACT_STD_LAST, ACT_STD_MAX, GRAD_NORM_FIRST, GRAD_NORM_LAST, GRAD_NORM_MAX,
                           GRAD_NORM_LOG10_FIRST, GRAD_NORM_LOG10_LAST, GRAD_NORM_LOG10_LAST_OVER_FIRST, GRAD_NORM_TOP_OVER_BOTTOM, GROUP_TAGS, head_tag,
                           layer_tag)

# batch rows whose attention the instruments recompute on a logging step: one sequence gives
# heads·T(T+1)/2 logits (33k at the default shape), and each row costs ~5 ms a logging step
# there (T² scores per head and block), a tenth of a plain step at log_every=1
SIGNAL_ROWS = 1


@contextlib.contextmanager
def recording(model: GPT, only: tuple[str, ...] | None = None) -> Iterator[dict[str, list[torch.Tensor]]]:
    """Within the block, each forward of `model` (directly, or through DDP or another
    wrapper; eager, even under compile=true) fills the trace {name: [tensor per place]} with what `model.readouts()` names
    (only those named in `only`, if given), detached; the queries and keys of the first SIGNAL_ROWS rows
    only. On leaving the block the hooks are removed: the model runs as if never watched."""
    readouts = model.readouts()
    if only is not None:
        readouts = {name: readouts[name] for name in only}
    for name in ("queries", "keys"):  # keep only the rows the attention signals use
        if name in readouts:
            readouts[name] = [dataclasses.replace(r, pick=lambda out, pick=r.pick: pick(out)[:SIGNAL_ROWS])
                              for r in readouts[name]]
    with model.eager(), read_outputs(readouts) as trace:  # hooks on compiled blocks would recompile them
        yield trace


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
def attention_signals(qk: list[tuple[torch.Tensor, torch.Tensor]], softcap: float | None = None,
                      extra: bool = True) -> dict[str, torch.Tensor]:
    """Per block, from the queries and keys of the first rows of the batch (see
    SIGNAL_ROWS), as the dot product saw them (after QK-norm, if any), and the logits as the
    softmax saw them (soft-capped, c·tanh(z/c), when `softcap` is c, the run's attn_softcap):
    attn_logit_max, the largest |logit| over heads and causal positions, the logit being
    q·k/√d_head (attention-logit growth: Dehghani et al. 2023; Wortsman et al. 2023; under a
    cap it stays below c), and attn_entropy, the mean over heads and query positions of
    −Σ_j A_tj log A_tj (entropy collapse: Zhai et al. 2023).

    With `extra` (log.extra_signals) also attn_entropy_head, the same entropy per head
    (blocks × heads; attn_entropy is its mean over heads), and query_norm / key_norm, the
    mean ‖q‖ and ‖k‖ over heads and positions: a growing max logit with flat norms is
    alignment of q and k, with growing norms it is scale (what QK-norm removes)."""
    # every block at once: one batched matmul over a (blocks, rows, heads, T, d_head) stack
    # instead of ~12 small ops per block (52 → 16 ms at 1,000 blocks; the same values bit for bit)
    q, k = torch.stack([q for q, _ in qk]).float(), torch.stack([k for _, k in qk]).float()
    T = q.shape[-2]
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if softcap is not None:
        scores = model_softcap(scores, softcap)
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    maxima = scores.abs().masked_fill(~causal, 0).flatten(1).amax(1)
    logp = torch.log_softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    per_query = -(logp.exp() * logp.masked_fill(~causal, 0)).sum(-1)  # (blocks, rows, heads, T)
    if not extra:
        return {"attn_logit_max": maxima, "attn_entropy": per_query.flatten(1).mean(1)}
    per_head = per_query.mean(dim=(1, 3))  # (blocks, heads): every head has rows·T queries
    return {"attn_logit_max": maxima, "attn_entropy": per_head.mean(1), "attn_entropy_head": per_head,
            "query_norm": torch.linalg.vector_norm(q, dim=-1).flatten(1).mean(1),
            "key_norm": torch.linalg.vector_norm(k, dim=-1).flatten(1).mean(1)}


class ForwardReading:
    """What FORWARD signals read: the recorded forward's trace, its first `rows` rows."""

    def __init__(self, trace: dict, rows: slice, softcap: float | None, extra: bool):
        self.trace, self.rows, self.softcap, self.extra = trace, rows, softcap, extra
        self._attention = None

    def std(self, name: str) -> torch.Tensor:
        """The population std of each of the trace's `name` tensors (one per block), as one vector."""
        return _std([t[self.rows] for t in self.trace[name]])

    def each_block(self, name: str, measure) -> torch.Tensor:
        """measure(tensor) of each of the trace's `name` tensors, stacked: one value per block."""
        return torch.stack([measure(t[self.rows]) for t in self.trace[name]])

    def attention(self) -> dict[str, torch.Tensor]:
        """attention_signals of every block, computed once for all the signals that read them."""
        if self._attention is None:
            qk = [(q[self.rows], k[self.rows]) for q, k in zip(self.trace["queries"], self.trace["keys"])]
            self._attention = attention_signals(qk, self.softcap, self.extra)
        return self._attention


class GroupReading:
    """What GRADIENTS and UPDATE signals read: norms over the instruments' parameter groups
    (`per_block`: the blocks' groups; `ratio`: ‖Δθ‖/‖θ‖ per group, after a step) and over each
    tensor (`per_tensor`), with the instruments' indexes into them."""

    def __init__(self, instruments: Instruments, per_group: torch.Tensor, per_tensor: torch.Tensor,
                 ratio: torch.Tensor | None = None):
        self.layers = instruments.layers
        self.per_block, self.per_tensor, self.ratio = per_group[: self.layers], per_tensor, ratio
        self.mlp_out_index, self.matrix_index = instruments.mlp_out_index, instruments.matrix_index
        self.matrix_group, self.matrix_numel = instruments.matrix_group, instruments.matrix_numel


class MomentReading:
    """What MOMENTS signals read: the optimizer's per-parameter state after its step."""

    def __init__(self, instruments: Instruments, optimizer: torch.optim.Optimizer):
        self.instruments = instruments
        self.states = [optimizer.state.get(p) or {} for p in instruments.params]

    def moment_norms(self, key: str) -> torch.Tensor:
        """Per block, the L2 norm of the state tensor `key` over the block's parameters (0 without state)."""
        zero = self.instruments.params[0].new_zeros(())
        return self.instruments._group_norms([st.get(key, zero) for st in self.states])[0][: self.instruments.layers]


def computed(phase: str, reading, extra: bool) -> dict[str, torch.Tensor]:
    """{tag: value} of every registered signal of `phase` (the extra ones only with `extra`)."""
    return {s.tag: s.compute(reading) for s in signals(phase, extra)}


class Instruments:
    """Collects the per-layer scalars of one step into {tag: tensor}; `read` syncs once.

    Parameter groups: `layer_XX` for each block, `embedding` (token + position tables,
    the tied head, and any other parameter of the head: nGPT's logit scale) and `final_norm`
    where the placement has one."""

    def __init__(self, model: GPT, model_update: bool = True, model_update_every: int = 1, extra_signals: bool = True):
        self.model = model
        self.extra_signals = extra_signals  # log.extra_signals: see attention_signals, activations, adam_moments
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
        seen = {id(p) for p in params}
        for p in model.parameters():  # outside the blocks, the tables and the final norm: the head's (nGPT's s_z)
            if id(p) not in seen:
                params.append(p)
                groups.append(self.layers)
        self.has_final_norm = any(g == self.layers + 1 for g in groups)
        self.params = params
        self.group_index = torch.tensor(groups, device=params[0].device)
        mlp_out = {id(w) for w in model.residual_output_weights()["mlp_out"]}
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
        # DeepNet's model update is measured on a fixed reference batch: its input and h₀,
        # the final hidden state on it at the initial weights
        self.reference_idx = None
        self.reference_h0 = None
        self._before = None

    def _group_norms(self, tensors: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """(L2 norm of each parameter group, L2 norm of each tensor): one multi-tensor norm,
        the groups' norms are the roots of their summed squared tensor norms."""
        per_tensor = torch.stack(torch._foreach_norm(tensors)).float()
        sums = torch.zeros(len(self.group_names), device=per_tensor.device).index_add_(0, self.group_index, per_tensor.pow(2))
        return sums.sqrt(), per_tensor

    def collect(self, loss: torch.Tensor, trace: dict, rows: int | None = None, targets: torch.Tensor | None = None,
                z_loss: float = 0.0) -> dict[str, torch.Tensor]:
        """A logging step's scalars as device tensors (loss, activations of the first `rows`
        rows, gradients); `read` turns them into numbers with one sync. With `targets` (the
        first `rows` rows' targets) and z_loss = c > 0 in the objective, also cross_entropy, the
        loss without c·z (loss = cross_entropy + c·output_z_loss)."""
        return {"loss": distributed.mean(loss.detach().float()), **self.activations(trace, rows, targets, z_loss),
                **self.gradients()}

    # ---- activations (from the trace of a forward inside `recording`)
    def activations(self, trace: dict, rows: int | None = None, targets: torch.Tensor | None = None,
                    z_loss: float = 0.0) -> dict[str, torch.Tensor]:
        """Stats of the first `rows` batch rows (all by default): the rows after them are the
        reference batch when it rides along in the training forward (`fused_reference_rows`).
        output_log_z: mean log Z of the output logits, the divergence signal of Wortsman et al. 2023.
        With extra_signals, output_z_loss: mean (log Z)², the z-loss term itself (PaLM), whether
        or not z_loss puts it in the objective; and with z_loss > 0 and `targets`,
        cross_entropy = mean(log Z − logit of the target), the objective without c·z. Both
        are means over the global batch (one all-reduce under torchrun), like the loss."""
        rows = slice(rows)  # slice(None): all rows
        logits = trace["logits"][0][rows].float()
        log_z = torch.logsumexp(logits, dim=-1)
        reading = ForwardReading(trace, rows, self.model.cfg.attn_softcap, self.extra_signals)
        out = {**computed(FORWARD, reading, self.extra_signals),
               "embedding_std": trace["embed"][0][rows].float().std(correction=0), "output_log_z": log_z.mean()}
        if self.extra_signals:
            means = [log_z.pow(2).mean()]
            if z_loss and targets is not None:
                means.append((log_z - logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)).mean())
            means = distributed.mean(torch.stack(means))
            out["output_z_loss"] = means[0]
            if len(means) > 1:
                out["cross_entropy"] = means[1]
        return out

    # ---- gradients (after backward, before clipping and the optimizer step)
    def gradients(self) -> dict[str, torch.Tensor]:
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        per_group, per_tensor = self._group_norms(grads)
        out = {
            **computed(GRADIENTS, GroupReading(self, per_group, per_tensor), self.extra_signals),
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
    def adam_moments(self, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
        """adam_m_norm and adam_v_norm: per block, the L2 norm of AdamW's first moment m and of
        its second moment v over the block's parameters, as the optimizer stores them (no bias
        correction), after the step. Read from `optimizer.state[p]`, which torch.optim.AdamW
        and FlatAdamW (views into its flat buffers) both keep per parameter; a parameter
        without state yet counts 0. (Update-size and moment spikes come before loss spikes.)"""
        return computed(MOMENTS, MomentReading(self, optimizer), self.extra_signals)

    @torch.no_grad()
    def after_step(self, optimizer: torch.optim.Optimizer | None = None) -> dict[str, torch.Tensor]:
        """update_ratio ‖Δθ‖/‖θ‖ per group, and update_rms: the RMS of the optimizer's update of
        each block's matrices, √(Σ‖ΔW‖² / Σ numel) (update-size spikes precede loss spikes);
        with extra_signals and the `optimizer` that took the step, its moments (adam_moments)."""
        torch._foreach_sub_(self._before, self.params)  # in place: θ_before − θ_after = −Δθ, same norm
        per_group, per_tensor = self._group_norms(self._before)
        ratio = per_group / self._before_norms.clamp_min(1e-30)
        out = {**computed(UPDATE, GroupReading(self, per_group, per_tensor, ratio), self.extra_signals),
               "update_ratio_embedding": ratio[self.layers]}
        if self.has_final_norm:
            out["update_ratio_final_norm"] = ratio[self.layers + 1]
        if self.extra_signals and optimizer is not None:
            out.update(self.adam_moments(optimizer))
        return out

    # ---- DeepNet's model update ‖f(x;θ_t) − f(x;θ_0)‖ / ‖f(x;θ_0)‖ on a fixed reference batch
    @torch.no_grad()
    def _reference_hidden(self, autocast) -> torch.Tensor:
        modes = [m.training for m in self.batch_norms]
        for m in self.batch_norms:  # running statistics, and no running-stat updates from the reference batch
            m.training = False
        with autocast(), self.model.eager():  # a measurement: eager, and a batch shape the compiled blocks never see
            h = self.model.hidden(self.reference_idx).float()
        for m, mode in zip(self.batch_norms, modes):
            m.training = mode
        return h

    def set_reference_batch(self, idx: torch.Tensor, autocast):
        """The model update's fixed input; h₀ is computed now, at the initial weights."""
        if self.model_update:
            self.reference_idx = idx
            self.reference_h0 = self._reference_hidden(autocast)

    def state_dict(self) -> dict:
        """What a checkpoint must keep for the model update to continue: h₀."""
        return {"reference_h0": self.reference_h0}

    def load_state_dict(self, state: dict) -> None:
        """h₀ from a checkpoint (read onto the CPU), onto the reference batch's device."""
        h0 = state.get("reference_h0")
        device = self.reference_idx.device if self.reference_idx is not None else None
        self.reference_h0 = h0.to(device) if h0 is not None and device is not None else h0

    def model_update_due(self, step: int, log_every: int, last_step: int) -> bool:
        """Whether logging step `step` measures the model update: when its last log_every
        steps hold a multiple of model_update_every (every logging step when log_every is at
        least that), and at the last step. A rule of the step alone, so a resumed run
        measures where the uninterrupted one would."""
        every = self.model_update_every
        return self.reference_h0 is not None and (step == last_step or step // every > (step - log_every) // every)

    def fused_reference_rows(self) -> torch.Tensor | None:
        """The reference batch, to append to a logging step's training batch, or None.

        A separate forward costs ~10 % of a step at depth 48 (a batch of one is all per-op
        overhead); riding along in the training forward costs only its share of the FLOPs.
        The reference rows get target −100 (ignored by the loss), so loss and gradients are
        those of the training rows alone. Not with BatchNorm, whose batch statistics would
        mix the rows: there the reference batch runs on its own, in eval mode."""
        if self.reference_h0 is None or self.batch_norms:
            return None
        return self.reference_idx

    def model_update_size(self, autocast, reference_hidden: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        """‖h − h₀‖/‖h₀‖ with h the final hidden state on the reference batch at the current
        weights: `reference_hidden` if the training forward computed it, else a forward of its own."""
        if self.reference_h0 is None:
            return {}
        h = self._reference_hidden(autocast) if reference_hidden is None else reference_hidden.detach().float()
        return {"model_update": (h - self.reference_h0).norm() / self.reference_h0.norm().clamp_min(1e-30)}

    # ---- one sync for everything collected this step
    @staticmethod
    def read(collected: dict[str, torch.Tensor]) -> dict[str, float | list[float] | list[list[float]]]:
        """{key: number} for a 0-d tensor, a list for a vector (per block), a list of rows for
        a matrix (per block and head)."""
        keys = list(collected)
        flat = [collected[k].reshape(-1).float() for k in keys]
        values = torch.cat(flat).tolist()
        out, pos = {}, 0
        for k, t in zip(keys, flat):
            n, shape = t.numel(), collected[k].shape
            if collected[k].dim() == 0:
                out[k] = values[pos]
            elif collected[k].dim() == 1:
                out[k] = values[pos: pos + n]
            else:
                out[k] = [values[pos + i * shape[1]: pos + (i + 1) * shape[1]] for i in range(shape[0])]
            pos += n
        return out


class StepWatch:
    """The instruments on one logging step, in the order the step meets them:

        the forward        `with_reference_rows` (the reference batch rides along), `recording` (hooks on)
        before the update  `before_update`: the step's scalars (one sync), the model update at θ_step,
                           the weights kept for the update size (clipping changes none of them)
        after the update   `after_update`: update sizes, Adam's moments, the model update (a second sync)

    `measure_update`: this step measures the model update (Instruments.model_update_due).
    `autocast`: the run's autocast, for the model update's own forward where it needs one."""

    def __init__(self, instruments: Instruments, autocast, measure_update: bool = False):
        self.instruments, self.autocast, self.measure_update = instruments, autocast, measure_update
        self.reference = instruments.fused_reference_rows() if measure_update else None
        self.rows: int | None = None  # the training rows of the recorded forward: the reference rows follow them
        self.trace: dict | None = None
        self.model_update: dict[str, torch.Tensor] = {}

    def with_reference_rows(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch the recorded forward runs: x and y, then the reference rows, if any, with
        ignored targets (so loss and gradients are the training rows' alone)."""
        self.rows = len(x)
        if self.reference is None:
            return x, y
        return torch.cat([x, self.reference]), torch.cat([y, torch.full_like(self.reference, IGNORE_TARGET)])

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """The instruments' hooks on for the forward inside the block (see `recording`)."""
        with recording(self.instruments.model) as trace:
            self.trace = trace
            yield

    def scalars(self, loss: torch.Tensor, targets: torch.Tensor | None = None, z_loss: float = 0.0) -> dict:
        """The recorded forward's scalars and the gradients (Instruments.collect), read with one sync."""
        collected = self.instruments.collect(loss, self.trace, rows=self.rows, targets=targets, z_loss=z_loss)
        return self.instruments.read(collected)

    def before_update(self, loss: torch.Tensor, targets: torch.Tensor | None = None, z_loss: float = 0.0) -> dict:
        """After backward, before clipping and the optimizer step: the step's scalars (one sync);
        the model update, measured at θ_step like them and read after the update; the weights
        kept for the update size."""
        values = self.scalars(loss, targets, z_loss)
        if self.measure_update:
            fused = None if self.reference is None else self.trace["final"][0][self.rows:]
            self.model_update = self.instruments.model_update_size(self.autocast, fused)
        self.trace = None
        self.instruments.before_step()
        return values

    def after_update(self, optimizer: torch.optim.Optimizer) -> dict:
        """After the optimizer step: update sizes, Adam's moments and the model update, read with one sync."""
        return self.instruments.read({**self.instruments.after_step(optimizer), **self.model_update})


def scalar_tags(values: dict[str, float | list[float]]) -> dict[str, float]:
    """TensorBoard tags (runs/schema.py): per-layer vectors become `<family>/layer_XX`, one-group
    values their GROUP_TAGS, and the first/last/max over depth go under `stability/`."""
    tags: dict[str, float] = {}
    for key, v in values.items():
        if key in LAYER_SIGNALS and LAYER_SIGNALS[key].per_head:  # rows of blocks: <family>/layer_XX/head_YY
            for i, row in enumerate(v):
                for h, x in enumerate(row):
                    tags[head_tag(key, i, h)] = x
        elif isinstance(v, list):
            for i, x in enumerate(v):
                tags[layer_tag(key, i)] = x
    for key, tag in GROUP_TAGS.items():
        if key in values:
            tags[tag] = values[key]
    if "act_std" in values:
        tags[ACT_STD_MAX] = max(values["act_std"])
        tags[ACT_STD_FIRST], tags[ACT_STD_LAST] = values["act_std"][0], values["act_std"][-1]
    if "grad_norm" in values:
        g = values["grad_norm"]
        tags[GRAD_NORM_MAX] = max(g)
        tags[GRAD_NORM_FIRST], tags[GRAD_NORM_LAST] = g[0], g[-1]
        tags[GRAD_NORM_LOG10_FIRST], tags[GRAD_NORM_LOG10_LAST] = log10_or_inf(g[0]), log10_or_inf(g[-1])
        tags[GRAD_NORM_TOP_OVER_BOTTOM] = ratio = g[-1] / g[0] if g[0] > 0 else float("inf")
        # a zero last block gives -inf, a zero first one +inf (as the ratio), a NaN stays NaN
        tags[GRAD_NORM_LOG10_LAST_OVER_FIRST] = log10_or_inf(ratio)
    return tags


def log10_or_inf(x: float) -> float:
    """log10 of a norm or a ratio of norms: 0 gives -inf, +inf stays +inf, NaN stays NaN."""
    return -math.inf if x == 0 else math.log10(x) if x > 0 else x
