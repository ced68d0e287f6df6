"""AdamW on one flat buffer per parameter group: the same update, one tensor instead of thousands.

AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization") is element-wise:
    m ← β₁·m + (1−β₁)·g,  v ← β₂·v + (1−β₂)·g²,
    θ ← θ·(1 − lr·wd) − lr · (m / (1−β₁ᵗ)) / (√(v / (1−β₂ᵗ)) + eps)
so applying it to the concatenation of a group's tensors gives every element the value the
per-tensor update gives it. torch's fused AdamW still pays a dispatch and a parallel region
per tensor: a 1,000-block model has ~12,000 of them, and at 32 wide each holds a few thousand
numbers, so per-tensor overhead is most of the optimizer step (issue 31).

Here each group's parameters become views into one flat tensor (`p.data` re-pointed once, at
construction), the optimizer state lives in one flat `exp_avg` / `exp_avg_sq` per group, and a
step copies the gradients into one flat gradient (a single `cat`) and runs torch's own fused
AdamW once per group. The per-parameter state in `self.state` is made of views into the flat
state, so `state_dict()` / `load_state_dict()` keep torch.optim.AdamW's format: checkpoints
written before this optimizer existed resume unchanged, and its checkpoints load into a plain
torch AdamW.

Exactness. torch's CPU kernel runs whole SIMD vectors and then a scalar tail per tensor, and
the two paths may round an element differently; in one flat buffer a former tail element lands
in a vector. Measured here (AVX2): models whose every tensor has a multiple of 8 elements
update bit for bit alike; a model with a 36-wide or scalar parameter differs in ~10 of 58,000
elements by one ulp. So the flat path is used only when every parameter's size is a multiple
of `ALIGN` (16 floats: AVX-512's vector, a multiple of AVX2's and NEON's). A parameter
without a gradient must not move (torch skips it); a flat step would give it weight decay and
momentum. So at the first step with a missing gradient, or when a group mixes dtypes or
devices, or when loaded state has unequal step counts, the optimizer falls back for good to
torch's per-tensor fused step on the same views (`per_tensor`), which is torch.optim.AdamW.
"""

from __future__ import annotations

import torch

ALIGN = 16  # elements; see "Exactness" above
_HYPER = ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize")


class FlatAdamW(torch.optim.AdamW):
    """torch.optim.AdamW(fused=True) with each group's parameters and state in one flat tensor."""

    def __init__(self, params, **kwargs):
        super().__init__(params, **kwargs, fused=True)
        self.per_tensor = any(g["amsgrad"] for g in self.param_groups) or not all(
            self._flattenable(g["params"]) for g in self.param_groups)
        self._flat: list[torch.Tensor] = []  # one flat parameter per group; grads and state hang on them
        if not self.per_tensor:
            for group in self.param_groups:
                self._flat.append(self._flatten_params(group["params"]))
            self._inner = torch.optim.AdamW(
                [{"params": [flat], **{k: g[k] for k in _HYPER}} for flat, g in zip(self._flat, self.param_groups)],
                fused=True)

    @staticmethod
    def _flattenable(params) -> bool:
        return (bool(params) and len({(p.dtype, p.device) for p in params}) == 1
                and all(p.numel() % ALIGN == 0 for p in params))

    @staticmethod
    def _flatten_params(params) -> torch.Tensor:
        """One buffer holding the group's values; each parameter becomes a view into it."""
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        offset = 0
        for p in params:
            p.data = flat[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        return flat

    @staticmethod
    def _views(flat: torch.Tensor, params) -> list[torch.Tensor]:
        out, offset = [], 0
        for p in params:
            out.append(flat[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        return out

    def _bind_state(self, i: int, step: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor) -> None:
        """Group i's flat state, and each parameter's state as views into it (one shared step)."""
        flat, params = self._flat[i], self.param_groups[i]["params"]
        self._inner.state[flat] = {"step": step, "exp_avg": exp_avg, "exp_avg_sq": exp_avg_sq}
        for p, m, v in zip(params, self._views(exp_avg, params), self._views(exp_avg_sq, params)):
            self.state[p] = {"step": step, "exp_avg": m, "exp_avg_sq": v}

    def go_per_tensor(self) -> None:
        """From now on torch's per-tensor step, on the same views; each parameter its own step count."""
        self.per_tensor = True
        for state in self.state.values():
            state["step"] = state["step"].clone()
        self._inner = None
        self._flat = []  # the flat buffers and their gradients: what still views them keeps them (a pack's rows do not)

    @torch.no_grad()
    def step(self, closure=None):
        if self.per_tensor or any(p.grad is None for g in self.param_groups for p in g["params"]):
            if not self.per_tensor:
                self.go_per_tensor()
            return super().step(closure)
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for i, (group, flat, inner_group) in enumerate(zip(self.param_groups, self._flat, self._inner.param_groups)):
            if flat not in self._inner.state:  # the first step: AdamW's zero state, as torch makes it
                self._bind_state(i, torch.tensor(0.0, dtype=torch.float32, device=flat.device),
                                 torch.zeros_like(flat), torch.zeros_like(flat))
            if flat.grad is None:
                flat.grad = torch.empty_like(flat)
            torch.cat([p.grad.reshape(-1) for p in group["params"]], out=flat.grad)
            inner_group.update({k: group[k] for k in _HYPER})
        self._inner.step()
        return loss

    def state_dict(self):
        """torch.optim.AdamW's format; each parameter's step its own tensor (torch's per-tensor step
        increments every step tensor it is given, so shared ones would count several times)."""
        sd = super().state_dict()
        # torch's dict holds this optimizer's own per-parameter state dicts, not copies: replacing
        # "step" in them would cut the views off the live flat step, and every later checkpoint
        # would keep the count of the first (issue 38). New dicts, same tensors, a cloned step.
        sd["state"] = {key: {**state, "step": state["step"].clone()} for key, state in sd["state"].items()}
        return sd

    def load_state_dict(self, state_dict) -> None:
        """A torch.optim.AdamW state (this optimizer's or a plain one's): loaded by torch, then
        moved into the flat buffers when every parameter has state at the same step."""
        super().load_state_dict(state_dict)
        if self.per_tensor:
            return
        states = [[self.state.get(p) for p in g["params"]] for g in self.param_groups]
        if not any(s for group in states for s in group):
            return  # saved before the first step
        steps = {float(s["step"]) for group in states for s in group if s}
        if any(s is None for group in states for s in group) or len(steps) != 1:
            self.go_per_tensor()
            return
        for i, group in enumerate(states):
            flat = self._flat[i]
            exp_avg = torch.cat([s["exp_avg"].reshape(-1) for s in group]).to(flat)
            exp_avg_sq = torch.cat([s["exp_avg_sq"].reshape(-1) for s in group]).to(flat)
            self._bind_state(i, group[0]["step"].detach().clone().to(torch.float32), exp_avg, exp_avg_sq)
