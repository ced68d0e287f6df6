#!/usr/bin/env python
"""Training-step benchmark: `python scripts/bench.py --all` (the same as `normexp bench --all`).

See normexp/bench/ for what is measured and how; `--help` lists the options."""

import sys

from normexp.cli import app

if __name__ == "__main__":
    app(["bench", *sys.argv[1:]], prog_name="normexp")
