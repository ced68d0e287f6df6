"""A pack's plain step captured as a CUDA graph: forward, backward and the packed AdamW step
replayed as one launch, so the GPU no longer waits on Python between its few thousand small
kernels (on an H100 a 48-block pack's eager step was ~90 % launch overhead; docs/speed.md).

Replay runs exactly the kernels recorded, on the same buffers: the tokens are copied into the
graph's input tensors, the lr and bias corrections into the packed optimizer's `hyper` tensors
(`PackedAdamW.prepare`), and the weights and moments are updated in place, where the members'
logging steps (eager, between replays) read and update them too. The first `WARMUP` plain steps
run eagerly (the allocator and kernels settle), the next is captured and replayed.

Used where it is correct and pays: CUDA, the packed optimizer, every member stepping, no
z-loss (its token selection has a data-dependent shape), and plain steps left unchecked
(divergence.every_step false, the GPU default: the check would read the loss mid-graph).
Anything else, and any change of the members stepping (one finished), runs the eager step. A
capture that fails (out of memory, an operation a graph cannot record) stops the run with a line
naming cuda_graph=false.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..config.checks import ConfigError

WARMUP = 3  # eager plain steps before the capture


def graph_step_fits(device: torch.device, packed_optimizer: bool, z_losses: list[float], every_step: bool) -> str | None:
    """Why a pack's plain step cannot be captured, or None if it can."""
    if device.type != "cuda":
        return "not on CUDA"
    if not packed_optimizer:
        return "each member steps its own optimizer"
    if any(z_losses):
        return "z_loss selects tokens by a data-dependent mask"
    if every_step:
        return "divergence.every_step reads each step's loss"
    return None


def packed_device_step(model, optimizer, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Every member's plain step, device work only (what the graph records): the PackedGPT's
    forward and backward under bf16 autocast on CUDA, clipping and the PackedAdamW step from the
    values its `prepare` set. Returns the members' losses."""
    model.zero_grad(set_to_none=True)
    bf16 = xs.is_cuda and torch.cuda.is_bf16_supported()
    with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):  # no cache: graph replays
        losses = model(xs, ys)
    losses.sum().backward()
    optimizer.collect_grads()
    optimizer.clip_all()
    optimizer.apply()
    return losses


class GraphedPackStep:
    """`run(xs, ys)` takes one plain step of every member (see the module docstring) and returns
    the members' losses (a tensor the graph rewrites at each replay). A capture that fails (out of
    memory, an operation CUDA graphs cannot record) stops the run with a ConfigError naming
    cuda_graph=false: after a failed capture the allocator and the stream may still be mid-capture,
    so the step is not tried again in this process."""

    def __init__(self, step: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], example: torch.Tensor,
                 setting: str = "auto"):
        self.step = step  # forward, backward, the packed optimizer's apply: device work only
        self.xs, self.ys = torch.zeros_like(example), torch.zeros_like(example)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.losses: torch.Tensor | None = None
        self.eager_steps = 0
        self.setting = setting  # the cuda_graph value that asked for the graph, for a failed capture's line

    def run(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        self.xs.copy_(xs, non_blocking=True)
        self.ys.copy_(ys, non_blocking=True)
        if self.graph is None and self.eager_steps < WARMUP:
            self.eager_steps += 1
            return self._eager()
        if self.graph is None:
            try:
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):  # records; the replay below takes the step
                    self.losses = self.step(self.xs, self.ys)
            except RuntimeError as e:
                # out of memory, an op a graph cannot record: the process may be left mid-capture,
                # so the run stops here (its checkpoints stay) rather than try the step again
                reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                raise ConfigError("cuda_graph", self.setting, f"the step could not be captured as a CUDA graph "
                                  f"({reason}); use cuda_graph=false (resume=true continues from the last checkpoint)") from e
            self.graph = graph
        self.graph.replay()
        return self.losses

    def _eager(self) -> torch.Tensor:
        """The step run eagerly, where the capture will be (a side stream on CUDA)."""
        if not self.xs.is_cuda:
            return self.step(self.xs, self.ys)
        # on a side stream, as the capture will be: autograd's gradient accumulators are
        # made at the first backward and keep that stream (on the default one, the capture fails)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            losses = self.step(self.xs, self.ys)
        torch.cuda.current_stream().wait_stream(side)
        return losses
