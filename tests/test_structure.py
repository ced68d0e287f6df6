"""The package's structure: no import cycle, between modules or between rooms, no function too
long to read in one screen, and one config package name."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "normexp"
MAX_FUNCTION_LINES = 80


def module_name(path: Path) -> str:
    """normexp/model/gpt.py -> "model.gpt"; a package's __init__.py is the package ("model")."""
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_imports() -> dict[str, set[str]]:
    """{module: the normexp modules it imports}, from the source (top level and inside
    functions); modules are dotted paths below normexp ("model.gpt"), relative imports resolved."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[: len(package) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                elif node.module and node.module.startswith("normexp."):
                    stem = node.module[len("normexp."):]
                else:
                    continue
                # `from .x import y`: y may be a module of package x, else a name defined in x
                deps.update(f"{stem}.{a.name}".strip(".") if f"{stem}.{a.name}".strip(".") in modules else stem
                            for a in node.names)
            elif isinstance(node, ast.Import):
                deps.update(a.name[len("normexp."):] for a in node.names if a.name.startswith("normexp."))
        graph[name] = {d for d in deps if d in modules and d != name and d}
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
    assert {"cli", "train.loop", "model", "model.gpt", "train.distributed"} <= set(graph)  # the parser sees the package
    assert "model" in graph["train.loop"] and "model.placements" in graph["model.gpt"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_import_loop_between_the_rooms():
    """The rooms (config/, model/, data/, runs/, train/, ..., cli.py) stand on floors, counting the
    imports inside functions too: none imports a room that imports it back, however deferred
    (scripts/import_floors.py prints the floors)."""
    rooms: dict[str, set[str]] = {}
    for module, deps in module_imports().items():
        room = module.split(".")[0]
        rooms.setdefault(room, set()).update(d.split(".")[0] for d in deps if d.split(".")[0] != room)
    assert {"config", "data", "model", "train", "launch", "cli"} <= set(rooms) and "config" in rooms["data"]
    assert find_cycle(rooms) is None, " -> ".join(find_cycle(rooms))


def test_no_function_is_longer_than_80_lines():
    long = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long


def test_the_config_package_is_named_in_one_place():
    holders = [p.name for p in PACKAGE.rglob("*.py") if '"normexp.configs"' in p.read_text()]
    assert holders == ["defaults.py"]


def test_tensorboard_tags_are_spelled_only_in_names():
    """Each TensorBoard tag and HParams metric is written out in normexp/runs/schema.py alone: the
    other modules use its constants, so a renamed tag cannot leave a reader behind."""
    from normexp.runs import schema as names

    tags = {v for k, v in vars(names).items() if k.isupper() and isinstance(v, str) and "/" in v}
    tags |= set(names.GROUP_TAGS.values()) | {m.tag for m in names.HPARAM_METRICS}
    assert {"val/loss", "train/loss", "stability/model_update", "hparams/status"} <= tags
    spelled = [f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value}"
               for path in sorted(PACKAGE.rglob("*.py")) if path.name != "schema.py"
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in tags]
    assert not spelled, spelled


LEAVES = {"config.checks", "config.registry", "config.defaults", "config.keys", "config.model_config"}


def test_the_model_stands_on_torch_and_the_configs_checks_alone():
    """The model package imports torch, the standard library, its own modules, the config's
    five leaves (the checks, stdlib only; the defaults, read from the shipped yaml with PyYAML;
    the registry helpers, which fill a variant's settings from those defaults; the keys, stdlib
    only, whose `plain` turns a config node into ModelConfig's plain data; ModelConfig itself
    with its rules) and the variants' settings classes (config/variants/, which stand on the
    checks, the registry helpers and the defaults, and import no torch: the pre-flight asks
    them): no Hydra, no OmegaConf, no run folder, no data."""
    import sys

    graph = module_imports()
    model = {m for m in graph if m == "model" or m.startswith("model.")}
    variants = {m for m in graph if m == "config.variants" or m.startswith("config.variants.")}
    assert {"model.gpt", "model.norms", "model.placements"} <= model and "config.variants.placements.deepnorm" in variants
    for m in sorted(model):
        assert graph[m] <= model | LEAVES | variants, (m, graph[m] - model)
    for m in LEAVES:
        assert graph[m] <= LEAVES - {"config.registry", "config.model_config"}, (m, graph[m])
    for m in variants:
        assert graph[m] <= variants | {"config.checks", "config.registry", "config.defaults"}, (m, graph[m])
    leaves = [PACKAGE / "config" / f"{m.split('.')[1]}.py" for m in LEAVES]
    for path in [*(PACKAGE / "model").rglob("*.py"), *leaves, *(PACKAGE / "config" / "variants").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and not node.level else [])
            for name in names:
                top = name.split(".")[0]
                allowed = (("yaml",) if path.name == "defaults.py" else ("__future__",) if "variants" in path.parts
                           else ("torch", "__future__"))
                assert top in allowed or top in sys.stdlib_module_names, f"{path.name} imports {name}"


def test_every_subpackage_ships_in_the_wheel():
    """pyproject.toml lists the packages by hand: a subpackage missing there (analysis.report,
    say) would work in an editable install and be absent from a wheel."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(p.parent.relative_to(PACKAGE.parent).parts) for p in PACKAGE.rglob("__init__.py")}
    assert on_disk - listed == set(), sorted(on_disk - listed)
