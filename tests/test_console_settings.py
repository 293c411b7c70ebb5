"""Operator credentials and the database URL (spectower.console.settings)."""

from __future__ import annotations

from pathlib import Path

from spectower.console.settings import operator_credentials


def test_env_key_and_operator() -> None:
    got = operator_credentials({"SPECTOWER_ADMIN_KEY": "k1", "SPECTOWER_OPERATOR": "ann"}, None)
    assert (
        got.operator is not None and got.operator.actor == "operator:ann" and got.operator.admin_key == "k1"
    )
    assert "k1" not in repr(got.operator)


def test_key_file(tmp_path: Path) -> None:
    f = tmp_path / "key"
    f.write_text("from-file\n")
    got = operator_credentials({"SPECTOWER_ADMIN_KEY_FILE": str(f), "SPECTOWER_OPERATOR": "ann"}, None)
    assert got.operator is not None and got.operator.admin_key == "from-file"


def test_missing_or_empty_key_file_says_which(tmp_path: Path) -> None:
    got = operator_credentials(
        {"SPECTOWER_ADMIN_KEY_FILE": str(tmp_path / "nope"), "SPECTOWER_OPERATOR": "a"}, None
    )
    assert got.operator is None and "nope" in got.why_not
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    got = operator_credentials({"SPECTOWER_ADMIN_KEY_FILE": str(empty), "SPECTOWER_OPERATOR": "a"}, None)
    assert got.operator is None and "empty" in got.why_not


def test_no_key_is_read_only_and_says_how() -> None:
    got = operator_credentials({}, None)
    assert got.operator is None
    assert "SPECTOWER_ADMIN_KEY_FILE" in got.why_not and "secrets.toml" in got.why_not


def test_key_without_operator_name_is_read_only() -> None:
    got = operator_credentials({"SPECTOWER_ADMIN_KEY": "k"}, None)
    assert got.operator is None and "SPECTOWER_OPERATOR" in got.why_not


def test_streamlit_secrets_section(tmp_path: Path) -> None:
    got = operator_credentials({}, {"spectower": {"admin_key": "sk", "operator": "bo"}})
    assert got.operator is not None and got.operator.actor == "operator:bo" and got.operator.admin_key == "sk"
    # env wins over secrets
    got = operator_credentials(
        {"SPECTOWER_ADMIN_KEY": "ek", "SPECTOWER_OPERATOR": "cy"}, {"spectower": {"admin_key": "sk"}}
    )
    assert got.operator is not None and got.operator.admin_key == "ek"
