"""Packs against their members alone (`normexp bench --packs`, scripts/bench_packs.py): tokens/s of
training steps (forward, backward, the AdamW step) of one model, and of K models of its shape as
one pack three ways: each member stepping its own optimizer (the CPU path), one packed AdamW step
(train/packed_adamw.py), and that step as a CUDA graph (train/pack_graph.py, CUDA only). On CUDA
with bf16 autocast (as normexp trains there), on CPU in float32. Each line also gives the peak
memory per member (CUDA), the largest difference of a member's first-step loss from its solo
model's, and (CUDA) the weights after 20 graphed steps against 20 eager ones.
Needs torch, numpy and pyyaml only (the lent GPU machine has no more)."""

from __future__ import annotations

import contextlib
import time

import torch

from ..config.model_config import ModelConfig
from ..model import GPT
from ..model.packed import PackedGPT
from ..train.pack_graph import GraphedPackStep, packed_device_step
from ..train.packed_adamw import PackedAdamW

# `normexp bench --packs`: the depth law's shape (64 wide, seq_len 32, batch 8) at 8 and 32 blocks,
# 8 members, as the issue measured it; on a GPU the README's 48 x 128 line and 24 members at 32 x 64
CPU_SETTINGS = [dict(layers=8, d_model=64, heads=4, seq_len=32, batch=8, members=8, norm="layer"),
                dict(layers=32, d_model=64, heads=4, seq_len=32, batch=8, members=8, norm="layer")]
GPU_SETTINGS = [dict(layers=48, d_model=128, heads=4, seq_len=128, batch=16, members=8),
                dict(layers=32, d_model=64, heads=4, seq_len=64, batch=16, members=24)]


def optimizer(model: GPT) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), weight_decay=0.01,
                             fused=next(model.parameters()).is_cuda or None)


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(step, device, warmup: int, steps: int) -> float:
    for _ in range(warmup):
        step()
    sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    sync(device)
    return (time.perf_counter() - t0) / steps


