"""The documentation site builds with warnings as errors (broken links, unresolved references,
missing snippet files, docstrings that do not render) — the docs' CI step."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None, reason="needs the docs extra (in the test extra)")
def test_docs_build_strict(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    for page in ("index.html", "getting-started/index.html", "reference/index.html", "examples/index.html"):
        assert (tmp_path / "site" / page).is_file()
    # the example scripts are embedded from examples/, and the reference renders docstrings
    assert "simulate" in (tmp_path / "site" / "examples" / "index.html").read_text()
    assert "value_and_grad" in (tmp_path / "site" / "reference" / "index.html").read_text()
