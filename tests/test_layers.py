"""The layout's rules, checked on the source: imports run down the layers only, no import cycles, ray only in the
executor, a light pure core, no function over 80 lines, no unexplained lazy import of the package's own modules.

The import graph is read from the AST, function-local imports included: a cycle or an upward import hidden behind a
lazy import is still one (it only moves the failure to run time), so it counts here.
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
    "rise_batch.space.docstore",
    "rise_batch.space.manifest",
    "rise_batch.space.sandbox",
    "rise_batch.space.tools",
    "rise_batch.agent.loop",
    "rise_batch.agent.systems",
    "rise_batch.eval.metrics",
    "rise_batch.llm.ratelimit",
    "rise_batch.llm.pricing",
)
HEAVY = ("ray", "openai", "tenacity", "aiohttp", "httpx")

# The layers, bottom first: a module may import its own layer and those below, never one above. A layer is a list of
# modules or packages (a package covers its submodules); every module of rise_batch must be in exactly one.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the foundation: data types, errors, storage URIs and atomic writes, names, prompts, the registries' data
    (
        "rise_batch",
        "rise_batch.types",
        "rise_batch.logs",
        "rise_batch.progress",
        "rise_batch.names",
        "rise_batch.storage",
        "rise_batch.storage_errors",  # what an error of object storage means (URI, endpoint, transient or not)
        "rise_batch.io",
        "rise_batch.safe_read",  # every file the engine reads, opened like a document (no link, regular, bounded)
        "rise_batch.errors",
        "rise_batch.dirlock",  # one writer per output directory: a flock, or a lease in object storage
        "rise_batch.prompts",
        "rise_batch.queries",
        "rise_batch.registry",
        "rise_batch.tier_rule",
        "rise_batch.strtable",  # memory-mapped string tables (index docids, vocabulary, docmap)
        "rise_batch.strtable_batch",  # many string-table lookups at once, in numpy
        "rise_batch.heap",  # malloc settings of a long-lived worker (a fixed mmap threshold, few arenas)
        "rise_batch.strtable_check",  # a string table's numbers checked before any lookup trusts them
        "rise_batch.counters",  # transport counters summed across workers
        "rise_batch.cache",  # node-local copies of object storage (index, docs tree), made once per node
        "rise_batch.cache_objects",  # those copies' objects listed, fetched and checked against their source
        "rise_batch.cache_admin",  # listing and pruning those copies (`rise-batch cache`)
        "rise_batch.options",  # config fields as options: their flags and the docs' option tables
        "rise_batch.option_paths",  # what a path option takes: a URI, or a local path only
    ),
    ("rise_batch.corpus",),
    ("rise_batch.config",),
    ("rise_batch.money",),  # the spend journal, kept replies, usage checks: what every paid call is written in
    ("rise_batch.llm",),
    ("rise_batch.structure",),
    ("rise_batch.executor",),
    ("rise_batch.index",),
    ("rise_batch.structuring",),
    ("rise_batch.space",),
    ("rise_batch.agent",),
    ("rise_batch.eval",),
    ("rise_batch.fake_llm",),  # the test server: it reuses eval's judge parsing and llm's wire formats
    ("rise_batch.commands", "rise_batch.cli"),
)
# where an import of rise_batch's own modules may sit inside a function without saying why: the CLI imports each
# command's dependencies only when that command runs, so `rise-batch --help` stays fast
LAZY_FREE = ("rise_batch.commands", "rise_batch.cli")
MAX_FUNCTION_LINES = 80
# functions allowed over MAX_FUNCTION_LINES, each with why (none today: split a long function into named helpers)
LONG_FUNCTIONS_ALLOWED: dict[str, str] = {}


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


def layer_of(module: str) -> int:
    """The index of `module`'s layer in LAYERS (its longest matching entry: a module, or a package it is in; the
    bare `rise_batch` is the package's __init__ only); -1 when none matches."""
    best, depth = -1, -1
    for i, layer in enumerate(LAYERS):
        for entry in layer:
            inside = "." in entry and module.startswith(entry + ".")
            if (module == entry or inside) and len(entry) > depth:
                best, depth = i, len(entry)
    return best


