"""The two halves of a placement: `Placement`, one sublayer's residual rule (built around every
sublayer of every block), and `ModelPolicy`, what the placement decides once for the whole model
(the stream entering the blocks, the final module, a logit scale, the optimizer's parameter
groups, a hook after each optimizer step). A placement names its policy (`Placement.model_policy`,
the standard `ModelPolicy` by default); the GPT builds that policy once and asks it, never one
chosen sublayer. OLMo-core separates its block variants from its model variants the same way."""

from __future__ import annotations

import torch
import torch.nn as nn

PLACEMENTS: dict[str, type[Placement]] = {}
# the run's model settings a placement may read or leave unread (Placement.reads)
MODEL_SETTINGS = ("norm", "qk_norm", "scale_embeddings")


class ModelPolicy:
    """The model-level half of a placement: what the GPT asks once, for the whole model.

        embedded x ─enter─> stream ─blocks─> stream ─make_final─> hidden ─tied head─> logits ─logit scale─> loss

    * Built as `cls(last)` by the GPT after its blocks: `last` is the placement of the last
      block's last sublayer, the one whose output the final module receives (every placement of
      a run shares its settings and depth, so a policy reads the numbers it needs there).
    * `enter(x)`: the stream entering block 0 from the embedded input x (the tensor itself by
      default; ResiDual's pair (x, x); nGPT's x/‖x‖).
    * `make_final(make_norm)`: the module that maps the last block's stream to the final hidden
      state: a Norm where `last.needs_final_norm` says so, else the identity (by default).
    * `make_logit_scale(vocab_size)`: a module the logits pass through before the loss (nGPT's
      learned s_z), or None (the default: no call).
    * `param_groups(model, lr, eps)`: the optimizer's parameter groups, each {"params", "lr",
      "lr_scale", "eps"} and, where the policy decides it, "weight_decay" (lr = the run's lr ×
      lr_scale; the lr schedule keeps each group's lr_scale): one group of every parameter at lr
      and ε by default. The training loop splits each group into decaying and non-decaying
      parameters (a group's own weight_decay wins).
    * `after_optimizer_step(model)`: runs after every optimizer step, and once when the model's
      weights are drawn (nGPT renormalizes every matrix there); nothing by default.

    A policy holds no parameters of its own (its modules, a final norm or a logit scale, are the
    GPT's, under the GPT's names), so checkpoints do not see it.
    """

    def __init__(self, last: Placement):
        self.needs_final_norm = last.needs_final_norm

    def enter(self, x: torch.Tensor):
        return x

    def make_final(self, make_norm) -> nn.Module:
        return make_norm() if self.needs_final_norm else nn.Identity()

    def make_logit_scale(self, vocab_size: int) -> nn.Module | None:
        return None

    def param_groups(self, model: nn.Module, lr: float, eps: float) -> list[dict]:
        return [{"params": list(model.parameters()), "lr": lr, "lr_scale": 1.0, "eps": eps}]

    def after_optimizer_step(self, model: nn.Module) -> None:
        pass


class Placement(nn.Module):
    """Where the norm sits around one sublayer F (attention, cross-attention or MLP): the
    contract every placement keeps.

        x ──┬── norms and F, as the placement says ──> contribution ──(+)──> new x
            └──────────────── residual (maybe scaled, maybe normed after) ──┘

    * Built as `cls(sublayer, make_norm, index=l, depth=L, **settings)`: `sublayer` is F, a
      `Sublayer` (it maps width `F.d_model` to itself), `make_norm()` makes a fresh norm of the run's type
      (`make_norm(width)` one of another width), `index` is the block's position
      (0 = nearest the input) and `depth` the number of blocks; `settings` are the
      keyword-only parameters, one per key of configs/placement/<name>.yaml, with no default
      values in the signature (the yaml holds them; `variant` fills them in).
    * `forward(x, *context)` returns (new residual stream, contribution): the contribution is
      F's output as it joins the stream (the attn_out_std / mlp_out_std instruments read it);
      `context` (the encoder output, for cross-attention) goes to F unchanged.
    * `needs_final_norm`: whether the stream leaving this sublayer is unnormalized, so that
      the model must add a Norm after the last block (Pre-LN does, Post-LN does not); the
      standard `ModelPolicy` reads it.
    * `init_gain`: the Xavier gain the placement wants for F's value, output and MLP
      matrices (query and key keep gain 1); DeepNorm's β.
    * `resolved()`: the numbers it actually uses ("auto" worked out), for summary.json.
    * `needs_calibration`: whether it is set by a profiling forward pass at initialisation
      (`GPT.calibrate`): then `start_calibration()` readies it for that pass and
      `calibrate(variance)` sets it from the variance of the stream entering it.
    * `residual(stream)`: the tensor the instruments read as the residual stream (act_std) in
      the stream this placement's forward takes and returns: the stream itself by default
      (ResiDual's stream is a pair, read as its first element).
    * `model_policy`: the class of its model-level half (`ModelPolicy`, above): the standard
      one unless the placement changes what enters or leaves the blocks, the optimizer's
      groups, or what happens after a step.
    * `reads`: which of the run's model settings outside its own node (MODEL_SETTINGS: the norm
      type, qk_norm, scale_embeddings) change what it computes: all by default; a placement that
      builds no norm (ReZero) or replaces them (nGPT) leaves them out, and the pre-flight refuses
      a value other than the default for a setting that nothing reads (model/gpt.py
      `check_settings_read`): it would train the same run under another name.
    * `sublayer` is a `Sublayer` (layers.py): its `norm_slots` declare where a placement may
      put norms of its own inside F (INNER_NORM, before the output projection; QKV_NORM, on
      queries, keys and values), filled with `sublayer.fill_slot(slot, norms)`; a placement
      reads the declaration, never probes attributes. An unfilled slot is None and costs one
      `is None` test and no call.
    * `unpackable`: why a pack (model/packed.py) cannot compute this placement as its members
      would alone, in a few words (nGPT: its renormalization after each step and its logit
      scale); None (the default) where it can. `pack_refusal` refuses it with that reason in its
      one line, and such a run trains alone.
    """

    needs_final_norm = True
    needs_calibration = False
    init_gain = 1.0
    model_policy: type[ModelPolicy] = ModelPolicy
    reads: frozenset[str] = frozenset(MODEL_SETTINGS)
    unpackable: str | None = None

    def resolved(self) -> dict:
        return {}

    @staticmethod
    def residual(stream) -> torch.Tensor:
        return stream
