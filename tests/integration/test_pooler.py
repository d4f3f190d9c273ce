"""The private PgBouncer of the tests pools by transaction, as the README's setting assumes:
a statement prepared on one server connection is unknown to the next client there."""

from __future__ import annotations

import psycopg
import pytest

from devtools.pgbouncer import _server_address, transaction_pooler
from tests.acceptance.conftest import live_database_url


def _three_clients(url: str, prepare_threshold: int | None) -> None:
    clients = [
        psycopg.connect(url, autocommit=True, prepare_threshold=prepare_threshold) for _ in range(3)
    ]
    try:
        for round_ in range(3):
            for client in clients:
                assert client.execute("SELECT %s::int", [round_]).fetchone() == (round_,)
    finally:
        for client in clients:
            client.close()


def test_prepared_statements_break_behind_the_pooler_and_none_is_safe(
    transactional_db: None,
) -> None:
    with transaction_pooler(live_database_url()) as pooler:
        with pytest.raises(psycopg.errors.DuplicatePreparedStatement):
            _three_clients(pooler.url, prepare_threshold=0)
        _three_clients(pooler.url, prepare_threshold=None)


def test_a_socket_folder_keeps_its_case_and_a_port_is_read() -> None:
    assert _server_address("postgres@%2Fwork%2FMain%2F.dev") == ("/work/Main/.dev", None)
    assert _server_address("postgres@127.0.0.1:5433") == ("127.0.0.1", 5433)
