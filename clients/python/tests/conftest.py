"""Fixtures of the client's tests: a real server (``DLOCK_TEST_DSN``, with dlock in schema
``dlock``; ``tests/scripts/clients.sh test`` starts one), clients closed after each test, keys
no other test uses, and an admin session."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

import dlock_client


def _dsn(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: run tests/scripts/clients.sh test (it starts a server)", 2)
    return value


@pytest.fixture(scope="session")
def dsn() -> str:
    return _dsn("DLOCK_TEST_DSN")


@pytest.fixture(scope="session")
def pgbouncer_dsn() -> str:
    return _dsn("DLOCK_TEST_PGBOUNCER_DSN")


@pytest.fixture
def key(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """Keys of this test alone: ``key("a")``."""
    prefix = f"py/{request.node.name}/{uuid.uuid4().hex[:8]}"
    return lambda name="k": f"{prefix}/{name}"


@pytest.fixture
def client(dsn: str) -> Iterator[Callable[..., dlock_client.Client]]:
    """A factory of clients of the test server, closed after the test."""
    made: list[dlock_client.Client] = []

    def make(**options: Any) -> dlock_client.Client:
        made.append(dlock_client.Client(options.pop("dsn", dsn), **options))
        return made[-1]

    yield make
    for c in made:
        c.close()


@pytest.fixture
def admin(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        yield connection


def eventually(condition: Callable[[], object], timeout: float = 10.0, what: str = "the condition") -> None:
    """Polls ``condition`` until it is true (a generous limit, never a measurement)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} did not hold within {timeout} s")
        time.sleep(0.02)
