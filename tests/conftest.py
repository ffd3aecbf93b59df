import numpy as np
import pytest


@pytest.fixture(autouse=True)
def _interpret_by_default(monkeypatch):
    """Semantics tests run on the NumPy interpreter, the oracle they are written against;
    compilation is tested against it in test_compiled.py (which sets NGRAD_JIT=always)."""
    monkeypatch.setenv("NGRAD_JIT", "never")


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


@pytest.fixture
def jit_always(monkeypatch, tmp_path_factory):
    """Compile every tape at once (the compiler tests), into this session's kernel folder."""
    monkeypatch.setenv("NGRAD_JIT", "always")
    monkeypatch.setenv("NGRAD_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "kernels"))
