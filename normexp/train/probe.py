"""`normexp probe`'s measurement: gradients and activations at initialisation, without training.

The study of Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"
(§3, Fig. 3): for each placement × depth × seed, build a freshly initialised GPT, run one
forward/backward per batch of real text, and record per block

    grad_norm_mlp_out  ‖∂L/∂W₂‖_F of the block's second MLP matrix (`GPT.residual_output_weights`)
    hidden_rms         √mean(x²) of the residual stream x leaving the block

averaged over the batches. `--encoder-decoder` measures the decoder of an encoder-decoder
Transformer instead (self-attention, cross-attention to the encoder's output, MLP in every
block), the model of Fig. 3. Here: the probe's settings and their checks, the corpus, the
models and their passes; the table and figures of the records, and what the paper predicts
of them: analysis/probe.py.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import OmegaConf

from ..config.compose import compose_config
from ..config.defaults import probe_default
from ..config.resources import batch_norm_needs, memory_problem
from ..data.batches import DataError, get_batch, load_corpus
from ..model import GPT, NORMS, PLACEMENTS, ModelConfig
from ..model.encoder_decoder import EncoderDecoder
from .instruments import recording

DEFAULT_PLACEMENTS = tuple(probe_default("placements"))
DEFAULT_DEPTHS = tuple(probe_default("depths"))
# DeepNorm's encoder-decoder α, β differ from the decoder-only ones and are not implemented
ENCODER_DECODER_PLACEMENTS = ("post", "pre", "sandwich", "peri")


class ProbeError(Exception):
    """A user-facing problem with the probe's settings; str(e) is one line."""


@dataclass
class ProbeSettings:
    placements: tuple[str, ...] = DEFAULT_PLACEMENTS
    depths: tuple[int, ...] = DEFAULT_DEPTHS
    # Seeds, not batches, carry the noise: the seed-to-seed spread of a profile is 3-5x the
    # batch-to-batch one, so 6 seeds × 1 batch beats 3 × 2 at the same cost.
    # configs/probe.yaml says why these values
    seeds: int = probe_default("seeds")
    batches: int = probe_default("batches")
    norm: str = probe_default("norm")
    d_model: int = probe_default("d_model")
    heads: int = probe_default("heads")
    seq_len: int = probe_default("seq_len")
    batch_size: int = probe_default("batch_size")
    threads: int = probe_default("threads")
    # the decoder of an encoder-decoder Transformer, the model of Xiong et al.'s Fig. 3
    encoder_decoder: bool = probe_default("encoder_decoder")

    def check(self) -> None:
        for p in self.placements:
            if p not in PLACEMENTS:
                raise ProbeError(f"--placements: unknown placement {p!r}; choose from {', '.join(sorted(PLACEMENTS))}")
            if self.encoder_decoder and p not in ENCODER_DECODER_PLACEMENTS:
                raise ProbeError(f"--encoder-decoder: placement {p} is not supported (DeepNorm's encoder-decoder "
                                 f"constants are not implemented); use {', '.join(ENCODER_DECODER_PLACEMENTS)}")
        if not self.placements:
            raise ProbeError("--placements is empty; give e.g. --placements post,pre")
        if not self.depths or any(d <= 0 for d in self.depths):
            raise ProbeError(f"--depths {','.join(map(str, self.depths))}: give positive layer counts, e.g. --depths 6,12")
        if self.norm not in NORMS:
            raise ProbeError(f"--norm {self.norm}: unknown norm; choose from {', '.join(sorted(NORMS))}")
        for name in ("seeds", "batches", "d_model", "heads", "seq_len", "batch_size", "threads"):
            if getattr(self, name) <= 0:
                raise ProbeError(f"--{name.replace('_', '-')} {getattr(self, name)}: must be a positive integer")
        if self.d_model % self.heads:
            raise ProbeError(f"--heads {self.heads} must divide --d-model {self.d_model}")
        if self.norm == "batch" and self.batch_size * self.seq_len < 2:
            raise ProbeError(f"--batch-size {self.batch_size}: " + batch_norm_needs(
                f"--seq-len {self.seq_len}", "--batch-size × --seq-len", "--batch-size or --seq-len"))


