"""The layout's rules, read from the source with ``ast`` (nothing under ngrad/ is imported).

Each rule is one checker over a folder that holds the package; each returns one line per
violation, naming the file, the line and the import:

(a) ``facade``  the engine (ngrad/engine/) never imports the facade (the rest of ngrad/);
(b) ``layers``  inside the engine, a module imports only its own layer or earlier ones, in
    pipeline order: ``config``, ``store`` < ``ir/`` < ``transform/`` < ``backend/`` <
    ``targets/`` < ``runtime/`` (imports inside functions count too);
(c) ``numba``   Numba (``numba``, ``numba_cuda``, ``llvmlite``) is imported only under
    ngrad/engine/targets/;
(d) ``cycles``  no import cycle among ngrad's modules through module-level imports (those that
    run when a module is imported; not those inside functions or under ``if TYPE_CHECKING``);
(e) ``private`` no private name crosses modules in package code: ``from .x import _y``, or
    ``x._y`` where ``x`` names an imported module (dunder names such as ``__version__`` are
    public; importing a private *module* such as ``ngrad._hooks`` is allowed, its private
    names are not).

The same checkers run on small synthetic packages written to a temporary folder, one per rule
and violation, so that a rule that finds nothing in the real tree is known to be able to find
something.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "ngrad"
ENGINE = "ngrad.engine"
# Pipeline order inside the engine: the first dotted component after ``ngrad.engine``.
LAYERS = {
    "config": 0,
    "recent": 0,
    "store": 0,
    "pace": 0,
    "ir": 1,
    "transform": 2,
    "backend": 3,
    "targets": 4,
    "runtime": 5,
}
# The engine package's own __init__ sits above every layer: it may re-export any of them.
ENGINE_INIT_LAYER = max(LAYERS.values()) + 1
NUMBA_MODULES = ("numba", "numba_cuda", "llvmlite")
NUMBA_HOME = "ngrad.engine.targets"


@dataclass(frozen=True)
class Import:
    """One import statement's effect: ``target`` is the imported module (resolved, absolute),
    ``names`` what a ``from`` import takes from it, ``top`` whether it runs at import time."""

    line: int
    text: str
    target: str
    names: tuple[str, ...]
    top: bool


@dataclass
class Module:
    """One parsed source file: its dotted name, path (relative to the scanned folder), the
    imports it makes, and the ``x._y`` attribute reads on names bound to imported modules."""

    name: str
    path: str
    is_package: bool
    imports: list[Import] = field(default_factory=list)
    attribute_reads: list[tuple[int, str, str]] = field(default_factory=list)  # (line, module, attr)


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _resolve(module: Module, level: int, target: str | None) -> str:
    """The absolute module a (possibly relative) import names."""
    if level == 0:
        return target or ""
    parts = module.name.split(".")
    base = parts if module.is_package else parts[:-1]
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([target] if target else []))


class _Visitor(ast.NodeVisitor):
    """Collects imports with their position (module level or not) in one pass; the stack of
    enclosing statements is kept by ``ast.NodeVisitor``'s recursion over the tree."""

    def __init__(self, module: Module, source_lines: list[str]):
        self.module = module
        self.lines = source_lines
        self.depth = 0  # functions entered
        self.type_checking = 0  # ``if TYPE_CHECKING:`` blocks entered

    def _text(self, node: ast.stmt) -> str:
        return " ".join(line.strip() for line in self.lines[node.lineno - 1 : node.end_lineno])

    def _add(self, node: ast.stmt, target: str, names: tuple[str, ...]) -> None:
        top = self.depth == 0 and self.type_checking == 0
        self.module.imports.append(Import(node.lineno, self._text(node), target, names, top))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(node, alias.name, ())

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        target = _resolve(self.module, node.level, node.module)
        self._add(node, target, tuple(alias.name for alias in node.names))

    def _function(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        guarded = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        if not guarded:
            self.generic_visit(node)
            return
        self.visit(test)
        self.type_checking += 1
        for stmt in node.body:
            self.visit(stmt)
        self.type_checking -= 1
        for stmt in node.orelse:
            self.visit(stmt)

    def visit_Call(self, node: ast.Call) -> None:
        # importlib.import_module("numba") and __import__("numba") are imports too
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if called in ("import_module", "__import__") and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and not arg.value.startswith("."):
                top = self.depth == 0 and self.type_checking == 0
                text = " ".join(line.strip() for line in self.lines[node.lineno - 1 : node.end_lineno])
                self.module.imports.append(Import(node.lineno, text, arg.value, (), top))
        self.generic_visit(node)


def scan(root: Path, package: str = PACKAGE) -> dict[str, Module]:
    """Parse every module of ``root/package`` (sorted by path): its imports, and its reads of
    private attributes of modules it imported."""
    modules: dict[str, Module] = {}
    trees: dict[str, ast.Module] = {}
    for path in sorted((root / package).rglob("*.py")):
        rel = path.relative_to(root)
        parts = list(rel.with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        module = Module(".".join(parts), rel.as_posix(), is_package)
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
        _Visitor(module, source.splitlines()).visit(tree)
        modules[module.name] = module
        trees[module.name] = tree
    for module in modules.values():
        _collect_attribute_reads(module, trees[module.name], modules)
    return modules


def _collect_attribute_reads(module: Module, tree: ast.Module, modules: dict[str, Module]) -> None:
    """Find ``x._y`` (and ``a.b.c._y``) where ``x`` is a name an import binds to a package
    module (``import a.b`` binds ``a``; ``import a.b as c``, ``from . import x as y`` too)."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    bound[alias.asname] = alias.name
                elif not alias.asname and alias.name.split(".")[0] in modules:
                    bound[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, node.level, node.module)
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{target}.{alias.name}"
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _is_private(node.attr):
            continue
        chain: list[str] = []
        value = node.value
        while isinstance(value, ast.Attribute):
            chain.append(value.attr)
            value = value.value
        if not isinstance(value, ast.Name) or value.id not in bound:
            continue
        owner = ".".join([bound[value.id], *reversed(chain)])
        if owner in modules and owner != module.name:
            module.attribute_reads.append((node.lineno, owner, node.attr))


def _layer(name: str) -> int | None:
    """The engine layer of module ``name``, ENGINE_INIT_LAYER for the engine package itself,
    None for a module the layer table does not place."""
    if name == ENGINE:
        return ENGINE_INIT_LAYER
    first = name[len(ENGINE) + 1 :].split(".")[0]
    return LAYERS.get(first)


def _in_engine(name: str) -> bool:
    return name == ENGINE or name.startswith(ENGINE + ".")


def _imported_modules(imp: Import, modules: dict[str, Module]) -> list[str]:
    """The package modules an import depends on: ``from p import m`` where ``p.m`` is a module
    depends on ``p.m``; any other name taken from ``p`` depends on ``p`` itself."""
    found = []
    if imp.names:
        for name in imp.names:
            if f"{imp.target}.{name}" in modules:
                found.append(f"{imp.target}.{name}")
            elif imp.target in modules and imp.target not in found:
                found.append(imp.target)
    elif imp.target in modules:
        found.append(imp.target)
    else:
        # ``import a.b.c`` of a name that is not a module file: the deepest existing package
        parts = imp.target.split(".")
        while parts and ".".join(parts) not in modules:
            parts.pop()
        if parts:
            found.append(".".join(parts))
    return found


def _where(module: Module, imp: Import) -> str:
    return f"{module.path}:{imp.line}: {imp.text}"


def check_facade(modules: dict[str, Module]) -> list[str]:
    """(a) Engine modules importing anything of ngrad outside ngrad/engine/."""
    found = []
    for module in modules.values():
        if not _in_engine(module.name):
            continue
        for imp in module.imports:
            for target in _imported_modules(imp, modules):
                if not _in_engine(target):
                    found.append(f"{_where(module, imp)}  (the engine imports the facade module {target})")
    return found


def check_layers(modules: dict[str, Module]) -> list[str]:
    """(b) Engine modules importing a later layer, and engine modules no layer holds."""
    found = []
    for module in modules.values():
        if not _in_engine(module.name) or module.name == ENGINE:
            continue
        own = _layer(module.name)
        if own is None:
            found.append(f"{module.path}:1: (module in no layer: add its folder to LAYERS in tests/test_layers.py)")
            continue
        for imp in module.imports:
            for target in _imported_modules(imp, modules):
                theirs = _layer(target) if _in_engine(target) else None
                if theirs is not None and theirs > own:
                    found.append(f"{_where(module, imp)}  (layer {own} {module.name} imports layer {theirs} {target})")
    return found


def check_numba(modules: dict[str, Module]) -> list[str]:
    """(c) Numba or llvmlite imported outside ngrad/engine/targets/."""
    found = []
    for module in modules.values():
        if module.name == NUMBA_HOME or module.name.startswith(NUMBA_HOME + "."):
            continue
        for imp in module.imports:
            if imp.target.split(".")[0] in NUMBA_MODULES:
                found.append(f"{_where(module, imp)}  (Numba is imported only under ngrad/engine/targets/)")
    return found


def _import_graph(modules: dict[str, Module]) -> dict[str, dict[str, Import]]:
    """Module-level import edges between package modules, each with the first import making it."""
    graph: dict[str, dict[str, Import]] = {name: {} for name in modules}
    for module in modules.values():
        for imp in module.imports:
            if not imp.top:
                continue
            for target in _imported_modules(imp, modules):
                if target != module.name:
                    graph[module.name].setdefault(target, imp)
    return graph


def _strongly_connected(graph: dict[str, dict[str, Import]]) -> list[list[str]]:
    """Tarjan's components, iteratively (no recursion limit), in a deterministic order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    components = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            advanced = False
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph[nxt])))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _cycle_in(component: list[str], graph: dict[str, dict[str, Import]]) -> list[str]:
    """One concrete cycle through the component's first module (breadth-first: a shortest one)."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for nxt in graph[node]:
                if nxt not in members:
                    continue
                if nxt == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [start, *reversed(path[:-1]), start] if len(path) > 1 else [start, node, start]
                if nxt not in parents:
                    parents[nxt] = node
                    following.append(nxt)
        frontier = following
    return [start, start]


def check_cycles(modules: dict[str, Module]) -> list[str]:
    """(d) Import cycles through module-level imports, one shortest cycle per component."""
    graph = _import_graph(modules)
    found = []
    for component in _strongly_connected(graph):
        cycle = _cycle_in(component, graph)
        steps = [f"    {modules[a].path}:{graph[a][b].line}: {graph[a][b].text}" for a, b in zip(cycle, cycle[1:])]
        found.append(f"cycle {' -> '.join(cycle)} (component of {len(component)} modules):\n" + "\n".join(steps))
    return found


def check_private(modules: dict[str, Module]) -> list[str]:
    """(e) Private names taken from another package module, by ``from`` import or attribute."""
    found = []
    for module in modules.values():
        for imp in module.imports:
            if imp.target not in modules or imp.target == module.name:
                continue
            for name in imp.names:
                if _is_private(name) and f"{imp.target}.{name}" not in modules:
                    found.append(f"{_where(module, imp)}  (private name {name} of {imp.target})")
        for line, owner, attr in module.attribute_reads:
            found.append(f"{module.path}:{line}: {owner}.{attr}  (private name {attr} of {owner})")
    return found


CHECKS = {
    "facade": check_facade,
    "layers": check_layers,
    "numba": check_numba,
    "cycles": check_cycles,
    "private": check_private,
}


def violations(root: Path, check: str, package: str = PACKAGE) -> list[str]:
    """Run one named check on the package under ``root``."""
    return CHECKS[check](scan(root, package))


@pytest.fixture(scope="module")
def tree() -> dict[str, Module]:
    return scan(ROOT)


@pytest.mark.parametrize("check", list(CHECKS))
def test_layout(tree, check):
    found = CHECKS[check](tree)
    assert not found, f"{len(found)} violation(s) of rule '{check}':\n" + "\n".join(found)


def test_the_scan_sees_the_engine(tree):
    # A scan that silently found nothing would pass every rule.
    assert "ngrad.engine.ir.tape" in tree and "ngrad.tensor" in tree
    assert any(imp.target == "ngrad.engine.ir.prims" for imp in tree["ngrad.engine.ir.tape"].imports)


# --- the checkers on synthetic packages -------------------------------------------------------

# Each case: files of a package named ngrad (paths relative to its parent), the check, and the
# fragments each reported violation must contain (one list per expected violation, in order).
SYNTHETIC = {
    "engine imports the facade": (
        {"ngrad/engine/ir/tape.py": "from ...tensor import Tensor\n", "ngrad/tensor.py": "Tensor = 1\n"},
        "facade",
        [["ngrad/engine/ir/tape.py:1", "from ...tensor import Tensor", "ngrad.tensor"]],
    ),
    "engine imports the root package": (
        {"ngrad/engine/store.py": "import os\n\nfrom .. import _version\n", "ngrad/_version.py": "v = 1\n"},
        "facade",
        [["ngrad/engine/store.py:3", "ngrad._version"]],
    ),
    "ir imports the runtime inside a function": (
        {
            "ngrad/engine/ir/graph.py": "def f():\n    from ..runtime import run\n    return run\n",
            "ngrad/engine/runtime/__init__.py": "def run():\n    pass\n",
        },
        "layers",
        [["ngrad/engine/ir/graph.py:2", "from ..runtime import run", "layer 1", "layer 5"]],
    ),
    "backend imports targets by absolute name": (
        {
            "ngrad/engine/backend/fuse.py": "import ngrad.engine.targets.compile\n",
            "ngrad/engine/targets/compile.py": "",
        },
        "layers",
        [["ngrad/engine/backend/fuse.py:1", "layer 3", "layer 4"]],
    ),
    "a layer imports the engine package": (
        {"ngrad/engine/__init__.py": "X = 1\n", "ngrad/engine/transform/batch.py": "from .. import X\n"},
        "layers",
        [["ngrad/engine/transform/batch.py:1", "from .. import X", "ngrad.engine"]],
    ),
    "a module in no layer": (
        {"ngrad/engine/extra/thing.py": "import os\n"},
        "layers",
        [["ngrad/engine/extra/__init__.py", "no layer"], ["ngrad/engine/extra/thing.py", "no layer"]],
    ),
    "numba outside targets": (
        {"ngrad/engine/runtime/cuda.py": "def f():\n    from numba import cuda\n    return cuda\n", "ngrad/b.py": ""},
        "numba",
        [["ngrad/engine/runtime/cuda.py:2", "from numba import cuda"]],
    ),
    "llvmlite and import_module in the facade": (
        {"ngrad/x.py": "import importlib\nimport llvmlite.ir\nm = importlib.import_module('numba')\n"},
        "numba",
        [["ngrad/x.py:2", "import llvmlite.ir"], ["ngrad/x.py:3", "import_module('numba')"]],
    ),
    "a cycle of three": (
        {
            "ngrad/a.py": "from . import b\n",
            "ngrad/b.py": "from .c import f\n",
            "ngrad/c.py": "import ngrad.a\n\ndef f():\n    pass\n",
        },
        "cycles",
        [["ngrad.a -> ngrad.b -> ngrad.c -> ngrad.a", "ngrad/a.py:1", "ngrad/b.py:1", "ngrad/c.py:1"]],
    ),
    "a package and its submodule": (
        {"ngrad/p/__init__.py": "from .m import g\nX = 1\n", "ngrad/p/m.py": "from . import X\n\ndef g():\n    pass\n"},
        "cycles",
        [["ngrad.p -> ngrad.p.m -> ngrad.p", "ngrad/p/m.py:1: from . import X"]],
    ),
    "private from-import": (
        {"ngrad/engine/ir/tape.py": "from .prims import _rule, PRIMS\n", "ngrad/engine/ir/prims.py": ""},
        "private",
        [["ngrad/engine/ir/tape.py:1", "_rule", "ngrad.engine.ir.prims"]],
    ),
    "private attribute of an imported module": (
        {
            "ngrad/engine/runtime/cuda.py": "from .. import runtime as rt\n\ndef f():\n    return rt._check\n",
            "ngrad/engine/runtime/__init__.py": "_check = 1\n",
            "ngrad/engine/__init__.py": "",
        },
        "private",
        [["ngrad/engine/runtime/cuda.py:4", "ngrad.engine.runtime._check"]],
    ),
    "private attribute through a dotted import": (
        {
            "ngrad/x.py": "import ngrad.engine.ir.tape\n\nngrad.engine.ir.tape._parse(1)\n",
            "ngrad/engine/ir/tape.py": "",
        },
        "private",
        [["ngrad/x.py:3", "ngrad.engine.ir.tape._parse"]],
    ),
}

# Code each check must accept: every rule is kept here.
ALLOWED = {
    "facade": {"ngrad/tensor.py": "from .engine.ir import tape\n", "ngrad/engine/ir/tape.py": "import numpy\n"},
    "layers": {
        "ngrad/engine/__init__.py": "from .runtime import run\n",
        "ngrad/engine/runtime/__init__.py": "from ..ir.tape import T\nfrom ..config import c\nfrom . import cuda\n",
        "ngrad/engine/runtime/cuda.py": "def f():\n    from ..targets.compile import k\n",
        "ngrad/engine/ir/tape.py": "from .. import store\nfrom . import prims\nT = 1\n",
        "ngrad/engine/ir/prims.py": "",
        "ngrad/engine/store.py": "from .config import c\n",
        "ngrad/engine/config.py": "c = 1\n",
        "ngrad/engine/targets/compile.py": "k = 1\n",
    },
    "numba": {
        "ngrad/engine/targets/compile.py": "import numba\nfrom llvmlite import ir\n",
        "ngrad/engine/backend/codegen.py": "SOURCE = '''\nfrom numba import cuda\n'''\n",
    },
    "cycles": {
        "ngrad/a.py": "from . import b\n",
        "ngrad/b.py": "def f():\n    from . import a\n",
        "ngrad/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import d\n",
        "ngrad/d.py": "from . import c\n",
    },
    "private": {
        "ngrad/a.py": "from ._version import __version__\nfrom . import _hooks\n_hooks.fire()\n_mine = 1\n",
        "ngrad/_version.py": "__version__ = '1'\n",
        "ngrad/_hooks.py": "def fire():\n    pass\n",
        "ngrad/b.py": "import os\nos._exit\n",
    },
}


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for folder in {p.parent for p in root.rglob("*.py")}:
        if not (folder / "__init__.py").exists():
            (folder / "__init__.py").write_text("")


@pytest.mark.parametrize("case", list(SYNTHETIC))
def test_checker_finds(tmp_path, case):
    files, check, expected = SYNTHETIC[case]
    _write(tmp_path, files)
    found = violations(tmp_path, check)
    assert len(found) == len(expected), "\n".join(found)
    for message, fragments in zip(found, expected):
        for fragment in fragments:
            assert fragment in message, f"{fragment!r} not in {message!r}"


@pytest.mark.parametrize("check", list(ALLOWED))
def test_checker_allows(tmp_path, check):
    _write(tmp_path, ALLOWED[check])
    assert violations(tmp_path, check) == []
