"""`normexp probe`'s table and figures, read from its records (measured by train/probe.py).

The study of Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture"
(§3, Fig. 3): for each placement × depth × seed, build a freshly initialised GPT, run one
forward/backward per batch of real text, and record per block

    grad_norm_mlp_out  ‖∂L/∂W₂‖_F of the block's second MLP matrix (`GPT.residual_output_weights`)
    hidden_rms         √mean(x²) of the residual stream x leaving the block

averaged over the batches. What the paper predicts at initialisation:
  * Post-LN: the last layer's W₂ gradient does not shrink as depth L grows (Theorem 1:
    O(d·√ln d), independent of L), and (Fig. 3) it is the largest of the stack;
  * Pre-LN: the last layer's gradient shrinks like O(d·√(ln d / L)), i.e. ~1/√L, because the
    final LayerNorm divides by ‖x_L‖ and ‖x_L‖² grows about linearly with L (Lemma 2);
    so Post-LN's last layer exceeds Pre-LN's by a factor growing like √L;
  * Pre-LN (Fig. 3): about the same gradient in every layer.

What this decoder-only model shows (tests/analysis/test_probe.py pins the trends; docs/results/probe/README.md has
the measured numbers): Theorem 1 and Lemma 2 hold; Fig. 3's per-layer shapes do not. Pre-LN's gradient falls with the layer index like 1/‖x_l‖
(grad × hidden RMS is flat): Theorem 1's mechanism applied layer by layer. Post-LN's profile
is a multiplicative random walk over layers, flat on average over seeds rather than rising
towards the output.

Fig. 3 is measured on an encoder-decoder Transformer, and `--encoder-decoder` (the decoder
of one: self-attention, cross-attention to the encoder's output, MLP in every block)
reproduces it: Post-LN's W₂ gradient rises towards the output (exponentially with depth: the vanishing gradient of Post-LN decoders that Liu et al. 2020,
"Understanding the Difficulty of Training Transformers", describe), while its last layer's
stays flat in depth; Pre-LN's per-layer gradients are about equal and its last layer's
follows 1/√L. Cross-attention is what separates the two: it adds variance
to the decoder's stream without passing gradient back along it (see `EncoderDecoder`).

The table shows, per placement × depth (means over seeds): the last layer's gradient and
last·√L (constant for a 1/√L law), last/first and its noise-robust version `fit` (the
last/first ratio of a least-squares line through log grad against layer index), max/min,
the hidden RMS of the first and last block, and `fit g·rms` (flat when grad ∝ 1/‖x_l‖); then
the last layer's gradient by depth with the Post-LN/Pre-LN ratio.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np


# ---------------------------------------------------------------------- summaries

def mean_profiles(records: list[dict], key: str) -> dict[tuple[str, int], np.ndarray]:
    """{(placement, layers): per-layer mean over seeds of `key`}."""
    groups: dict[tuple[str, int], dict[int, list[float]]] = {}
    for r in records:
        groups.setdefault((r["placement"], r["layers"]), {}).setdefault(r["layer"], []).append(r[key])
    return {k: np.array([np.mean(v[i]) for i in sorted(v)]) for k, v in groups.items()}


def fitted_ratio(profile: np.ndarray) -> float:
    """exp(slope·(L−1)) for the least-squares line through log(profile) against layer index:
    the last/first ratio with the per-layer noise averaged out (exact for a geometric profile)."""
    if len(profile) < 2:
        return 1.0
    slope = np.polyfit(np.arange(len(profile)), np.log(profile), 1)[0]
    return float(np.exp(slope * (len(profile) - 1)))


def render(rows: list[tuple[str, ...]]) -> str:
    """Columns padded to width; the first left-aligned, the rest right-aligned."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def format_table(records: list[dict]) -> str:
    """One row per placement × depth (values averaged over seeds), then the last layer's
    gradient by depth: the columns in which Xiong et al.'s trends show (module docstring)."""
    grads, rms = mean_profiles(records, "grad_norm_mlp_out"), mean_profiles(records, "hidden_rms")
    rows = [("placement", "layers", "grad last", "last·√L", "last/first", "fit", "max/min",
             "rms first", "rms last", "fit g·rms")]
    for (placement, layers), g in grads.items():
        h = rms[(placement, layers)]
        rows.append((placement, str(layers), f"{g[-1]:.4g}", f"{g[-1] * math.sqrt(layers):.3g}",
                     f"{g[-1] / g[0]:.2f}", f"{fitted_ratio(g):.2f}", f"{g.max() / g.min():.2f}",
                     f"{h[0]:.2f}", f"{h[-1]:.2f}", f"{fitted_ratio(g * h):.2f}"))
    placements = list(dict.fromkeys(p for p, _ in grads))
    by_depth = [("layers", *placements, *(["post/pre"] if {"post", "pre"} <= set(placements) else []))]
    for layers in sorted({d for _, d in grads}):
        last = {p: grads[(p, layers)][-1] for p in placements if (p, layers) in grads}
        row = [str(layers), *(f"{last[p]:.4g}" if p in last else "-" for p in placements)]
        if len(by_depth[0]) > len(placements) + 1:
            row.append(f"{last['post'] / last['pre']:.2f}" if {"post", "pre"} <= set(last) else "-")
        by_depth.append(tuple(row))
    return (render(rows) + "\n\nlast layer's grad_norm_mlp_out by depth (Theorem 1: Post-LN flat, Pre-LN ∝ 1/√L)\n"
            + render(by_depth))


