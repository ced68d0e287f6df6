"""A pack: K runs of one shape stepped together, each still a run of its own.

Each member is a `Trainer` (loop.py), built exactly as its solo run builds it: its folder,
data stream, model, optimizer, instruments, TensorBoard writer, checkpoints, resume; and the
pack trains in the one loop every run trains in (loop.train_runs, loop.Runs). The pack adds
one thing, the plain step: the members' forward and backward as one `PackedGPT`
(model/packed.py), after which each member takes its own update through the Trainer's own
methods (`check_health`, then clipping and its optimizer's step, or on CUDA one AdamW step
for all, train/packed_adamw.py; then `advance`). A logging step is each member's own
`Trainer.train_step` on its own model (whose weights are its row of the pack), so every
per-layer tag is measured as in a solo run; evaluation and checkpoints are the members' own.

A member that diverges finishes as its solo run would (status "diverged", the same step); its
row stays in the pack on a zero batch whose gradient is never applied, so nothing of it reaches
the others. On CPU (float32) a member's losses and tags equal its solo run's bit for bit
(tests/train/test_packs.py); on CUDA the pack's batched kernels round differently.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import torch
from omegaconf import DictConfig

from ..model.packed import PackedGPT
from .config import TrainConfig
from .flat_adamw import FlatAdamW
from .pack_graph import GraphedPackStep, graph_step_fits, packed_device_step
from .packed_adamw import PackedAdamW, RowAdamW
from .loop import JobContext, Runs, Trainer, train_runs
from .signals import StopSignals

log = logging.getLogger("normexp")


class Pack(Runs):
    """The members' Trainers (stepped as loop.Runs steps runs) and the PackedGPT over their
    models, which computes their plain steps."""

    def __init__(self, trainers: Sequence[Trainer], packed_optimizer: bool | None = None, cuda_graph: bool | None = None):
        super().__init__(trainers)
        first = self.trainers[0]
        self.device, self.autocast = first.device, first.autocast
        self.model = PackedGPT([t.model for t in self.trainers])
        for t in self.trainers:
            t.in_pack = True  # checkpoints copy the member's own row of the weights
            if isinstance(t.optimizer, FlatAdamW) and not t.optimizer.per_tensor:
                # its flat buffer no longer holds the weights (the pack does): torch's per-tensor
                # fused step on the same parameters, the same numbers (flat_adamw.py, "Exactness")
                t.optimizer.go_per_tensor()
        # one AdamW step for all members where bit-equality with solo runs is not kept anyway
        # (CUDA's bf16); on CPU each member's own optimizer, so members equal their solo runs
        if packed_optimizer is None:
            packed_optimizer = self.device.type == "cuda"
        self.optimizer = None
        if packed_optimizer:
            self.optimizer = PackedAdamW(self.model, [t.optimizer for t in self.trainers], [t.model for t in self.trainers])
            for k, t in enumerate(self.trainers):
                t.optimizer = RowAdamW(self.optimizer, k)
            self.optimizer.set_max_norms([t.config.optim.grad_clip for t in self.trainers])
        self.graph = self._graph(cuda_graph)
        for t in self.trainers:
            t.summary["cuda_graph"] = self.graph is not None

    def _graph(self, wanted: bool | None) -> GraphedPackStep | None:
        """The plain step as a CUDA graph (train/pack_graph.py) where it fits; `wanted` (the packed
        launcher's cuda_graph): None = as the runs' own `cuda_graph` says (false if one says false,
        true if all say true), where it fits."""
        if wanted is None:
            own = {t.config.cuda_graph for t in self.trainers}
            wanted = False if False in own else True if own == {True} else None
        why = graph_step_fits(self.device, self.optimizer is not None, [t.config.z_loss for t in self.trainers],
                              any(t.guard.every_step for t in self.trainers))
        if wanted is False or (why is not None and not wanted):
            return None
        if why is not None:
            log.warning("pack: plain steps run eagerly, not as a CUDA graph: %s", why)
            return None
        K, B, T = len(self.trainers), self.trainers[0].config.batch_size, self.trainers[0].config.seq_len
        return GraphedPackStep(self._device_step, torch.zeros(K, B, T, dtype=torch.long, device=self.device),
                               "true" if wanted else "auto")

    def _device_step(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return packed_device_step(self.model, self.optimizer, xs, ys)

    def plain_step(self, members: list[int]) -> None:
        """One update of each listed member, their forward and backward computed together."""
        first = self.trainers[members[0]].config
        K, B, T = len(self.trainers), first.batch_size, first.seq_len
        xs = torch.zeros(K, B, T, dtype=torch.long, device=self.device)  # rows of members not stepping: a zero batch
        ys = torch.zeros_like(xs)
        batches, lrs = {}, {}
        for i in members:
            t = self.trainers[i]
            lrs[i] = t.set_lr(t.step)
            batches[i] = t.next_batch()
            xs[i], ys[i] = batches[i]
            t.optimizer.zero_grad(set_to_none=True)
        if self.graph is not None and members == list(range(K)):
            self.optimizer.prepare()
            self.graph.run(xs, ys)  # unchecked plain steps (graph_step_fits): nothing to read back
            for t in self.trainers:
                t.advance()
            return
        self.model.zero_grad(set_to_none=True)
        with self.autocast():
            losses = self.model(xs, ys, z_loss=[t.config.z_loss for t in self.trainers])
        losses.sum().backward()  # member k's loss reaches member k's parameters only
        if self.optimizer is None:
            self.model.member_grads_to_members(members)
            for i in members:
                self.guarded(i, lambda t=self.trainers[i], i=i: t.update(*batches[i], losses[i], lrs[i]))
            return
        # Trainer.update's order through its own methods, the optimizer step taken for all healthy members at once
        self.optimizer.collect_grads()
        healthy = []

        def check(i: int) -> None:
            self.trainers[i].check_health(*batches[i], losses[i], None)  # raises Diverged
            healthy.append(i)

        for i in members:
            self.guarded(i, lambda i=i: check(i))
        if healthy == list(range(K)):
            self.optimizer.clip_all()
        else:
            self.optimizer.clip(healthy, [self.trainers[i].config.optim.grad_clip for i in healthy])
        self.optimizer.step(healthy)
        for i in healthy:
            self.trainers[i].advance()


def train_pack(configs: Sequence[DictConfig | TrainConfig], run_dirs: Sequence[Path], stop: StopSignals | None = None,
               jobs: Sequence[JobContext] | None = None, packed_optimizer: bool | None = None,
               cuda_graph: bool | None = None) -> list[dict]:
    """Train the runs `configs` describe (one shape: launch/packs.py groups them) as one pack,
    each into its run folder; returns their summaries, as `train` returns one. On SIGINT or
    SIGTERM every running member saves a checkpoint and records "interrupted" (or "requeued"),
    then `Interrupted` is raised, as for a solo run: the one loop's (loop.train_runs), which also
    sizes the grace of a first signal to the step; a stop that cannot wait (a second signal, the
    grace spent) is `stop`'s on_hard_stop's to record (the launcher's: every member
    "interrupted" at its newest checkpoint). `packed_optimizer`: one AdamW step for all
    members (train/packed_adamw.py); None = on CUDA only. `cuda_graph`: plain steps as a CUDA
    graph (train/pack_graph.py); None = where it fits."""
    return train_runs(configs, run_dirs, stop, jobs,
                      stepping=lambda trainers: Pack(trainers, packed_optimizer, cuda_graph))
