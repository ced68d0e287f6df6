"""The GPT itself, read top to bottom as nanoGPT's: a Block wraps each sublayer in the run's
placement; the GPT embeds the tokens, runs the blocks, applies the final norm where the
placement needs one, and reads the logits through a head tied to the token embedding. What the
placement decides for the whole model (the stream entering the blocks, the final module, a logit
scale, the optimizer's groups, a hook after each step) the GPT asks its policy, built once.

One `ModelConfig` drives everything. A norm, a placement or an init is a small class picked
by name from `NORMS` (norms/), `PLACEMENTS` (placements/) or `INITS` (inits.py); its
settings are those of its settings class (config/variants/, torch-free: the pre-flight asks it
without building a model), their values those of its own config file
(configs/norm/<name>.yaml, ...) where the config leaves them out (config/registry.py's
`variant`, the one place that fills them):

    NORMS[name](d_model, **settings)
    PLACEMENTS[name](sublayer, make_norm, index=block, depth=layers, **settings)
    PLACEMENTS[name].model_policy(last placement)     # the model-level half (placements/base.py)

(`make_norm(width=d_model)` makes a fresh norm of the run's type.)
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Iterator

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config.registry import variant
from ..config.model_config import ModelConfig
from .inits import INITS
from .layers import MLP, CausalSelfAttention, CrossAttention, softcap
from .norms import NORMS
from .placements import PLACEMENTS, ModelPolicy, Placement
from .readouts import Readout, _first, _second, read_outputs


# ATEN_CPU_CAPABILITY's values and the SIMD width (bits) inductor's C++ code is written for at each.
_SIMD_BITS = {"default": 1, "avx2": 256, "avx512": 512}


def key_inductor_cache_by_cpu_capability() -> None:
    """Name inductor's CPU vector width when ATEN_CPU_CAPABILITY asks for one. Inductor picks its
    width from that variable but leaves the variable out of its cache key, so kernels cached under
    one setting fail to compile under another ("'at::vec' has not been declared", torch 2.13);
    a width in its config is part of the key. A width the user set is left alone."""
    import torch._inductor.config as inductor_config  # here: importing inductor costs ~0.8 s, paid only by compile=true

    bits = _SIMD_BITS.get(os.environ.get("ATEN_CPU_CAPABILITY", "").lower())
    if bits is not None and inductor_config.cpp.simdlen is None:
        inductor_config.cpp.simdlen = bits


class Block(nn.Module):
    """One Transformer block, every sublayer wrapped in the run's placement:

        x ─> placement(self-attention) ─> [placement(cross-attention to memory)] ─> placement(MLP) ─> x

    `readouts()` names what an instrument may read of it (see `Readout`)."""

    def __init__(self, cfg: ModelConfig, wrap, causal: bool = True, cross_attention: bool = False, make_qk_norm=None):
        super().__init__()
        self.attn = wrap(CausalSelfAttention(cfg, causal, make_qk_norm))
        self.cross = wrap(CrossAttention(cfg)) if cross_attention else None
        self.mlp = wrap(MLP(cfg))

    def forward(self, x, memory=None):
        x, _ = self.attn(x)
        if self.cross is not None:
            x, _ = self.cross(x, memory)
        x, _ = self.mlp(x)
        return x

    def sublayers(self) -> list[Placement]:
        return [p for p in (self.attn, self.cross, self.mlp) if p is not None]

    def readouts(self) -> dict[str, Readout]:
        """The stream leaving the block (the placement's `residual` view of it: x_a under
        ResiDual), each sublayer's contribution as it joins the stream (second output of the
        placement), and the self-attention's queries and keys."""
        return {"block": Readout(self, self.mlp.residual), "attn_out": Readout(self.attn, _second), "mlp_out": Readout(self.mlp, _second),
                **self.attn.sublayer.readouts()}

    def residual_output_weights(self) -> dict[str, nn.Parameter]:
        """The matrices whose output joins the stream (init roles attn_out and mlp_out); the
        MLP's second matrix W₂ is the one Xiong et al.'s Fig. 3 plots the gradient of."""
        return {"attn_out": self.attn.sublayer.proj.weight, "mlp_out": self.mlp.sublayer.fc_out.weight}


# ----------------------------------------------------------------------------- GPT

IGNORE_TARGET = -100  # a target position that adds nothing to the loss


