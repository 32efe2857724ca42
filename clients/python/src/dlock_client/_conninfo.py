"""Taking ``dlock_pooler`` out of a connection string: libpq refuses parameters it does not know,
so it must go before psycopg sees the rest, which is left exactly as written. Both forms of
libpq's connection strings are read: a URL's query (``postgresql://db/app?dlock_pooler=transaction``,
percent-encoded) or ``key=value`` pairs (quoted with ``'``, ``\\`` escapes)."""

from __future__ import annotations

from urllib.parse import unquote

#: The parameter the client handles itself: ``session`` (the default) or ``transaction``.
POOLER = "dlock_pooler"


def split(conninfo: str) -> tuple[str, str | None]:
    """``conninfo`` without ``dlock_pooler``, and its value (the last one written) if any."""
    if conninfo.startswith(("postgres://", "postgresql://")):
        return _split_url(conninfo)
    return _split_pairs(conninfo)


def _split_url(url: str) -> tuple[str, str | None]:
    base, sep, query = url.partition("?")
    if not sep:
        return url, None
    kept, value = [], None
    for segment in query.split("&"):
        name, eq, raw = segment.partition("=")
        if eq and unquote(name) == POOLER:
            value = unquote(raw)
        else:
            kept.append(segment)
    return (f"{base}?{'&'.join(kept)}" if kept else base), value


def _split_pairs(text: str) -> tuple[str, str | None]:
    kept, value, at = [], None, 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            break
        start = at
        while at < len(text) and not text[at].isspace() and text[at] != "=":
            at += 1
        name = text[start:at]
        while at < len(text) and text[at].isspace():
            at += 1
        if not name or at == len(text) or text[at] != "=":
            # Malformed: libpq will say what is wrong with it.
            return text, value
        at += 1
        while at < len(text) and text[at].isspace():
            at += 1
        parsed, at = _read_value(text, at)
        if name == POOLER:
            value = parsed
        else:
            kept.append(text[start:at])
    return " ".join(kept), value


def _read_value(text: str, at: int) -> tuple[str, int]:
    """A value at ``at``: quoted (``'...'``) or up to white space, ``\\`` escaping one character."""
    quoted = at < len(text) and text[at] == "'"
    if quoted:
        at += 1
    out = []
    while at < len(text):
        c = text[at]
        if c == "\\" and at + 1 < len(text):
            out.append(text[at + 1])
            at += 2
            continue
        if (quoted and c == "'") or (not quoted and c.isspace()):
            at += 1 if quoted else 0
            break
        out.append(c)
        at += 1
    return "".join(out), at


def pooler_mode(value: str | None) -> str:
    """``session`` or ``transaction``; anything else is refused."""
    mode = value or "session"
    if mode not in ("session", "transaction"):
        raise ValueError(f"dlock: dlock_pooler={mode!r}: expected session or transaction")
    return mode