def parse_list(text: str, kind: type, option: str) -> tuple:
    """'post,pre' -> ('post', 'pre'); '6,12' -> (6, 12)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    try:
        return tuple(kind(t) for t in items)
    except ValueError:
        raise ProbeError(f"{option} {text}: expected a comma-separated list of {kind.__name__}s, "
                         f"e.g. {option} {'6,12' if kind is int else 'post,pre'}") from None


# ------------------------------------------------------------------------- corpus

def probe_tokens(data_file: Path | None) -> tuple[np.ndarray, int, str]:
    """Training tokens, vocabulary size and a description: the default config's corpus and
    tokenizer (`normexp train` without overrides), or `data_file` as data=text."""
    cfg = compose_config(["data=text"] if data_file is not None else [])
    data_cfg = cfg.data
    if data_file is not None:
        # set after composing: a path may hold characters the override grammar would parse
        data_cfg = OmegaConf.merge(data_cfg, {"files": [str(data_file)]})
    try:
        corpus = load_corpus(data_cfg, cfg.tokenizer, progress=True)
    except DataError as e:
        raise ProbeError(str(e)) from None
    return np.asarray(corpus.train), corpus.vocab_size, corpus.description


# -------------------------------------------------------------------------- probe

def probe_model(placement: str, layers: int, seed: int, tokens: np.ndarray, vocab_size: int,
                s: ProbeSettings) -> list[dict]:
    """One record per block of a fresh model (the decoder's blocks for an encoder-decoder):
    W₂ gradient norm and hidden RMS, averaged over `s.batches` forward/backward passes
    (the weights never change)."""
    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=vocab_size, seq_len=s.seq_len, layers=layers, d_model=s.d_model,
                      heads=s.heads, norm=s.norm, placement=placement)
    model = EncoderDecoder(cfg) if s.encoder_decoder else GPT(cfg)
    decoder = model.decoder if s.encoder_decoder else model
    model.train()  # BatchNorm uses batch statistics, as in the first training step
    # The same batches for every placement and depth at a given seed: differences between
    # rows of the table come from the architecture, not from the sample.
    batch_gen = torch.Generator().manual_seed(seed)
    w2 = decoder.residual_output_weights()["mlp_out"]
    grad_sum = torch.zeros(layers, dtype=torch.float64)
    rms_sum = torch.zeros(layers, dtype=torch.float64)
    for _ in range(s.batches):
        model.zero_grad(set_to_none=True)
        with recording(decoder, only=("block",)) as trace:
            if s.encoder_decoder:  # source: a segment of text; target: the segment that follows it
                x2, y2 = get_batch(tokens, s.batch_size, 2 * s.seq_len, batch_gen)
                _, loss = model(x2[:, : s.seq_len], x2[:, s.seq_len:], y2[:, s.seq_len:])
            else:
                x, y = get_batch(tokens, s.batch_size, s.seq_len, batch_gen)
                _, loss = model(x, y)
        streams = trace["block"]
        loss.backward()
        grad_sum += torch.stack([w.grad.detach().norm() for w in w2]).double()
        rms_sum += torch.stack([h.detach().float().pow(2).mean().sqrt() for h in streams]).double()
    grad, rms = (grad_sum / s.batches).tolist(), (rms_sum / s.batches).tolist()
    model_key = {"model": "encoder-decoder"} if s.encoder_decoder else {}
    return [{"placement": placement, "norm": s.norm, "layers": layers, "layer": i, "seed": seed, **model_key,
             "grad_norm_mlp_out": grad[i], "hidden_rms": rms[i]} for i in range(layers)]


def check_probe_memory(s: ProbeSettings, vocab_size: int, available: int | None = None) -> None:
    """The training run's memory check (config.resources.memory_problem) for the deepest model of the
    probe, without an optimizer: refused up front rather than killed by the OOM killer."""
    # an encoder-decoder holds an encoder as deep as its decoder, over a source as long as its target
    twice = 2 if s.encoder_decoder else 1
    model = ModelConfig(vocab_size=vocab_size, seq_len=s.seq_len, layers=max(s.depths), d_model=s.d_model, heads=s.heads)
    cfg = OmegaConf.create({"tokenizer": {"vocab_size": vocab_size}, "d_model": s.d_model, "seq_len": s.seq_len,
                            "layers": twice * max(s.depths), "mlp_ratio": model.mlp_ratio, "batch_size": s.batch_size,
                            "heads": s.heads})
    problem = memory_problem(cfg, available, optimizer=False, names={
        "layers": "--depths", "d_model": "--d-model", "batch_size": "--batch-size", "seq_len": "--seq-len"})
    if problem:
        raise ProbeError(f"--depths {max(s.depths)}: {problem}")


def run_probe(s: ProbeSettings, tokens: np.ndarray, vocab_size: int, progress: bool = True) -> list[dict]:
    s.check()
    need = (2 if s.encoder_decoder else 1) * s.seq_len + 2
    if len(tokens) < need:
        raise ProbeError(f"the corpus has only {len(tokens)} tokens, the probe needs {need}; "
                         "use a smaller --seq-len or a larger corpus")
    check_probe_memory(s, vocab_size)
    saved_threads = torch.get_num_threads()
    torch.set_num_threads(s.threads)
    records = []
    try:
        for placement in s.placements:
            for layers in s.depths:
                t0 = time.perf_counter()
                for seed in range(s.seeds):
                    records += probe_model(placement, layers, seed, tokens, vocab_size, s)
                if progress:
                    print(f"probe: {placement:>9} L={layers:<3} {s.seeds} seeds × {s.batches} batches "
                          f"in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
    finally:
        torch.set_num_threads(saved_threads)
    return records


def check_out_dir(out_dir: Path | None) -> None:
    """Refuse an --out the outputs cannot be written to, before anything is computed: a file,
    a folder under a file, or a place this user cannot write. None (the default) is fine."""
    if out_dir is None:
        return
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ProbeError(f"--out {out_dir} is a file; give a folder (created if missing), e.g. --out probe_out")
    existing = out_dir
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise ProbeError(f"--out {out_dir}: {existing} is a file, so no folder can be made under it; "
                         "choose another --out")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise ProbeError(f"--out {out_dir}: cannot write in {existing}; choose another --out")
