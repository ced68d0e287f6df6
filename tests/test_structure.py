"""The package's structure: no import cycle, no function too long to read in one screen,
and one config package name."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "normexp"
MAX_FUNCTION_LINES = 80


def module_imports() -> dict[str, set[str]]:
    """{module: the normexp modules it imports}, from the source (top level and inside functions)."""
    graph = {}
    for path in PACKAGE.glob("*.py"):
        name = path.stem
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level == 1 and node.module:  # from .x import y
                    deps.add(node.module.split(".")[0])
                elif node.level == 1:  # from . import x, y
                    deps.update(a.name for a in node.names)
                elif node.module and node.module.startswith("normexp."):
                    deps.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                deps.update(a.name.split(".")[1] for a in node.names if a.name.startswith("normexp."))
        graph[name] = {d for d in deps if (PACKAGE / f"{d}.py").exists() and d != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_cycle_in_the_package():
    graph = module_imports()
    assert {"cli", "train", "model", "distributed"} <= set(graph)  # the parser sees the package
    assert "model" in graph["train"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_function_is_longer_than_80_lines():
    long = []
    for path in PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


def test_the_config_package_is_named_in_one_place():
    holders = [p.name for p in PACKAGE.glob("*.py") if '"normexp.configs"' in p.read_text()]
    assert holders == ["compose.py"]


def test_tensorboard_tags_are_spelled_only_in_names():
    """Each TensorBoard tag and HParams metric is written out in normexp/names.py alone: the
    other modules use its constants, so a renamed tag cannot leave a reader behind."""
    from normexp import names

    tags = {v for k, v in vars(names).items() if k.isupper() and isinstance(v, str) and "/" in v}
    tags |= set(names.GROUP_TAGS.values()) | {m.tag for m in names.HPARAM_METRICS}
    assert {"val/loss", "train/loss", "stability/model_update", "hparams/status"} <= tags
    spelled = [f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value}"
               for path in sorted(PACKAGE.rglob("*.py")) if path.name != "names.py"
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in tags]
    assert not spelled, spelled
