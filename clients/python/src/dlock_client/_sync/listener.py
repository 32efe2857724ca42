"""The listener: one connection on which every wait of a client hears of released keys.

One thread owns the connection. It runs the watch and unwatch calls it is handed, in the order
they come, and in between sleeps until the server sends something (a notification) or it is
handed more work. A notification names a channel (``dlock_watch`` returns a key's); the thread
passes it on. If the connection breaks, everyone waiting is told (they re-watch on a new one,
opened by the next watch, and try again: notifications may have been missed meanwhile).
"""

from __future__ import annotations

import os
import selectors
import threading
from collections import deque
from concurrent.futures import Future
from typing import Any, Callable

import psycopg

from ..errors import ConnectionFailed, from_driver


class Listener:
    """The listener connection of one client, opened by the first watch."""

    def __init__(
        self,
        connect_with: Callable[[], tuple[str, dict[str, Any]]],
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
        self._connection: psycopg.Connection[Any] | None = None
        self._work: deque[tuple[str, str, str, Future[int]]] = deque()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def watch(self, key: str, sql: str) -> tuple[int, str]:
        """Watches ``key`` (``sql`` is ``dlock_watch``), connecting first if need be: the
        generation of the connection it is watched in, and its channel."""
        future: Future[Any] = self._hand("watch", key, sql)
        generation, channel = future.result()
        return generation, channel

    def unwatch(self, key: str, sql: str) -> None:
        """Stops watching ``key`` in the background, unless a new waiter wants it by then."""
        if not self._closed:  # a closed listener watches nothing
            self._hand("unwatch", key, sql)

    def _hand(self, what: str, key: str, sql: str) -> Future[Any]:
        future: Future[Any] = Future()
        with self._lock:
            if self._closed:
                raise ConnectionFailed("connection: the client is closed")
            self._work.append((what, key, sql, future))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="dlock-listener", daemon=True)
                self._thread.start()
        self._wake()
        return future

    def _wake(self) -> None:
        try:
            os.write(self._wake_w, b"\0")
        except BlockingIOError:
            pass  # already awake-pending

    def close(self) -> None:
        """Closes the connection and ends the thread."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake()
        if thread is not None:
            thread.join(timeout=5)
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        selector.register(self._wake_r, selectors.EVENT_READ)
        try:
            while True:
                with self._lock:
                    if self._closed:
                        return
                    work = list(self._work)
                    self._work.clear()
                for item in work:
                    self._do(*item)
                connection = self._connection
                if connection is not None:
                    self._deliver_parsed(connection)
                    selector.register(connection.fileno(), selectors.EVENT_READ)
                try:
                    ready = selector.select()
                finally:
                    if connection is not None:
                        selector.unregister(connection.fileno())
                for selected, _ in ready:
                    if selected.fd == self._wake_r:
                        self._drain_wake()
                    else:
                        self._receive()
        finally:
            selector.close()
            self._disconnect(tell=False)

    def _drain_wake(self) -> None:
        try:
            while os.read(self._wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def _do(self, what: str, key: str, sql: str, future: Future[Any]) -> None:
        if what == "unwatch" and (self._connection is None or self._still_wanted(key)):
            # A waiter came back for the key meanwhile (its watch comes after this), or the
            # watch went with a broken connection.
            future.set_result(None)
            return
        try:
            connection = self._connect()
            channel = psycopg.RawCursor(connection).execute(sql, (key,)).fetchone()
            future.set_result((self.generation, channel[0] if channel else None))
        except Exception as e:
            future.set_exception(from_driver(e))
            if self._connection is not None and self._connection.closed:
                self._disconnect(tell=True)

    def _connect(self) -> psycopg.Connection[Any]:
        if self._connection is None or self._connection.closed:
            conninfo, kwargs = self._connect_with()
            connection = psycopg.Connection.connect(conninfo, **{**kwargs, "autocommit": True})
            # Notifications that arrive with the answer to a watch.
            connection.add_notify_handler(lambda n: self._on_notify(n.channel))
            self._connection = connection
            self.generation += 1
        return self._connection

    def _receive(self) -> None:
        """Reads what the server sent: notifications, or the news that the connection broke."""
        connection = self._connection
        if connection is None:
            return
        pgconn = connection.pgconn
        try:
            pgconn.consume_input()
        except Exception:
            self._disconnect(tell=True)
            return
        if pgconn.status != psycopg.pq.ConnStatus.OK:
            self._disconnect(tell=True)
            return
        self._deliver_parsed(connection)

    def _deliver_parsed(self, connection: psycopg.Connection[Any]) -> None:
        """Passes on the notifications libpq has already read. One can come in the same read as
        a watch's last reply, after the driver last looked: the socket is then drained, and a
        select would not wake for it."""
        while (notify := connection.pgconn.notifies()) is not None:
            self._on_notify(notify.relname.decode())

    def _disconnect(self, *, tell: bool) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            try:
                connection.close()
            except Exception:
                pass
        if tell:
            self._on_lost()
