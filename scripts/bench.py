#!/usr/bin/env python
"""Training-step benchmark: `python scripts/bench.py --all` (same as `normexp bench --all`).

See normexp/bench.py for what is measured and how; `--help` lists the options."""

from normexp.bench import run

if __name__ == "__main__":
    run()
