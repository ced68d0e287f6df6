"""Data-parallel training: one run on several processes under torchrun (how many threads each
process uses is threads.py's).

`torchrun --nproc_per_node N -m normexp.cli
train ...` starts N copies of the command; `launch.launchers.join_run` puts them into one process group (gloo
on CPU, NCCL for CUDA tensors) before Hydra runs, and gives every rank rank 0's run folder.
Training then follows the usual DistributedDataParallel recipe (Li et al. 2020, "PyTorch
Distributed: Experiences on Accelerating Data Parallel Training"): every rank draws the same
global batch from the shared-seed generator and trains on its own rows of it; DDP averages the
gradients during backward, so the update equals a one-process step on the whole batch. Only
rank 0 writes into the run folder (TensorBoard, summary.json, checkpoints, train.log).
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..config.checks import ConfigError

# ------------------------------------------------------------------- process group


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    """Rank 0, the only process that writes logs, TensorBoard, summary.json and checkpoints."""
    return rank() == 0


def init_from_env() -> None:
    """Join the process group torchrun describes in RANK, WORLD_SIZE, MASTER_ADDR/PORT.
    Gloo carries CPU tensors; with CUDA, NCCL carries the GPU tensors (gradients, loss)."""
    if is_distributed():
        return
    backend = "gloo"
    if torch.cuda.is_available() and dist.is_nccl_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        backend = "cpu:gloo,cuda:nccl"
    dist.init_process_group(backend=backend, init_method="env://")


def leave_together() -> None:
    """Every rank waits here for the others once its run is done, before the group is torn
    down: a rank that tore it down while rank 0 still wrote its run's end aborted now and then
    ("terminate called without an active exception", gloo, torch 2.13, once in a suite under load)."""
    if is_distributed():
        dist.barrier()


def cleanup() -> None:
    if is_distributed():
        dist.destroy_process_group()


# ------------------------------------------------------------- data-parallel steps


def local_batch_size(batch_size: int) -> int:
    """Rows of the global batch each rank trains on; the global batch stays `batch_size`."""
    if batch_size % world_size():
        raise ConfigError("batch_size", batch_size,
                          f"must be divisible by the {world_size()} torchrun processes; "
                          "change batch_size or --nproc_per_node")
    return batch_size // world_size()


def my_rows(batch: torch.Tensor) -> torch.Tensor:
    """This rank's rows [rank·b, (rank+1)·b) of a global batch every rank drew identically."""
    b = local_batch_size(batch.shape[0])
    return batch[rank() * b: (rank() + 1) * b]


def mean(value: torch.Tensor) -> torch.Tensor:
    """The mean over ranks (each rank's value a mean over equally many rows, so this is the
    mean over the global batch). The value itself on one process."""
    if not is_distributed():
        return value
    value = value.detach().clone()
    dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value / world_size()


def agree_max(value: int) -> int:
    """The largest `value` over ranks, e.g. a signal number that reached only some ranks:
    all ranks must stop at the same step, or the others wait forever in the next all-reduce."""
    if not is_distributed():
        return value
    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def rank_device(device: torch.device) -> torch.device:
    """Under torchrun on GPUs each process owns the GPU numbered by its LOCAL_RANK."""
    if is_distributed() and device.type == "cuda" and device.index is None:
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return device


def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """DistributedDataParallel around the model under torchrun (it broadcasts rank 0's weights
    once and averages gradients during backward); the model itself on one process."""
    if not is_distributed():
        return model
    return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)


class NullWriter:
    """Stands in for the TensorBoard SummaryWriter on ranks other than 0: any attribute is
    itself and any call does nothing, so `writer.file_writer.add_summary(...)` is a no-op too."""

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return None
