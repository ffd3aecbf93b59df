"""Settings follow the environment as it is when they are read (``engine/config.py``): the
parsed values are memoized by the raw text, so a changed, removed or invalid variable must be
seen at the next read, whichever way it was changed."""

import os

import pytest

from ngrad.engine import config


def test_a_setting_follows_each_change_of_its_variable(monkeypatch):
    monkeypatch.delenv("NGRAD_DEBUG", raising=False)
    assert config.debug_level() == 0
    for text, level in (("2", 2), ("3", 3), ("", 0), ("x", 0), (" 4 ", 4), ("2", 2)):
        os.environ["NGRAD_DEBUG"] = text
        assert config.debug_level() == level
    del os.environ["NGRAD_DEBUG"]
    assert config.debug_level() == 0
    monkeypatch.setenv("NGRAD_DEBUG", "1")
    assert config.debug_level() == 1


def test_a_choice_is_validated_at_every_read(monkeypatch):
    monkeypatch.setenv("NGRAD_JIT", " Never ")
    assert config.jit_mode() == "never"
    monkeypatch.setenv("NGRAD_JIT", "sometimes")
    for _ in range(2):  # an invalid value is never remembered as a valid one
        with pytest.raises(ValueError, match="NGRAD_JIT must be one of auto, always, never"):
            config.jit_mode()
    monkeypatch.setenv("NGRAD_JIT", "")
    assert config.jit_mode() == "auto"
    monkeypatch.delenv("NGRAD_JIT")
    assert config.jit_mode() == "auto"


def test_two_settings_with_one_raw_value_keep_their_own_defaults(monkeypatch):
    monkeypatch.delenv("NGRAD_JIT_THRESHOLD", raising=False)
    monkeypatch.delenv("NGRAD_MEMORY_ENTRIES", raising=False)
    assert (config.jit_threshold(), config.memory_entries()) == (2, 1024)
    monkeypatch.setenv("NGRAD_MEMORY_ENTRIES", "7")
    assert (config.jit_threshold(), config.memory_entries()) == (2, 7)


def test_many_values_over_a_long_session_stay_bounded(monkeypatch):
    for i in range(600):
        monkeypatch.setenv("NGRAD_DEBUG", str(i % 5))
        assert config.debug_level() == i % 5
    assert len(config._parsed) <= 257


def _cgroup(root, v2=None, v1=None):
    if v2 is not None:
        (root / "cpu.max").write_text(v2 + "\n")
    if v1 is not None:
        (root / "cpu").mkdir()
        (root / "cpu" / "cpu.cfs_quota_us").write_text(f"{v1[0]}\n")
        (root / "cpu" / "cpu.cfs_period_us").write_text(f"{v1[1]}\n")
    return str(root)


@pytest.mark.parametrize(
    "v2, v1, cpus",
    [
        ("200000 100000", None, 2.0),  # docker --cpus 2
        ("150000 100000", None, 1.5),
        ("max 100000", None, None),  # no quota
        (None, (50000, 100000), 0.5),  # cgroup v1
        (None, (-1, 100000), None),  # v1 without a quota
        (None, None, None),  # no control groups mounted
        ("garbage\n", (200000, 100000), 2.0),  # an unreadable v2 file: v1 is asked
    ],
)
def test_a_control_groups_cpu_quota_is_read_in_either_version(tmp_path, v2, v1, cpus):
    assert config._cgroup_cpus(_cgroup(tmp_path, v2, v1)) == cpus


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="CPU affinity is Linux's")
@pytest.mark.parametrize(
    "allowed, v2, expected",
    [(16, None, 16), (2, None, 2), (16, "150000 100000", 2), (2, "800000 100000", 2), (4, "10000 100000", 1)],
)
def test_cores_are_those_the_affinity_and_the_quota_allow(tmp_path, monkeypatch, allowed, v2, expected):
    # a process limited to 2 of 16 CPUs (taskset, a cpuset) or to a quota of 1.5 CPUs counts its
    # compile and BLAS threads from what it may use, not from the host's CPUs
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(allowed)))
    monkeypatch.setattr(config, "CGROUP_ROOT", _cgroup(tmp_path, v2))
    config.cores.cache_clear()
    try:
        assert config.cores() == expected
        assert config.compile_threads() == max(1, expected - 1)
    finally:
        config.cores.cache_clear()
