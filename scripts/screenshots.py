"""Screenshots of TensorBoard's dashboards for a run folder, as a user opens them: starts
`tensorboard --logdir LOGDIR` on a free local port and points headless Chromium at each
dashboard (Debian: `apt-get install chromium`).

    python scripts/screenshots.py runs/multirun/<date>/<time> --out docs/tensorboard

writes hparams.png, images.png, custom_scalars.png and signals.png (the Scalars dashboard
filtered to issue 29's signals, `--tag-filter` to change the regex) into --out (`--only
signals` for one), and prints how long each dashboard took to load and draw.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

DASHBOARDS = {"hparams": "hparams", "images": "images", "custom_scalars": "custom_scalars",
              # the Scalars dashboard with its tag filter (`tagFilter` in the URL's hash, a regex; see
              # --tag-filter): the Time Series dashboard draws its charts with WebGL, which stays
              # blank in headless Chromium here
              "signals": "scalars&tagFilter="}
# issue 29's signals: of the last block of each run (signals_filter fills in BLOCK)
SIGNALS_FILTER = (r"attn_entropy_head/BLOCK|(query|key)_norm/BLOCK|adam_._norm/BLOCK|output/z_loss|"
                  r"train/cross_entropy|train/loss_spike|train/loss$")


def signals_filter(logdir: Path) -> str:
    """SIGNALS_FILTER for the runs under `logdir`: BLOCK is the last block of each run's depth
    (summary.json's layers; `layer_05` for a 6-block run, `layer_(05|11)` for runs of 6 and 12)."""
    import json

    from normexp.runs.schema import layer_tag

    depths = set()
    for summary in Path(logdir).rglob("summary.json"):
        try:
            depths.add(int(json.loads(summary.read_text())["layers"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    blocks = [layer_tag("x", d - 1).split("/", 1)[1] for d in sorted(depths)] or ["layer_05"]
    block = blocks[0] if len(blocks) == 1 else f"({'|'.join(blocks)})"
    return SIGNALS_FILTER.replace("BLOCK", block)
# flags for a headless Chromium on a closed network (no background connections, no sandbox as root)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--virtual-time-budget=20000"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logdir", type=Path)
    ap.add_argument("--out", type=Path, default=Path("docs/tensorboard"))
    ap.add_argument("--size", default="1500,950", help="window width,height")
    ap.add_argument("--only", default=",".join(DASHBOARDS), help=f"dashboards to take, of {', '.join(DASHBOARDS)}")
    ap.add_argument("--tag-filter", default=None, help="the signals page's tag regex (default: issue 29's "
                    "signals of each run's last block)")
    args = ap.parse_args()
    args.tag_filter = args.tag_filter or signals_filter(args.logdir)
    unknown = [n for n in args.only.split(",") if n not in DASHBOARDS]
    if unknown:
        raise SystemExit(f"screenshots: --only {args.only}: unknown {', '.join(unknown)}; choose from {', '.join(DASHBOARDS)}")
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        raise SystemExit("screenshots: no Chromium on PATH; install it (Debian: apt-get install chromium)")
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    board = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", str(args.logdir), "--host",
                              "127.0.0.1", "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(120):  # until it answers
            try:
                urllib.request.urlopen(url + "/data/runs", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        time.sleep(3)  # let it read the event files
        for name in args.only.split(","):
            route = "#" + DASHBOARDS[name] + (urllib.parse.quote(args.tag_filter, safe="") if name == "signals" else "")
            with tempfile.TemporaryDirectory() as profile:
                path = args.out / f"{name}.png"
                began = time.perf_counter()
                subprocess.run([browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={args.size}",
                                f"--screenshot={path.resolve()}", f"{url}/{route}"],
                               check=True, capture_output=True, timeout=300)
                # headless Chromium returns once the page has loaded and gone idle for the virtual
                # time budget: its wall time is how long the dashboard took to load and draw
                print(f"wrote {path} ({time.perf_counter() - began:.1f} s to load and draw)")
    finally:
        board.terminate()
        board.wait(timeout=30)


if __name__ == "__main__":
    main()
