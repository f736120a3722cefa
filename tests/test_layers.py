"""The layout's rules, checked on the source: no import cycles, ray only in the executor, a light pure core.

The import graph is read from the AST, function-local imports included: a cycle hidden behind a lazy import is
still a cycle (it only moves the failure to run time), so it counts here.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "rise_batch"

# Modules allowed to import ray: the Ray executor and the job-wide limiter actor.
RAY_ALLOWED = ("rise_batch.executor.", "rise_batch.llm.limiter_actor")

# The pure core and the agent loop: importing them must load neither ray nor openai (nor the HTTP stacks).
PURE = (
    "rise_batch.types",
    "rise_batch.config",
    "rise_batch.corpus.readers",
    "rise_batch.corpus.scan",
    "rise_batch.corpus.docmap",
    "rise_batch.structure.anchors",
    "rise_batch.structure.render",
    "rise_batch.structure.propose",
    "rise_batch.structure.heuristic",
    "rise_batch.structure.tier",
    "rise_batch.structure.backends",
    "rise_batch.index.tokenize",
    "rise_batch.space.workspace",
    "rise_batch.space.sandbox",
    "rise_batch.space.tools",
    "rise_batch.agent.loop",
    "rise_batch.agent.systems",
    "rise_batch.eval.metrics",
    "rise_batch.llm.ratelimit",
    "rise_batch.llm.pricing",
)
HEAVY = ("ray", "openai", "tenacity", "aiohttp", "httpx")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every rise_batch module `name` imports, at module level or inside functions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            # `from pkg import sub` imports the submodule pkg.sub when there is one
            targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in known and t != name)
    return found


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: imports_of(name, path, set(mods)) for name, path in mods.items()}


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_function_local_imports() -> None:
    graph = import_graph()
    assert len(graph) > 50
    assert sum(len(v) for v in graph.values()) > 100


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles (function-local imports count): " + "; ".join(" <-> ".join(c) for c in cycles)


def test_only_the_executor_and_the_limiter_actor_import_ray() -> None:
    offenders = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            if any(n == "ray" or n.startswith("ray.") for n in names) and not name.startswith(RAY_ALLOWED):
                offenders.append(name)
    assert not offenders, f"modules outside the Ray layer import ray: {sorted(set(offenders))}"


def test_no_private_names_imported_across_modules() -> None:
    offenders = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rise_batch"):
                offenders += [f"{name}: {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert not offenders, offenders


@pytest.mark.parametrize("module", PURE)
def test_the_pure_core_loads_no_ray_and_no_openai(module: str) -> None:
    code = f"import sys, {module}; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == "", f"importing {module} loads {out.stdout.strip()}"
