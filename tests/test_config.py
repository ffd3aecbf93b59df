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
