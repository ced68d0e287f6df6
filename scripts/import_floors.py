"""The package's floors, read from its imports: each room (a top-level module, or a
subpackage as one room) stands one floor above the highest room it imports; floor 1 imports
no other room. Prints the rooms from the top floor down, each with its lines and what it
imports, then any import loop between rooms.

    python scripts/import_floors.py            # this checkout's normexp/
    python scripts/import_floors.py PATH       # another checkout's (PATH/normexp)
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path


def room_of(module: str) -> str:
    """"model.gpt" -> "model/" (a subpackage is one room); "cli" -> "cli.py"."""
    head, _, rest = module.partition(".")
    return f"{head}/" if rest or module in PACKAGES else f"{head}.py"


def modules(package: Path) -> dict[str, Path]:
    out = {}
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name:
            out[name] = path
    return out


def imports(name: str, path: Path, known: dict) -> set[str]:
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    deps = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = ".".join(package[: len(package) - (node.level - 1)] + ([node.module] if node.module else []))
            deps.update(f"{base}.{a.name}".strip(".") if f"{base}.{a.name}".strip(".") in known else base
                        for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("normexp."):
            deps.add(node.module[len("normexp."):])
        elif isinstance(node, ast.Import):
            deps.update(a.name[len("normexp."):] for a in node.names if a.name.startswith("normexp."))
    return {d for d in deps if d in known}


def where(root: Path) -> str:
    """"at <commit>" (the checkout's short commit, "+" if it has changes), else "of <folder name>":
    the output is pasted into docs, so it never names where the checkout lies on this machine."""
    import subprocess

    try:
        git = lambda *a: subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True,  # noqa: E731
                                        check=True).stdout.strip()
        return f"at {git('rev-parse', '--short', 'HEAD')}{'+' if git('status', '--porcelain', '--', 'normexp') else ''}"
    except (OSError, subprocess.CalledProcessError):
        return f"of {root.resolve().name}"


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]
    package = root / "normexp"
    known = modules(package)
    global PACKAGES
    PACKAGES = {n for n, p in known.items() if p.name == "__init__.py"}
    rooms: dict[str, set[str]] = {}
    lines: dict[str, int] = {}
    for name, path in known.items():
        room = room_of(name)
        rooms.setdefault(room, set()).update(room_of(d) for d in imports(name, path, known))
        lines[room] = lines.get(room, 0) + len(path.read_text().splitlines())
    for room in rooms:
        rooms[room].discard(room)
    floor: dict[str, int] = {}
    loops = []

    def climb(room, seen=()):
        if room in floor:
            return floor[room]
        if room in seen:
            loops.append(" -> ".join([*seen[seen.index(room):], room]))
            return 0
        floor[room] = 1 + max((climb(d, (*seen, room)) for d in rooms[room]), default=0)
        return floor[room]

    for room in sorted(rooms):
        climb(room)
    print(f"normexp/ {where(root)}: {len(rooms)} rooms on {max(floor.values())} floors")
    for room in sorted(rooms, key=lambda r: (-floor[r], r)):
        print(f"floor {floor[room]:2d}  {room:<16} {lines[room]:5d} lines  imports: {', '.join(sorted(rooms[room])) or '-'}")
    print("import loops between rooms:", "; ".join(sorted(set(loops))) or "none")


PACKAGES: set[str] = set()

if __name__ == "__main__":
    main()
