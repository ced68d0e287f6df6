"""Screenshots of TensorBoard's dashboards for a run folder, as a user opens them: starts
`tensorboard --logdir LOGDIR` on a free local port and drives headless Chromium (Debian:
`apt-get install chromium`) to each dashboard over its DevTools pipe.

    python scripts/screenshots.py runs/multirun/<date>/<time> --out docs/tensorboard

writes timeseries.png and scalars.png (Time Series and Scalars filtered to the train and
validation losses, `--loss-filter` to change the regex), hparams.png, images.png,
custom_scalars.png and signals.png (the Scalars dashboard filtered to issue 29's signals,
`--tag-filter` to change the regex) into --out (`--only hparams,scalars` for some), and prints
how long each dashboard took to load.
"""

from __future__ import annotations

import argparse
import base64
import fcntl
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

# each dashboard's address after http://HOST:PORT/; {losses} and {signals} are the tag regexes.
# Time Series takes its tag filter in the query; forceSVG=true draws its charts as SVG, since
# the default WebGL ones stay blank in headless Chromium. Scalars takes its filter in the hash.
DASHBOARDS = {"timeseries": "?forceSVG=true&tagFilter={losses}#timeseries",
              "scalars": "#scalars&tagFilter={losses}",
              "hparams": "#hparams",
              "images": "#images",
              "custom_scalars": "#custom_scalars",
              "signals": "#scalars&tagFilter={signals}"}
LOSSES_FILTER = r"^(train|val)/loss$"
# issue 29's signals: of the last block of each run (signals_filter fills in BLOCK)
SIGNALS_FILTER = (r"attn_entropy_head/BLOCK|(query|key)_norm/BLOCK|adam_._norm/BLOCK|output/z_loss|"
                  r"train/cross_entropy|train/loss_spike|train/loss$")
# JavaScript run on a dashboard once it has loaded, before its screenshot. HParams' "Trial ID"
# column (the run's name) is 10em wide whatever the names, which cuts a sweep's names such as
# `placement=deepnorm,warmup=100` to their common start: size it to its longest name instead.
PREPARE = {"hparams": """(() => {
  const grids = [];
  const walk = root => root.querySelectorAll('*').forEach(el => {
    if (el.localName === 'vaadin-grid') grids.push(el);
    if (el.shadowRoot) walk(el.shadowRoot);
  });
  walk(document);
  for (const grid of grids) {
    const trialId = grid.querySelector('vaadin-grid-column');
    if (trialId) { trialId.autoWidth = true; grid.recalculateColumnWidths(); }
  }
  return grids.length;
})()"""}
# flags for a headless Chromium on a closed network (no background connections, no sandbox as root)
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--hide-scrollbars", "--remote-debugging-pipe"]
QUIET_S = 2.0  # a page has loaded when its network has been idle this long after its load event


def signals_filter(logdir: Path) -> str:
    """SIGNALS_FILTER for the runs under `logdir`: BLOCK is the last block of each run's depth
    (summary.json's layers; `layer_05` for a 6-block run, `layer_(05|11)` for runs of 6 and 12)."""
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


