"""scripts/screenshots.py: each dashboard's address carries its tag regex where that dashboard
reads it, and the DevTools-pipe driver shows a page and writes its PNG at the window's size."""

from __future__ import annotations

import importlib.util
import shutil
import urllib.parse
from pathlib import Path

import pytest
from PIL import Image

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "screenshots.py"
spec = importlib.util.spec_from_file_location("screenshots", SCRIPT)
screenshots = importlib.util.module_from_spec(spec)
spec.loader.exec_module(screenshots)
BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

LOSSES = r"^(train|val)/loss$"
SIGNALS = r"attn_entropy_head/layer_05|output/z_loss|train/loss$"


def test_time_series_takes_svg_and_its_filter_in_the_query():
    url = urllib.parse.urlsplit(screenshots.dashboard_url("http://127.0.0.1:6006", "timeseries", LOSSES, SIGNALS))
    query = urllib.parse.parse_qs(url.query)
    assert (url.path, url.fragment) == ("/", "timeseries")
    assert query == {"forceSVG": ["true"], "tagFilter": [LOSSES]}


@pytest.mark.parametrize("name, regex", [("scalars", LOSSES), ("signals", SIGNALS)])
def test_scalars_take_their_filter_in_the_hash(name, regex):
    url = urllib.parse.urlsplit(screenshots.dashboard_url("http://127.0.0.1:6006", name, LOSSES, SIGNALS))
    route, _, param = url.fragment.partition("&")
    assert (url.query, route) == ("", "scalars")
    assert urllib.parse.parse_qs(param) == {"tagFilter": [regex]}


@pytest.mark.skipif(BROWSER is None, reason="needs Chromium")
def test_chromium_screenshots_a_page_at_the_window_size(tmp_path):
    page = tmp_path / "page.html"
    # the left half red, the right half blue: a PNG of the page shows both where they are drawn
    page.write_text('<body style="margin:0"><div style="display:flex;height:100vh">'
                    '<div style="flex:1;background:#ff0000"></div><div style="flex:1;background:#0000ff"></div>'
                    "</div></body>")
    chromium = screenshots.Chromium(BROWSER, str(tmp_path / "profile"), 320, 200, timeout=60)
    try:
        for name in ("first.png", "second.png"):  # a tab each: the second must not wait on the first's state
            chromium.screenshot(page.as_uri(), tmp_path / name)
            image = Image.open(tmp_path / name).convert("RGB")
            assert image.size == (320, 200)
            assert image.getpixel((40, 100)) == (255, 0, 0)
            assert image.getpixel((280, 100)) == (0, 0, 255)
    finally:
        chromium.close()
    assert chromium.process.returncode is not None
