"""`normexp report PATH`: compare the runs under a folder — a table, runs.csv, report.md, figures.

Everything is read back through the run-folder contract (see runfolder.py); nothing is
re-computed by training:

    summary.json            status and final numbers (written at start and at the end)
    .hydra/config.yaml      the hyperparameters; the ones that differ between runs are
    .hydra/overrides.yaml   the "varied keys", ordered as the user typed them in the sweep
    events.out.tfevents.*   val/loss curves and the per-layer instruments

A run still going has "running" in summary.json and no final numbers yet (a run that says
"running" but whose process is gone from this host is shown as "killed"): its values come
from its event file, as far as TensorBoard has flushed it (every 30 s). A run that failed
before training has summary.json but no events; it is listed with its error.
"""

from __future__ import annotations

import csv
import logging
import math
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

from .runfolder import find_runs, read_summary

GROUPS = ("norm", "placement", "schedule", "data", "tokenizer")
# Keys that do not change what a run computes: never reported as "varied".
NOISE_KEYS = {"log.progress", "threads", "device", "resume"}
# Tie-break order for varied keys the overrides do not mention (e.g. set by an experiment file).
PRIORITY = ("placement.name", "norm.name", "layers", "warmup", "lr", "d_model", "schedule.name", "seed")
LAYER_FAMILIES = {"grad_norm": "gradient norm of each block's parameters",
                  "act_std": "std of the residual stream leaving each block"}
METRIC_COLUMNS = ("status", "steps", "final val", "best val", "diverged at", "tok/s")
CSV_METRICS = ("status", "steps_completed", "final_val_loss", "best_val_loss", "final_train_loss",
               "diverged_at_step", "tokens_per_second", "wall_seconds", "parameters", "error")


class ReportError(Exception):
    """A user-facing problem; str(e) is one line naming the problem and the fix."""


@dataclass
class Run:
    path: Path
    rel: str                       # path relative to the report's root
    config: dict                   # flattened .hydra/config.yaml
    overrides: list[str]
    summary: dict                  # {} if there is no summary.json yet
    scalars: dict = field(default_factory=dict)  # tag -> [(step, value)], sorted by step
    index: int = 0

    @property
    def status(self) -> str:
        """summary.json's status, except "killed" for a run that says "running" but whose
        process is gone (SIGKILL, out of memory, a lost node): checked when the run was
        started on this host; elsewhere there is no telling, and it stays "running"."""
        status = self.summary.get("status") or "unknown"
        if status == "running" and not process_alive(self.summary):
            return "killed"
        return status

    @property
    def unfinished(self) -> bool:
        """Started but without final numbers: still running, or killed mid-run."""
        return self.status in ("running", "killed")

    def last(self, tag: str) -> float | None:
        points = self.scalars.get(tag)
        return points[-1][1] if points else None

    def metrics(self) -> dict:
        """Summary values; for a run without final numbers yet (running, or no summary),
        the latest values in its event file."""
        s = dict(self.summary)
        if self.unfinished or self.status == "unknown":
            val = [v for _, v in self.scalars.get("val/loss", [])]
            steps = [st + 1 for st, _ in self.scalars.get("train/loss", [])]
            steps += [st for st, _ in self.scalars.get("val/loss", [])]
            s.setdefault("final_val_loss", None)
            if s.get("final_val_loss") is None and val:
                s["final_val_loss"] = val[-1]
            if s.get("best_val_loss") is None and val:
                s["best_val_loss"] = min(val)
            if s.get("final_train_loss") is None:
                s["final_train_loss"] = self.last("train/loss")
            if s.get("tokens_per_second") is None:
                s["tokens_per_second"] = self.last("perf/tokens_per_second")
            if steps:
                s["steps_completed"] = max(steps)
        return s


# ------------------------------------------------------------------------ reading

def process_alive(summary: dict) -> bool:
    """False only when the run's process is known to be gone: same host, no such pid."""
    pid, host = summary.get("pid"), summary.get("host")
    if not isinstance(pid, int) or host != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except OSError:  # exists, but belongs to someone else
        return True
    return True


