"""The import rules of ARCHITECTURE.md ("Parts and who may touch what"), checked on the source.

Every module's imports are read with ``ast`` (function-level ones included) and reduced to the
asyncvk part they name; each part may import only the parts the table allows, and the parts
import each other without a cycle.
"""

from __future__ import annotations

import ast
import inspect
import itertools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "asyncvk"

#: Leaf modules every part may import: the error tree, the lazy-attribute helper, the worker
#: threads, the version.
SHARED = {"_errors", "_lazy", "_threads", "_version"}
#: The application on top (the command line, the entry points): it may import any part but _vk.
APPLICATION = {"cli", "__main__", "__init__"}
ALLOWED: dict[str, set[str]] = {
    "_vk": set(),
    "shader": set(),
    "gpu": {"_vk", "shader"},
    "cache": {"gpu", "shader"},
    # layers declare: they use gpu and cache types, and shader's ShaderOptions (a type too)
    "layers": {"gpu", "cache", "shader"},
    "net": {"layers", "cache", "gpu", "shader"},
    # the serving engine: batcher, model repository, the protocol over HTTP and gRPC, the app
    "serve": {"net", "cache", "gpu"},
    **{
        app: {"gpu", "cache", "shader", "layers", "net", "serve", *APPLICATION}
        for app in APPLICATION
    },
}
#: Known violations being removed by other work, each named as ("part", "imported part") with
#: a comment saying why; none by pattern. (layers -> net._paramdict was the last one.)
ALLOWANCES: set[tuple[str, str]] = set()


def _part(module: str) -> str:
    """The part of ``asyncvk.x.y``: ``x``."""
    return module.split(".")[1] if module.count(".") else "__init__"


def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """(line, absolute asyncvk module) for every import in ``path``, nested ones included."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("asyncvk")]
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                if (node.module or "").startswith("asyncvk"):
                    found.append((node.lineno, node.module or ""))
                continue
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            target = ".".join(base + ([node.module] if node.module else []))
            if node.module is None:  # from . import x: each name may be a module
                found += [(node.lineno, f"{target}.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, target))
    return found


def part_imports() -> dict[tuple[str, str], list[str]]:
    """(importing part, imported part) -> where, for every edge between two parts."""
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        source = _part(_module_name(path))
        for line, module in imported_modules(path):
            target = _part(module)
            if target != source and module != "asyncvk":
                where = f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}"
                edges.setdefault((source, target), []).append(where)
    return edges


def test_each_part_imports_only_what_the_table_allows() -> None:
    edges = part_imports()
    assert ("net", "layers") in edges and ("cache", "gpu") in edges  # the reader sees imports
    broken = [
        where
        for (source, target), places in sorted(edges.items())
        if target not in SHARED
        and target not in ALLOWED.get(source, set())
        and (source, target) not in ALLOWANCES
        for where in places
    ]
    assert not broken, "imports the architecture forbids:\n" + "\n".join(broken)


def test_every_allowance_is_still_needed() -> None:
    """An allowance that no import uses any more must go, so it cannot hide a new one."""
    edges = part_imports()
    stale = [edge for edge in ALLOWANCES if edge not in edges]
    assert not stale, f"remove these allowances, nothing needs them: {stale}"


def test_no_cycle_between_parts() -> None:
    edges = {
        edge for edge in part_imports() if edge[1] not in SHARED and edge[0] not in APPLICATION
    }
    edges -= ALLOWANCES
    parts = {p for edge in edges for p in edge}
    reach = {p: {t for s, t in edges if s == p} for p in parts}
    for _ in parts:  # transitive closure, small graph
        for p, q in itertools.product(parts, parts):
            if q in reach[p]:
                reach[p] |= reach[q]
    cycles = sorted(p for p in parts if p in reach[p])
    assert not cycles, f"parts that import themselves through others: {cycles}"


def _net_modules_reached(start: str) -> set[str]:
    """Every ``asyncvk.net`` module ``start`` imports, directly or through others (type-only
    imports included: a plan must not even name the Net)."""
    reached, todo = set(), [start]
    while todo:
        module = todo.pop()
        path = PACKAGE.parent / (module.replace(".", "/") + ".py")
        for _, imported in imported_modules(path):
            if imported.startswith("asyncvk.net.") and imported not in reached:
                reached.add(imported)
                todo.append(imported)
    return reached


def test_a_plan_never_sees_the_net() -> None:
    """Plan(graph, gpu_model, request) is made from the parsed graph and what one load
    holds on a device: it neither imports the Net's module, nor takes, names or
    reads a Net (``plan.net.device`` was how it found its device)."""
    from asyncvk.net._plan import Plan

    assert "asyncvk.net._net" not in _net_modules_reached("asyncvk.net._plan")
    tree = ast.parse((PACKAGE / "net" / "_plan.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    assert not names & {"net", "Net", "_net"}, names & {"net", "Net", "_net"}
    params = inspect.signature(Plan).parameters
    assert list(params) == ["graph", "gpu_model", "request"]
    assert not [p for p in params.values() if "Net" in str(p.annotation)]


def _module_graph() -> dict[str, set[str]]:
    """Module -> the asyncvk modules it imports (type-only and function-level imports
    included); a name imported from a package is the package's ``__init__`` unless it is a
    module of its own (a compiled extension is not ours to check)."""
    paths = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        targets = set()
        for _, imported in imported_modules(path):
            folder = PACKAGE.parent / imported.rpartition(".")[0].replace(".", "/")
            if imported not in paths and list(folder.glob(f"{imported.rpartition('.')[2]}.*.so")):
                continue  # a compiled extension
            while imported and imported not in paths:
                imported = imported.rpartition(".")[0]
            if imported and imported != module:
                targets.add(imported)
        graph[module] = targets
    return graph


def module_cycles() -> list[frozenset[str]]:
    """The sets of modules that import each other, directly or through others."""
    graph = _module_graph()
    reach = {m: set(targets) for m, targets in graph.items()}
    changed = True
    while changed:  # transitive closure
        changed = False
        for m in reach:
            more = set().union(*(reach[t] for t in reach[m])) - reach[m]
            if more:
                reach[m] |= more
                changed = True
    cycles = {
        frozenset({m} | {t for t in reach[m] if m in reach[t]}) for m in reach if m in reach[m]
    }
    return sorted(cycles, key=sorted)


#: Module cycles being untangled, each named whole; a new cycle, or one of these growing, fails.
KNOWN_CYCLES: set[frozenset[str]] = set()


def test_no_new_cycle_between_modules() -> None:
    cycles = module_cycles()
    new = [sorted(c) for c in cycles if c not in KNOWN_CYCLES]
    assert not new, f"modules that import themselves through others: {new}"


def test_every_known_cycle_is_still_there() -> None:
    """A cycle untangled leaves KNOWN_CYCLES, so it cannot come back unseen."""
    stale = [sorted(c) for c in KNOWN_CYCLES if c not in module_cycles()]
    assert not stale, f"remove these from KNOWN_CYCLES, they are gone: {stale}"


#: a module a reader can hold in mind: past this, it holds more than one concept
MOST_LINES = 400


def test_no_module_is_longer_than_a_reader_holds() -> None:
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MOST_LINES
    }
    assert not long, f"modules over {MOST_LINES} lines (split them by concept): {long}"
