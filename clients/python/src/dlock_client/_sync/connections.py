"""Sending a statement: on which connection, and whether it is prepared.

The client's own pool is opened on first use (no connection is made before the first call),
its connections in autocommit. In session mode statements are prepared once per connection;
behind a transaction pooler nothing is (each call is one unnamed statement, with its
parameter types, that leaves nothing behind on the server connection the pooler lent).
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import psycopg
from psycopg.rows import tuple_row
from psycopg_pool import ConnectionPool

from ..errors import DlockError, from_driver

Row = tuple[Any, ...]


class Connections:
    """A pool of connections to one database, and how statements are sent on them."""

    def __init__(self, pool: ConnectionPool, *, transaction_pooler: bool, owns_pool: bool) -> None:
        self.pool = pool
        self.transaction_pooler = transaction_pooler
        self.owns_pool = owns_pool
        self._prepare = not transaction_pooler
        self._opened = not owns_pool
        self._opening = threading.Lock()

    def _open(self) -> None:
        with self._opening:
            if not self._opened:
                self.pool.open(wait=False)
                self._opened = True

    def take(self) -> psycopg.Connection[Any]:
        """A connection out of the pool, until :meth:`give_back`."""
        if not self._opened:
            self._open()
        try:
            return self.pool.getconn()
        except Exception as e:
            raise from_driver(e) from e

    def give_back(self, connection: psycopg.Connection[Any]) -> None:
        """Returns a connection to the pool (which discards it if it is broken)."""
        self.pool.putconn(connection)

    def run(self, connection: psycopg.Connection[Any], sql: str, params: Sequence[Any]) -> list[Row]:
        """Every row of ``sql`` with ``params``, on ``connection``."""
        try:
            cursor = psycopg.RawCursor(connection, row_factory=tuple_row)
            if connection.autocommit:
                cursor.execute(sql, params, prepare=self._prepare)
            else:
                # A pool of the caller's making may lend connections that open transactions:
                # each call must commit on its own, as in autocommit.
                with connection.transaction():
                    cursor.execute(sql, params, prepare=self._prepare)
            return cursor.fetchall()
        except DlockError:
            raise
        except Exception as e:
            raise from_driver(e) from e

    def rows(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """Every row of ``sql`` on a pooled connection."""
        connection = self.take()
        try:
            return self.run(connection, sql, params)
        finally:
            self.give_back(connection)

    def one(self, sql: str, params: Sequence[Any]) -> Row:
        """The one row of ``sql`` on a pooled connection."""
        return self.rows(sql, params)[0]

    def close(self) -> None:
        """Closes the pool, if it is the client's own."""
        if self.owns_pool:
            self.pool.close()
