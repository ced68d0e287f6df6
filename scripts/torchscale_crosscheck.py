#!/usr/bin/env python
"""Cross-check `init=torchscale` against the DeepNet reference code itself (issue 30).

Trains torchscale 0.3's `Decoder` (its own init, built as torchscale's fairseq language-model
example builds it) and normexp with `init=torchscale` on one protocol, and prints, per row,
both implementations' final validation loss for each seed and whether the run learned or
stalled against the unigram baseline as normexp judges it (`stall_margin`).

Protocol (issue 30): byte-level Shakespeare (normexp's data=shakespeare, its held-out works),
d_model 64, 4 heads, seq 64, batch 16, 400 steps, constant lr, no warmup, AdamW (0.9, 0.98),
eps 1e-8, weight decay 0.01 on matrices only, no clipping, tied output embedding, learned
positions, GELU, no dropout, LayerNorm eps 1e-5, one thread. Both see the same batches (the
reference is fed by normexp's own data stream for the seed) and are judged on the same
validation batches.

An optional developer tool, not a dependency of the package or of the tests. torchscale
imports fairscale and timm; install into a venv of your own (not an unpinned torch):

    pip install torchscale==0.3.0 --no-deps && pip install fairscale --no-deps
    python scripts/torchscale_crosscheck.py                      # the issue's table, seeds 0 and 1
    python scripts/torchscale_crosscheck.py --rows post:6:3e-3 --seeds 0 --steps 100
    python scripts/torchscale_crosscheck.py --weights normexp   # the reference from normexp's draws

timm (for `drop_path`, used only with drop_path_rate > 0) is replaced by a shim here.
tests/model/test_torchscale_reference.py uses `reference_decoder` and `copy_into_normexp` for the
weight-copy equivalence test.

The reference as built here (torchscale 0.3.0, read in its source):
* `DecoderConfig(no_scale_embedding=False, share_decoder_input_output_embed=True, ...)`: the
  token embedding is multiplied by √d, the learned positions are added unscaled
  (`Decoder.forward_embedding`); the head is the token embedding, no bias.
* token embedding: torchscale's `TextEmbedding`, N(0, 1/d). Positions: fairseq's learned
  positional embedding as the LM example passes it (fairseq's `PositionalEmbedding(...,
  learned=True)`): padding_idx + 1 + T rows drawn N(0, 1/d), the padding row zeroed, position
  t read from row padding_idx + 1 + t (fairseq's dictionary pads with 1: rows from 2).
  torchscale's own `PositionalEmbedding` class has the same offset of 2; drawn by
  `nn.Embedding`'s default it would be N(0, 1) instead, which fairseq's factory replaces.
* every `nn.Linear` keeps its default init: `MultiheadAttention.reset_parameters` (fairseq's
  Xavier init of q, k, v, out) is defined but never called. DeepNorm divides the weights and
  biases of v_proj, out_proj, fc1, fc2 by (8N)^¼ and scales the residual by (2N)^¼.
* Post-LN: decoder_normalize_before=False and subln=False (torchscale's default subln=True
  would force Pre-LN + Sub-LN); no final LayerNorm. Pre-LN: a final LayerNorm.
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
import types
from pathlib import Path

import torch
import torch.nn as nn

# ------------------------------------------------------------------ the reference


def drop_path(x: torch.Tensor, drop_prob: float = 0.0, training: bool = False) -> torch.Tensor:
    """Stochastic depth per sample (Huang et al. 2016), what torchscale imports from timm:
    zero a sample's branch with probability p, scale the kept ones by 1/(1−p)."""
    if drop_prob == 0.0 or not training:
        return x
    keep = 1.0 - drop_prob
    mask = x.new_empty((x.shape[0],) + (1,) * (x.dim() - 1)).bernoulli_(keep)
    return x * mask / keep


