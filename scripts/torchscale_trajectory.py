#!/usr/bin/env python
"""Trajectory equivalence of `init=torchscale` with the DeepNet reference code (issue 39, item 6).

normexp's GPT (`init=torchscale`) and torchscale 0.3's `Decoder` start from the same weights
(normexp's draws for the seed, copied into the reference by scripts/torchscale_crosscheck.py's
map), see the same batches (normexp's data stream for the seed), and step under one optimizer
set-up and one lr schedule. The script prints both training losses at every step, the largest
|Δloss| and the first step where |Δloss| leaves the float-noise bound, and writes them as CSV.

The float-noise bound. Two codes that compute the same function in a different order agree to
rounding, and training amplifies rounding differences step by step. How far it amplifies them
is measured, not guessed: beside the pair, `--noise-runs` copies of normexp train from the same
weights on the same batches with the batch's rows in a different (random) order each step.
That is the same mathematics (the loss is a mean over all tokens), rounded differently: every
weight gradient sums its rows in another order. The envelope e(t) is the largest |Δloss|
between normexp and those copies at any step up to t, and the bound at step t is
max(FACTOR·e(t), FLOOR): FACTOR (10) allows the reference's reordering (q, k, v as three
matmuls, its own attention arithmetic) to round an order of magnitude worse than a row
permutation, and FLOOR (1e-5 nats, ~2 ulp of float32 at a loss of 3-6 summed over the 8 blocks'
roundings, the size at which the forward alone already differs: the logits test's atol 2e-5) is
there for the first steps, where the envelope can be 0. The pair parts at the first step where
|Δloss| > bound.

Set-ups (`--setup`), each applied to both codes alike, the reference's parameters grouped as
normexp groups theirs (`torchscale_crosscheck.reference_parameters`: fused qkv = q, k, v):
* normexp: normexp's optimizer as a run builds it (`make_optimizer`: FlatAdamW, weight decay
  on matrices only, β (0.9, 0.98), ε 1e-8); the reference gets torch's fused AdamW on the
  mapped groups (the arithmetic FlatAdamW's docstring says it matches).
* fairseq: what torchscale's fairseq GPT example (`--optimizer adam --adam-betas "(0.9, 0.98)"
  --adam-eps 1e-08 --weight-decay 0.01`) trains with on a CPU: fairseq's Trainer hands every
  parameter to the optimizer in one group, so weight decay also reaches biases, LayerNorm gains
  and the (tied) embeddings, and fairseq's Adam adds ε to √v before v's bias correction
  (`FairseqAdam` below). Both codes get it.

Shape (the depth-law preset, configs/experiment/depth_law.yaml): 64 wide, 4 heads, seq 32,
batch 8, 200 steps, 100 warmup steps then cosine, byte-level Shakespeare, LayerNorm, one thread.

    pip install torchscale==0.3.0 --no-deps && pip install fairscale --no-deps
    python scripts/torchscale_trajectory.py                                  # the page's table
    python scripts/torchscale_trajectory.py --rows deepnorm:8:1.73e-3 --seeds 0 1 2 --setup normexp fairseq
"""

from __future__ import annotations

import argparse
import copy
import csv
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from normexp.config.compose import compose_config
from normexp.data.batches import get_batch
from normexp.config.run_config import OptimizerConfig
from normexp.model import GPT, ModelConfig
from normexp.train.config import TrainConfig
from normexp.train.loop import (autocast_for, build_model, generator, load_data, make_optimizer, seed_everything,
                                validation_loss)
from normexp.train.schedules import lr_multiplier

sys.path.insert(0, str(Path(__file__).resolve().parent))
import torchscale_crosscheck as tc  # noqa: E402

FACTOR = 10.0
FLOOR = 1e-5
DEFAULT_ROWS = ["post:8:1e-3", "post:8:1.73e-3", "deepnorm:8:1e-3", "deepnorm:8:1.73e-3"]


# ------------------------------------------------------------------ optimizer set-ups

