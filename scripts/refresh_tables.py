"""Rewrite a committed study's edge tables from its CSVs alone (the run folders are not committed),
adding the failure rule's columns; each refuses to write where a column the folder already had
would not come out as committed (normexp/analysis/report/tables.py, same_columns).

    python scripts/refresh_tables.py depth_law docs/results/depth_law/issue39_800 ...
    python scripts/refresh_tables.py depth_law --rewrite "slope, likelihood [95 %]" FOLDER...   # a column whose method changed
    python scripts/refresh_tables.py depth_transfer docs/results/depth_transfer placement,placement.exponent
    python scripts/refresh_tables.py depth_transfer --rewrite "optimal lr per depth [95 %]" FOLDER LINE_KEYS
"""

import sys
from pathlib import Path

from normexp.analysis.report.sections import refresh_depth_law
from normexp.analysis.report.transfer_sections import refresh_depth_transfer

USAGE = ("usage: refresh_tables.py depth_law [--rewrite COLUMN]... FOLDER... | "
         "depth_transfer [--rewrite COLUMN]... FOLDER LINE_KEYS (comma-separated)")


def main(args: list[str]) -> int:
    args, rewrite = list(args), []
    while args[1:2] == ["--rewrite"] and len(args) > 3:   # --rewrite COLUMN, before the folders
        rewrite.append(args[2])
        del args[1:3]
    if len(args) < 2 or args[0] not in ("depth_law", "depth_transfer") or (args[0] == "depth_transfer" and len(args) != 3):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        if args[0] == "depth_law":
            folders = args[1:]
            written = [p for folder in folders for p in refresh_depth_law(Path(folder), echo=lambda *_: None,
                                                                          rewrite=rewrite)]
        else:
            written = refresh_depth_transfer(Path(args[1]), args[2].split(","), rewrite)
    except (ValueError, OSError) as e:
        print(f"refresh_tables: {e}", file=sys.stderr)
        return 1
    print("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
