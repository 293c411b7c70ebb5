"""The one key reader (collectors.auth, through control.credentials): keys from the environment or a
one-line file, errors that name the variable, not the key."""

from __future__ import annotations

from pathlib import Path

import pytest
from spectower.control.credentials import CredentialError, load_admin_key, load_api_key, load_credentials


def test_env_value_wins_over_file(tmp_path: Path) -> None:
    key_file = tmp_path / "admin.key"
    key_file.write_text("from-file\n")
    env = {"SPECTOWER_ADMIN_KEY": "from-env", "SPECTOWER_ADMIN_KEY_FILE": str(key_file)}
    assert load_admin_key(env) == "from-env"
    assert load_admin_key({"SPECTOWER_ADMIN_KEY_FILE": str(key_file)}) == "from-file"
    assert load_admin_key({}) is None
    assert load_api_key({"SPECTOWER_API_KEY": " api "}) == "api"


def test_bad_key_files_name_the_variable(tmp_path: Path) -> None:
    with pytest.raises(CredentialError, match=r"SPECTOWER_ADMIN_KEY_FILE: cannot read .*missing"):
        load_admin_key({"SPECTOWER_ADMIN_KEY_FILE": str(tmp_path / "missing")})
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    with pytest.raises(CredentialError, match=r"SPECTOWER_API_KEY_FILE: the key file .* is empty"):
        load_api_key({"SPECTOWER_API_KEY_FILE": str(empty)})


def test_a_key_file_of_two_lines_is_refused_everywhere(tmp_path: Path) -> None:
    """The sweeps' old reader took the first line of such a file; the one reader refuses it for every
    caller: the knob client's admin key, the collector's and load generators' API key, the console's."""
    from spectower.collectors.auth import load_api_key as collector_api_key
    from spectower.console.settings import operator_credentials

    two = tmp_path / "two"
    two.write_text("first-line-key\nsecond-line\n")
    readers = ((load_admin_key, "SPECTOWER_ADMIN_KEY_FILE"), (collector_api_key, "SPECTOWER_API_KEY_FILE"))
    for load, var in readers:
        with pytest.raises(CredentialError, match=f"{var}: the key file .* must hold one line") as err:
            load({var: str(two)})
        assert "first-line-key" not in str(err.value)
    console = operator_credentials({"SPECTOWER_ADMIN_KEY_FILE": str(two), "SPECTOWER_OPERATOR": "ann"}, None)
    assert console.operator is None and "must hold one line" in console.why_not


def test_repr_never_shows_a_key() -> None:
    creds = load_credentials({"SPECTOWER_ADMIN_KEY": "top-secret", "SPECTOWER_API_KEY": "also-secret"})
    assert creds.admin_key == "top-secret"
    assert "secret" not in repr(creds) and "admin_key=set" in repr(creds)


def test_a_key_file_that_is_no_key_file_is_one_line(tmp_path: Path) -> None:
    # /dev/zero was read for ever; a binary file raised UnicodeDecodeError as a traceback
    binary = tmp_path / "key.bin"
    binary.write_bytes(b"\xff\xfe\x00key")
    with pytest.raises(CredentialError, match=r"^SPECTOWER_ADMIN_KEY_FILE: not UTF-8 text \(byte 0\): "):
        load_admin_key({"SPECTOWER_ADMIN_KEY_FILE": str(binary)})
    with pytest.raises(CredentialError, match=r"^SPECTOWER_API_KEY_FILE: more than 65536 bytes: /dev/zero$"):
        load_api_key({"SPECTOWER_API_KEY_FILE": "/dev/zero"})