def flatten(node, prefix: str = "") -> dict:
    """{"optim": {"lr": 1}} -> {"optim.lr": 1}; lists become their string form."""
    out = {}
    if isinstance(node, dict):
        for k, v in node.items():
            out.update(flatten(v, f"{prefix}{k}."))
        return out
    out[prefix[:-1]] = str(node) if isinstance(node, list) else node
    return out


def load_config(run_dir: Path) -> dict:
    from omegaconf import OmegaConf

    try:
        cfg = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
    except Exception:  # noqa: BLE001 - a damaged config makes the run anonymous, not the report fail
        return {}
    try:
        return flatten(OmegaConf.to_container(cfg, resolve=True))
    except Exception:  # noqa: BLE001 - interpolations that need Hydra's resolvers
        return flatten(OmegaConf.to_container(cfg, resolve=False))


def load_overrides(run_dir: Path) -> list[str]:
    from omegaconf import OmegaConf

    try:
        return [str(o) for o in OmegaConf.load(run_dir / ".hydra" / "overrides.yaml")]
    except Exception:  # noqa: BLE001 - optional file
        return []


def load_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of the run's TensorBoard event files (none yet: {})."""
    if not any(run_dir.glob("events.out.tfevents.*")):
        return {}
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    # 0 keeps every scalar point; the other kinds are not needed, so keep one of each.
    acc = EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "histograms": 1, "images": 1,
                                                        "audio": 1, "tensors": 1, "compressedHistograms": 1})
    # a resumed run's events restart at its checkpoint (purge_step); TensorBoard's reader
    # warns "Purging ... expired events" for that, which is expected here, not news
    tb_log = logging.getLogger("tensorboard")
    level = tb_log.level
    tb_log.setLevel(logging.ERROR)
    try:
        acc.Reload()
    except Exception:  # noqa: BLE001 - a file being written can end mid-record
        pass
    finally:
        tb_log.setLevel(level)
    out = {}
    for tag in acc.Tags().get("scalars", []):
        by_step = {e.step: e.value for e in acc.Scalars(tag)}  # a resumed run may repeat steps
        out[tag] = sorted(by_step.items())
    return out


def load_runs(root: Path) -> list[Run]:
    runs = []
    for run_dir in find_runs(root):
        rel = str(run_dir.relative_to(root)) if run_dir != root else "."
        runs.append(Run(run_dir, rel, load_config(run_dir), load_overrides(run_dir),
                        read_summary(run_dir) or {}, load_scalars(run_dir)))
    return runs


# ------------------------------------------------------------------- varied keys

def display_name(key: str) -> str:
    """placement.name -> placement (a config group is named by its option)."""
    group, _, rest = key.partition(".")
    return group if group in GROUPS and rest == "name" else key


def _override_key(override: str) -> str:
    key = override.split("=", 1)[0].lstrip("+~")
    return f"{key}.name" if key in GROUPS else key


def varied_keys(runs: list[Run]) -> list[str]:
    """Config keys whose values differ between runs, most important first: in the order the
    sweep's overrides name them, then by PRIORITY. A group's sub-keys (norm.eps, ...) are
    left out when the group's name explains them."""
    missing = object()
    keys = sorted({k for r in runs for k in r.config} - NOISE_KEYS)
    values = {k: [r.config.get(k, missing) for r in runs] for k in keys}
    varied = [k for k in keys if len({repr(v) for v in values[k]}) > 1]

    def explained_by_group(k: str) -> bool:
        name_key = k.split(".", 1)[0] + ".name"
        if name_key == k or name_key not in varied:
            return False
        seen = {}
        for n, v in zip(values[name_key], values[k]):
            if seen.setdefault(repr(n), repr(v)) != repr(v):
                return False
        return True

    varied = [k for k in varied if not explained_by_group(k)]
    position = {}
    for r in runs:
        for i, o in enumerate(r.overrides):
            position.setdefault(_override_key(o), i)

    def rank(k: str):
        if k in position:
            return (0, position[k], k)
        return (1, PRIORITY.index(k) if k in PRIORITY else len(PRIORITY), k)

    return sorted(varied, key=rank)


def sort_key(value):
    """Numbers before strings, numbers by value: 0 < 5 < 50, not '0' < '50' < '5'."""
    if isinstance(value, bool) or value is None:
        return (2, str(value))
    if isinstance(value, (int, float)):
        return (0, float(value))
    return (1, str(value))