class FairseqAdam(torch.optim.Optimizer):
    """Adam as fairseq's `--optimizer adam` steps on a CPU (fairseq.optim.adam.Adam, the AdamW
    variant): per element, m ← β₁m + (1−β₁)g, v ← β₂v + (1−β₂)g², then decoupled decay
    θ ← θ − lr·wd·θ and θ ← θ − lr·√(1−β₂ᵗ)/(1−β₁ᵗ) · m/(√v + ε). ε joins √v before v's bias
    correction, so it acts as ε/√(1−β₂ᵗ) does in torch's AdamW (√v̂ + ε): larger in the first steps."""

    def __init__(self, params, lr: float, betas, eps: float, weight_decay: float):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            beta1, beta2 = group["betas"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
                m, v, t = state["exp_avg"], state["exp_avg_sq"], state["step"]
                m.mul_(beta1).add_(p.grad, alpha=1 - beta1)
                v.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
                if group["weight_decay"]:
                    p.add_(p, alpha=-group["weight_decay"] * group["lr"])
                step_size = group["lr"] * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t)
                p.addcdiv_(m, v.sqrt().add_(group["eps"]), value=-step_size)


def normexp_optimizer(setup: str, model, cfg) -> torch.optim.Optimizer:
    """The optimizer of one normexp model (the pair's, or a noise copy's) under the set-up."""
    if setup == "normexp":
        return make_optimizer(model, OptimizerConfig.from_composed(cfg))
    return FairseqAdam([{"params": list(model.parameters())}], lr=cfg.lr, betas=cfg.optim.betas,
                       eps=cfg.optim.eps, weight_decay=cfg.optim.weight_decay)


def reference_optimizer(setup: str, ours: torch.optim.Optimizer, model, decoder) -> torch.optim.Optimizer:
    """The reference's optimizer: normexp's groups, each normexp parameter replaced by the
    reference parameters that hold it, with the group's own lr, β, ε and weight decay."""
    mapped, names = tc.reference_parameters(decoder), {id(p): n for n, p in model.named_parameters()}
    groups = [{"params": [q for p in g["params"] for q in mapped[names[id(p)]]],
               **{k: v for k, v in g.items() if k in ("lr", "betas", "eps", "weight_decay", "lr_scale")}}
              for g in ours.param_groups]
    if setup == "normexp":
        return torch.optim.AdamW(groups, fused=True)
    return FairseqAdam(groups, lr=groups[0]["lr"], betas=groups[0]["betas"], eps=groups[0]["eps"],
                       weight_decay=groups[0]["weight_decay"])


SETUPS = ("normexp", "fairseq")


# ------------------------------------------------------------------ one pair of trajectories

def trajectory_config(placement: str, layers: int, lr: float, seed: int, steps: int, extra=()):
    """The depth-law preset's shape with init=torchscale, LayerNorm, one thread."""
    return compose_config(["experiment=depth_law", f"placement={placement}", "init=torchscale", "norm=layer",
                           f"layers={layers}", f"lr={lr}", f"seed={seed}", f"steps={steps}", "threads=1",
                           "log.progress=off", *extra])


@dataclass
class Trajectory:
    """Per-step training losses of normexp, the reference and the noise copies, and the end."""
    lrs: list[float] = field(default_factory=list)
    ours: list[float] = field(default_factory=list)
    reference: list[float] = field(default_factory=list)
    noise: list[list[float]] = field(default_factory=list)  # per step: one loss per noise copy
    val_ours: float = math.nan
    val_reference: float = math.nan

    def deltas(self) -> list[float]:
        return [abs(a - b) for a, b in zip(self.ours, self.reference)]

    def envelope(self) -> list[float]:
        """e(t): the largest |normexp − noise copy| at any step up to t."""
        out, running = [], 0.0
        for a, copies in zip(self.ours, self.noise):
            running = max([running, *(abs(a - c) for c in copies)])
            out.append(running)
        return out

    def bounds(self, factor: float = FACTOR, floor: float = FLOOR) -> list[float]:
        return [max(factor * e, floor) for e in self.envelope()]

    def parting_step(self, factor: float = FACTOR, floor: float = FLOOR) -> int | None:
        """The first step where |Δloss| leaves the bound (a non-finite loss counts), or None."""
        for step, (d, b) in enumerate(zip(self.deltas(), self.bounds(factor, floor))):
            if not d <= b:
                return step
        return None


def set_lr(optimizer, lr: float) -> None:
    for group in optimizer.param_groups:  # as Trainer.set_lr: each group keeps its lr scale
        group["lr"] = lr * group.get("lr_scale", 1.0)


def normexp_step(model, optimizer, x, y) -> float:
    optimizer.zero_grad(set_to_none=True)
    _, loss = model(x, y)
    loss.backward()
    optimizer.step()
    model.after_optimizer_step()
    return loss.item()