def install_timm_shim() -> None:
    """torchscale.component.droppath does `from timm.models.layers import drop_path`; timm
    brings heavy dependencies, so where it is missing a module holding `drop_path` stands in."""
    try:
        import timm.models.layers  # noqa: F401
        return
    except ImportError:
        pass
    timm, models, layers = (types.ModuleType(n) for n in ("timm", "timm.models", "timm.models.layers"))
    layers.drop_path = drop_path
    timm.models, models.layers = models, layers
    sys.modules.update({"timm": timm, "timm.models": models, "timm.models.layers": layers})


def torchscale_missing() -> str | None:
    """Why the reference cannot be built here (None: it can)."""
    install_timm_shim()
    try:
        import fairscale  # noqa: F401
        import torchscale.architecture.decoder  # noqa: F401
    except ImportError as e:
        return (f"torchscale cannot be imported ({e}); install it with `pip install torchscale==0.3.0 --no-deps` "
                "and `pip install fairscale --no-deps`")
    return None


PLACEMENT_FLAGS = {  # normexp placement → DecoderConfig flags (subln defaults to True in torchscale)
    "post": dict(decoder_normalize_before=False, subln=False, deepnorm=False),
    "pre": dict(decoder_normalize_before=True, subln=False, deepnorm=False),
    "deepnorm": dict(deepnorm=True, subln=False),
}
POSITION_OFFSET = 2  # fairseq: padding_idx (1) + 1


def reference_decoder(placement: str, layers: int, d_model: int, heads: int, vocab_size: int, seq_len: int,
                      mlp_ratio: int = 4):
    """torchscale's Decoder with its own init, as its fairseq LM example builds it (see above)."""
    install_timm_shim()
    from torchscale.architecture.config import DecoderConfig
    from torchscale.architecture.decoder import Decoder
    from torchscale.component.embedding import PositionalEmbedding, TextEmbedding

    config = DecoderConfig(decoder_embed_dim=d_model, decoder_attention_heads=heads,
                           decoder_ffn_embed_dim=mlp_ratio * d_model, decoder_layers=layers, vocab_size=vocab_size,
                           activation_fn="gelu", dropout=0.0, attention_dropout=0.0, activation_dropout=0.0,
                           drop_path_rate=0.0, layernorm_eps=1e-5, no_scale_embedding=False,
                           share_decoder_input_output_embed=True, max_target_positions=seq_len,
                           **PLACEMENT_FLAGS[placement])
    tokens = TextEmbedding(vocab_size, d_model)  # N(0, 1/d)
    positions = PositionalEmbedding(seq_len + POSITION_OFFSET, d_model, padding_idx=POSITION_OFFSET - 1)
    nn.init.normal_(positions.weight, std=d_model ** -0.5)  # fairseq's learned positional embedding
    with torch.no_grad():
        positions.weight[POSITION_OFFSET - 1].zero_()
    return Decoder(config, embed_tokens=tokens, embed_positions=positions)


def reference_logits(decoder, idx: torch.Tensor) -> torch.Tensor:
    return decoder(idx)[0]


def normexp_model(placement: str, layers: int, d_model: int, heads: int, vocab_size: int, seq_len: int,
                  overrides=()):
    """normexp's GPT with init=torchscale, composed as `normexp train` composes it."""
    from normexp.config.compose import compose_config
    from normexp.model import GPT, ModelConfig

    cfg = compose_config([f"placement={placement}", "init=torchscale", "norm=layer", f"layers={layers}",
                          f"d_model={d_model}", f"heads={heads}", f"seq_len={seq_len}", *overrides])
    return GPT(ModelConfig.from_composed(cfg, vocab_size))


