"""The TOML writer behind `streamfix config`: what it writes, tomllib reads back unchanged."""

from __future__ import annotations

import tomllib

import pytest

from proxy.settings.schema import Settings
from proxy.settings.toml_text import dumps, value_text
from proxy.settings.values import flatten


def test_every_value_kind_reads_back() -> None:
    document = {
        "note": "shown only",
        "section": {
            "text": 'quote " backslash \\ newline \n tab \t escape \x1b del \x7f nel \x85 é',
            "count": 3,
            "big": 1e16,
            "small": 1e-5,
            "half": 0.5,
            "flag": False,
            "names": ["a", "b c"],
            "empty": [],
            "odd key": 1,
        },
        "items": [{"name": "one", "tags": ["x"]}, {"name": "two", "tags": []}],
        "none": [],
    }
    text = dumps(document, notes={"note"})
    read = tomllib.loads(text)
    assert "note" not in read and "# note (shown, not a config key): " in text
    assert read["section"] == document["section"]
    assert read["items"] == document["items"]
    assert read["none"] == []  # an empty list of tables is written as an empty array
    assert "\x1b" not in text and "\x85" not in text  # escaped, not raw, for the terminal's sake


def test_a_bool_is_written_as_a_bool_not_an_int() -> None:
    assert (value_text(True), value_text(1), value_text(2.0)) == ("true", "1", "2.0")
    assert tomllib.loads(f"x = {value_text(float('inf'))}")["x"] == float("inf")


def test_a_value_with_no_toml_form_is_refused() -> None:
    with pytest.raises(TypeError):
        value_text(None)


def test_the_default_settings_read_back_to_the_defaults() -> None:
    read = tomllib.loads(dumps(Settings().to_dict()))
    assert Settings().with_values(flatten(read), text=False) == Settings()