def dashboard_url(base: str, name: str, losses: str, signals: str) -> str:
    """The address of dashboard `name` on the TensorBoard at `base`, its tag filters URL-quoted."""
    quote = lambda regex: urllib.parse.quote(regex, safe="")  # noqa: E731
    return f"{base}/" + DASHBOARDS[name].format(losses=quote(losses), signals=quote(signals))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Chromium:
    """Headless Chromium driven through the DevTools protocol over `--remote-debugging-pipe`:
    NUL-terminated JSON messages, commands in on the browser's fd 3, replies and events out on
    its fd 4 (no websocket library needed)."""

    def __init__(self, browser: str, profile: str, width: int, height: int, timeout: float = 300):
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()
        # above fd 4, so that moving them onto 3 and 4 in the child cannot overwrite one another
        child_read, child_write = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (commands_read, replies_write))
        for fd in (commands_read, replies_write):
            os.close(fd)

        def onto_fds_3_and_4() -> None:
            os.dup2(child_read, 3)
            os.dup2(child_write, 4)

        self.process = subprocess.Popen(
            [browser, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={width},{height}", "about:blank"],
            preexec_fn=onto_fds_3_and_4, pass_fds=(3, 4), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(child_read)
        os.close(child_write)
        self.timeout = timeout
        self._buffer = b""
        self._last_id = 0
        self._in_flight: set[str] = set()
        self._loaded = False
        self._last_activity = time.perf_counter()
        self._session = None
        self.size = {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}

    def send(self, method: str, params: dict | None = None, page: bool = False) -> dict:
        """Run one command (on the page when `page`) and return its result."""
        self._last_id += 1
        message = {"id": self._last_id, "method": method, "params": params or {}}
        if page:
            message["sessionId"] = self._session
        data = json.dumps(message).encode() + b"\0"
        while data:
            data = data[os.write(self._commands, data):]
        deadline = time.perf_counter() + self.timeout
        while True:
            reply = self._receive(deadline - time.perf_counter())
            if reply is None:
                raise TimeoutError(f"screenshots: Chromium did not answer {method} in {self.timeout:.0f} s")
            if reply.get("id") == self._last_id:
                if "error" in reply:
                    raise RuntimeError(f"screenshots: Chromium: {method}: {reply['error'].get('message')}")
                return reply.get("result", {})

    def _receive(self, wait: float) -> dict | None:
        """The next message (an event updates the page's network state), or None after `wait` s."""
        while b"\0" not in self._buffer:
            if not select.select([self._replies], [], [], max(wait, 0))[0]:
                return None
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise RuntimeError("screenshots: Chromium closed its DevTools pipe (it exited)")
            self._buffer += chunk
        raw, _, self._buffer = self._buffer.partition(b"\0")
        message = json.loads(raw)
        method, params = message.get("method"), message.get("params", {})
        if method and message.get("sessionId") != self._session:
            return message  # another tab's event
        if method == "Network.requestWillBeSent":
            self._in_flight.add(params["requestId"])
        elif method in ("Network.loadingFinished", "Network.loadingFailed"):
            self._in_flight.discard(params["requestId"])
        elif method == "Page.loadEventFired":
            self._loaded = True
        if method and method.startswith(("Network.", "Page.")):
            self._last_activity = time.perf_counter()
        return message

    def wait_until_quiet(self) -> None:
        """Until the page has fired its load event and its network has been idle QUIET_S."""
        deadline = time.perf_counter() + self.timeout
        while not (self._loaded and not self._in_flight and time.perf_counter() - self._last_activity >= QUIET_S):
            if time.perf_counter() > deadline:
                raise TimeoutError(f"screenshots: the page had not loaded after {self.timeout:.0f} s")
            self._receive(0.1)

    def screenshot(self, url: str, path: Path, prepare: str = "") -> float:
        """Open `url` in a new tab, wait until it has loaded, run `prepare`, write a PNG of the
        window to `path`, close the tab; returns the seconds from opening the page to its last
        network activity."""
        tab = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.send("Target.attachToTarget", {"targetId": tab, "flatten": True})["sessionId"]
        try:
            self.send("Emulation.setDeviceMetricsOverride", self.size, page=True)
            self.send("Page.enable", page=True)
            self.send("Network.enable", page=True)
            self._loaded = False
            self._in_flight.clear()
            began = time.perf_counter()
            self.send("Page.navigate", {"url": url}, page=True)
            self.wait_until_quiet()
            loaded = self._last_activity - began
            if prepare:
                self.send("Runtime.evaluate", {"expression": prepare, "returnByValue": True}, page=True)
                self._last_activity = time.perf_counter()
                self.wait_until_quiet()
            png = self.send("Page.captureScreenshot", {"format": "png"}, page=True)["data"]
            path.write_bytes(base64.b64decode(png))
        finally:
            self._session = None
            self.send("Target.closeTarget", {"targetId": tab})
        return loaded

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (OSError, RuntimeError, TimeoutError):
            pass
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        os.close(self._commands)
        os.close(self._replies)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logdir", type=Path)
    ap.add_argument("--out", type=Path, default=Path("docs/tensorboard"))
    ap.add_argument("--size", default="1500,950", help="window width,height")
    ap.add_argument("--only", default=",".join(DASHBOARDS), help=f"dashboards to take, of {', '.join(DASHBOARDS)}")
    ap.add_argument("--loss-filter", default=LOSSES_FILTER, help="the Time Series and Scalars pages' tag regex")
    ap.add_argument("--tag-filter", default=None, help="the signals page's tag regex (default: issue 29's "
                    "signals of each run's last block)")
    args = ap.parse_args()
    args.tag_filter = args.tag_filter or signals_filter(args.logdir)
    unknown = [n for n in args.only.split(",") if n not in DASHBOARDS]
    if unknown:
        raise SystemExit(f"screenshots: --only {args.only}: unknown {', '.join(unknown)}; choose from {', '.join(DASHBOARDS)}")
    if not args.logdir.is_dir():
        raise SystemExit(f"screenshots: {args.logdir} is not a folder; pass a run or sweep folder")
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        raise SystemExit("screenshots: no Chromium on PATH; install it (Debian: apt-get install chromium)")
    width, height = (int(v) for v in args.size.split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    # run from the folder's parent with its bare name, so the pages (the sidebar names the log
    # folder) show no path of this machine
    logdir = args.logdir.resolve()
    board = subprocess.Popen([sys.executable, "-m", "tensorboard.main", "--logdir", logdir.name, "--host",
                              "127.0.0.1", "--port", str(port)], cwd=logdir.parent,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        for _ in range(120):  # until it answers
            try:
                urllib.request.urlopen(base + "/data/runs", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        time.sleep(3)  # let it read the event files
        with tempfile.TemporaryDirectory() as profile:
            chromium = Chromium(browser, profile, width, height)
            try:
                for name in args.only.split(","):
                    path = args.out / f"{name}.png"
                    loaded = chromium.screenshot(dashboard_url(base, name, args.loss_filter, args.tag_filter), path,
                                                 PREPARE.get(name, ""))
                    print(f"wrote {path} ({loaded:.1f} s to load)")
            finally:
                chromium.close()
    finally:
        board.terminate()
        board.wait(timeout=30)


if __name__ == "__main__":
    main()