@torch.no_grad()
def copy_into_normexp(decoder, model) -> None:
    """Load the reference's weights into a normexp GPT of the same shape; every normexp
    parameter is written (strict), so a renamed or added one fails loudly."""
    seq_len = model.pos_emb.weight.shape[0]
    state = {"tok_emb.weight": decoder.embed_tokens.weight,
             "pos_emb.weight": decoder.embed_positions.weight[POSITION_OFFSET: POSITION_OFFSET + seq_len]}
    for i, layer in enumerate(decoder.layers):
        a, f = layer.self_attn, layer.ffn
        ours = f"blocks.{i}."
        state.update({
            ours + "attn.sublayer.qkv.weight": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
            ours + "attn.sublayer.qkv.bias": torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]),
            ours + "attn.sublayer.proj.weight": a.out_proj.weight, ours + "attn.sublayer.proj.bias": a.out_proj.bias,
            ours + "attn.norm.weight": layer.self_attn_layer_norm.weight, ours + "attn.norm.bias": layer.self_attn_layer_norm.bias,
            ours + "mlp.sublayer.fc_in.weight": f.fc1.weight, ours + "mlp.sublayer.fc_in.bias": f.fc1.bias,
            ours + "mlp.sublayer.fc_out.weight": f.fc2.weight, ours + "mlp.sublayer.fc_out.bias": f.fc2.bias,
            ours + "mlp.norm.weight": layer.final_layer_norm.weight, ours + "mlp.norm.bias": layer.final_layer_norm.bias,
        })
    if decoder.layer_norm is not None:
        state.update({"final_norm.weight": decoder.layer_norm.weight, "final_norm.bias": decoder.layer_norm.bias})
    model.load_state_dict({k: v.detach().clone() for k, v in state.items()}, strict=True)


@torch.no_grad()
def copy_into_reference(model, decoder) -> None:
    """The other direction: a normexp GPT's weights into the reference (`copy_into_normexp`'s
    map inverted); the position rows the model never reads (fairseq's offset) stay as drawn."""
    ours = model.state_dict()
    seq_len = model.pos_emb.weight.shape[0]
    decoder.embed_tokens.weight.copy_(ours["tok_emb.weight"])
    decoder.embed_positions.weight[POSITION_OFFSET: POSITION_OFFSET + seq_len].copy_(ours["pos_emb.weight"])
    for i, layer in enumerate(decoder.layers):
        a, f, block = layer.self_attn, layer.ffn, f"blocks.{i}."
        for proj, w, b in zip((a.q_proj, a.k_proj, a.v_proj), ours[block + "attn.sublayer.qkv.weight"].chunk(3),
                              ours[block + "attn.sublayer.qkv.bias"].chunk(3)):
            proj.weight.copy_(w)
            proj.bias.copy_(b)
        for module, key in ((a.out_proj, "attn.sublayer.proj"), (layer.self_attn_layer_norm, "attn.norm"),
                            (f.fc1, "mlp.sublayer.fc_in"), (f.fc2, "mlp.sublayer.fc_out"),
                            (layer.final_layer_norm, "mlp.norm")):
            module.weight.copy_(ours[block + key + ".weight"])
            module.bias.copy_(ours[block + key + ".bias"])
    if decoder.layer_norm is not None:
        decoder.layer_norm.weight.copy_(ours["final_norm.weight"])
        decoder.layer_norm.bias.copy_(ours["final_norm.bias"])


