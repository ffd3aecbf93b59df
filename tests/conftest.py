"""Fixtures every test module shares, and the markers that pick the fast loop.

Markers (registered in pyproject.toml) are set here from data, by module and, for the few tests
that differ from their module, by test: ``numba`` (compiles kernels), ``cuda`` (Numba's CUDA
simulator or a device), ``slow`` (more than about 5 s). The fast loop is
``python -m pytest -m "not numba and not cuda and not slow"``.
"""

import os

import numpy as np
import pytest

# Tests assert what a call compiled and when (tiering, the cache, warnings of a compile), so
# compiles happen in the call that needs them, in this process and in the subprocesses tests
# start; tests/test_background.py runs the default, compiles on the worker thread.
os.environ.setdefault("NGRAD_COMPILE", "wait")

# Modules whose tests compile kernels (the jit_always fixture or NGRAD_JIT=always, ngrad bench
# and the examples in subprocesses, vmath's compiled-against-NumPy checks).
NUMBA_MODULES = {
    "test_background",
    "test_buffers",
    "test_bench",
    "test_bytecode",
    "test_cache",
    "test_codegen",
    "test_compile",
    "test_compiled",
    "test_cuda",
    "test_driver",
    "test_examples",
    "test_fuse",
    "test_memory",
    "test_cache_faults",
    "test_threads",
    "test_tiering",
    "test_vmath",
}
CUDA_MODULES = {"test_cuda"}
# Tests of other modules that compile: Numba's dispatcher compiled while they ran (measured
# with an empty kernel cache). Node ids without parameters.
NUMBA_TESTS = {
    "tests/test_linalg.py::test_a_compiled_newton_step_matches_numpy",
    "tests/test_optim.py::test_a_step_outside_compile_replays_its_program_and_follows_changes",
    "tests/test_tape.py::test_backward_stores_a_joint_it_meets_again_or_traces_and_reads_it_back",
}
# Tests measured at more than about 5 s with an empty kernel cache on the 2-core machine (a
# node id without parameters marks every parametrization).
SLOW_TESTS = {
    "tests/test_autograd.py::test_deep_graph_of_100000_ops",
    "tests/test_bytecode.py::test_every_primitive_and_the_corpus_equal_the_interpreter",
    "tests/test_bytecode.py::test_pairs_in_every_primitives_gradient_equal_the_interpreter",
    "tests/test_compiled.py::test_op_corpus_values_and_gradients[cross_entropy_probabilities]",
    "tests/test_compiled.py::test_op_corpus_values_and_gradients[diagonal_trace_diag]",
    "tests/test_compiled.py::test_random_programs_compiled_equal_interpreted",
    "tests/test_cuda.py::test_ptx_type_checks_the_op_corpus_and_fixed_kernels",
    "tests/test_cuda.py::test_simulator_runs_the_device_tests",
    "tests/test_docs.py::test_docs_build_strict",
    "tests/test_examples.py::test_ode_parameters_are_recovered",
    "tests/test_tape.py::test_backward_stores_a_joint_it_meets_again_or_traces_and_reads_it_back",
    "tests/test_threads.py::test_parallel_kernels_equal_serial_kernels_and_the_interpreter",
    "tests/test_threads.py::test_parallel_kernels_survive_fork_and_concurrent_threads",
    "tests/test_tiering.py::test_a_traced_program_of_many_new_functions_is_tiered_not_compiled_at_once",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        test = item.nodeid.split("[")[0]
        # Doctests (ngrad/ and docs/) run at the default NGRAD_JIT=auto, without this folder's
        # interpreter fixture, and their repeated calls compile.
        doctest = not item.nodeid.startswith("tests/")
        if doctest or item.path.stem in NUMBA_MODULES or test in NUMBA_TESTS:
            item.add_marker(pytest.mark.numba)
        if item.path.stem in CUDA_MODULES:
            item.add_marker(pytest.mark.cuda)
        if test in SLOW_TESTS or item.nodeid in SLOW_TESTS:
            item.add_marker(pytest.mark.slow)


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