class GPT(nn.Module):
    """Token + position embeddings (scaled by √d: their sum, or the token embedding alone as
    the init scheme's `scale_positions` says), `layers` blocks, the final norm where the
    placement needs one, and a head tied to the token embedding. `causal=False` and
    `cross_attention=True` build the encoder and the decoder of an encoder-decoder model.
    `policy` is the placement's model-level half (`ModelPolicy`): what enters and leaves the
    blocks, the logit scale, the optimizer's groups, the hook after each step."""

    def __init__(self, cfg: ModelConfig, causal: bool = True, cross_attention: bool = False):
        super().__init__()
        norm_cls, norm_settings = variant(NORMS, "norm", cfg.norm)
        placement_cls, placement_settings = variant(PLACEMENTS, "placement", cfg.placement)
        make_norm = lambda width=cfg.d_model: norm_cls(width, **norm_settings)  # noqa: E731
        make_qk_norm = (lambda: norm_cls(cfg.d_model // cfg.heads, **norm_settings)) if cfg.qk_norm else None
        init_cls, init_settings = variant(INITS, "init", cfg.init)
        self.init_scheme = init_cls(cfg.d_model, cfg.layers, **init_settings)
        self.cfg = cfg
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(
            Block(cfg, lambda f, i=i: placement_cls(f, make_norm, index=i, depth=cfg.layers, **placement_settings),
                  causal, cross_attention, make_qk_norm)
            for i in range(cfg.layers))
        self.policy: ModelPolicy = placement_cls.model_policy(self.blocks[-1].mlp)  # holds no parameters
        self.final_norm = self.policy.make_final(make_norm)  # a Norm, the identity, or ResiDual's output
        self.logit_scale = self.policy.make_logit_scale(cfg.vocab_size)  # None, or nGPT's s_z
        self.register_buffer("positions", torch.arange(cfg.seq_len), persistent=False)
        self.embed_scale = math.sqrt(cfg.d_model) if cfg.scale_embeddings else 1.0
        self.scale_positions = self.init_scheme.scale_positions  # what √d multiplies: tok + pos, or tok alone
        self.compiled_blocks: list | None = None  # compile_blocks(): what `hidden` runs instead of the blocks
        self._init_weights()

    def _init_weights(self):
        """Embeddings and matrices drawn by the init scheme (xavier by default: embeddings
        N(0, 1/d), multiplied by √d on the way in as in Vaswani et al. 2017, so the stream
        entering block 0 has unit-scale entries as Xiong et al.'s analysis assumes, and
        Xavier-normal matrices; see `embed` for what √d multiplies), zero biases, each placement's gain on value, output and MLP
        matrices. A placement that profiles (Admin) is set afterwards by `calibrate`."""
        self.init_scheme.embedding(self.tok_emb.weight)
        self.init_scheme.embedding(self.pos_emb.weight)
        for index, block in enumerate(self.blocks):
            for wrapper in block.sublayers():
                wrapper.sublayer.init_weights(wrapper.init_gain, self.init_scheme, index)
        self.after_optimizer_step()  # what the placement keeps after every step holds from the start (nGPT)

    @torch.no_grad()
    def calibrate(self, idx: torch.Tensor) -> bool:
        """The profiling forward pass of placements that need one (Admin): each is set to its
        profiling state (`start_calibration`), its sublayer's output variance is recorded, then
        each is told the variance the stream has gathered before it, Var[x_0] + Σ_{j<i} Var[F_j],
        in the order the stream meets them (`calibrate`). BatchNorm uses its batch statistics but keeps its running
        ones. Returns whether anything was calibrated."""
        wrappers = [w for b in self.blocks for w in b.sublayers() if w.needs_calibration]
        if not wrappers:
            return False
        batch_norms = [m for m in self.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        saved = [{k: v.clone() for k, v in m.state_dict().items()} for m in batch_norms]
        for w in wrappers:
            w.start_calibration()
        readouts = {"embed": [self.readouts()["embed"][0]], "added": [Readout(w, _second) for w in wrappers]}
        with read_outputs(readouts) as read:
            self.hidden(idx)
        total = read["embed"][0].float().var(unbiased=False).item()
        for w, added in zip(wrappers, read["added"]):
            w.calibrate(total)
            total += added.float().var(unbiased=False).item()
        for m, state in zip(batch_norms, saved):
            m.load_state_dict(state)
        return True

    def compile_blocks(self) -> None:
        """compile=true: a regional compile, each block through `torch.compile` on its own. The
        blocks share their code, so dynamo traces it once and every block reuses the graph with
        its own weights as inputs (a whole-model compile would unroll all `layers` blocks into
        one graph: minutes at 1,000). The blocks stay the eager modules they were: parameter
        names, checkpoints and the instruments' hooks are unchanged, and a forward inside
        `eager()` (the instruments' recording ones) does not use the compiled code. Inductor's
        fused kernels round differently from eager, so losses agree to float tolerance, not bit for bit."""
        key_inductor_cache_by_cpu_capability()
        self.compiled_blocks = [torch.compile(block) for block in self.blocks]

    @contextlib.contextmanager
    def eager(self) -> Iterator[None]:
        """Within the block, forwards run the uncompiled blocks (forward hooks see every module)."""
        compiled, self.compiled_blocks = self.compiled_blocks, None
        try:
            yield
        finally:
            self.compiled_blocks = compiled

    def after_optimizer_step(self) -> None:
        """The placement's hook after each optimizer step (`ModelPolicy.after_optimizer_step`)."""
        self.policy.after_optimizer_step(self)

    def param_groups(self, lr: float, eps: float) -> list[dict]:
        """The optimizer's parameter groups, as the placement's policy says (`ModelPolicy.param_groups`):
        one group at lr and ε, or depth_mup's depth-scaled lr and ε for the blocks."""
        return self.policy.param_groups(self, lr, eps)

    def settings(self) -> dict:
        """The norm's and the placement's settings as built ("auto" resolved), read from the
        modules themselves: {"norm": {...}, "placement": {...}}."""
        first = self.blocks[0].mlp
        norms = [m for m in self.modules() if type(m) in NORMS.values()]
        return {"norm": norms[0].resolved() if norms else {}, "placement": first.resolved()}

    def embed(self, idx: torch.Tensor) -> torch.Tensor:
        """The stream entering block 0: (tok + pos)·√d, or tok·√d + pos where the init scheme's
        `scale_positions` is false (fairseq's and torchscale's order); with `scale_embeddings`
        false, tok + pos unscaled (GPT-2, OLMo).

        The √d is a model setting (train.yaml's `scale_embeddings`), not a norm's or an init's:
        it multiplies the stream entering block 0 at every step, so it belongs to the forward
        pass of the model, not to one norm type (rms_gemma may be combined with it or not, and
        Vaswani et al. use it with LayerNorm) nor to the weights' starting draw (an init only
        says where the weights begin; `scale_positions` stays with the inits because the
        torchscale init copies its reference code's forward as a whole)."""
        tok, pos = self.tok_emb(idx), self.pos_emb(self.positions[: idx.shape[1]])
        if self.scale_positions:
            return (tok + pos) * self.embed_scale
        return tok * self.embed_scale + pos

    def hidden(self, idx: torch.Tensor, memory: torch.Tensor | None = None) -> torch.Tensor:
        """The final hidden state (B, T, d). `memory`: the encoder output, for cross-attention."""
        x = self.embed(idx)
        x = self.policy.enter(x)  # the stream: x itself, ResiDual's pair, or nGPT's x/‖x‖
        for block in self.compiled_blocks or self.blocks:
            x = block(x, memory)
        return self.final_norm(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None,
                memory: torch.Tensor | None = None, z_loss: float = 0.0):
        """(logits, loss): logits through the tied head, soft-capped (c·tanh(z/c)) when
        logit_softcap is set, so the loss, the z-loss and the log Z signal all see the capped
        logits; with targets, the mean cross-entropy (nats/token) over the targets that are not
        IGNORE_TARGET, plus z_loss·mean((log Z)²) over the same tokens when z_loss > 0 (PaLM,
        Chowdhery et al. 2022; Wortsman et al. 2023), Z = Σ_v e^logit_v; loss None without targets."""
        h = self.hidden(idx, memory)
        logits = h @ self.tok_emb.weight.t()
        if self.logit_scale is not None:
            logits = self.logit_scale(logits)
        if self.cfg.logit_softcap:  # None or 0: off
            logits = softcap(logits, self.cfg.logit_softcap)
        loss = None
        if targets is not None:
            flat = logits.flatten(0, 1).float()
            loss = F.cross_entropy(flat, targets.flatten(), ignore_index=IGNORE_TARGET)
            if z_loss:
                kept = targets.flatten() != IGNORE_TARGET
                loss = loss + z_loss * torch.logsumexp(flat[kept], dim=-1).pow(2).mean()
        return logits, loss

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def readouts(self) -> dict[str, list[Readout]]:
        """What an instrument may read, {name: one Readout per place}: `embed`, the stream
        entering block 0 (embeddings scaled by √d); per block, `block`, `attn_out`, `mlp_out`,
        `queries`, `keys` (see Block.readouts); `final`, the final hidden state; `logits`."""
        per_block = [block.readouts() for block in self.blocks]
        enter_view = self.blocks[0].attn.residual  # ResiDual's block 0 receives the pair (x, x)
        return {"embed": [Readout(self.blocks[0], lambda inputs: enter_view(inputs[0]), read="input")],
                **{name: [r[name] for r in per_block] for name in per_block[0]},
                "final": [Readout(self.final_norm)], "logits": [Readout(self, _first)]}

    def residual_output_weights(self) -> dict[str, list[nn.Parameter]]:
        """{"attn_out": [W_O per block], "mlp_out": [W₂ per block]} (Block.residual_output_weights)."""
        per_block = [block.residual_output_weights() for block in self.blocks]
        return {role: [w[role] for w in per_block] for role in per_block[0]}
