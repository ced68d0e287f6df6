"""One AdamW step for a whole pack: every member's weights, gradients and moments as rows of
one (members × parameters) buffer, and each member's lr, betas, ε and weight decay as a column
of per-row values, so a step is a dozen kernels for all members together instead of one
optimizer call (and its Python) per member. On a GPU that Python is most of a small pack's step.

The update is torch.optim.AdamW's, written out (Loshchilov & Hutter 2019):
    θ ← θ·(1 − lr·wd);  m ← β₁·m + (1−β₁)·g;  v ← β₂·v + (1−β₂)·g²
    θ ← θ − lr/(1−β₁ᵗ) · m / (√v/√(1−β₂ᵗ) + ε)
with the same operations in the same order, but not torch's fused kernel: float results agree to
rounding, not bit for bit. So packs use it where bf16 autocast already rules bit-equality out
(CUDA), and each member's own optimizer on CPU (train/pack.py).

Each member keeps its AdamW object (`RowAdamW` stands in front of it): its `param_groups` (the
schedule sets each group's lr there), its `state` (whose moments are views of the pack's rows,
so the instruments and checkpoints read them as before, in torch's format), and `step()` for the
member's own logging steps, which updates its row alone.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..model.packed import PackedGPT


class PackedAdamW:
    """The members' AdamW steps as one, over `pack`'s parameters (see the module docstring).
    `optimizers`: each member's AdamW (resumed state included), all built alike."""

    def __init__(self, pack: PackedGPT, optimizers: Sequence[torch.optim.Optimizer], models: Sequence[torch.nn.Module]):
        self.pack, self.optimizers, K = pack, list(optimizers), pack.K
        names = {id(p): n for n, p in models[0].named_parameters()}
        self.layout: list[tuple[str, int, int, tuple]] = []  # (pack key, offset, numel, shape), by group
        self.groups: list[tuple[int, int]] = []  # each param group's column range
        offset = 0
        for group in self.optimizers[0].param_groups:
            start = offset
            for p in group["params"]:
                self.layout.append((pack._names[names[id(p)]], offset, p.numel(), tuple(p.shape)))
                offset += p.numel()
            self.groups.append((start, offset))
        if sorted(key for key, *_ in self.layout) != sorted(pack.packed.keys()):
            raise ValueError("the optimizer's parameters are not the pack's")
        first = next(iter(pack.packed.values()))
        self.weights = torch.empty(K, offset, dtype=first.dtype, device=first.device)
        self.grads = torch.zeros_like(self.weights)
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(self.weights), torch.zeros_like(self.weights)
        member_params = [dict(m.named_parameters()) for m in models]
        key_to_name = {key: name for name, key in pack._names.items()}
        for key, o, n, shape in self.layout:  # the pack's and the members' weights become views of the rows
            packed = pack.packed[key]
            self.weights[:, o:o + n] = packed.detach().reshape(K, n)
            packed.data = self.weights[:, o:o + n].view(K, *shape)
            for k in range(K):
                member_params[k][key_to_name[key]].data = self.weights[k, o:o + n].view(shape)
        self.params_in_order = [[member_params[k][key_to_name[key]] for key, *_ in self.layout] for k in range(K)]
        self.steps = [self._adopt_state(k) for k in range(K)]
        self.hyper: list[torch.Tensor] | None = None  # prepare()'s per-row values, on the device
        self.max_norms: torch.Tensor | None = None  # clip_all()'s (K, 1) grad_clip, inf = off; None: no member clips

    def set_max_norms(self, max_norms: list[float | None]) -> None:
        if any(m is not None for m in max_norms):
            self.max_norms = torch.tensor([[math.inf if m is None else m] for m in max_norms],
                                          dtype=self.grads.dtype, device=self.grads.device)

    def _adopt_state(self, k: int) -> torch.Tensor:
        """Member k's moments (a resumed run's) copied into its rows, and its optimizer's state
        re-pointed to views of them, with one step count (a 0-dim tensor) shared by its parameters."""
        optimizer, params = self.optimizers[k], self.params_in_order[k]
        states = [optimizer.state.get(p) for p in params]
        counts = {float(s["step"]) for s in states if s}
        if len(counts) > 1 or (counts and any(not s for s in states)):
            raise ValueError(f"member {k}'s parameters are at different optimizer steps")
        step = torch.tensor(counts.pop() if counts else 0.0)
        for p, state, (_, o, n, shape) in zip(params, states, self.layout):
            m, v = self.exp_avg[k, o:o + n], self.exp_avg_sq[k, o:o + n]
            if state:
                m.copy_(state["exp_avg"].reshape(-1))
                v.copy_(state["exp_avg_sq"].reshape(-1))
            optimizer.state[p] = {"step": step, "exp_avg": m.view(shape), "exp_avg_sq": v.view(shape)}
        return step

    def collect_grads(self) -> None:
        """The pack's gradients (after its backward) into the gradient rows."""
        K = self.pack.K
        parts = []
        for key, _, n, _ in self.layout:
            g = self.pack.packed[key].grad
            parts.append(torch.zeros(K, n, dtype=self.grads.dtype, device=self.grads.device) if g is None
                         else g.reshape(K, n))
        torch.cat(parts, dim=1, out=self.grads)

    def collect_member_grads(self, k: int) -> None:
        """Member k's own gradients (a logging step's backward) into its row."""
        parts = [torch.zeros(n, dtype=self.grads.dtype, device=self.grads.device) if p.grad is None else p.grad.reshape(-1)
                 for p, (_, _, n, _) in zip(self.params_in_order[k], self.layout)]
        torch.cat(parts, out=self.grads[k])

    def clip(self, rows: list[int], max_norms: list[float | None]) -> None:
        """Each listed member's gradient scaled to at most its max norm (grad_clip; None = off)."""
        for k, max_norm in zip(rows, max_norms):
            if max_norm is not None:
                norm = torch.linalg.vector_norm(self.grads[k])
                self.grads[k].mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))

    def clip_all(self) -> None:
        """clip() for every member at once, from `set_max_norms`: device work only (capturable)."""
        if self.max_norms is not None:
            norm = torch.linalg.vector_norm(self.grads, dim=1, keepdim=True)
            self.grads.mul_(torch.clamp(self.max_norms / (norm + 1e-6), max=1.0))

    @torch.no_grad()
    def step(self, rows: list[int]) -> None:
        """One AdamW update of the listed members' rows, from their gradient rows."""
        if not rows:
            return
        if rows == list(range(self.pack.K)):
            self.prepare()
            self.apply()
            return
        hyper = self._count_and_read(rows)
        index = torch.tensor(rows, device=self.weights.device)
        for (a, b), h in zip(self.groups, hyper):
            blocks = [x[:, a:b].index_select(0, index) for x in (self.weights, self.grads, self.exp_avg, self.exp_avg_sq)]
            theta, m, v = self._update(*blocks, *h.to(self.weights).unbind(0))
            for target, value in zip((self.weights, self.exp_avg, self.exp_avg_sq), (theta, m, v)):
                target[:, a:b].index_copy_(0, index, value)

    def prepare(self) -> None:
        """For an update of every member: count the step and set the per-row values in their
        device tensors (`hyper`), which `apply` reads: apply alone can be captured in a CUDA graph."""
        values = self._count_and_read(list(range(self.pack.K)))
        if self.hyper is None:
            self.hyper = [torch.empty_like(v, dtype=self.weights.dtype, device=self.weights.device) for v in values]
        for target, v in zip(self.hyper, values):
            target.copy_(v)

    @torch.no_grad()
    def apply(self) -> None:
        """The update of every member's rows with the values `prepare` set: device work only."""
        for (a, b), h in zip(self.groups, self.hyper):
            self._update(*(x[:, a:b] for x in (self.weights, self.grads, self.exp_avg, self.exp_avg_sq)), *h.unbind(0))

    @staticmethod
    def _update(theta, g, m, v, lr, wd, beta1, beta2, eps, step_size, bias2_sqrt):
        """torch.optim.AdamW's single-tensor update, in place, each value a (rows, 1) column."""
        theta.mul_(1 - lr * wd)
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).add_(g * g * (1 - beta2))
        denom = (v.sqrt() / bias2_sqrt).add_(eps)
        theta.sub_(step_size * m / denom)
        return theta, m, v

    def _count_and_read(self, rows: list[int]) -> list[torch.Tensor]:
        """Count one more step for each listed member; per group, its (7, rows, 1) values in
        float64: lr, weight decay, β₁, β₂, ε, lr/(1−β₁ᵗ), √(1−β₂ᵗ)."""
        for k in rows:
            self.steps[k] += 1
        out = []
        for gi in range(len(self.groups)):
            lr, wd, beta1, beta2, eps, t = torch.tensor([self._hyper(k, gi) for k in rows], dtype=torch.float64).T
            out.append(torch.stack([lr, wd, beta1, beta2, eps, lr / (1 - beta1 ** t), (1 - beta2 ** t).sqrt()]).unsqueeze(-1))
        return out

    def _hyper(self, k: int, gi: int) -> tuple[float, ...]:
        group = self.optimizers[k].param_groups[gi]
        beta1, beta2 = group["betas"]
        return (group["lr"], group["weight_decay"], beta1, beta2, group["eps"], float(self.steps[k]))


class RowAdamW:
    """Member k's optimizer inside a pack with a PackedAdamW: its own AdamW's param_groups,
    state and state_dict; `step()` updates its row alone (its own logging steps)."""

    def __init__(self, packed: PackedAdamW, k: int):
        self.packed, self.k, self.inner = packed, k, packed.optimizers[k]

    @property
    def param_groups(self):
        return self.inner.param_groups

    @property
    def state(self):
        return self.inner.state

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)

    def step(self) -> None:
        self.packed.collect_member_grads(self.k)
        self.packed.step([self.k])

    def state_dict(self) -> dict:
        return self.inner.state_dict()
