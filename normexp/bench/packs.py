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
from ..train.pack_graph import GraphedPackStep
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


def measure_pack(layers: int, d_model: int, heads: int, seq_len: int, batch: int, members: int,
                 placement: str = "pre", norm: str = "rms", device: str = "auto", mode: str = "all",
                 warmup: int = 3, steps: int = 10) -> str:
    """One setting: the solo rate and the pack's, each variant of its optimizer, as one line."""
    device = torch.device(device if device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else contextlib.nullcontext
    cfg = ModelConfig(seq_len=seq_len, layers=layers, d_model=d_model, heads=heads,
                      placement=placement, norm=norm)
    K, B, T = members, batch, seq_len
    g = torch.Generator().manual_seed(0)
    x = torch.randint(0, 256, (K, B, T), generator=g).to(device)
    y = torch.randint(0, 256, (K, B, T), generator=g).to(device)

    torch.manual_seed(0)
    solo = GPT(cfg).to(device)
    solo_opt = optimizer(solo)

    def solo_step():
        solo_opt.zero_grad(set_to_none=True)
        with autocast():
            loss = solo(x[0], y[0])[1]
        loss.backward()
        solo_opt.step()

    solo_s = measure(solo_step, device, warmup, steps)
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()

    def build():
        members = []
        for k in range(K):
            torch.manual_seed(k)
            members.append(GPT(cfg).to(device))
        return members

    members = build()
    with torch.no_grad(), autocast():
        first = [m(x[k], y[k])[1].float() for k, m in enumerate(members)]
    pack = PackedGPT(members)
    with torch.no_grad(), autocast():
        packed_first = pack(x, y).float()
    diff = max(abs(a.item() - b.item()) for a, b in zip(first, packed_first))
    rates = {}
    if mode in ("all", "own"):  # each member its own optimizer (the CPU path)
        opts = [optimizer(m) for m in members]

        def own_step():
            for o in opts:
                o.zero_grad(set_to_none=True)
            pack.zero_grad(set_to_none=True)
            with autocast():
                losses = pack(x, y)
            losses.sum().backward()
            pack.member_grads_to_members(range(K))
            for o in opts:
                o.step()

        rates["own optimizers"] = measure(own_step, device, warmup, steps)
    graph_check = ""
    if mode in ("all", "packed"):  # one AdamW step for the pack, eager then as a CUDA graph
        def fresh():
            members = build()
            pack = PackedGPT(members)
            opt = PackedAdamW(pack, [optimizer(m) for m in members], members)
            opt.prepare_calls = 0

            def device_step(xs, ys):
                pack.zero_grad(set_to_none=True)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda", cache_enabled=False):
                    losses = pack(xs, ys)
                losses.sum().backward()
                opt.collect_grads()
                opt.apply()
                return losses
            return opt, device_step

        opt, device_step = fresh()

        def packed_step():
            opt.prepare()
            device_step(x, y)

        rates["packed optimizer"] = measure(packed_step, device, warmup, steps)
        if device.type == "cuda":
            opt_e, step_e = fresh()
            opt_g, step_g = fresh()
            graphed = GraphedPackStep(step_g, x)
            for _ in range(20):  # the same 20 steps eagerly and through the graph, from the same weights
                opt_e.prepare()
                step_e(x, y)
                opt_g.prepare()
                graphed.run(x, y)
            torch.cuda.synchronize()
            graph_check = f"; after 20 steps graph vs eager weights max |diff| {(opt_e.weights - opt_g.weights).abs().max().item():.2e}"

            def graph_step():
                opt_g.prepare()
                graphed.run(x, y)

            rates["packed optimizer, CUDA graph"] = measure(graph_step, device, warmup, steps)
    per_member = ""
    if device.type == "cuda":
        per_member = f", peak {torch.cuda.max_memory_allocated() / 2**20 / K:.0f} MiB a member (all variants)"
    solo_rate = B * T / solo_s
    parts = [f"{name}: {K * B * T / sec:,.0f} tok/s ({sec * 1e3:.1f} ms a step, {K * B * T / sec / solo_rate:.1f}x solo)"
             for name, sec in rates.items()]
    return (f"{layers} x {d_model} (seq {T}, batch {B}, {placement}/{norm}) on {device.type}: "
            f"solo {solo_rate:,.0f} tok/s ({solo_s * 1e3:.1f} ms a step); pack of {K}: " + "; ".join(parts) +
            f"{per_member}; first-step loss pack vs solo max |diff| {diff:.2e}{graph_check}")



def pack_section(steps: int, say) -> list[str]:
    """The bench's pack lines for this machine's device (CPU_SETTINGS or GPU_SETTINGS)."""
    settings = GPU_SETTINGS if torch.cuda.is_available() else CPU_SETTINGS
    lines = []
    for s in settings:
        say(f"normexp bench: packs, {s['layers']} x {s['d_model']} with {s['members']} members")
        lines.append(measure_pack(**s, steps=steps))
    return lines
