"""The training loop: one run from a resolved config into one run folder.

Order of a step: forward (with the instrument trace on logging steps), backward,
divergence check, optional clipping, optimizer step, logging. Checkpoints hold
everything needed to continue bit-for-bit on CPU: model, optimizer, step, RNG states
and the data sampler's generator.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import signal
import socket
import sys
import time
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf

from . import checkpoint as ckpt
from . import distributed
from .instruments import LAYOUT_FAMILIES, Instruments, scalar_tags
from .model import GPT, IGNORE_TARGET, ModelConfig, deepnorm_constants
from .runfolder import write_summary
from .schedules import lr_multiplier

log = logging.getLogger("normexp")


class Diverged(Exception):
    pass


# ----------------------------------------------------------------------- set-up

def select_device(name: str) -> torch.device:
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    return torch.device(name)


def autocast_for(device: torch.device):
    """bf16 autocast on CUDA GPUs that support it; fp32 elsewhere (bf16 is slower on most CPUs)."""
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


def resolve_deepnorm(cfg: DictConfig) -> tuple[float | None, float | None]:
    """(α, β) actually used: numbers for placement=deepnorm, (None, None) otherwise."""
    if cfg.placement.name != "deepnorm":
        return None, None
    alpha, beta = deepnorm_constants(cfg.layers)
    a, b = cfg.deepnorm.alpha, cfg.deepnorm.beta
    return (alpha if a == "auto" else float(a)), (beta if b == "auto" else float(b))


def model_config(cfg: DictConfig, vocab_size: int) -> ModelConfig:
    alpha, beta = resolve_deepnorm(cfg)
    return ModelConfig(
        vocab_size=vocab_size, seq_len=cfg.seq_len, layers=cfg.layers, d_model=cfg.d_model,
        heads=cfg.heads, mlp_ratio=cfg.mlp_ratio, norm=cfg.norm.name,
        norm_eps=cfg.norm.get("eps", 1e-5), bn_momentum=cfg.norm.get("momentum", 0.1),
        dyt_init_alpha=cfg.norm.get("init_alpha", 0.5), placement=cfg.placement.name,
        mix_ratio=cfg.placement.get("ratio", 0.25), deepnorm_alpha=alpha, deepnorm_beta=beta,
    )


def data_label(cfg: DictConfig) -> str:
    """A readable corpus name: the Hub config or path for Hub presets, else the group name."""
    return str(cfg.data.get("config") or cfg.data.get("path") or cfg.data.name)


def set_threads(cfg: DictConfig) -> int:
    """cores ÷ parallel jobs when a launcher runs several jobs at once (joblib reuses
    worker processes, so this is reset at the start of every job); see distributed.py."""
    threads = cfg.get("threads", "auto")
    if threads == "auto":
        threads = distributed.threads_per_job()
    torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def make_optimizer(model: GPT, cfg: DictConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only (not on norms, biases or embeddings)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "emb" not in n]
    rest = [p for n, p in model.named_parameters() if not (p.dim() >= 2 and "emb" not in n)]
    groups = [{"params": decay, "weight_decay": cfg.optim.weight_decay},
              {"params": rest, "weight_decay": 0.0}]
    # fused AdamW does one kernel per step for all tensors; falls back to foreach
    try:
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.optim.betas), eps=cfg.optim.eps, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.optim.betas), eps=cfg.optim.eps, foreach=True)


# ------------------------------------------------------------------- TensorBoard

def _import_summary_writer():
    """torch's SummaryWriter, imported with boto3 hidden: TensorBoard's file layer imports boto3
    (for s3:// logdirs) whenever it is installed, ~0.2-0.5 s of every run's start-up, and run
    folders are local paths. Hiding it makes that optional `import boto3` fail as if absent."""
    hide = "boto3" not in sys.modules
    if hide:
        sys.modules["boto3"] = None  # `import boto3` now raises ImportError
    try:
        from torch.utils.tensorboard import SummaryWriter
    finally:
        if hide and sys.modules.get("boto3", 0) is None:
            del sys.modules["boto3"]  # later imports of boto3 work as usual
    return SummaryWriter


def tensorboard_writer(run_dir: Path, purge_step: int | None):
    SummaryWriter = _import_summary_writer()
    from torch.utils.tensorboard.summary import custom_scalars

    writer = SummaryWriter(str(run_dir), purge_step=purge_step, flush_secs=30)
    if purge_step is None:
        charts = {title: ["Multiline", [rf"{family}/layer_\d+"]] for family, title in
                  ((f, f"{f}: {d}") for f, d in LAYOUT_FAMILIES.items())}
        layout = {
            "per layer": charts,
            "stability": {
                "activation std max": ["Multiline", [r"stability/act_std_max"]],
                "gradient norm max, last/first": ["Multiline", [r"stability/grad_norm_max", r"stability/grad_norm_top_over_bottom"]],
                "model update (DeepNet)": ["Multiline", [r"stability/model_update"]],
            },
            "training": {
                "loss": ["Multiline", [r"train/loss", r"val/loss"]],
                "lr": ["Multiline", [r"train/lr"]],
                "global grad norm": ["Multiline", [r"train/grad_norm"]],
            },
        }
        writer.file_writer.add_summary(custom_scalars(layout))
    return writer


HPARAM_METRICS = ("hparams/final_val_loss", "hparams/best_val_loss", "hparams/final_train_loss", "hparams/diverged")


def write_scalars(writer, tags: dict[str, float], step: int) -> None:
    """All of a step's scalars as one TensorBoard event. Read back exactly like add_scalar's
    (a simple_value per tag), but one proto and one queue entry instead of one per tag:
    ~50× cheaper at depth 48, where a logging step writes ~300 tags."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    values = [Summary.Value(tag=tag, simple_value=float(v)) for tag, v in tags.items()]
    writer.file_writer.add_summary(Summary(value=values), step)


def write_hparams(writer, hparams: dict) -> None:
    """HParams into the run's own event file (add_hparams would open a second run folder)."""
    from torch.utils.tensorboard.summary import hparams as hparams_summary

    clean = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in hparams.items()}
    exp, ssi, sei = hparams_summary(clean, {m: 0.0 for m in HPARAM_METRICS})
    for s in (exp, ssi, sei):
        writer.file_writer.add_summary(s)


