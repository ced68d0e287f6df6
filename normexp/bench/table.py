"""The bench's printed table (the same figures as its JSON)."""

from __future__ import annotations

from .shapes import Shape

NAMES = {"minimal": "minimal GPT (by hand)", "log10": "normexp log_every=10", "off": "normexp instruments off",
         "log1": "normexp log_every=1", "compile": "normexp compile=true, log 10",
         "plain10": "log_every=10, extra sig. off"}


def _label(s: Shape) -> str:
    return f"{s.name} {s.layers}×{s.d_model} T{s.seq_len} B{s.batch_size}"


def throughput_lines(shapes: list[Shape], results: dict) -> list[str]:
    head = (f"{'shape':24s} {'run':28s} {'tok/s':>9s} {'ms/step':>9s} {'peak RSS':>9s} {'MFU':>6s} "
            f"{'vs minimal':>10s} {'CPU':>5s}")
    lines = [head, "-" * len(head)]
    for shape in shapes:
        label = _label(shape)
        for v, row in results[shape.name]["runs"].items():
            lines.append(f"{label:24s} {NAMES[v]:28s} {row['tokens_per_s']:9,.0f} {row['ms_per_step']:9.1f} "
                         f"{row['peak_rss_mb']:7.0f}MB {100 * row['mfu']:5.1f}% {row['vs_minimal']:9.3f}× "
                         f"{100 * row['cpu_share']:4.0f}%")
            label = ""
        lines.append("")
    return lines


def cost_lines(shapes: list[Shape], results: dict) -> list[str]:
    """Model build, one logging step against a plain step, the step at the default log_every,
    and the TensorBoard bytes of a logging step."""
    every = results[shapes[0].name]["costs"]["default_log_every"]
    lines = ["model build (construction + init, best round); a logging step against the plain steps of the same "
             "log_every=10 runs (medians of the rounds);",
             f"s/step amortised at the default run's log_every={every}; TensorBoard bytes written by one logging step",
             f"{'shape':24s} {'build normexp':>13s} {'build minimal':>13s} {'plain ms':>9s} {'logging ms':>10s} "
             f"{'extra ms':>8s} {f's/step @{every}':>10s} {'TB/logging step':>16s}"]
    lines.append("-" * len(lines[-1]))
    for s in shapes:
        c = results[s.name]["costs"]
        step = c["logging_step"]
        timing = (f"{1e3 * step['plain_s']:9.1f} {1e3 * step['logged_s']:10.1f} {1e3 * step['extra_s']:+8.1f}"
                  if step else f"{'n/a':>9s} {'n/a':>10s} {'n/a':>8s}")
        size = c["event_bytes_per_logging_step"]
        lines.append(f"{_label(s):24s} {c['build_s']['normexp']:11.2f} s {c['build_s']['minimal']:11.2f} s {timing} "
                     f"{c['s_per_step_at_default_log_every']:10.3f} "
                     + (f"{size / 1e3:13,.1f} kB" if size is not None else f"{'n/a':>16s}"))
    return lines + [""]


