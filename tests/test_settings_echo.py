"""A key pasted into the wrong setting is never echoed back in a settings warning (issue 12, item 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from saipling.config.settings import load_settings

KEY = "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 3


@pytest.mark.parametrize("name", ["SAIPLING_PROVIDER", "SAIPLING_FALLBACK", "SAIPLING_MODEL_PATH", "SAIPLING_MODE"])
def test_a_key_in_the_wrong_setting_is_named_not_echoed(tmp_path: Path, name: str) -> None:
    _, warnings = load_settings(tmp_path, env={name: KEY})
    assert all(KEY not in w and KEY[:16] not in w for w in warnings)


@pytest.mark.parametrize("setting", ["provider", "fallback"])
def test_a_bad_choice_is_reported_naming_the_setting(tmp_path: Path, setting: str) -> None:
    _, warnings = load_settings(tmp_path, init_options={setting: KEY})
    assert any(setting in w and "looks like an API key" in w for w in warnings), warnings
    assert all(KEY not in w for w in warnings)


@pytest.mark.parametrize("value", ["5", "[1, 2]", '"none"'])
def test_a_saipling_key_that_is_not_a_table_warns_and_keeps_the_defaults(tmp_path: Path, value: str) -> None:
    """`saipling = 5` in config.toml was an AttributeError traceback from every command and both servers."""
    (tmp_path / ".saipling").mkdir()
    (tmp_path / ".saipling" / "config.toml").write_text(f"saipling = {value}\n", encoding="utf-8")
    settings, warnings = load_settings(tmp_path, env={})
    assert settings.provider == load_settings(tmp_path / "nowhere", env={})[0].provider
    assert len(warnings) == 1 and "saipling: expected a table" in warnings[0] and "using defaults" in warnings[0]