class PackBench:
    """One setting's models, batch and timing (see the module docstring); a method per variant."""

    def __init__(self, cfg: ModelConfig, members: int, batch: int, device: torch.device, warmup: int, steps: int):
        self.cfg, self.K, self.device, self.warmup, self.steps = cfg, members, device, warmup, steps
        self.autocast = ((lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda"
                         else contextlib.nullcontext)
        g = torch.Generator().manual_seed(0)
        self.x = torch.randint(0, 256, (members, batch, cfg.seq_len), generator=g).to(device)
        self.y = torch.randint(0, 256, (members, batch, cfg.seq_len), generator=g).to(device)

    def build(self) -> list[GPT]:
        members = []
        for k in range(self.K):
            torch.manual_seed(k)
            members.append(GPT(self.cfg).to(self.device))
        return members

    def solo(self) -> float:
        """Seconds a step of one model alone."""
        torch.manual_seed(0)
        model = GPT(self.cfg).to(self.device)
        opt = optimizer(model)

        def step():
            opt.zero_grad(set_to_none=True)
            with self.autocast():
                loss = model(self.x[0], self.y[0])[1]
            loss.backward()
            opt.step()

        return measure(step, self.device, self.warmup, self.steps)

    def own_optimizers(self) -> tuple[float, float]:
        """Seconds a pack step with each member's own optimizer, and the largest first-step loss
        difference of a member from its model alone."""
        members = self.build()
        with torch.no_grad(), self.autocast():
            first = [m(self.x[k], self.y[k])[1].float() for k, m in enumerate(members)]
        pack = PackedGPT(members)
        with torch.no_grad(), self.autocast():
            packed_first = pack(self.x, self.y).float()
        diff = max(abs(a.item() - b.item()) for a, b in zip(first, packed_first))
        opts = [optimizer(m) for m in members]

        def step():
            for o in opts:
                o.zero_grad(set_to_none=True)
            pack.zero_grad(set_to_none=True)
            with self.autocast():
                losses = pack(self.x, self.y)
            losses.sum().backward()
            pack.member_grads_to_members(range(self.K))
            for o in opts:
                o.step()

        return measure(step, self.device, self.warmup, self.steps), diff

    def packed_adamw(self):
        """A fresh pack with its packed AdamW, and its plain step's device work (as train/pack.py's)."""
        members = self.build()
        pack = PackedGPT(members)
        opt = PackedAdamW(pack, [optimizer(m) for m in members], members)
        return opt, lambda xs, ys: packed_device_step(pack, opt, xs, ys)

    def packed(self) -> float:
        opt, device_step = self.packed_adamw()
        return measure(lambda: (opt.prepare(), device_step(self.x, self.y)), self.device, self.warmup, self.steps)

    def graphed(self) -> tuple[float, float]:
        """Seconds a step of the packed AdamW step as a CUDA graph, and the largest weight difference
        after the same 20 steps eagerly and through the graph, from the same weights."""
        (eager, eager_step), (opt, step) = self.packed_adamw(), self.packed_adamw()
        graph = GraphedPackStep(step, self.x)
        for _ in range(20):
            eager.prepare()
            eager_step(self.x, self.y)
            opt.prepare()
            graph.run(self.x, self.y)
        torch.cuda.synchronize()
        diff = (eager.weights - opt.weights).abs().max().item()
        return measure(lambda: (opt.prepare(), graph.run(self.x, self.y)), self.device, self.warmup, self.steps), diff


def measure_pack(layers: int, d_model: int, heads: int, seq_len: int, batch: int, members: int,
                 placement: str = "pre", norm: str = "rms", device: str = "auto", mode: str = "all",
                 warmup: int = 3, steps: int = 10) -> str:
    """One setting: the solo rate and the pack's, each variant of its optimizer, as one line."""
    device = torch.device(device if device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    cfg = ModelConfig(seq_len=seq_len, layers=layers, d_model=d_model, heads=heads, placement=placement, norm=norm)
    bench = PackBench(cfg, members, batch, device, warmup, steps)
    solo_s = bench.solo()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    rates, notes = {}, []
    if mode in ("all", "own"):  # each member its own optimizer (the CPU path)
        rates["own optimizers"], diff = bench.own_optimizers()
        notes.append(f"first-step loss pack vs solo max |diff| {diff:.2e}")
    if mode in ("all", "packed"):  # one AdamW step for the pack, eager, then as a CUDA graph
        rates["packed optimizer"] = bench.packed()
        if device.type == "cuda":
            rates["packed optimizer, CUDA graph"], diff = bench.graphed()
            notes.append(f"after 20 steps graph vs eager weights max |diff| {diff:.2e}")
    if device.type == "cuda":
        notes.insert(0, f"peak {torch.cuda.max_memory_allocated() / 2**20 / members:.0f} MiB a member (all variants)")
    tokens, solo_rate = members * batch * seq_len, batch * seq_len / solo_s
    parts = [f"{name}: {tokens / sec:,.0f} tok/s ({sec * 1e3:.1f} ms a step, {tokens / sec / solo_rate:.1f}x solo)"
             for name, sec in rates.items()]
    return (f"{layers} x {d_model} (seq {seq_len}, batch {batch}, {placement}/{norm}) on {device.type}: "
            f"solo {solo_rate:,.0f} tok/s ({solo_s * 1e3:.1f} ms a step); pack of {members}: " + "; ".join(parts) +
            "; " + "; ".join(notes))


def pack_section(steps: int, say) -> list[str]:
    """The bench's pack lines for this machine's device (CPU_SETTINGS or GPU_SETTINGS)."""
    settings = GPU_SETTINGS if torch.cuda.is_available() else CPU_SETTINGS
    lines = []
    for s in settings:
        say(f"normexp bench: packs, {s['layers']} x {s['d_model']} with {s['members']} members")
        lines.append(measure_pack(**s, steps=steps))
    return lines