# ------------------------------------------------------------------------ figures

def plot(records: list[dict], out_dir: Path) -> list[Path]:
    """probe.png (Xiong et al. Fig. 3 style: per-layer W₂ gradient norm and hidden RMS, one
    column per depth, one line per placement) and probe_last_layer.png (the last layer's
    gradient against depth, with a 1/√L guide)."""
    import matplotlib  # why here: ~0.3 s for the figures alone; Agg is chosen before pyplot loads
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grads, rms = mean_profiles(records, "grad_norm_mlp_out"), mean_profiles(records, "hidden_rms")
    placements = list(dict.fromkeys(p for p, _ in grads))
    depths = sorted({d for _, d in grads})
    colors = {p: f"C{i % 10}" for i, p in enumerate(placements)}
    # Post-LN and DeepNorm both leave the stream at RMS 1: distinct styles keep both visible
    styles = {p: (["-", "--", "-.", ":"][i % 4], "osD^v"[i % 5]) for i, p in enumerate(placements)}
    norm = records[0]["norm"]

    fig, axes = plt.subplots(2, len(depths), figsize=(max(3.6 * len(depths), 8.0), 6.6), squeeze=False)
    for j, depth in enumerate(depths):
        for row, (profiles, label) in enumerate(((grads, "‖∂L/∂W₂‖ (MLP out)"), (rms, "hidden RMS"))):
            ax = axes[row][j]
            for p in placements:
                if (p, depth) in profiles:
                    ls, marker = styles[p]
                    ax.plot(np.arange(depth), profiles[(p, depth)], ls=ls, marker=marker, mfc="none",
                            ms=max(2.0, 6.0 - placements.index(p)), color=colors[p], label=p, alpha=0.9)
            ax.set_yscale("log")
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.set_xlabel("layer index")
            if j == 0:
                ax.set_ylabel(label)
            if row == 0:
                ax.set_title(f"L = {depth}")
            ax.grid(alpha=0.3, which="both")
    axes[0][0].legend(fontsize=8)
    axes[1][0].legend(fontsize=8)
    which = ("each decoder block" if records[0].get("model") == "encoder-decoder" else "each block")
    fig.suptitle(f"At initialisation ({norm} norm, {records[0].get('model', 'decoder-only')}, mean over seeds): "
                 f"gradient of {which}'s second MLP matrix\n"
                 "and RMS of the residual stream leaving it (Xiong et al. 2020, Fig. 3)", fontsize=10)
    fig.tight_layout()
    paths = [out_dir / "probe.png"]
    fig.savefig(paths[0], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(5.2, 4))
    for p in placements:
        ds = [d for d in depths if (p, d) in grads]
        ax.plot(ds, [grads[(p, d)][-1] for d in ds], marker="o", color=colors[p], label=p)
    if "pre" in placements and len(depths) > 1:
        d0 = depths[0]
        ref = grads[("pre", d0)][-1]
        ax.plot(depths, [ref * math.sqrt(d0 / d) for d in depths], ls="--", color="grey", label="∝ 1/√L")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.set_xlabel("depth L (blocks)")
    ax.set_ylabel("last block's ‖∂L/∂W₂‖")
    ax.set_title("Last layer's gradient against depth (Xiong et al. Thm 1)", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    paths.append(out_dir / "probe_last_layer.png")
    fig.savefig(paths[1], dpi=110)
    plt.close(fig)
    return paths


def write_outputs(records: list[dict], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "probe.json"
    path.write_text(json.dumps(records, indent=1) + "\n")
    return [path, *plot(records, out_dir)]