def reference_step(decoder, optimizer, x, y) -> float:
    optimizer.zero_grad(set_to_none=True)
    loss = F.cross_entropy(tc.reference_logits(decoder, x).flatten(0, 1).float(), y.flatten())
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def reference_validation(decoder, corpus, cfg) -> float:
    """The reference's loss on normexp's validation batches (train.validation_loss's stream)."""
    decoder.eval()
    evaluation, total = generator(cfg.seed, "evaluation"), 0.0
    for _ in range(cfg.eval_batches):
        x, y = get_batch(corpus.val, cfg.batch_size, cfg.seq_len, evaluation)
        total += F.cross_entropy(tc.reference_logits(decoder, x).flatten(0, 1).float(), y.flatten()).item()
    decoder.train()
    return total / cfg.eval_batches


def run_pair(cfg, corpus, setup: str = "normexp", noise_runs: int = 2, reference_hook=None) -> Trajectory:
    """Train normexp (built as a run builds it, seed and all), the reference holding its
    initial weights, and `noise_runs` normexp copies fed row-permuted batches, side by side.
    `reference_hook(decoder)`, if given, may change the reference after the copy (the tests
    use it to show a changed reference parts)."""
    torch.set_num_threads(int(cfg.threads))
    seed_everything(cfg.seed)  # as Trainer does before it builds the model
    config = TrainConfig.from_composed(cfg)
    model = build_model(config, corpus, torch.device("cpu"))
    initial = copy.deepcopy(model.state_dict())
    decoder = tc.reference_decoder(cfg.placement.name, cfg.layers, cfg.d_model, cfg.heads, corpus.vocab_size,
                                   cfg.seq_len, cfg.mlp_ratio)
    tc.copy_into_reference(model, decoder)
    if reference_hook:
        reference_hook(decoder)
    copies = []
    for _ in range(noise_runs):
        twin = GPT(ModelConfig.from_composed(cfg, corpus.vocab_size))
        twin.load_state_dict(initial)
        copies.append(twin)
    ours = normexp_optimizer(setup, model, cfg)
    ref_opt = reference_optimizer(setup, ours, model, decoder)
    copy_opts = [normexp_optimizer(setup, twin, cfg) for twin in copies]
    data = generator(cfg.seed, "data")
    orders = torch.Generator().manual_seed(10_000 + cfg.seed)  # the noise copies' row orders
    for m in (model, decoder, *copies):
        m.train()
    out = Trajectory()
    for step in range(cfg.steps):
        lr = cfg.lr * lr_multiplier(step, cfg.steps, config.schedule.effective_warmup, config.schedule)
        for opt in (ours, ref_opt, *copy_opts):
            set_lr(opt, lr)
        x, y = get_batch(corpus.train, cfg.batch_size, cfg.seq_len, data)
        out.lrs.append(lr)
        out.ours.append(normexp_step(model, ours, x, y))
        out.reference.append(reference_step(decoder, ref_opt, x, y))
        perms = [torch.randperm(len(x), generator=orders) for _ in copies]
        out.noise.append([normexp_step(twin, opt, x[p], y[p]) for twin, opt, p in zip(copies, copy_opts, perms)])
        if not all(map(math.isfinite, (out.ours[-1], out.reference[-1]))):
            break
    out.val_ours = validation_loss(model, corpus.val, config, torch.device("cpu"), autocast_for(torch.device("cpu")))
    out.val_reference = reference_validation(decoder, corpus, cfg)
    return out


# ------------------------------------------------------------------ the table

STEP_FIELDS = ["placement", "layers", "lr", "seed", "setup", "step", "lr_at_step", "loss_normexp", "loss_torchscale",
               "abs_delta", "noise_envelope", "bound"]
