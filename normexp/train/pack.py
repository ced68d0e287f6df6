"""A pack's training: K runs of one shape stepped together, each still a run of its own.

Each member is a `Trainer` (loop.py), built exactly as its solo run builds it: its folder,
data stream, model, optimizer, instruments, TensorBoard writer, checkpoints, resume. The pack
adds one thing, the plain step: the members' forward and backward as one `PackedGPT`
(model/packed.py), after which each member takes its own update (`Trainer.update`: the
divergence check, clipping, its optimizer, its lr). A logging step is each member's own
`Trainer.train_step` on its own model (whose weights are its row of the pack), so every
per-layer tag is measured as in a solo run; evaluation and checkpoints are the members' own.

    while some member is running:
        members at a logging step: their own train_step        (the instruments watch it)
        the others: one packed forward/backward, then each its own update (on CUDA: each its
            own checks, then one AdamW step for all, train/packed_adamw.py)
        each: after_step (evaluation, checkpoint, progress); a finished member finishes

A member that diverges finishes as its solo run would (status "diverged", the same step); its
row stays in the pack on a zero batch whose gradient is never applied, so nothing of it reaches
the others. On CPU (float32) a member's losses and tags equal its solo run's bit for bit
(tests/train/test_packs.py); on CUDA the pack's batched kernels round differently.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Sequence
from pathlib import Path

import torch
from omegaconf import DictConfig

from ..model.packed import PackedGPT
from ..runs.schema import Status
from .config import TrainConfig
from .flat_adamw import FlatAdamW
from .pack_graph import GraphedPackStep, graph_step_fits, packed_device_step
from .packed_adamw import PackedAdamW, RowAdamW
from .loop import Diverged, Hooks, JobContext, Trainer, is_logging_step, set_up_objects_frozen
from .signals import Interrupted, StopSignals

log = logging.getLogger("normexp")

# a first signal waits for the next step boundary this many times the longest step so far (at least
# signals.GRACE_SECONDS) before the pack stops at once: a step's time varies with evaluations and load
STEP_GRACE_FACTOR = 3.0

# the member whose code runs now (None: the pack's own), for the launcher's per-member logs
current_member: contextvars.ContextVar[int | None] = contextvars.ContextVar("current_member", default=None)


@contextlib.contextmanager
def as_member(i: int):
    token = current_member.set(i)
    try:
        yield
    finally:
        current_member.reset(token)


class Pack:
    """The members' Trainers and the PackedGPT over their models."""

    def __init__(self, trainers: Sequence[Trainer], packed_optimizer: bool | None = None, cuda_graph: bool | None = None):
        self.trainers = list(trainers)
        first = self.trainers[0]
        self.device, self.autocast = first.device, first.autocast
        self.model = PackedGPT([t.model for t in self.trainers])
        for t in self.trainers:
            t.in_pack = True  # checkpoints copy the member's own row of the weights
            if isinstance(t.optimizer, FlatAdamW) and not t.optimizer.per_tensor:
                # its flat buffer no longer holds the weights (the pack does): torch's per-tensor
                # fused step on the same parameters, the same numbers (flat_adamw.py, "Exactness")
                t.optimizer._go_per_tensor()
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
        self.summaries: list[dict | None] = [None] * len(self.trainers)

    def _graph(self, wanted: bool | None) -> GraphedPackStep | None:
        """The plain step as a CUDA graph (train/pack_graph.py) where it fits; `wanted`: None = where it fits."""
        why = graph_step_fits(self.device, self.optimizer is not None, [t.config.z_loss for t in self.trainers],
                              any(t.guard.every_step for t in self.trainers))
        if wanted is False or (why is not None and not wanted):
            return None
        if why is not None:
            log.warning("pack: plain steps run eagerly, not as a CUDA graph: %s", why)
            return None
        K, B, T = len(self.trainers), self.trainers[0].config.batch_size, self.trainers[0].config.seq_len
        return GraphedPackStep(self._device_step, torch.zeros(K, B, T, dtype=torch.long, device=self.device))

    def _device_step(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return packed_device_step(self.model, self.optimizer, xs, ys)

    def running(self) -> list[int]:
        return [i for i, t in enumerate(self.trainers) if self.summaries[i] is None and t.step < t.config.steps]

    def packed_step(self, members: list[int]) -> None:
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
                t.model.after_optimizer_step()
                t.step += 1
            return
        self.model.zero_grad(set_to_none=True)
        with self.autocast():
            losses = self.model(xs, ys, z_loss=[t.config.z_loss for t in self.trainers])
        losses.sum().backward()  # member k's loss reaches member k's parameters only
        if self.optimizer is None:
            self.model.member_grads_to_members(members)
            for i in members:
                self._guarded(i, lambda t=self.trainers[i], i=i: t.update(*batches[i], losses[i], lrs[i]))
            return
        # Trainer.update's order, the optimizer step taken for all healthy members at once
        self.optimizer.collect_grads()
        healthy = []

        def check(i: int) -> None:
            self.trainers[i].check_health(*batches[i], losses[i], None)  # raises Diverged
            healthy.append(i)

        for i in members:
            self._guarded(i, lambda i=i: check(i))
        if healthy == list(range(K)):
            self.optimizer.clip_all()
        else:
            self.optimizer.clip(healthy, [self.trainers[i].config.optim.grad_clip for i in healthy])
        self.optimizer.step(healthy)
        for i in healthy:
            self.trainers[i].model.after_optimizer_step()
            self.trainers[i].step += 1

    def _guarded(self, i: int, action) -> None:
        """Run one member's action; a divergence finishes that member alone."""
        with as_member(i):
            try:
                action()
            except Diverged as e:
                self.summaries[i] = self.trainers[i].finish(Status.DIVERGED, diverged_at_step=e.step)

    def step(self) -> None:
        running = self.running()
        logging_now = [i for i in running if is_logging_step(self.trainers[i].step, self.trainers[i].config.log.log_every,
                                                             self.trainers[i].config.steps)]
        for i in logging_now:
            self._guarded(i, self.trainers[i].train_step)
        plain = [i for i in running if i not in logging_now]
        if plain:
            self.packed_step(plain)
        for i in running:
            if self.summaries[i] is None:
                self._guarded(i, self.trainers[i].after_step)
            t = self.trainers[i]
            if self.summaries[i] is None and t.step >= t.config.steps:
                with as_member(i):
                    t.save_checkpoint()
                    self.summaries[i] = t.finish(Status.COMPLETED)


def train_pack(configs: Sequence[DictConfig | TrainConfig], run_dirs: Sequence[Path], stop: StopSignals | None = None,
               jobs: Sequence[JobContext] | None = None, packed_optimizer: bool | None = None,
               cuda_graph: bool | None = None) -> list[dict]:
    """Train the runs `configs` describe (one shape: launch/packs.py groups them) as one pack,
    each into its run folder; returns their summaries, as `train` returns one. On SIGINT or
    SIGTERM every running member saves a checkpoint and records "interrupted" (or "requeued"),
    then `Interrupted` is raised, as for a solo run. The first signal waits for the next step
    boundary up to STEP_GRACE_FACTOR × the longest step so far (`stop.grace` raised to it); a
    stop that cannot wait (a second signal, the grace spent) is `stop`'s on_hard_stop's to record
    (the launcher's: every member "interrupted" at its newest checkpoint). `packed_optimizer`: one AdamW step for all
    members (train/packed_adamw.py); None = on CUDA only. `cuda_graph`: plain steps as a CUDA
    graph (train/pack_graph.py); None = where it fits."""
    configs = [c if isinstance(c, TrainConfig) else TrainConfig.from_composed(c) for c in configs]
    jobs = list(jobs or [JobContext()] * len(configs))
    trainers = []
    for i, (c, d, j) in enumerate(zip(configs, run_dirs, jobs)):
        with as_member(i):
            trainers.append(Trainer(c, Path(d), Hooks(), j))
    pack = Pack(trainers, packed_optimizer, cuda_graph)
    with contextlib.ExitStack() as stack:
        stop = stop or stack.enter_context(StopSignals())
        stack.enter_context(set_up_objects_frozen())
        try:
            with stop.deferred():
                for i in pack.running():
                    if trainers[i].step == 0:
                        with as_member(i):
                            trainers[i].evaluate_initial()
                longest = 0.0
                while pack.running():
                    stop.check()
                    began = time.monotonic()
                    pack.step()
                    # a pack's step (K members, their evaluations and checkpoints) may outlast the
                    # solo grace: a first signal waits for the next boundary as long as steps take
                    longest = max(longest, time.monotonic() - began)
                    stop.grace = max(stop.grace, STEP_GRACE_FACTOR * longest)
        except Interrupted as e:
            for i in pack.running():
                with as_member(i):
                    trainers[i].stop_interrupted(e)
            raise
    return [s if s is not None else t.summary for s, t in zip(pack.summaries, trainers)]
