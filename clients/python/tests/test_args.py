"""The checks made before any round trip, and the pure parts (no server needed)."""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import pytest
from psycopg_pool import ConnectionPool

import dlock_client
from dlock_client import _args, _backoff, _conninfo, _owner, _sql
from dlock_client._schedule import Due, Schedule


def test_limits_are_bytes_not_characters() -> None:
    assert _args.key("k" * 1024) == "k" * 1024
    assert _args.key("é" * 512) == "é" * 512
    with pytest.raises(dlock_client.InvalidArgument, match="1026 bytes") as e:
        _args.key("é" * 513)
    assert e.value.sqlstate == "22023"
    with pytest.raises(dlock_client.InvalidArgument):
        _args.owner("o" * 257)


def test_bad_values_are_invalid_arguments_and_value_errors() -> None:
    for bad in (lambda: _args.key(""), lambda: _args.ttl(0), lambda: _args.ttl(-1), lambda: _args.wait(-0.5),
                lambda: _args.ttl(float("nan")), lambda: _args.permits(0), lambda: _args.keys([]),
                lambda: _args.keys(["a", "a"]), lambda: _args.keys([f"k{i}" for i in range(65)]),
                lambda: _args.info("i" * 1025), lambda: _args.key("a\x00b")):
        with pytest.raises(ValueError) as e:
            bad()
        assert isinstance(e.value, dlock_client.InvalidArgument)
        assert e.value.sqlstate in ("22023", "22021")


def test_wrong_types_are_type_errors() -> None:
    for bad in (lambda: _args.key(None), lambda: _args.key(b"k"), lambda: _args.ttl("30"), lambda: _args.ttl(True),
                lambda: _args.permits(2.0), lambda: _args.keys("ab"), lambda: _args.info(3)):
        with pytest.raises(TypeError):
            bad()


def test_durations_take_seconds_or_timedeltas_and_none_means_no_limit() -> None:
    assert _args.ttl(timedelta(milliseconds=1500)) == 1.5
    assert _args.ttl(None) is None
    assert _args.wait(None) is None
    assert _args.wait(0) == 0.0
    assert _args.wait(1e30) == _args.MAX_SECONDS


def test_a_client_refuses_bad_input_without_connecting() -> None:
    # Nothing listens on port 1: any round trip would fail with ConnectionFailed instead.
    pool = ConnectionPool("host=127.0.0.1 port=1 user=nobody", open=False, timeout=0.5)
    client = dlock_client.Client(pool=pool)
    try:
        with pytest.raises(dlock_client.InvalidArgument):
            client.lock("")
        with pytest.raises(dlock_client.InvalidArgument):
            client.semaphore("k", 0)
        with pytest.raises(dlock_client.InvalidArgument):
            client.lock_all(["a", "a"])
        with pytest.raises(TypeError):
            client.wait_free(None, 1)  # type: ignore[arg-type]
        pool.open()
        with pytest.raises(dlock_client.ConnectionFailed):
            client.lock("k").acquire()
    finally:
        client.close()
        pool.close()
    with pytest.raises(dlock_client.InvalidArgument):
        dlock_client.Client("host=127.0.0.1 port=1", owner="o" * 257)


def test_generated_owners_are_host_pid_random_and_unique() -> None:
    a, b = _owner.generate(), _owner.generate()
    assert a != b
    host, pid, random = a.rsplit(":", 2)
    assert host == socket.gethostname()[:64] and pid == str(os.getpid()) and len(random) == 32


def test_dlock_pooler_is_taken_out_of_both_forms_of_connection_string() -> None:
    assert _conninfo.split("postgresql://db/app?dlock_pooler=transaction&sslmode=require") == (
        "postgresql://db/app?sslmode=require", "transaction")
    assert _conninfo.split("host=db dlock_pooler = 'transaction' user='a b'") == ("host=db user='a b'", "transaction")
    assert _conninfo.split("host=db") == ("host=db", None)
    with pytest.raises(ValueError):
        _conninfo.pooler_mode("statement")


def test_every_statement_calls_the_quoted_schema() -> None:
    statements = _sql.Statements('my "locks"')
    for name, text in vars(statements).items():
        if name == "schema":
            continue
        calls = text.count("dlock_")
        assert calls >= 1 and calls == text.count('"my ""locks""".dlock_'), text


def test_backoff_doubles_to_its_maximum_and_never_passes_the_expiry() -> None:
    backoff = _backoff.Backoff(0.1)
    assert [round(backoff.pause(None, 1.0), 3) for _ in range(5)] == [0.01, 0.02, 0.04, 0.08, 0.1]
    assert backoff.pause(0.03, 1.0) == 0.03
    assert backoff.pause(0.0, 1.0) == _backoff.FIRST_PAUSE


def test_the_schedule_renews_at_a_third_and_is_lost_at_the_deadline() -> None:
    schedule = Schedule(ttl=3.0, deadline=103.0, renew_every=1.0, now=100.0)
    assert schedule.next_wake() == 101.0
    assert schedule.due(100.5) is Due.SLEEP
    assert schedule.due(101.0) is Due.RENEW
    assert schedule.next_wake() == 103.0, "while renewing, only the deadline"
    schedule.renewed(sent=101.0, now=101.1)
    assert (schedule.deadline, schedule.next_wake()) == (104.0, 102.1)
    schedule.due(102.1)
    schedule.retry_soon(102.2)
    assert schedule.next_wake() == pytest.approx(102.45)
    assert schedule.due(104.0) is Due.LOST
