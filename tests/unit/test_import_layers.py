"""The layout's rules, read from the source: no import cycle between packages, Celery only where it runs.

Units are the top-level packages connectors/, workers/ and schedules/, each subpackage of the core
(headwater.pipeline, headwater.store, ...), and the core's own top-level modules together
(headwater: models, errors, settings, ...); the package's __init__, its public face, is a unit of its own
above them. Every import counts, at module level or inside a
function: a function-level import is still a dependency, only a later one.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("headwater", "connectors", "workers", "schedules")
CELERY_MODULES = ("celery", "kombu", "redbeat")
CELERY_ALLOWED = ("workers", "schedules")


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _unit(module: str) -> str:
    if module == "headwater":  # the package's public face (headwater.search), above everything it calls
        return "headwater (public API)"
    parts = module.split(".")
    if parts[0] == "headwater" and len(parts) > 1 and (ROOT / "headwater" / parts[1]).is_dir():
        return f"headwater.{parts[1]}"
    return parts[0]


def _imports(path: Path, modules: dict[str, Path] | frozenset = frozenset()) -> list[tuple[str, int]]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from headwater import exit_codes` depends on the module headwater.exit_codes, not on
            # what the package's __init__ defines; `from headwater.settings import Settings` on the module.
            submodules = [f"{node.module}.{alias.name}" for alias in node.names
                          if f"{node.module}.{alias.name}" in modules]
            names += [(name, node.lineno) for name in submodules]
            if len(submodules) < len(node.names):
                names.append((node.module, node.lineno))
    return names


def _graph() -> dict[str, dict[str, str]]:
    """unit -> {unit it imports: one place that does, for the failure message}."""
    modules = _modules()
    graph: dict[str, dict[str, str]] = defaultdict(dict)
    for module, path in modules.items():
        for name, line in _imports(path, modules):
            if name.split(".")[0] not in PACKAGES or (name not in modules and name.rsplit(".", 1)[0] not in modules):
                continue
            target = name if name in modules else name.rsplit(".", 1)[0]
            source_unit, target_unit = _unit(module), _unit(target)
            if source_unit != target_unit:
                graph[source_unit].setdefault(target_unit, f"{path.relative_to(ROOT)}:{line} imports {target}")
    return graph


def _cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(unit: str) -> list[str] | None:
        state[unit] = 1
        stack.append(unit)
        for target in sorted(graph.get(unit, {})):
            if state.get(target) == 1:
                return stack[stack.index(target):] + [target]
            if target not in state and (found := visit(target)):
                return found
        stack.pop()
        state[unit] = 2
        return None

    for unit in sorted(graph):
        if unit not in state and (found := visit(unit)):
            return found
    return None


def test_no_import_cycle_between_packages():
    graph = _graph()
    cycle = _cycle(graph)
    where = [graph[a][b] for a, b in zip(cycle, cycle[1:])] if cycle else []
    assert cycle is None, "import cycle " + " -> ".join(cycle) + ":\n  " + "\n  ".join(where)


def test_the_cycle_check_finds_a_cycle():
    assert _cycle({"a": {"b": ""}, "b": {"c": ""}, "c": {"a": ""}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b": ""}, "b": {}}) is None


def test_only_workers_and_schedules_import_celery():
    offenders = [f"{path.relative_to(ROOT)}:{line} imports {name}" for module, path in _modules().items()
                 if _unit(module) not in CELERY_ALLOWED
                 for name, line in _imports(path) if name.split(".")[0] in CELERY_MODULES]
    assert not offenders, "\n".join(offenders)


def test_connectors_and_the_pipeline_stay_below_the_fleet_and_the_app():
    """DESIGN.md's nevers: connectors import no pipeline, fleet or app; the pipeline no fleet, app or Celery side."""
    graph = _graph()
    never = {
        "connectors": {"headwater.pipeline", "headwater.fleet", "headwater.http", "headwater.sync", "headwater.cli",
                       "workers", "schedules"},
        "headwater.pipeline": {"headwater.fleet", "headwater.http", "headwater.sync", "headwater.cli", "workers",
                               "schedules"},
        "headwater.http": {"headwater.cli"},
    }
    broken = [graph[unit][target] for unit, targets in never.items() for target in targets if target in graph[unit]]
    assert not broken, "\n".join(broken)
