"""Rewrite a committed study's edge tables from its CSVs alone (the run folders are not committed),
adding the failure rule's columns; each refuses to write where a column the folder already had
would not come out as committed (normexp/analysis/report/tables.py, same_columns).

    python scripts/refresh_tables.py depth_law docs/results/depth_law/issue39_800 ...
    python scripts/refresh_tables.py depth_law --rewrite "slope, likelihood [95 %]" FOLDER...   # a column whose method changed
    python scripts/refresh_tables.py depth_transfer docs/results/depth_transfer placement,placement.exponent
"""

import sys
from pathlib import Path

from normexp.analysis.report.sections import refresh_depth_law
from normexp.analysis.report.transfer_sections import refresh_depth_transfer

USAGE = "usage: refresh_tables.py depth_law FOLDER... | depth_transfer FOLDER LINE_KEYS (comma-separated)"


def main(args: list[str]) -> int:
    if len(args) < 2 or args[0] not in ("depth_law", "depth_transfer") or (args[0] == "depth_transfer" and len(args) != 3):
        print(USAGE, file=sys.stderr)
        return 2
    try:
        if args[0] == "depth_law":
            folders, rewrite = list(args[1:]), []
            while folders[:1] == ["--rewrite"] and len(folders) > 2:
                rewrite.append(folders[1])
                folders = folders[2:]
            written = [p for folder in folders for p in refresh_depth_law(Path(folder), echo=lambda *_: None,
                                                                          rewrite=rewrite)]
        else:
            written = refresh_depth_transfer(Path(args[1]), args[2].split(","))
    except (ValueError, OSError) as e:
        print(f"refresh_tables: {e}", file=sys.stderr)
        return 1
    print("wrote " + ", ".join(map(str, written)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
