"""The two halves of a placement: `Placement`, one sublayer's residual rule (built around every
sublayer of every block), and `ModelPolicy`, what the placement decides once for the whole model
(the stream entering the blocks, the final module, a logit scale, the optimizer's parameter
groups, a hook after each optimizer step). A placement names its policy (`Placement.model_policy`,
the standard `ModelPolicy` by default); the GPT builds that policy once and asks it, never one
chosen sublayer. OLMo-core separates its block variants from its model variants the same way."""

from __future__ import annotations

import torch
import torch.nn as nn

from ...config.variants import PlacementSettings

PLACEMENTS: dict[str, type[Placement]] = {}


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
      (0 = nearest the input) and `depth` the number of blocks; `settings` are the keyword-only
      parameters of its settings class, `Settings` (config/variants/placements/<name>.py, registered
      there by the same name), one per key of configs/placement/<name>.yaml (the yaml holds
      their values; `variant` fills them in). `Placement.__init__(depth, **settings)` builds
      `self.settings` from them (a bad value is refused by the one rule the pre-flight asks too)
      and `self.numbers`, the numbers it uses for this depth ("auto" worked out there).
    * `forward(x, *context)` returns (new residual stream, contribution): the contribution is
      F's output as it joins the stream (the attn_out_std / mlp_out_std instruments read it);
      `context` (the encoder output, for cross-attention) goes to F unchanged.
    * `needs_final_norm`: whether the stream leaving this sublayer is unnormalized, so that
      the model must add a Norm after the last block (Pre-LN does, Post-LN does not); the
      standard `ModelPolicy` reads it.
    * `init_gain`: the Xavier gain the placement wants for F's value, output and MLP
      matrices (query and key keep gain 1); DeepNorm's β.
    * `resolved()`: the numbers it actually uses (`self.numbers`), for summary.json.
    * `needs_calibration`: whether it is set by a profiling forward pass at initialisation
      (`GPT.calibrate`): then `start_calibration()` readies it for that pass and
      `calibrate(variance)` sets it from the variance of the stream entering it.
    * `residual(stream)`: the tensor the instruments read as the residual stream (act_std) in
      the stream this placement's forward takes and returns: the stream itself by default
      (ResiDual's stream is a pair, read as its first element).
    * `model_policy`: the class of its model-level half (`ModelPolicy`, above): the standard
      one unless the placement changes what enters or leaves the blocks, the optimizer's
      groups, or what happens after a step.
    * What the pre-flight and the packs ask without building a model is declared on its
      settings class: `reads` (which of the run's model settings outside its own node change
      what it computes) and `unpackable` (why a pack, model/packed.py, cannot compute it).
    * `sublayer` is a `Sublayer` (layers.py): its `norm_slots` declare where a placement may
      put norms of its own inside F (INNER_NORM, before the output projection; QKV_NORM, on
      queries, keys and values), filled with `sublayer.fill_slot(slot, norms)`; a placement
      reads the declaration, never probes attributes. An unfilled slot is None and costs one
      `is None` test and no call.
    """

    Settings: type[PlacementSettings] = PlacementSettings
    needs_final_norm = True
    needs_calibration = False
    init_gain = 1.0
    model_policy: type[ModelPolicy] = ModelPolicy

    def __init__(self, depth: int, **settings):
        super().__init__()
        self.settings = self.Settings(**settings)
        self.numbers = self.settings.resolved(depth)

    def resolved(self) -> dict:
        return dict(self.numbers)

    @staticmethod
    def residual(stream) -> torch.Tensor:
        return stream
