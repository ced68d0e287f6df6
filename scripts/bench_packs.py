"""The speed of a pack against its members one after another, in one process: tokens/s of
training steps (forward, backward, each member's AdamW step), as train/pack.py takes them.

    python scripts/bench_packs.py --layers 48 --d-model 128 --seq-len 128 --batch 16 --members 8

On CUDA with bf16 autocast (as normexp trains there), on CPU in float32. It prints one line a
setting: the solo rate (one model stepped alone), the pack's aggregate rate, their ratio, the
peak memory per member (CUDA), and the largest difference of a pack member's first-step loss
from its solo model's (0 on CPU). A benchmark, not a test: the machine and its load decide.
Needs torch, numpy and pyyaml only (the lent GPU machine has no network).
"""

from __future__ import annotations

import argparse
import contextlib
import time

import torch

from normexp.config.model_config import ModelConfig
from normexp.model import GPT
from normexp.model.packed import PackedGPT
from normexp.train.pack_graph import GraphedPackStep
from normexp.train.packed_adamw import PackedAdamW


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


def run(args) -> str:
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    autocast = (lambda: torch.autocast("cuda", dtype=torch.bfloat16)) if device.type == "cuda" else contextlib.nullcontext
    cfg = ModelConfig(seq_len=args.seq_len, layers=args.layers, d_model=args.d_model, heads=args.heads,
                      placement=args.placement, norm=args.norm)
    K, B, T = args.members, args.batch, args.seq_len
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

    solo_s = measure(solo_step, device, args.warmup, args.steps)
    del solo, solo_opt
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
    if args.mode in ("all", "own"):  # each member its own optimizer (the CPU path)
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

        rates["own optimizers"] = measure(own_step, device, args.warmup, args.steps)
    graph_check = ""
    if args.mode in ("all", "packed"):  # one AdamW step for the pack, eager then as a CUDA graph
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

        rates["packed optimizer"] = measure(packed_step, device, args.warmup, args.steps)
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

            rates["packed optimizer, CUDA graph"] = measure(graph_step, device, args.warmup, args.steps)
    per_member = ""
    if device.type == "cuda":
        per_member = f", peak {torch.cuda.max_memory_allocated() / 2**20 / K:.0f} MiB a member (all variants)"
    solo_rate = B * T / solo_s
    parts = [f"{name}: {K * B * T / sec:,.0f} tok/s ({sec * 1e3:.1f} ms a step, {K * B * T / sec / solo_rate:.1f}x solo)"
             for name, sec in rates.items()]
    return (f"{args.layers} x {args.d_model} (seq {T}, batch {B}, {args.placement}/{args.norm}) on {device.type}: "
            f"solo {solo_rate:,.0f} tok/s ({solo_s * 1e3:.1f} ms a step); pack of {K}: " + "; ".join(parts) +
            f"{per_member}; first-step loss pack vs solo max |diff| {diff:.2e}{graph_check}")



def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--members", type=int, default=8)
    p.add_argument("--placement", default="pre")
    p.add_argument("--norm", default="rms")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--mode", choices=("all", "own", "packed"), default="all",
                   help="the pack's optimizer: each member's own, one packed AdamW (eager, and on CUDA as a graph), or all")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(run(args), flush=True)


if __name__ == "__main__":
    main()