def test_every_module_has_a_layer() -> None:
    assert layer_of("rise_batch.structuring.shard") > layer_of("rise_batch.config") > layer_of("rise_batch.types")
    missing = [m for m in modules() if layer_of(m) == -1]
    assert not missing, f"modules in no layer of LAYERS (add them where they belong): {missing}"


def test_imports_run_down_the_layers_only() -> None:
    upward = [
        f"{a} -> {b}"
        for a, targets in sorted(import_graph().items())
        for b in sorted(targets)
        if layer_of(b) > layer_of(a)
    ]
    assert not upward, "imports up the layers (move what is needed down, or pass it in): " + "; ".join(upward)


def long_functions(path: Path, name: str) -> dict[str, int]:
    """Functions and methods of one module longer than MAX_FUNCTION_LINES (decorators and docstring included)."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualified = f"{prefix}.{child.name}"
                if not isinstance(child, ast.ClassDef):
                    first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                    lines = (child.end_lineno or child.lineno) - first + 1
                    if lines > MAX_FUNCTION_LINES:
                        found[qualified] = lines
                visit(child, qualified)

    visit(ast.parse(path.read_text(encoding="utf-8")), name)
    return found


def test_the_length_check_sees_a_long_method(tmp_path: Path) -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "m.py").write_text(f"class C:\n    def f(self):\n{body}\n\n    def g(self):\n        pass\n")
    assert long_functions(tmp_path / "m.py", "m") == {"m.C.f": MAX_FUNCTION_LINES + 1}


def test_no_function_over_80_lines() -> None:
    found: dict[str, int] = {}
    for name, path in modules().items():
        found |= long_functions(path, name)
    over = {f: n for f, n in found.items() if f not in LONG_FUNCTIONS_ALLOWED}
    assert not over, f"functions over {MAX_FUNCTION_LINES} lines (split them into named helpers): {over}"
    stale = sorted(set(LONG_FUNCTIONS_ALLOWED) - set(found))
    assert not stale, f"LONG_FUNCTIONS_ALLOWED lists functions that are short now (remove them): {stale}"


def unexplained_lazy_imports(path: Path, name: str) -> list[str]:
    """Imports of rise_batch modules inside functions with no `# lazy: <why>` comment on their line or the line
    before (the reasons that hold: a heavy optional dependency, an import cycle, the CLI's start-up time)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[str] = []

    def visit(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)) and inside:
                targets = [a.name for a in child.names] if isinstance(child, ast.Import) else [child.module or ""]
                own = child.level > 0 if isinstance(child, ast.ImportFrom) else False
                own = own or any(t == "rise_batch" or t.startswith("rise_batch.") for t in targets)
                near = lines[child.lineno - 1] + (lines[child.lineno - 2] if child.lineno > 1 else "")
                if own and "# lazy:" not in near:
                    found.append(f"{name}:{child.lineno}: {lines[child.lineno - 1].strip()}")
            visit(child, inside or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(ast.parse("\n".join(lines)), False)
    return found


def test_the_lazy_import_check_sees_an_unexplained_one(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "from rise_batch.io import read_json\n\n\n"
        "def f():\n    from rise_batch.storage import location\n\n"
        "def g():\n    from rise_batch.llm.client import client_from_config  # lazy: loads openai\n\n"
        "def h():\n    # lazy: loads ray\n    from rise_batch.executor.ray import init_ray\n    import json\n"
    )
    assert unexplained_lazy_imports(tmp_path / "m.py", "m") == ["m:5: from rise_batch.storage import location"]


def test_internal_imports_sit_at_module_top_unless_they_say_why() -> None:
    found = [
        hit
        for name, path in modules().items()
        if not any(name == p or name.startswith(p + ".") for p in LAZY_FREE)
        for hit in unexplained_lazy_imports(path, name)
    ]
    assert not found, (
        "imports of rise_batch modules inside functions: move them to the module's top, or say why they must stay "
        "lazy (a heavy optional dependency, an import cycle, the CLI's start-up time) in a `# lazy: ...` comment on "
        "their line or the line before: " + "; ".join(found)
    )


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
