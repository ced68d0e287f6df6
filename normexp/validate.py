"""Up-front checks of a resolved config: every problem is one line naming the key,
the value, and what is allowed, before any data is loaded or any folder is written."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig


class ConfigError(Exception):
    """A bad setting; str(e) is a single line: `key=value: what is allowed`."""

    def __init__(self, key: str, value, allowed: str):
        self.key, self.value = key, value
        super().__init__(f"{key}={value}: {allowed}")


def _positive_int(cfg, key):
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ConfigError(key, v, "must be a positive integer")


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def validate(cfg: DictConfig, explicit: frozenset[str] | set[str] = frozenset()) -> None:
    """Raise ConfigError for the first problem found. `explicit` holds the keys the user set
    on the command line: a default warmup longer than a short run is shortened (with a
    warning) rather than refused, but an explicit warmup > steps is an error."""
    from .data import DATA_NAMES, TOKENIZER_NAMES
    from .model import NORMS, PLACEMENT_NAMES
    from .schedules import SCHEDULES

    for key in ("layers", "d_model", "heads", "mlp_ratio", "seq_len", "batch_size", "steps",
                "log_every", "eval_every", "eval_batches"):
        _positive_int(cfg, key)
    if cfg.d_model % cfg.heads:
        raise ConfigError("heads", cfg.heads, f"must divide d_model={cfg.d_model}")
    if not _number(cfg.lr) or cfg.lr <= 0:
        raise ConfigError("lr", cfg.lr, "must be a number > 0")
    w = cfg.warmup
    if isinstance(w, bool) or not isinstance(w, int) or w < 0 or (w > cfg.steps and "warmup" in explicit):
        raise ConfigError("warmup", w, f"must be an integer step count from 0 to steps={cfg.steps}")
    if cfg.grad_clip is not None and (not _number(cfg.grad_clip) or cfg.grad_clip <= 0):
        raise ConfigError("grad_clip", cfg.grad_clip, "must be null (off) or a number > 0")
    if isinstance(cfg.seed, bool) or not isinstance(cfg.seed, int) or cfg.seed < 0:
        raise ConfigError("seed", cfg.seed, "must be a non-negative integer")
    if cfg.device not in ("auto", "cpu", "cuda", "mps") and not str(cfg.device).startswith("cuda:"):
        raise ConfigError("device", cfg.device, "choose auto, cpu, cuda, cuda:N or mps")
    if str(cfg.device).startswith("cuda"):
        import torch
        if not torch.cuda.is_available():
            raise ConfigError("device", cfg.device, "no CUDA device is available here; use device=auto or device=cpu")
    for key in ("alpha", "beta"):
        v = cfg.deepnorm[key]
        if v != "auto" and (not _number(v) or v <= 0):
            raise ConfigError(f"deepnorm.{key}", v, 'must be "auto" or a number > 0')
    if cfg.norm.name not in NORMS:
        raise ConfigError("norm", cfg.norm.name, f"choose from {', '.join(sorted(NORMS))}")
    if cfg.placement.name not in PLACEMENT_NAMES:
        raise ConfigError("placement", cfg.placement.name, f"choose from {', '.join(PLACEMENT_NAMES)}")
    if cfg.placement.name == "mix" and not 0 <= cfg.placement.get("ratio", 0.25) < 1:
        raise ConfigError("placement.ratio", cfg.placement.ratio, "must be in [0, 1)")
    if cfg.schedule.name not in SCHEDULES:
        raise ConfigError("schedule", cfg.schedule.name, f"choose from {', '.join(sorted(SCHEDULES))}")
    if not _number(cfg.divergence.max_loss) or cfg.divergence.max_loss <= 0:
        raise ConfigError("divergence.max_loss", cfg.divergence.max_loss, "must be a number > 0")
    if isinstance(cfg.checkpoint_every, bool) or not isinstance(cfg.checkpoint_every, int) or cfg.checkpoint_every < 0:
        raise ConfigError("checkpoint_every", cfg.checkpoint_every, "must be an integer >= 0 (0 = only at the end)")
    _positive_int(cfg, "keep_checkpoints")
    if cfg.log.progress not in ("auto", "bar", "lines", "off"):
        raise ConfigError("log.progress", cfg.log.progress, "choose auto, bar, lines or off")
    threads = cfg.get("threads", "auto")
    if threads != "auto" and (isinstance(threads, bool) or not isinstance(threads, int) or threads <= 0):
        raise ConfigError("threads", threads, 'must be "auto" or a positive integer')

    tok = cfg.tokenizer
    if tok.name not in TOKENIZER_NAMES:
        raise ConfigError("tokenizer", tok.name, f"choose from {', '.join(TOKENIZER_NAMES)}")
    if tok.name == "bpe":
        v = tok.get("vocab_size")
        if isinstance(v, bool) or not isinstance(v, int) or not 300 <= v <= 1_000_000:
            raise ConfigError("tokenizer.vocab_size", v, "must be an integer from 300 (256 bytes + merges) to 1000000")
    if cfg.data.name not in DATA_NAMES:
        raise ConfigError("data", cfg.data.name, f"choose from {', '.join(DATA_NAMES)}")
    if cfg.data.name == "text":
        files = cfg.data.get("files")
        if not files or isinstance(files, str):
            raise ConfigError("data.files", files, "give a list of text files, e.g. data.files=[train.txt]")
        for key in ("files", "val_files"):
            for f in cfg.data.get(key) or []:
                p = Path(str(f)).expanduser()
                if not p.is_file():
                    raise ConfigError(f"data.{key}", f, "no such file")
                if p.stat().st_size == 0:
                    raise ConfigError(f"data.{key}", f, "the file is empty")
