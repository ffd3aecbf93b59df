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
