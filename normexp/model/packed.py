"""A pack: K GPTs of one shape run as one model, each member still its own GPT.

Every parameter of the K members is stacked into one tensor with a leading member dimension
(`PackedGPT.packed[name]`, shape (K, *shape)), and each member's own parameter is re-pointed to
its row of it (`p.data = packed[k]`): the members' models, optimizers, checkpoints and
instruments see their own weights as before, and a step of the pack updates them in place.

The pack's forward is the members' forward with the members as a leading dimension of every
activation, (K, B, T, C):

* the modules of member 0 are copied once (`shell`), and run unchanged wherever their forward
  is element-wise in their parameters (the norms but LayerNorm, the placements' gains and
  gates, the residual additions): each such parameter is handed to its module as a view of the
  packed tensor shaped to broadcast over the member dimension, (K, 1, ..., *shape);
* `nn.Linear` becomes one batched matmul over the members (`PackedLinear`), the embeddings a
  gather from the stacked tables, the tied head a batched matmul, and attention folds the
  members into its batch (layers.py writes its shapes for any leading dims);
* LayerNorm, whose fused affine rounds differently from `x̂·γ + β`, runs once per member on
  CPU, where float32 results are compared bit for bit with solo runs;
* the loss is each member's own cross-entropy (+ z-loss) on its own rows, so
  ∂(Σ_k loss_k)/∂θ_k = ∂loss_k/∂θ_k: nothing of one member reaches another's gradient.

A placement, norm or setting whose forward is not of that kind (BatchNorm's running statistics,
nGPT's logit scale and renormalization, cross-attention, compile) is refused by `packable`,
which names it; such jobs run alone.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config.variants import pack_refusal
from .gpt import GPT, IGNORE_TARGET
from .layers import softcap
from .norms import BatchNorm, LayerNorm


def packable(model: GPT) -> str | None:
    """Why this model cannot be one member of a pack (pack_refusal, and what only a built model
    shows); None if it can."""
    why = pack_refusal(model.cfg.name_of("placement"), model.cfg.name_of("norm"), model.compiled_blocks is not None)
    if why is None and any(b.cross is not None for b in model.blocks):
        return "cross-attention (an encoder-decoder model)"
    if why is None and model.logit_scale is not None:
        return "a logit scale"
    return why


class PackedLinear(nn.Module):
    """K linear maps as one batched matmul: x (K, ..., in) → (K, ..., out), member k through
    its own weight (out, in) and bias; per member the same sum as F.linear's."""

    def __init__(self, pack: "PackedGPT", weight: str, bias: str | None):
        super().__init__()
        self._pack = [pack]  # a list: not registered as a submodule (no cycle in the module tree)
        self.weight_name, self.bias_name = weight, bias

    def forward(self, x):
        packed = self._pack[0].packed
        w = packed[self.weight_name]
        K, out_features = w.shape[0], w.shape[1]
        flat = x.reshape(K, -1, x.shape[-1])
        if self.bias_name is None:
            y = torch.bmm(flat, w.transpose(1, 2))
        else:
            y = torch.baddbmm(packed[self.bias_name].unsqueeze(1), flat, w.transpose(1, 2))
        return y.view(*x.shape[:-1], out_features)


class PackedLayerNorm(nn.Module):
    """LayerNorm per member: on CPU one F.layer_norm call per member (bit for bit a solo
    run's); elsewhere one normalization and the affine as a broadcast (one kernel for all)."""

    def __init__(self, pack: "PackedGPT", weight: str, bias: str, eps: float):
        super().__init__()
        self._pack = [pack]
        self.weight_name, self.bias_name, self.eps = weight, bias, eps

    def forward(self, x):
        packed = self._pack[0].packed
        w, b = packed[self.weight_name], packed[self.bias_name]
        d = x.shape[-1]
        if x.device.type == "cpu":
            return torch.stack([F.layer_norm(x[k], (d,), w[k], b[k], self.eps) for k in range(x.shape[0])])
        shape = (w.shape[0], *[1] * (x.dim() - 2), d)
        return F.layer_norm(x, (d,), None, None, self.eps) * w.view(shape) + b.view(shape)


def _broadcast_params(pack: "PackedGPT", module: nn.Module, names: dict[str, str]) -> None:
    """Before each forward of `module`, set each of its parameters (now plain attributes) to
    the packed tensor viewed as (K, 1, ..., *shape), broadcasting against its input (K, ...)."""

    def hook(mod, inputs):
        x = inputs[0]
        while isinstance(x, (tuple, list)):  # ResiDual's stream is a pair
            x = x[0]
        for attr, full in names.items():
            p = pack.packed[full]
            lead = x.dim() - (p.dim() - 1) - 1
            object.__setattr__(mod, attr, p.view(p.shape[0], *[1] * lead, *p.shape[1:]))

    module.register_forward_pre_hook(hook)