def reference_parameters(decoder) -> dict[str, list[nn.Parameter]]:
    """For every normexp parameter name, the reference parameters that hold its values (the
    weight map of `copy_into_normexp`): one each, except the fused qkv (q, k, v stacked) and the
    positions (normexp's rows are rows POSITION_OFFSET.. of the reference's table). Every
    reference parameter appears exactly once; the output head is the token embedding in both."""
    mapped = {"tok_emb.weight": [decoder.embed_tokens.weight], "pos_emb.weight": [decoder.embed_positions.weight]}
    for i, layer in enumerate(decoder.layers):
        a, f, block = layer.self_attn, layer.ffn, f"blocks.{i}."
        for part in ("weight", "bias"):
            mapped[block + f"attn.sublayer.qkv.{part}"] = [getattr(m, part) for m in (a.q_proj, a.k_proj, a.v_proj)]
            for module, key in ((a.out_proj, "attn.sublayer.proj"), (layer.self_attn_layer_norm, "attn.norm"),
                                (f.fc1, "mlp.sublayer.fc_in"), (f.fc2, "mlp.sublayer.fc_out"),
                                (layer.final_layer_norm, "mlp.norm")):
                mapped[block + f"{key}.{part}"] = [getattr(module, part)]
    if decoder.layer_norm is not None:
        mapped.update({"final_norm.weight": [decoder.layer_norm.weight], "final_norm.bias": [decoder.layer_norm.bias]})
    listed = [id(p) for ps in mapped.values() for p in ps]
    assert sorted(listed) == sorted(id(p) for p in decoder.parameters()), "the map must cover each reference parameter once"
    return mapped


def reference_optimizer(decoder, lr: float, betas, eps: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW with normexp's rule (train.loop.decays): decay on matrices, not on norms, biases or
    embeddings (the tied head is the token embedding)."""
    named = list(decoder.named_parameters())
    decays = lambda n, p: p.dim() >= 2 and "embed" not in n  # noqa: E731
    groups = [{"params": [p for n, p in named if decays(n, p)], "weight_decay": weight_decay},
              {"params": [p for n, p in named if not decays(n, p)], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), eps=eps, foreach=True)


# ------------------------------------------------------------------ the protocol

PROTOCOL = ["d_model=64", "heads=4", "seq_len=64", "batch_size=16", "warmup=0", "schedule=constant",
            "grad_clip=null", "norm=layer", "init=torchscale", "threads=1", "log.progress=off",
            "checkpoint_every=0", "log_every=100", "eval_every=400"]
ISSUE_ROWS = ["post:6:1e-3", "post:6:2e-3", "post:6:3e-3", "post:6:5e-3", "post:12:1e-3",
              "deepnorm:6:1e-3", "deepnorm:6:2e-3", "deepnorm:6:3e-3"]


def protocol_config(placement: str, layers: int, lr: float, seed: int, steps: int, extra=()):
    from normexp.config.compose import compose_config

    return compose_config([*PROTOCOL, f"placement={placement}", f"layers={layers}", f"lr={lr}", f"seed={seed}",
                           f"steps={steps}", *extra])


def train_reference(cfg, corpus, weights: str = "own") -> float:
    """The reference Decoder trained on normexp's batches for the seed; the final validation
    loss on normexp's validation batches (`train.loop.validation_loss`'s stream). weights="own":
    its own init; "normexp": the weights normexp's run for this config starts from (so the
    two runs differ only by the implementation)."""
    from normexp.data.batches import get_batch
    from normexp.config.run_config import ScheduleConfig
    from normexp.model import GPT, ModelConfig
    from normexp.train.loop import generator, seed_everything
    from normexp.train.schedules import lr_multiplier

    torch.set_num_threads(int(cfg.threads))
    seed_everything(cfg.seed)
    decoder = reference_decoder(cfg.placement.name, cfg.layers, cfg.d_model, cfg.heads, corpus.vocab_size,
                                cfg.seq_len, cfg.mlp_ratio)
    if weights == "normexp":
        seed_everything(cfg.seed)  # as train.loop.Trainer does before it builds the model
        copy_into_reference(GPT(ModelConfig.from_composed(cfg, corpus.vocab_size)), decoder)
    opt = reference_optimizer(decoder, cfg.lr, cfg.optim.betas, cfg.optim.eps, cfg.optim.weight_decay)
    data = generator(cfg.seed, "data")
    schedule = ScheduleConfig.from_composed(cfg)
    decoder.train()
    for step in range(cfg.steps):
        for group in opt.param_groups:  # normexp's warmup and schedule (Trainer.set_lr), not a constant lr
            group["lr"] = cfg.lr * lr_multiplier(step, schedule.steps, schedule.effective_warmup, schedule)
        x, y = get_batch(corpus.train, cfg.batch_size, cfg.seq_len, data)
        logits = reference_logits(decoder, x)
        loss = nn.functional.cross_entropy(logits.flatten(0, 1).float(), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if not math.isfinite(loss.item()):
            return math.nan
        opt.step()
    decoder.eval()
    evaluation, total = generator(cfg.seed, "evaluation"), 0.0
    with torch.no_grad():
        for _ in range(cfg.eval_batches):
            x, y = get_batch(corpus.val, cfg.batch_size, cfg.seq_len, evaluation)
            total += nn.functional.cross_entropy(reference_logits(decoder, x).flatten(0, 1).float(), y.flatten()).item()
    return total / cfg.eval_batches


def train_normexp(cfg, work: Path) -> tuple[float, str]:
    """normexp's own training loop (`normexp train` in-process): final val loss and status."""
    from normexp.train.alone import train

    summary = train(cfg, work)
    return summary.get("final_val_loss", math.nan), summary["status"]