def table(shapes: list[Shape], results: dict, peak: float, threads: int, peak_size: int) -> str:
    lines = [f"fp32 matmul peak, n×n @ n×n with n={peak_size}, {threads} threads: {peak:.1f} GFLOP/s (best of the rounds)",
             "MFU = FLOPs/token × tokens/s ÷ peak;  FLOPs/token = 6·N + 12·L·T·d  (N = matmul weights "
             "incl. the tied head, 12·L·T·d = attention scores and values, fwd+bwd)",
             "each figure is the best of the rounds; CPU = CPU time ÷ (wall × threads) in that round "
             "(well below 100 % means other processes shared the cores)", ""]
    lines += throughput_lines(shapes, results)
    lines += cost_lines(shapes, results)
    comp = [(s, results[s.name]["runs"]) for s in shapes if "compile" in results[s.name]["runs"]]
    if comp:
        lines.append("torch.compile (compile=true) against eager, both at log_every=10 (logging steps run eager):")
        for s, runs in comp:
            ratio = runs["compile"]["tokens_per_s"] / runs["log10"]["tokens_per_s"]
            verdict = "helps" if ratio > 1.03 else "does not help" if ratio < 0.97 else "makes no clear difference"
            lines.append(f"  {s.name} {s.layers}×{s.d_model}: {ratio:.2f}× eager's tokens/s, {verdict}; "
                         f"the first step (compiling) took {runs['compile']['first_step_s']:.0f} s")
        lines.append("")
    over = [(s, results[s.name]["instrument_overhead"]) for s in shapes if "instrument_overhead" in results[s.name]]
    if over:
        lines.append("instrument overhead (target ≤ 3 % at log_every=10, ≤ 15 % at log_every=1):")
        lines.append("  inside  = a logging step's extra time over the plain steps of the same log_every=10 runs "
                     "(median of the rounds; ÷ 10 at log_every=10)")
        lines.append("  between = whole runs against a run with no logging step, paired within each round: "
                     "median [min … max] of the rounds")
        pct = lambda x: f"{100 * x:+5.1f} %"  # noqa: E731
        for s, o in over:
            rng = lambda t: f"{pct(t[0])} [{pct(t[1]).strip()} … {pct(t[2]).strip()}]"  # noqa: E731
            inside = ("n/a" if o["log_every_1_within_runs"] is None else
                      f"log_every=10 {pct(o['log_every_10_within_runs'])}, log_every=1 {pct(o['log_every_1_within_runs'])}"
                      f"  ({o['logging_step_extra_ms']:.1f} ms a logging step)")
            lines.append(f"  {s.name} {s.layers}×{s.d_model}  inside:  {inside}")
            lines.append(f"  {' ' * len(f'{s.name} {s.layers}×{s.d_model}')}  between: log_every=10 {rng(o['log_every_10'])}, "
                         f"log_every=1 {rng(o['log_every_1'])}  ({o['rounds']} rounds)")
            extra = o.get("extra_signals")
            if extra:
                inside = ("n/a" if extra["inside"] is None else f"{pct(extra['inside']['log_every_10'])} "
                          f"({extra['inside']['logging_step_extra_ms']:+.1f} ms a logging step)")
                lines.append(f"  {' ' * len(f'{s.name} {s.layers}×{s.d_model}')}  of which log.extra_signals (issue 29) "
                             f"at log_every=10: inside {inside}, between {rng(extra['between_log_every_10'])}")
    return "\n".join(lines)


def extras_text(sweep: dict | None, startup: dict | None, profiles: dict | None, cores: int, sweep_steps: int) -> str:
    """The lines of the optional measurements (--sweep, --startup, --profiles) under the table;
    sets sweep["faster"]."""
    text = ""
    if sweep:
        faster = "parallel" if sweep["parallel_tokens_per_s"] > sweep["sequential_tokens_per_s"] else "sequential"
        text += (f"\n\nsweep throughput on {sweep['shape']} (aggregate tokens/s, steady state): {sweep['parallel_jobs']} jobs × 1 thread "
                 f"{sweep['parallel_tokens_per_s']:,.0f}  vs  1 job × {cores} threads {sweep['sequential_tokens_per_s']:,.0f}"
                 f"  -> {faster} is faster ({sweep['parallel_tokens_per_s'] / sweep['sequential_tokens_per_s']:.2f}×)")
        cli = sweep["cli"]
        text += (f"\nthe same through `normexp train -m` ({2 * cores} seeds × {sweep_steps} steps, "
                 f"start-up, validation and checkpoints included): "
                 f"joblib n_jobs={cores} {cli['joblib']['wall_s']:.1f} s, basic launcher {cli['basic']['wall_s']:.1f} s "
                 f"({cli['basic']['wall_s'] / cli['joblib']['wall_s']:.2f}× in favour of "
                 f"{'joblib' if cli['joblib']['wall_s'] < cli['basic']['wall_s'] else 'basic'})")
        sweep["faster"] = faster
    if startup:
        text += (f"\n\nstart-up, `normexp train` (default config, token cache warm), median of {startup['repeats']}: "
                 f"step 0 starts {startup['to_first_step_s']:.2f} s after launch (best {startup['best_to_first_step_s']:.2f} s), "
                 f"{startup['to_first_step_cpu_s']:.2f} CPU s")
    if profiles:
        share = profiles["overhead"]
        text += (f"\n\ndepth-profile images (log.profiles_every=auto): {profiles['ms_per_image']:.1f} ms each "
                 f"(median of 10); the default run ({profiles['default_steps']} steps) draws "
                 f"{profiles['images_per_default_run']}, every {profiles['profiles_every']} steps: "
                 + (f"+{100 * share:.2f} % of its step time" if share is not None else "add C to --only for the share"))
    return text