# ---------------------------------------------------------------------- the table

def fmt(value, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        return f"{value:.3g}" if 0 < abs(value) < 0.01 else f"{value:.{digits}f}"  # lr=3e-4 stays 0.0003
    return str(value)


def fmt_param(value) -> str:
    """A hyperparameter value as the user would type it: 0.01, 3e-05, 200."""
    if value is None:
        return "-"
    return f"{value:g}" if isinstance(value, float) else str(value)


def fmt_rate(value) -> str:
    """Throughput as a whole number with thousands separators."""
    return "-" if value is None else f"{value:,.0f}"


def table_rows(runs: list[Run], keys: list[str]) -> tuple[list[str], list[list[str]]]:
    head = ["#", *map(display_name, keys), *METRIC_COLUMNS]
    rows = []
    for r in runs:
        m = r.metrics()
        rows.append([str(r.index), *(fmt_param(r.config.get(k)) for k in keys), r.status, fmt(m.get("steps_completed")),
                     fmt(m.get("final_val_loss")), fmt(m.get("best_val_loss")), fmt(m.get("diverged_at_step")),
                     fmt_rate(m.get("tokens_per_second"))])
    return head, rows


def text_table(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(x) for x in col) for col in zip(head, *rows)]
    numeric = [all(_is_number(r[i]) for r in rows) for i in range(len(head))]
    line = lambda cells: "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, numeric))  # noqa: E731
    return "\n".join([line(head), "  ".join("-" * w for w in widths), *map(line, rows)])


def markdown_table(head: list[str], rows: list[list[str]]) -> str:
    esc = lambda c: c.replace("|", "\\|")  # noqa: E731
    return "\n".join(["| " + " | ".join(map(esc, head)) + " |", "|" + "---|" * len(head),
                      *("| " + " | ".join(map(esc, r)) + " |" for r in rows)])


def _is_number(text: str) -> bool:
    try:
        float(text.replace(",", ""))
        return True
    except ValueError:
        return text == "-"


def write_csv(path: Path, runs: list[Run], keys: list[str]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "path", *map(display_name, keys), *CSV_METRICS])
        for r in runs:
            m = r.metrics()
            w.writerow([r.index, r.rel, *(r.config.get(k) for k in keys), r.status,
                        *("" if m.get(c) is None else m.get(c) for c in CSV_METRICS[1:])])


# ------------------------------------------------------------------------ figures

def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def _label(r: Run, keys: list[str]) -> str:
    return ", ".join(f"{display_name(k)}={fmt_param(r.config.get(k))}" for k in keys) or f"run #{r.index}"