class PackedGPT(nn.Module):
    """K members of one shape as one model; see the module docstring. `forward(idx, targets)`
    takes (K, B, T) tokens and targets and returns the K losses (one 1-D tensor)."""

    def __init__(self, members: Sequence[GPT]):
        super().__init__()
        for m in members:
            if (why := packable(m)) is not None:
                raise ValueError(f"cannot pack {why}")
        template = members[0]
        self.K = len(members)
        self.cfg = template.cfg
        self.shell = copy.deepcopy(template)  # before the members' weights move into the pack
        self.shell.compiled_blocks = None
        self.packed = nn.ParameterDict()
        self._names: dict[str, str] = {}  # parameter name → ParameterDict key
        for name, _ in template.named_parameters():
            stacked = torch.stack([m.get_parameter(name).detach() for m in members])
            key = name.replace(".", "__")
            self.packed[key] = nn.Parameter(stacked)
            self._names[name] = key
            for k, m in enumerate(members):  # each member's weights live in its row of the pack
                m.get_parameter(name).data = self.packed[key].data[k]
        self.member_params = [[m.get_parameter(name) for name in self._names] for m in members]
        self._swap_modules()

    def _swap_modules(self) -> None:
        """Each module of the shell with parameters reads them from the pack (module docstring)."""
        for path, module in list(self.shell.named_modules()):
            own = dict(module.named_parameters(recurse=False))
            if not own:
                continue
            if module is self.shell.tok_emb or module is self.shell.pos_emb:  # read by `embed` and the head
                module._parameters.clear()
                continue
            full = {attr: self._names[f"{path}.{attr}" if path else attr] for attr in own}
            if isinstance(module, nn.Linear):
                replacement = PackedLinear(self, full["weight"], full.get("bias"))
            elif isinstance(module, LayerNorm):
                replacement = PackedLayerNorm(self, full["weight"], full["bias"], module.eps)
            elif isinstance(module, (BatchNorm, nn.modules.batchnorm._BatchNorm)):
                raise ValueError("cannot pack norm=batch")
            else:
                for attr in own:
                    del module._parameters[attr]
                _broadcast_params(self, module, full)
                continue
            parent_path, _, attr = path.rpartition(".")
            parent = self.shell.get_submodule(parent_path) if parent_path else self.shell
            if isinstance(parent, (nn.ModuleList, nn.Sequential)):
                parent[int(attr)] = replacement
            else:
                setattr(parent, attr, replacement)
        for p in self.shell.parameters():  # none should be left: every weight is the pack's
            raise ValueError(f"cannot pack: a parameter of shape {tuple(p.shape)} stayed outside the pack")

    def member_grads_to_members(self, members: Sequence[int]) -> None:
        """Each listed member's parameters get their gradients as views of the pack's."""
        keys = list(self._names.values())
        for k in members:
            for p, key in zip(self.member_params[k], keys):
                g = self.packed[key].grad
                p.grad = None if g is None else g[k]

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """GPT.embed for every member: (K, B, T) → (K, B, T, C)."""
        tok_table = self.packed[self._names["tok_emb.weight"]]
        K, V, C = tok_table.shape
        offsets = (torch.arange(K, device=idx.device) * V).view(K, 1, 1)
        tok = F.embedding(idx + offsets, tok_table.reshape(K * V, C))
        pos = self.packed[self._names["pos_emb.weight"]][:, : idx.shape[-1]].unsqueeze(1)
        shell = self.shell
        if shell.scale_positions:
            return (tok + pos) * shell.embed_scale
        return tok * shell.embed_scale + pos

    def forward(self, idx: torch.Tensor, targets: torch.Tensor, z_loss: Sequence[float] | float = 0.0) -> torch.Tensor:
        shell = self.shell
        x = shell.policy.enter(self.embed(idx))
        for block in shell.blocks:
            x = block(x)
        h = shell.final_norm(x)
        K, B, T, C = h.shape
        table = self.packed[self._names["tok_emb.weight"]]
        logits = torch.bmm(h.reshape(K, B * T, C), table.transpose(1, 2))  # the tied head, per member
        if self.cfg.logit_softcap:
            logits = softcap(logits, self.cfg.logit_softcap)
        z = list(z_loss) if isinstance(z_loss, Sequence) else [z_loss] * K
        losses = []
        for k in range(K):  # GPT.forward's loss on member k's rows
            flat, tk = logits[k].float(), targets[k].flatten()
            loss = F.cross_entropy(flat, tk, ignore_index=IGNORE_TARGET)
            if z[k]:
                kept = tk != IGNORE_TARGET
                loss = loss + z[k] * torch.logsumexp(flat[kept], dim=-1).pow(2).mean()
            losses.append(loss)
        return torch.stack(losses)
