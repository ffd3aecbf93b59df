"""Line budget: no module over ``max-module-lines`` physical lines, no function over
``max-function-lines`` lines (from its ``def`` to its last line, docstring and nested functions
included, decorators not), for every ``.py`` file under the configured paths.

The limits live in pyproject.toml:

    [tool.ngrad.line-budget]
    paths = ["ngrad"]
    max-module-lines = 700
    max-function-lines = 100
    exclude = []          # glob patterns, relative to the project root

Usage: ``python tools/line_budget.py [PATH ...]`` (paths default to the configured ones). It
prints one line per file or function over budget, largest first, and exits with status 1 when
there is any, 0 otherwise. It reads the source with ``ast``; nothing is imported.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULTS = {"paths": ["ngrad"], "max-module-lines": 700, "max-function-lines": 100, "exclude": []}


@dataclass(frozen=True)
class Overrun:
    """One module or function over its budget."""

    path: str
    line: int
    what: str  # "module" or the function's qualified name
    lines: int
    budget: int

    def __str__(self) -> str:
        kind = "module" if self.what == "module" else f"function {self.what}"
        return f"{self.path}:{self.line}: {kind} has {self.lines} lines (budget {self.budget})"


def load_config(pyproject: Path) -> dict:
    """The ``[tool.ngrad.line-budget]`` table merged over the defaults (the defaults alone when
    the file or the table is missing, or when no TOML reader is installed on Python 3.10)."""
    config = dict(DEFAULTS)
    if not pyproject.is_file():
        return config
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            return config
    with pyproject.open("rb") as f:
        table = tomllib.load(f).get("tool", {}).get("ngrad", {}).get("line-budget", {})
    unknown = set(table) - set(DEFAULTS)
    if unknown:
        raise SystemExit(f"{pyproject}: unknown [tool.ngrad.line-budget] keys: {', '.join(sorted(unknown))}")
    config.update(table)
    return config


def _functions(tree: ast.Module):
    """Every function with its qualified name (``Class.method``, ``outer.<locals>.inner``), in
    source order, walked iteratively."""
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        children = list(ast.iter_child_nodes(node))
        for child in reversed(children):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                yield child, name
                stack.append((child, f"{name}.<locals>."))
            elif isinstance(child, ast.ClassDef):
                stack.append((child, f"{prefix}{child.name}."))
            else:
                stack.append((child, prefix))


def check_file(path: Path, shown: str, max_module: int, max_function: int) -> list[Overrun]:
    """The overruns of one file; ``shown`` is the path printed for it."""
    source = path.read_text(encoding="utf-8")
    found = []
    physical = len(source.splitlines())
    if physical > max_module:
        found.append(Overrun(shown, 1, "module", physical, max_module))
    for node, name in _functions(ast.parse(source, filename=str(path))):
        length = node.end_lineno - node.lineno + 1
        if length > max_function:
            found.append(Overrun(shown, node.lineno, name, length, max_function))
    return found


def check(paths: list[Path], config: dict, root: Path = ROOT) -> list[Overrun]:
    """The overruns of every ``.py`` file under ``paths``, largest overrun first."""
    files: list[Path] = []
    for path in paths:
        files.extend(sorted(path.rglob("*.py")) if path.is_dir() else [path])
    found = []
    for file in files:
        try:
            shown = file.resolve().relative_to(root).as_posix()
        except ValueError:
            shown = file.as_posix()
        if any(fnmatch.fnmatch(shown, pattern) for pattern in config["exclude"]):
            continue
        found.extend(check_file(file, shown, config["max-module-lines"], config["max-function-lines"]))
    found.sort(key=lambda o: (o.what != "module", -(o.lines - o.budget), o.path, o.line))
    return found


def main(argv: list[str] | None = None) -> int:
    """Command line: print the overruns, return 1 if there are any."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="*", type=Path, help="files or folders (default: the configured paths)")
    parser.add_argument("--config", type=Path, default=ROOT / "pyproject.toml", help="pyproject.toml to read")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    root = args.config.resolve().parent
    paths = args.paths or [root / p for p in config["paths"]]
    found = check(paths, config, root)
    for overrun in found:
        print(overrun)
    if found:
        modules = sum(o.what == "module" for o in found)
        print(
            f"line budget: {modules} module(s) over {config['max-module-lines']} lines, "
            f"{len(found) - modules} function(s) over {config['max-function-lines']} lines"
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
