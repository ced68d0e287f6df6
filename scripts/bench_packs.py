"""Packs against their members alone: `normexp bench --packs`'s measurement (normexp/bench/packs.py)
for one setting of your choice. Needs torch, numpy and pyyaml only (the lent GPU machine has no more).

    python scripts/bench_packs.py --layers 48 --d-model 128 --seq-len 128 --batch 16 --members 8
"""

from __future__ import annotations

import argparse

import torch

from normexp.bench.packs import measure_pack


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
    print(measure_pack(args.layers, args.d_model, args.heads, args.seq_len, args.batch, args.members, args.placement,
                       args.norm, args.device, args.mode, args.warmup, args.steps), flush=True)


if __name__ == "__main__":
    main()