SUMMARY_FIELDS = ["placement", "layers", "lr", "seed", "setup", "steps", "max_abs_delta", "max_noise_envelope",
                  "parting_step", "final_train_normexp", "final_train_torchscale", "val_normexp", "val_torchscale",
                  "outcome_normexp", "outcome_torchscale", "baseline"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", nargs="+", default=DEFAULT_ROWS, help="placement:layers:lr each")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--setup", nargs="+", choices=SETUPS, default=["normexp"], help="optimizer set-ups to run")
    parser.add_argument("--noise-runs", type=int, default=2,
                        help="row-permuted normexp copies for the bound (0: none, the bound is the floor alone)")
    parser.add_argument("--csv", type=Path, default=None,
                        help="folder for steps.csv (every step) and summary.csv (one line a run)")
    parser.add_argument("--print-steps", action="store_true", help="print every step's losses")
    args = parser.parse_args(argv)
    if args.noise_runs < 0:
        parser.error(f"--noise-runs must be 0 or more, not {args.noise_runs}")
    rows = []
    for row in args.rows:
        try:
            placement, layers, lr = row.split(":")
            rows.append((placement, int(layers), lr, float(lr)))
        except ValueError:
            parser.error(f"--rows {row!r}: each row is placement:layers:lr, e.g. deepnorm:8:1.73e-3")
    why = tc.torchscale_missing()
    if why:
        print(f"torchscale_trajectory: {why}", file=sys.stderr)
        return 2

    corpus, steps_rows, summary_rows, t0 = None, [], [], time.time()
    print(f"bound at step t: max({FACTOR:g} × e(t), {FLOOR:g}); e(t): the largest |Δloss| between normexp and "
          f"{args.noise_runs} row-permuted copies of itself up to t")
    print("| set-up | placement | depth | lr | seed | max abs Δloss | max noise e | parting step | "
          "val normexp | val torchscale | outcome normexp / torchscale |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for setup in args.setup:
        for placement, layers, lr, lr_value in rows:
            for seed in args.seeds:
                cfg = trajectory_config(placement, layers, lr_value, seed, args.steps)
                corpus = corpus or load_data(TrainConfig.from_composed(cfg))
                traj = run_pair(cfg, corpus, setup, args.noise_runs)
                deltas, envelope, bounds = traj.deltas(), traj.envelope(), traj.bounds()
                parting = traj.parting_step()
                outcomes = [tc.outcome(v, corpus.baseline_loss, cfg.stall_margin)
                            for v in (traj.val_ours, traj.val_reference)]
                key = dict(placement=placement, layers=layers, lr=lr, seed=seed, setup=setup)
                for step, values in enumerate(zip(traj.lrs, traj.ours, traj.reference, deltas, envelope, bounds)):
                    steps_rows.append({**key, "step": step, **dict(zip(STEP_FIELDS[6:], values))})
                    if args.print_steps:
                        print(f"  step {step:3d} lr {values[0]:.3e} normexp {values[1]:.6f} torchscale "
                              f"{values[2]:.6f} |Δ| {values[3]:.2e} e {values[4]:.2e}")
                summary_rows.append({**key, "steps": len(deltas), "max_abs_delta": max(deltas),
                                     "max_noise_envelope": envelope[-1],
                                     "parting_step": "" if parting is None else parting,
                                     "final_train_normexp": traj.ours[-1], "final_train_torchscale": traj.reference[-1],
                                     "val_normexp": traj.val_ours, "val_torchscale": traj.val_reference,
                                     "outcome_normexp": outcomes[0], "outcome_torchscale": outcomes[1],
                                     "baseline": corpus.baseline_loss})
                print(f"| {setup} | {placement} | {layers} | {lr} | {seed} | {max(deltas):.2e} | {envelope[-1]:.2e} | "
                      f"{'none' if parting is None else parting} | {traj.val_ours:.4f} | {traj.val_reference:.4f} | "
                      f"{outcomes[0]} / {outcomes[1]} |", flush=True)
    parted = sum(r["parting_step"] != "" for r in summary_rows)
    print(f"\nunigram baseline {corpus.baseline_loss:.4f}; stalled = final val loss above {1 - cfg.stall_margin:.2f} × "
          f"baseline; {len(summary_rows)} pair(s) in {time.time() - t0:.0f} s; {parted} parted beyond the bound")
    if args.csv:
        args.csv.mkdir(parents=True, exist_ok=True)
        for name, fields, rows in (("steps.csv", STEP_FIELDS, steps_rows), ("summary.csv", SUMMARY_FIELDS, summary_rows)):
            with open(args.csv / name, "w", newline="") as f:
                writer = csv.DictWriter(f, fieldnames=fields)
                writer.writeheader()
                writer.writerows(rows)
        print(f"wrote {args.csv / 'steps.csv'} and {args.csv / 'summary.csv'}")
    return 1 if parted else 0


if __name__ == "__main__":
    sys.exit(main())
