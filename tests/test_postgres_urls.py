"""A PostgreSQL store URL's password never shows: in the user part or as a `password=` parameter (libpq takes
both), in messages, in the refusal of a URL of another scheme, or in logs (no server needed)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from saipling.errors import SaiplingError, StorageUnavailable

pytest.importorskip("psycopg", reason="the PostgreSQL backend needs psycopg (pip install -e '.[postgres]')")


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://writer:s3cret-Passw0rd@db.example/saipling?workspace=w1",
        "postgresql://writer@db.example/saipling?password=s3cret-Passw0rd&workspace=w1",
        "postgresql://writer@db.example/saipling?PASSWORD=s3cret-Passw0rd",
    ],
)
def test_redacted_hides_the_password_in_either_place(url: str) -> None:
    from saipling.storage.postgres.store import redacted

    shown = redacted(url)
    assert "s3cret-Passw0rd" not in shown and "***" in shown
    assert "db.example" in shown and "writer" in shown


def test_a_failed_connection_names_the_server_not_the_password(tmp_path: Path, caplog) -> None:
    from saipling.redact import RedactingFilter
    from saipling.storage.postgres.store import connect

    socket_dir = tmp_path / "nothing-listens-here"
    socket_dir.mkdir()
    with pytest.raises(StorageUnavailable) as caught:
        connect(f"postgresql://writer@/saipling?host={socket_dir}&password=s3cret-Passw0rd")
    assert "s3cret-Passw0rd" not in str(caught.value) and str(socket_dir) in str(caught.value)
    record = logging.LogRecord("t", logging.WARNING, __file__, 1, "tried %s", (caught.value.args,), None)
    RedactingFilter().filter(record)
    assert "s3cret-Passw0rd" not in record.getMessage()  # (remembered: the log filter hides it from now on)


def test_a_store_of_another_scheme_is_refused_without_echoing_its_password(tmp_path: Path) -> None:
    from saipling.config.settings import load_settings
    from saipling.project import open_store

    settings, _ = load_settings(tmp_path, env={"SAIPLING_STORE": "mysql://writer:s3cret-Passw0rd@db.example/x"})
    assert settings.store
    with pytest.raises(SaiplingError) as caught:
        open_store(tmp_path, True, [], settings=settings)
    assert "not a postgresql:// URL" in str(caught.value) and "s3cret-Passw0rd" not in str(caught.value)


def test_a_project_file_never_supplies_a_store_password(tmp_path: Path) -> None:
    """config.toml is shared with the project (a clone, a repository): a store URL there may name the server but
    never carry its password; the environment may."""
    from saipling.config.settings import load_settings

    (tmp_path / ".saipling").mkdir()
    (tmp_path / ".saipling" / "config.toml").write_text(
        'store = "postgresql://writer:s3cret-Passw0rd@db.example/saipling"\n', encoding="utf-8"
    )
    settings, warnings = load_settings(tmp_path, env={})
    # the store is kept without its password (never a quiet fallback to an index of this copy's own)
    assert settings.store == "postgresql://writer@db.example/saipling"
    assert any("never read from project files" in w for w in warnings)
    assert not any("s3cret-Passw0rd" in w for w in warnings)
    (tmp_path / ".saipling" / "config.toml").write_text(
        'store = "postgresql://db.example/saipling?password=s3cret-Passw0rd&workspace=team"\n', encoding="utf-8"
    )
    settings, warnings = load_settings(tmp_path, env={})
    assert settings.store == "postgresql://db.example/saipling?workspace=team" and warnings
    (tmp_path / ".saipling" / "config.toml").write_text(
        'store = "postgresql://writer@db.example/saipling?workspace=team"\n', encoding="utf-8"
    )
    settings, warnings = load_settings(tmp_path, env={})
    assert settings.store == "postgresql://writer@db.example/saipling?workspace=team" and not warnings
    settings, _ = load_settings(tmp_path, env={"SAIPLING_STORE": "postgresql://writer:pw-from-env@db/saipling"})
    assert settings.store == "postgresql://writer:pw-from-env@db/saipling"


def test_a_connection_that_fails_says_the_project_files_password_was_left_out(tmp_path: Path) -> None:
    """A team that put the password in config.toml got only the driver's `fe_sendauth: no password supplied`: the
    warning that the password was left out is shown once the project is open, which it never was (it showed at
    `-v` only). The failed open now carries it."""
    from saipling.project import Project

    socket_dir = tmp_path / "nothing-listens-here"
    socket_dir.mkdir()
    (tmp_path / ".saipling").mkdir()
    (tmp_path / ".saipling" / "config.toml").write_text(
        f'store = "postgresql://writer:s3cret-Passw0rd@/saipling?host={socket_dir}&workspace=team"\n',
        encoding="utf-8",
    )
    with pytest.raises(StorageUnavailable) as caught:
        Project.open(tmp_path, env={}, create=False)
    message = str(caught.value)
    assert "cannot connect to PostgreSQL" in message and str(socket_dir) in message
    assert "never read from project files" in message and "PGPASSWORD" in message
    assert "s3cret-Passw0rd" not in message


# a password with a character a URL must percent-encode, as people type it: the character ends the URL's user part,
# so urllib and libpq read the rest of the password as the host, port, path, query or fragment
# (`Sup3r@Secret9`: libpq's user part ends at the first `@`, its host was `Secret9@127.0.0.1`; `2024?k=Secret9`: urllib
# read a port and a query, libpq the password; both were shown whole)
UNENCODED = ["Sup3r/Secret9", "Sup3r#Secret9", "Sup3r?Secret9", "p@ss/w#rd-Secret9", "Sup3r@Secret9", "2024?k=Secret9"]


@pytest.mark.parametrize("password", UNENCODED)
def test_a_password_that_is_not_percent_encoded_is_never_shown(tmp_path: Path, password: str) -> None:
    """The refusal names the server and says what to do; nothing of the password shows (it was echoed whole:
    `cannot connect to PostgreSQL at postgresql://team:Sup3r/Secret9@127.0.0.1:54329/saipling: failed to resolve
    host 'team'`), in the message, `redacted` or `shown_url`."""
    from saipling.config.settings import load_settings
    from saipling.project import open_store
    from saipling.redact import shown_url
    from saipling.storage.postgres.store import redacted

    url = f"postgresql://writer:{password}@127.0.0.1:1/saipling?workspace=team"
    settings, _ = load_settings(tmp_path, env={"SAIPLING_STORE": url})
    with pytest.raises(SaiplingError) as caught:
        open_store(tmp_path, True, [], settings=settings)
    message = str(caught.value)
    assert "Secret9" not in message and "127.0.0.1:1/saipling" in message
    assert "percent-encoded" in message and "%2F" in message
    for shown in (redacted(url), shown_url(url)):
        assert "Secret9" not in shown and "127.0.0.1:1" in shown


@pytest.mark.parametrize("password", UNENCODED)
def test_a_project_file_never_supplies_a_password_that_is_not_percent_encoded(tmp_path: Path, password: str) -> None:
    """The rule that config.toml never carries the store's password held only for a password urllib could parse:
    `writer:Sup3r/Secret9@db` has none for it, so the URL was kept whole (and shown in every error)."""
    from saipling.config.settings import load_settings

    (tmp_path / ".saipling").mkdir()
    (tmp_path / ".saipling" / "config.toml").write_text(
        f'store = "postgresql://writer:{password}@db.example/saipling?workspace=team"\n', encoding="utf-8"
    )
    settings, warnings = load_settings(tmp_path, env={})
    assert settings.store == "postgresql://writer@db.example/saipling?workspace=team"
    assert any("never read from project files" in w for w in warnings)
    assert not any("Secret9" in w for w in warnings)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://writer:pw@db.example/saipling?workspace=team",
        "postgresql://db.example:5432/saipling?user=me@corp&workspace=team",  # (Azure's user@server names)
        "postgresql://writer:pw@h1:5432,h2:5433/saipling?workspace=team",
        "postgresql://[::1]/saipling?user=me@corp",
        "postgresql://writer:p%2Fss@db.example/saipling",
    ],
)
def test_urls_that_parse_are_not_taken_for_unencoded_passwords(url: str) -> None:
    from saipling.redact import unencoded_userinfo

    assert not unencoded_userinfo(url)


def test_a_copy_is_named_by_its_machine_id_or_saipling_copy_id(tmp_path: Path, monkeypatch) -> None:
    """The identity a shared store records with each file: SAIPLING_COPY_ID, else a real machine id (not
    systemd's first-boot `uninitialized`, which cloned images share), else the host name; and the folder."""
    import socket

    from saipling.storage import copy_identity

    monkeypatch.delenv("SAIPLING_COPY_ID", raising=False)
    good, placeholder = tmp_path / "machine-id", tmp_path / "placeholder"
    good.write_text("0123456789abcdef0123456789abcdef\n")
    placeholder.write_text("uninitialized\n")
    root = tmp_path / "novel"
    assert copy_identity(root, (str(placeholder), str(good))) == f"0123456789abcdef0123456789abcdef:{root.resolve()}"
    assert copy_identity(root, (str(placeholder), str(tmp_path / "none"))) == f"{socket.gethostname()}:{root.resolve()}"
    monkeypatch.setenv("SAIPLING_COPY_ID", "alice-laptop")
    assert copy_identity(root, (str(good),)) == "alice-laptop"