def plot_val_curves(runs: list[Run], keys: list[str], path: Path) -> str | None:
    """Validation loss against step: one panel per value of the first varied key, one line
    per run labelled by the other varied keys. Returns a note if there is nothing to draw."""
    with_val = [r for r in runs if r.scalars.get("val/loss")]
    if not with_val:
        return "no run has logged val/loss yet: the validation-loss figure is skipped"
    plt = _pyplot()
    panel_key, line_keys = (keys[0], keys[1:]) if keys else (None, [])
    panels = sorted({r.config.get(panel_key) for r in with_val}, key=sort_key) if panel_key else [None]
    labels = list(dict.fromkeys(_label(r, line_keys) for r in sorted(with_val, key=lambda r: [sort_key(r.config.get(k)) for k in line_keys])))
    colors = {lab: f"C{i % 10}" for i, lab in enumerate(labels)}
    cols = min(len(panels), 4)
    rows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False, sharey=True)
    for ax, value in zip(axes.flat, panels):
        for r in with_val:
            if panel_key and r.config.get(panel_key) != value:
                continue
            steps, vals = zip(*r.scalars["val/loss"])
            lab = _label(r, line_keys)
            ax.plot(steps, vals, color=colors[lab], ls="--" if r.unfinished else "-", marker=".",
                    label=lab + (f" ({r.status})" if r.unfinished else ""))
            finite = [(st, v) for st, v in zip(steps, vals) if math.isfinite(v)]
            if r.status == "diverged" and finite:  # the cross sits at the divergence step
                at = r.summary.get("diverged_at_step")
                ax.plot(at if at is not None else finite[-1][0], finite[-1][1], marker="x", color="red", ms=9, mew=2)
        ax.set_title(f"{display_name(panel_key)}={fmt_param(value)}" if panel_key else "validation loss", fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[:, 0]:
        ax.set_ylabel("validation loss")
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle("Validation loss (red x: diverged; dashed: still running)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


def _cell_text(members: list[Run]) -> tuple[float, str]:
    """Mean final val loss over the cell's non-diverged runs, and the cell's annotation."""
    finite, notes = [], []
    for r in members:
        v = r.metrics().get("final_val_loss")
        if r.status == "diverged":
            notes.append(f"div@{r.summary.get('diverged_at_step')}")
        elif r.status == "failed":
            notes.append("failed")
        elif v is not None and math.isfinite(v):
            finite.append(v)
            if r.unfinished:
                notes.append(r.status)
    mean = sum(finite) / len(finite) if finite else math.nan
    text = [f"{mean:.3f}"] if finite else []
    if len(finite) > 1:
        text[0] += f" (n={len(finite)})"
    return mean, "\n".join(text + sorted(set(notes)))


def plot_final_grid(runs: list[Run], keys: list[str], path: Path) -> tuple[str | None, str | None]:
    """A heatmap of final validation loss over the first two varied keys (a bar chart with
    one varied key). Diverged and failed cells are hatched and labelled. Returns
    (kind, note): kind is "heatmap" or "bar chart", or None with a note when skipped."""
    if not keys:
        return None, "no hyperparameter varies across the runs: the final-loss grid is skipped"
    plt = _pyplot()
    import numpy as np

    row_key, col_key = keys[0], (keys[1] if len(keys) > 1 else None)
    row_vals = sorted({r.config.get(row_key) for r in runs}, key=sort_key)
    col_vals = sorted({r.config.get(col_key) for r in runs}, key=sort_key) if col_key else [None]
    grid = np.full((len(row_vals), len(col_vals)), np.nan)
    texts = [["" for _ in col_vals] for _ in row_vals]
    for i, rv in enumerate(row_vals):
        for j, cv in enumerate(col_vals):
            members = [r for r in runs if r.config.get(row_key) == rv and (col_key is None or r.config.get(col_key) == cv)]
            if members:
                grid[i, j], texts[i][j] = _cell_text(members)
    others = [display_name(k) for k in keys[2:]]
    subtitle = f"\n(mean over {', '.join(others)})" if others else ""
    if col_key is None:
        fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(row_vals) + 2), 3.6))
        heights = np.nan_to_num(grid[:, 0], nan=0.0)
        bars = ax.bar(range(len(row_vals)), heights, color="C0")
        for b, v, t in zip(bars, grid[:, 0], [t[0] for t in texts]):
            if not math.isfinite(v):
                b.set_hatch("//")
            ax.annotate(t or "no value", (b.get_x() + b.get_width() / 2, b.get_height()), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(range(len(row_vals)), [fmt_param(v) for v in row_vals])
        ax.set_xlabel(display_name(row_key))
        ax.set_ylabel("final validation loss")
        ax.set_title("Final validation loss (hatched: diverged or failed)" + subtitle, fontsize=10)
        kind = "bar chart"
    else:
        fig, ax = plt.subplots(figsize=(1.5 * len(col_vals) + 3, 0.9 * len(row_vals) + 2.2))
        masked = np.ma.masked_invalid(grid)
        im = ax.imshow(masked, cmap="viridis_r", aspect="auto")
        fig.colorbar(im, ax=ax, label="final validation loss")
        for i in range(len(row_vals)):
            for j in range(len(col_vals)):
                bad = not math.isfinite(grid[i, j])
                if bad and texts[i][j]:  # only diverged / failed runs: hatched grey cell
                    ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor="0.85", edgecolor="red", hatch="xx", lw=1.5))
                elif "div@" in texts[i][j] or "failed" in texts[i][j]:  # some runs of the cell: red frame
                    ax.add_patch(plt.Rectangle((j - 0.48, i - 0.48), 0.96, 0.96, fill=False, edgecolor="red", lw=2.5))
                # viridis_r: low loss is light yellow (black text), high loss dark (white text)
                light = not bad and (grid[i, j] - np.nanmin(grid)) <= 0.5 * (np.nanmax(grid) - np.nanmin(grid))
                ax.text(j, i, texts[i][j] or "–", ha="center", va="center", fontsize=8,
                        color="red" if bad else ("black" if light else "white"),
                        bbox=dict(facecolor="white", edgecolor="none", pad=1.5) if bad and texts[i][j] else None)
        ax.set_xticks(range(len(col_vals)), [fmt_param(v) for v in col_vals])
        ax.set_yticks(range(len(row_vals)), [fmt_param(v) for v in row_vals])
        ax.set_xlabel(display_name(col_key))
        ax.set_ylabel(display_name(row_key))
        ax.set_title("Final validation loss (hatched red: diverged or failed)" + subtitle, fontsize=10)
        kind = "heatmap"
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return kind, None