def outcome(loss: float, baseline: float, margin: float) -> str:
    from normexp.runs.summary import beat_baseline

    return "learned" if beat_baseline(loss, baseline, margin) else "stalled"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="+", default=ISSUE_ROWS, help="placement:layers:lr each (default: issue 30's)")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--set", nargs="*", default=[], dest="extra", help="more normexp overrides for both, e.g. data=text")
    parser.add_argument("--weights", choices=["own", "normexp"], default="own",
                        help="the reference starts from its own init (default) or from normexp's weights for the seed")
    args = parser.parse_args(argv)
    why = torchscale_missing()
    if why:
        print(f"torchscale_crosscheck: {why}", file=sys.stderr)
        return 2

    from normexp.train.config import TrainConfig
    from normexp.train.loop import load_data

    start = "own init" if args.weights == "own" else "from normexp's weights"
    print(f"| placement | depth | lr | torchscale Decoder, {start} (seeds " + ", ".join(map(str, args.seeds))
          + ") | normexp `init=torchscale` | agree |")
    print("|---|---|---|---|---|---|")
    corpus, disagreements, t0 = None, 0, time.time()
    for row in args.rows:
        placement, layers, lr = row.split(":")
        ref_cells, ours_cells, ref_out, ours_out = [], [], [], []
        for seed in args.seeds:
            cfg = protocol_config(placement, int(layers), float(lr), seed, args.steps, args.extra)
            corpus = corpus or load_data(TrainConfig.from_composed(cfg))
            baseline, margin = corpus.baseline_loss, cfg.stall_margin
            ref_loss = train_reference(cfg, corpus, args.weights)
            with tempfile.TemporaryDirectory() as tmp:
                our_loss, status = train_normexp(cfg, Path(tmp))
            ref_out.append(outcome(ref_loss, baseline, margin))
            ours_out.append("learned" if status == "completed" else status)
            ref_cells.append(f"{ref_loss:.3f}" + ("" if ref_out[-1] == "learned" else f" {ref_out[-1]}"))
            ours_cells.append(f"{our_loss:.3f}" + ("" if ours_out[-1] == "learned" else f" {ours_out[-1]}"))
        agree = ref_out == ours_out
        disagreements += not agree
        print(f"| {placement} | {layers} | {lr} | {', '.join(ref_cells)} | {', '.join(ours_cells)} | "
              f"{'yes' if agree else 'NO'} |", flush=True)
    print(f"\nunigram baseline {corpus.baseline_loss:.4f} nats/token, stalled = final val loss above "
          f"{1 - cfg.stall_margin:.2f} × baseline; {len(args.rows)} rows × {len(args.seeds)} seeds × 2 implementations "
          f"in {time.time() - t0:.0f} s; {disagreements} row(s) disagree")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
