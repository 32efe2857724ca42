"""The owner identity a client takes its leases as, when none is given."""

from __future__ import annotations

import os
import socket
import uuid

#: How much of the host name goes into a generated owner, so that it always fits in 256 bytes.
MAX_HOST_BYTES = 64


def generate() -> str:
    """``host:pid:random``: readable in ``dlock_locks`` (which host and process holds a key), and
    unguessable thanks to 122 random bits, so that no one else renews or releases by accident."""
    host = socket.gethostname() or "unknown"
    host = host.encode("utf-8")[:MAX_HOST_BYTES].decode("utf-8", "ignore")
    return f"{host}:{os.getpid()}:{uuid.uuid4().hex}"