def layer_profile(r: Run, family: str) -> dict[int, list[float]]:
    """{step: [value of layer_00, layer_01, ...]} for the steps where every layer is logged."""
    tags = sorted(t for t in r.scalars if t.startswith(f"{family}/layer_"))
    if not tags:
        return {}
    per_tag = [dict(r.scalars[t]) for t in tags]
    steps = set(per_tag[0]).intersection(*per_tag[1:])
    return {s: [d[s] for d in per_tag] for s in sorted(steps)}


def plot_layer_profiles(runs: list[Run], keys: list[str], family: str, path: Path) -> str | None:
    """`family`/layer_XX against layer index at step 0 and at each run's last logged step.
    Colour = placement (or run, if placement does not vary). At step 0 runs whose values are
    identical (same init and batch; warmup and lr act only after it) share one line."""
    import numpy as np

    profiles = {r.index: layer_profile(r, family) for r in runs}
    drawn = [r for r in runs if profiles[r.index]]
    if not drawn:
        return f"no run has logged {family}/layer_XX yet: the {family} figure is skipped"
    plt = _pyplot()
    color_key = "placement.name" if "placement.name" in keys else None
    color_vals = sorted({r.config.get(color_key) for r in drawn}, key=sort_key) if color_key else [r.index for r in drawn]
    color = {v: f"C{i % 10}" for i, v in enumerate(color_vals)}
    colour_of = lambda r: color[r.config.get(color_key) if color_key else r.index]  # noqa: E731
    styles = ["-", "--", ":", "-."]
    rest = [k for k in keys if k != color_key]
    combos = list(dict.fromkeys(tuple(repr(r.config.get(k)) for k in rest) for r in drawn))
    style_of = lambda r: styles[combos.index(tuple(repr(r.config.get(k)) for k in rest)) % len(styles)]  # noqa: E731

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=False)
    clean = lambda v: np.where(np.isfinite(v), v, np.nan)  # noqa: E731
    # step 0: group identical profiles
    groups: list[tuple[np.ndarray, list[Run]]] = []
    for r in drawn:
        if 0 not in profiles[r.index]:
            continue
        v = np.array(profiles[r.index][0], dtype=float)
        for g in groups:
            if g[0].shape == v.shape and np.allclose(g[0], v, rtol=1e-6, atol=0, equal_nan=True):
                g[1].append(r)
                break
        else:
            groups.append((v, [r]))
    for v, members in groups:
        common = [k for k in keys if len({repr(m.config.get(k)) for m in members}) == 1]
        label = _label(members[0], common) + (f" ({len(members)} runs)" if len(members) > 1 else "")
        axes[0].plot(np.arange(len(v)), clean(v), marker="o", ms=3, color=colour_of(members[0]),
                     ls="-" if len(members) > 1 else style_of(members[0]), label=label)
    axes[0].set_title("step 0 (initialisation, first batch)", fontsize=10)
    for r in drawn:
        last = max(profiles[r.index])
        v = np.array(profiles[r.index][last], dtype=float)
        tail = f" @{last}" + (f" {r.status}" if r.unfinished or r.status == "diverged" else "")
        axes[1].plot(np.arange(len(v)), clean(v), marker="o", ms=3, color=colour_of(r), ls=style_of(r),
                     label=_label(r, keys) + tail)
    axes[1].set_title("last logged step of each run", fontsize=10)
    for ax in axes:
        ax.set_yscale("log")
        ax.set_xlabel("layer index")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    axes[0].set_ylabel(family)
    fig.suptitle(f"{family}/layer_XX: {LAYER_FAMILIES[family]}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return None


# ------------------------------------------------------------------------- report

def make_report(path: Path, out: Path | None = None, echo=print) -> dict:
    """Build the table, runs.csv, report.md and the figures. Returns what was written."""
    root = Path(path)
    if not root.exists():
        raise ReportError(f"{root}: no such folder; give a sweep folder, e.g. runs/multirun/<date>/<time>")
    if not root.is_dir():
        raise ReportError(f"{root} is a file; give the folder that holds the run folders")
    runs = load_runs(root)
    if not runs:
        raise ReportError(f"{root}: no run folders found (a run folder holds .hydra/config.yaml); "
                          "give a folder written by `normexp train`")
    out_dir = Path(out) if out is not None else root
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".normexp-report-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as e:
        raise ReportError(f"cannot write to {out_dir} ({e.strerror}); choose another folder with --out") from None

    keys = varied_keys(runs)
    runs.sort(key=lambda r: ([sort_key(r.config.get(k)) for k in keys], r.rel))
    for i, r in enumerate(runs, 1):
        r.index = i
    head, rows = table_rows(runs, keys)

    counts = {}
    for r in runs:
        counts[r.status] = counts.get(r.status, 0) + 1
    overview = (f"{len(runs)} run{'s' * (len(runs) != 1)} under {root}: "
                + ", ".join(f"{n} {s}" for s, n in counts.items())
                + (f"; varied: {', '.join(map(display_name, keys))}" if keys else "; no hyperparameter varies"))

    figures, notes = [], []
    note = plot_val_curves(runs, keys, out_dir / "val_loss.png")
    if note:
        notes.append(note)
    else:
        figures.append(("Validation loss", "val_loss.png"))
    kind, note = plot_final_grid(runs, keys, out_dir / "final_val_loss.png")
    if note:
        notes.append(note)
    else:
        figures.append((f"Final validation loss ({kind})", "final_val_loss.png"))
    for family in LAYER_FAMILIES:
        note = plot_layer_profiles(runs, keys, family, out_dir / f"{family}_layers.png")
        if note:
            notes.append(note)
        else:
            figures.append((f"Per-layer {family} at step 0 and at the end", f"{family}_layers.png"))

    for r in runs:
        if r.status == "failed":
            notes.append(f"run #{r.index} failed: {r.summary.get('error') or 'no error recorded'} ({r.rel})")
        elif r.status == "killed":
            notes.append(f"run #{r.index} was killed (its process {r.summary.get('pid')} is gone) before it could "
                         f"write a final status: its values are read from its event file; `normexp train ... "
                         f"resume=true hydra.run.dir={r.rel}` continues it from its last checkpoint")
        elif r.status in ("running", "unknown"):
            what = "is still running" if r.status == "running" else "has no summary.json yet"
            notes.append(f"run #{r.index} {what}: its values are read from its event file, "
                         f"as far as flushed ({r.rel})")
    if len(keys) > 2:
        notes.append(f"the final-loss grid shows {display_name(keys[0])} × {display_name(keys[1])} and "
                     f"averages over {', '.join(map(display_name, keys[2:]))}")

    csv_path, md_path = out_dir / "runs.csv", out_dir / "report.md"
    write_csv(csv_path, runs, keys)
    md = [f"# normexp report: `{root}`", "", overview, "", markdown_table(head, rows), ""]
    if notes:
        md += ["## Notes", "", *(f"- {n}" for n in notes), ""]
    md += ["## Figures", ""]
    for title, name in figures:
        md += [f"### {title}", "", f"![{title}]({name})", ""]
    md_path.write_text("\n".join(md))

    echo(overview)
    echo(text_table(head, rows))
    for n in notes:
        echo(f"note: {n}")
    written = [csv_path, md_path, *(out_dir / name for _, name in figures)]
    echo("wrote " + ", ".join(str(p) for p in written))
    return {"runs": runs, "keys": keys, "figures": [out_dir / n for _, n in figures], "notes": notes,
            "csv": csv_path, "markdown": md_path}
