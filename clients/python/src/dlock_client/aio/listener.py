"""The listener: one connection on which every wait of a client hears of released keys (the
asyncio twin of ``dlock_client._sync.listener``).

One task owns the connection. It runs the watch and unwatch calls it is handed, in order, and
in between sleeps until the server sends something (a notification) or it is handed more
work. Only that task touches the connection, so its own reader on the socket never competes
with psycopg's.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Awaitable, Callable

import psycopg

from ..errors import ConnectionFailed, from_driver


class Listener:
    """The listener connection of one client, opened by the first watch."""

    def __init__(
        self,
        connect_with: Callable[[], Awaitable[tuple[str, dict[str, Any]]]],
        on_notify: Callable[[str], None],
        on_lost: Callable[[], None],
        still_wanted: Callable[[str], bool],
    ) -> None:
        self._connect_with = connect_with
        self._on_notify = on_notify
        self._on_lost = on_lost
        self._still_wanted = still_wanted
        #: Bumped for every new connection: a key watched in an older one must be watched again.
        self.generation = 0
        self._connection: psycopg.AsyncConnection[Any] | None = None
        self._work: deque[tuple[str, str, str, asyncio.Future[Any]]] = deque()
        self._kick: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    async def watch(self, key: str, sql: str) -> tuple[int, str]:
        """Watches ``key`` (``sql`` is ``dlock_watch``), connecting first if need be: the
        generation of the connection it is watched in, and its channel."""
        generation, channel = await self._hand("watch", key, sql)
        return generation, channel

    def unwatch(self, key: str, sql: str) -> None:
        """Stops watching ``key`` in the background, unless a new waiter wants it by then.
        Outside the event loop the watch stays until the connection closes: only extra
        notifications."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        if not self._closed:
            self._hand("unwatch", key, sql)

    def _hand(self, what: str, key: str, sql: str) -> asyncio.Future[Any]:
        if self._closed:
            raise ConnectionFailed("connection: the client is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._work.append((what, key, sql, future))
        if self._task is None or self._task.done():
            self._task = loop.create_task(self._run(), name="dlock-listener")
        if self._kick is not None and not self._kick.done():
            self._kick.set_result(None)
        return future

    async def close(self) -> None:
        """Closes the connection and ends the task."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await self._disconnect(tell=False)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closed:
            while self._work:
                await self._do(*self._work.popleft())
            self._kick = loop.create_future()
            connection = self._connection
            if connection is None:
                await self._kick
                continue
            self._deliver_parsed(connection)
            readable: asyncio.Future[None] = loop.create_future()
            fd = connection.fileno()

            def ready(readable: asyncio.Future[None] = readable) -> None:
                if not readable.done():
                    readable.set_result(None)

            loop.add_reader(fd, ready)
            try:
                await asyncio.wait({readable, self._kick}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                loop.remove_reader(fd)
            if readable.done():
                await self._receive()

    async def _do(self, what: str, key: str, sql: str, future: asyncio.Future[Any]) -> None:
        if future.done():
            return  # its waiter is gone
        if what == "unwatch" and (self._connection is None or self._still_wanted(key)):
            future.set_result(None)
            return
        try:
            connection = await self._connect()
            cursor = await psycopg.AsyncRawCursor(connection).execute(sql, (key,))
            row = await cursor.fetchone()
            future.set_result((self.generation, row[0] if row else None))
        except Exception as e:
            if not future.done():
                future.set_exception(from_driver(e))
            if self._connection is not None and self._connection.closed:
                await self._disconnect(tell=True)

    async def _connect(self) -> psycopg.AsyncConnection[Any]:
        if self._connection is None or self._connection.closed:
            conninfo, kwargs = await self._connect_with()
            connection = await psycopg.AsyncConnection.connect(conninfo, **{**kwargs, "autocommit": True})
            # Notifications that arrive with the answer to a watch.
            connection.add_notify_handler(lambda n: self._on_notify(n.channel))
            self._connection = connection
            self.generation += 1
        return self._connection

    async def _receive(self) -> None:
        """Reads what the server sent: notifications, or the news that the connection broke."""
        connection = self._connection
        if connection is None:
            return
        pgconn = connection.pgconn
        try:
            pgconn.consume_input()
        except Exception:
            await self._disconnect(tell=True)
            return
        if pgconn.status != psycopg.pq.ConnStatus.OK:
            await self._disconnect(tell=True)
            return
        self._deliver_parsed(connection)

    def _deliver_parsed(self, connection: psycopg.AsyncConnection[Any]) -> None:
        """Passes on the notifications libpq has already read. One can come in the same read as
        a watch's last reply, after the driver last looked: the socket is then drained, and
        waiting for it to be readable would not wake for it."""
        while (notify := connection.pgconn.notifies()) is not None:
            self._on_notify(notify.relname.decode())

    async def _disconnect(self, *, tell: bool) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                await connection.close()
            except Exception:
                pass
        if tell:
            self._on_lost()
