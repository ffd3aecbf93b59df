"""tools/line_budget.py: what it counts on small files, and the package within its budget."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "line_budget.py"

_spec = importlib.util.spec_from_file_location("line_budget", TOOL)
line_budget = importlib.util.module_from_spec(_spec)
sys.modules["line_budget"] = line_budget  # dataclasses look their module up there
_spec.loader.exec_module(line_budget)


def _function(name, body_lines, indent=""):
    body = "".join(f"{indent}    x = {i}\n" for i in range(body_lines))
    return f"{indent}def {name}():\n{body}"


def _config(tmp_path, **table):
    lines = ["[tool.ngrad.line-budget]"] + [f"{k} = {v!r}".replace("'", '"') for k, v in table.items()]
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return line_budget.load_config(tmp_path / "pyproject.toml")


def test_counts_modules_and_functions(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    # 1 + 5 lines: one over a budget of 5; the class's method carries its qualified name
    (pkg / "a.py").write_text(_function("long", 5) + _function("short", 3))
    (pkg / "b.py").write_text("class C:\n" + _function("method", 6, indent="    "))
    (pkg / "c.py").write_text("x = 1\n" * 12)
    config = _config(tmp_path, paths=["pkg"], **{"max-module-lines": 10, "max-function-lines": 5})
    found = [str(o) for o in line_budget.check([pkg], config, tmp_path)]
    assert found == [
        "pkg/c.py:1: module has 12 lines (budget 10)",
        "pkg/b.py:2: function C.method has 7 lines (budget 5)",
        "pkg/a.py:1: function long has 6 lines (budget 5)",
    ]


def test_nested_functions_count_in_their_outer_one(tmp_path):
    source = "def outer():\n" + _function("inner", 3, indent="    ") + "    return inner\n"
    (tmp_path / "m.py").write_text(source)
    config = _config(tmp_path, **{"max-function-lines": 4})
    found = [str(o) for o in line_budget.check([tmp_path / "m.py"], config, tmp_path)]
    assert found == ["m.py:1: function outer has 6 lines (budget 4)"]


def test_exclude_and_unknown_keys(tmp_path):
    (tmp_path / "gen.py").write_text("x = 1\n" * 5)
    config = _config(tmp_path, **{"max-module-lines": 2, "exclude": ["gen*.py"]})
    assert line_budget.check([tmp_path], config, tmp_path) == []
    (tmp_path / "pyproject.toml").write_text("[tool.ngrad.line-budget]\nmax-lines = 3\n")
    with pytest.raises(SystemExit, match="max-lines"):
        line_budget.load_config(tmp_path / "pyproject.toml")


def test_command_line_exit_status(tmp_path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text("x = 1\n" * 3)
    _config(tmp_path, paths=["pkg"], **{"max-module-lines": 2})
    run = [sys.executable, str(TOOL), "--config", str(tmp_path / "pyproject.toml")]
    out = subprocess.run(run, capture_output=True, text=True)
    assert out.returncode == 1
    assert "pkg/m.py:1: module has 3 lines (budget 2)" in out.stdout
    _config(tmp_path, paths=["pkg"], **{"max-module-lines": 3})
    assert subprocess.run(run, capture_output=True, text=True).returncode == 0


def test_the_package_is_within_budget():
    config = line_budget.load_config(ROOT / "pyproject.toml")
    found = line_budget.check([ROOT / p for p in config["paths"]], config, ROOT)
    assert not found, "over the line budget ([tool.ngrad.line-budget] in pyproject.toml):\n" + "\n".join(
        map(str, found)
    )