# ------------------------------------------------------------------------ the run

class Interrupted(Exception):
    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(signal.Signals(signum).name)


class SignalGuard:
    """First SIGINT/SIGTERM asks the loop to stop at the next step boundary (checkpoint,
    summary, exit 130/143); a second one exits at once."""

    def __init__(self):
        self.signum = None
        self._old = {}

    def _handle(self, signum, frame):
        if self.signum is not None:
            os._exit(128 + signum)
        self.signum = signum

    def __enter__(self):
        for s in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(ValueError):  # not in the main thread
                self._old[s] = signal.signal(s, self._handle)
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)

    def check(self):
        signum = distributed.agree_max(self.signum or 0)  # under torchrun all ranks stop together
        if signum:
            raise Interrupted(signum)


class Progress:
    """A tqdm bar on a terminal, plain log lines every `log_every` steps otherwise."""

    def __init__(self, mode: str, total: int, initial: int):
        self.bar = None
        if mode == "bar" or (mode == "auto" and sys.stderr.isatty()):
            from tqdm import tqdm
            self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True, leave=True)
        self.lines = mode in ("auto", "lines")

    def update(self, step: int, fields: dict, line: bool):
        if self.bar is not None:
            self.bar.update(step + 1 - self.bar.n)
            if fields:
                self.bar.set_postfix(fields, refresh=False)
        elif self.lines and line:
            log.info("step %d  %s", step, "  ".join(f"{k} {v}" for k, v in fields.items()))

    def close(self):
        if self.bar is not None:
            self.bar.close()


