"""Sending a statement: on which connection, and whether it is prepared (the asyncio twin of
``dlock_client._sync.connections``)."""

from __future__ import annotations

import asyncio
from typing import Any, Sequence

import psycopg
from psycopg.rows import tuple_row
from psycopg_pool import AsyncConnectionPool

from ..errors import DlockError, from_driver

Row = tuple[Any, ...]


class Connections:
    """A pool of connections to one database, and how statements are sent on them."""

    def __init__(self, pool: AsyncConnectionPool, *, transaction_pooler: bool, owns_pool: bool) -> None:
        self.pool = pool
        self.transaction_pooler = transaction_pooler
        self.owns_pool = owns_pool
        self._prepare = not transaction_pooler
        self._opened = not owns_pool
        self._opening: asyncio.Lock | None = None

    async def _open(self) -> None:
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if not self._opened:
                await self.pool.open(wait=False)
                self._opened = True

    async def take(self) -> psycopg.AsyncConnection[Any]:
        """A connection out of the pool, until :meth:`give_back`."""
        if not self._opened:
            await self._open()
        try:
            return await self.pool.getconn()
        except Exception as e:
            raise from_driver(e) from e

    async def give_back(self, connection: psycopg.AsyncConnection[Any]) -> None:
        """Returns a connection to the pool (which discards it if it is broken)."""
        await self.pool.putconn(connection)

    async def run(self, connection: psycopg.AsyncConnection[Any], sql: str, params: Sequence[Any]) -> list[Row]:
        """Every row of ``sql`` with ``params``, on ``connection``."""
        try:
            cursor = psycopg.AsyncRawCursor(connection, row_factory=tuple_row)
            if connection.autocommit:
                await cursor.execute(sql, params, prepare=self._prepare)
            else:
                # A pool of the caller's making may lend connections that open transactions.
                async with connection.transaction():
                    await cursor.execute(sql, params, prepare=self._prepare)
            return await cursor.fetchall()
        except DlockError:
            raise
        except Exception as e:
            raise from_driver(e) from e

    async def rows(self, sql: str, params: Sequence[Any]) -> list[Row]:
        """Every row of ``sql`` on a pooled connection."""
        connection = await self.take()
        try:
            return await self.run(connection, sql, params)
        finally:
            await self.give_back(connection)

    async def one(self, sql: str, params: Sequence[Any]) -> Row:
        """The one row of ``sql`` on a pooled connection."""
        return (await self.rows(sql, params))[0]

    async def close(self) -> None:
        """Closes the pool, if it is the client's own."""
        if self.owns_pool:
            await self.pool.close()