def train(cfg: DictConfig, run_dir: Path) -> dict:
    """Train one model as `cfg` says, logging into `run_dir`. Returns the summary dict (also
    written to summary.json). Raises Interrupted on SIGINT/SIGTERM after saving."""
    from .data import get_batch, load_corpus

    t_start = time.time()
    run_dir = Path(run_dir)
    threads = set_threads(cfg)
    seed_everything(cfg.seed)
    device = distributed.rank_device(select_device(cfg.device))
    main = distributed.is_main()  # under torchrun only rank 0 writes into run_dir
    distributed.local_batch_size(cfg.batch_size)  # the global batch must split evenly over ranks
    autocast = autocast_for(device)
    alpha, beta = resolve_deepnorm(cfg)
    warmup = min(cfg.warmup, cfg.steps)
    if warmup < cfg.warmup:
        log.warning("warmup=%d is longer than steps=%d: warming up over all %d steps", cfg.warmup, cfg.steps, warmup)

    summary = {
        "status": "running", "steps_completed": 0, "final_train_loss": None, "final_val_loss": None,
        "best_val_loss": None, "diverged_at_step": None, "tokens_per_second": None, "parameters": None,
        "wall_seconds": None, "initial_loss": None, "norm": cfg.norm.name, "placement": cfg.placement.name,
        "layers": cfg.layers, "d_model": cfg.d_model, "heads": cfg.heads, "warmup": warmup,
        "lr": cfg.lr, "seed": cfg.seed, "steps": cfg.steps, "batch_size": cfg.batch_size,
        "seq_len": cfg.seq_len, "schedule": cfg.schedule.name, "grad_clip": cfg.grad_clip,
        "data": data_label(cfg), "tokenizer": cfg.tokenizer.name, "deepnorm_alpha": alpha,
        "deepnorm_beta": beta, "device": str(device), "threads": threads, "error": None,
    }

    corpus = load_corpus(cfg.data, cfg.tokenizer, progress=cfg.log.progress != "off")
    for split, tokens in (("train", corpus.train), ("val", corpus.val)):
        if len(tokens) < cfg.seq_len + 2:
            from .validate import ConfigError
            raise ConfigError("seq_len", cfg.seq_len,
                              f"the {split} split has only {len(tokens)} tokens; use a smaller seq_len or a larger corpus")
    log.info("%s", corpus.description)

    model = GPT(model_config(cfg, corpus.vocab_size)).to(device)
    summary["parameters"] = model.num_parameters()
    optimizer = make_optimizer(model, cfg, device)
    ddp_model = distributed.wrap(model, device)  # DDP under torchrun; `model` itself otherwise
    step_model = torch.compile(ddp_model) if cfg.compile else ddp_model
    instruments = Instruments(model, model_update=cfg.log.model_update, model_update_every=cfg.log.model_update_every)

    data_gen = torch.Generator().manual_seed(cfg.seed)
    probe_gen = torch.Generator().manual_seed(cfg.seed + 1)
    # a sixteenth of the batch (1 to 8 sequences): the probe joins every logging step's
    # forward and backward, so its size is paid for at every logging step
    probe_x, _ = get_batch(corpus.val, min(8, max(1, cfg.batch_size // 16)), cfg.seq_len, probe_gen)
    instruments.set_probe(probe_x.to(device), autocast)

    start_step, best_val = 0, math.inf
    purge_step = None
    if cfg.resume:
        state = ckpt.load_latest(run_dir, map_location=device)
        if state is not None:
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            data_gen.set_state(state["data_generator"])
            ckpt.restore_rng(state["rng"])
            instruments.probe_h0 = state.get("probe_h0")
            start_step, best_val = state["step"], state["best_val"]
            summary.update(state["summary"])
            purge_step = start_step
            log.info("resumed from step %d", start_step)
        else:
            log.info("resume=true but no checkpoint in %s: starting from scratch", run_dir)
    # who is running it: lets `normexp report` tell a live run from one killed without a word
    summary.update(status="running", pid=os.getpid(), host=socket.gethostname())
    if main:
        write_summary(run_dir, summary)

    writer = tensorboard_writer(run_dir, purge_step) if main else distributed.NullWriter()
    if purge_step is not None and start_step % cfg.eval_every == 0 and summary.get("final_val_loss") is not None:
        # purge_step hides the old file's events from the resume step on, val/loss there included
        writer.add_scalar("val/loss", summary["final_val_loss"], start_step)
        if corpus.bytes_per_token != 1.0:
            writer.add_scalar("val/loss_per_byte", summary["final_val_loss"] / corpus.bytes_per_token, start_step)
    hparams = {"norm": cfg.norm.name, "placement": cfg.placement.name, "layers": cfg.layers,
               "d_model": cfg.d_model, "warmup": warmup, "lr": cfg.lr, "schedule": cfg.schedule.name,
               "seed": cfg.seed, "steps": cfg.steps, "batch_size": cfg.batch_size, "seq_len": cfg.seq_len,
               "grad_clip": str(cfg.grad_clip), "data": data_label(cfg), "tokenizer": cfg.tokenizer.name,
               "deepnorm_alpha": alpha if alpha is not None else 0.0,
               "deepnorm_beta": beta if beta is not None else 0.0}
    if purge_step is None:
        write_hparams(writer, hparams)
        writer.add_text("config", "```\n" + OmegaConf.to_yaml(cfg) + "\n```", 0)

    tokens_per_step = cfg.batch_size * cfg.seq_len
    check_every_step = device.type == "cpu"  # .item() is free on CPU; on GPUs only on logged steps
    max_loss = cfg.divergence.max_loss
    if summary.get("initial_loss") is not None:  # resumed: the ceiling set at step 0
        max_loss = max(max_loss, 2 * summary["initial_loss"])
    last_train_loss = summary.get("final_train_loss")
    progress = Progress(cfg.log.progress if main else "off", cfg.steps, start_step)
    timer_start, timer_steps, tps = time.perf_counter(), 0, summary.get("tokens_per_second")
    model.train()

    def evaluate() -> float:
        gen = torch.Generator().manual_seed(cfg.seed + 2)  # the same val batches every time
        model.eval()
        total = torch.zeros((), device=device)
        with torch.no_grad(), autocast():
            for _ in range(cfg.eval_batches):
                x, y = (distributed.my_rows(t) for t in get_batch(corpus.val, cfg.batch_size, cfg.seq_len, gen))
                total += model(x.to(device), y.to(device))[1].float()
        model.train()
        return distributed.mean(total / cfg.eval_batches).item()

    def forward_backward(x, y, record: bool, probe: torch.Tensor | None = None):
        """Loss and (record=True) the instruments' trace. `probe` rows, if given, ride along
        in the forward with ignored targets (see Instruments.fused_probe_rows)."""
        optimizer.zero_grad(set_to_none=True)
        if probe is not None:
            x = torch.cat([x, probe])
            y = torch.cat([y, torch.full_like(probe, IGNORE_TARGET)])
        with autocast():
            if record:
                _, loss, trace = ddp_model(x, y, record=True)
            else:
                _, loss = step_model(x, y)
                trace = None
        loss.backward()
        return loss, trace

    def save(step: int):
        if not main:
            return
        ckpt.save(run_dir, {
            "model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
            "data_generator": data_gen.get_state(), "rng": ckpt.capture_rng(), "best_val": best_val,
            "probe_h0": instruments.probe_h0, "summary": summary,
        }, keep=cfg.keep_checkpoints)

    def finish(status: str, step: int, **extra):
        summary.update(extra)
        summary.update(status=status, steps_completed=step, final_train_loss=last_train_loss,
                       best_val_loss=None if best_val == math.inf else best_val,
                       tokens_per_second=tps, wall_seconds=round(time.time() - t_start, 2))
        final = {"hparams/final_val_loss": summary["final_val_loss"], "hparams/best_val_loss": summary["best_val_loss"],
                 "hparams/final_train_loss": last_train_loss, "hparams/diverged": float(status == "diverged")}
        for tag, v in final.items():
            if v is not None and math.isfinite(v):
                writer.add_scalar(tag, v, step)
        writer.close()
        if main:
            write_summary(run_dir, summary)
        return summary

    step = start_step
    try:
        with SignalGuard() as guard:
            while step < cfg.steps:
                guard.check()
                record = step % cfg.log_every == 0 or step == cfg.steps - 1
                lr = cfg.lr * lr_multiplier(step, cfg.steps, warmup, cfg.schedule)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                # every rank draws the same global batch and trains on its own rows of it
                x, y = (distributed.my_rows(t) for t in get_batch(corpus.train, cfg.batch_size, cfg.seq_len, data_gen))
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                measure_update = record and instruments.model_update_due(step, cfg.log_every, cfg.steps - 1)
                probe = instruments.fused_probe_rows() if measure_update else None
                loss, trace = forward_backward(x, y, record, probe)

                collected = {}
                if record:
                    collected = {"loss": distributed.mean(loss.detach().float()),
                                 **instruments.activations(trace, rows=len(x)), **instruments.gradients()}
                    probe_hidden = None if probe is None else trace["final"][len(x):]
                    del trace
                loss_value = None
                if record or check_every_step:
                    if record:
                        values = Instruments.read(collected)
                        loss_value = values["loss"]
                        grad_ok = math.isfinite(values["grad_norm_global"])
                    else:
                        loss_value, grad_ok = distributed.mean(loss.detach()).item(), True
                    if step == 0 and math.isfinite(loss_value):
                        # a model that starts above the ceiling (e.g. norm=none) has not diverged:
                        # the ceiling becomes twice its initial loss
                        summary["initial_loss"] = loss_value
                        max_loss = max(max_loss, 2 * loss_value)
                    if not (math.isfinite(loss_value) and loss_value <= max_loss and grad_ok):
                        if not record:  # redo this step's forward/backward to log every layer
                            loss, trace = forward_backward(x, y, True)
                            values = Instruments.read({"loss": distributed.mean(loss.detach().float()), **instruments.activations(trace),
                                                       **instruments.gradients()})
                        write_scalars(writer, {**scalar_tags(values), "train/loss": values["loss"]}, step)
                        why = ("non-finite gradient" if math.isfinite(loss_value) and loss_value <= max_loss
                               else f"loss {loss_value:.4g}" + ("" if not math.isfinite(loss_value) else f" above the ceiling {max_loss:.4g} (divergence.max_loss, or twice the initial loss)"))
                        writer.add_text("divergence", f"Diverged at step {step}: {why}. "
                                        "See the per-layer charts at this step for the layer that blew up first.", step)
                        log.warning("diverged at step %d: %s", step, why)
                        progress.close()
                        return finish("diverged", step, diverged_at_step=step)
                    last_train_loss = loss_value

                if cfg.grad_clip is not None:
                    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip, foreach=True)
                if record:  # the model update is measured at θ_step, like every other scalar of this step
                    model_update = instruments.model_update_size(autocast, probe_hidden) if measure_update else {}
                    instruments.before_step()
                optimizer.step()
                step += 1

                if record:
                    values.update(Instruments.read({**instruments.after_step(), **model_update}))
                    s = step - 1
                    write_scalars(writer, {**scalar_tags(values), "train/loss": values["loss"], "train/lr": lr}, s)
                    if cfg.log.histograms:
                        for i, t in enumerate(instruments_hist(model, x)):
                            writer.add_histogram(f"act_hist/layer_{i:02d}", t, s)
                timer_steps += 1
                if record:  # throughput over the steps since the last logged one (the first is warm-up)
                    if step - 1 > start_step:
                        tps = round(timer_steps * tokens_per_step / max(time.perf_counter() - timer_start, 1e-9), 1)
                        writer.add_scalar("perf/tokens_per_second", tps, step - 1)
                    timer_start, timer_steps = time.perf_counter(), 0

                if step % cfg.eval_every == 0 or step == cfg.steps:
                    t_eval = time.perf_counter()
                    val = evaluate()
                    timer_start += time.perf_counter() - t_eval  # keep eval out of tokens/s
                    summary["final_val_loss"] = val
                    best_val = min(best_val, val)
                    writer.add_scalar("val/loss", val, step)
                    if corpus.bytes_per_token != 1.0:
                        writer.add_scalar("val/loss_per_byte", val / corpus.bytes_per_token, step)
                    if not math.isfinite(val):
                        progress.close()
                        return finish("diverged", step, diverged_at_step=step)
                if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < cfg.steps:
                    summary["steps_completed"] = step
                    save(step)
                fields = {}
                if loss_value is not None:
                    fields["loss"] = f"{loss_value:.4f}"
                fields["lr"] = f"{lr:.2e}"
                if tps:
                    fields["tok/s"] = f"{tps:,.0f}"
                progress.update(step - 1, fields, line=record)
    except Interrupted as e:
        progress.close()
        summary["steps_completed"] = step
        save(step)
        finish("interrupted", step)
        log.warning("interrupted by %s at step %d: checkpoint saved; resume with: %s", e, step, ckpt.resume_command(run_dir))
        raise
    progress.close()
    summary["steps_completed"] = step
    save(step)
    out = finish("completed", step)
    log.info("completed %d steps: val loss %.4f (best %.4f), %s tokens/s, %.0f s -> %s",
             step, out["final_val_loss"] or float("nan"), out["best_val_loss"] or float("nan"),
             f"{tps:,.0f}" if tps else "?", out["wall_seconds"], run_dir)
    return out


@torch.no_grad()
def instruments_hist(model: GPT, x: torch.Tensor) -> list[torch.Tensor]:
    """The residual stream leaving each block, for the optional histograms."""
    was = model.training
    model.eval()
    _, trace = model.hidden(x, record=True)
    model.train(was)
    return [t.float().cpu() for t in trace["block"]]
