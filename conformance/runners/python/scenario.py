"""The interpreter of the conformance scenarios (conformance/README.md): values, expectations,
the runner's own actions, and the client actions, which go to an adapter of one client API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Callable

import psycopg
from psycopg.conninfo import make_conninfo

#: How long one step may take before the scenario fails (never a measurement).
STEP_LIMIT = 60.0
OPERATORS = {"$gt", "$ge", "$lt", "$le", "$ne", "$len", "$any"}
#: The error kinds of SQLSTATEs a ``sql`` step may expect.
SQLSTATE_KINDS = {
    "22023": "InvalidArgument",
    "22004": "InvalidArgument",
    "0A000": "ModeConflict",
    "42501": "PermissionDenied",
    "55006": "HeldHere",
}


def holds(op: str, actual: Any, want: Any) -> bool:
    """Whether ``actual`` compares with ``want`` as the operator ``op`` says."""
    try:
        if op == "$gt":
            return bool(actual > want)
        if op == "$ge":
            return bool(actual >= want)
        if op == "$lt":
            return bool(actual < want)
        if op == "$le":
            return bool(actual <= want)
        if op == "$ne":
            return bool(actual != want)
        if op == "$len":
            return len(actual) == want
        return op == "$any"
    except TypeError:
        return False


class Failure(Exception):
    """A step did not do what the scenario says."""


@dataclass
class Outcome:
    """What one step did: its result fields, or the kind of error it failed with."""

    result: dict[str, Any] = field(default_factory=dict)
    error: tuple[str, str | None, str] | None = None  # kind, sqlstate, message
    elapsed_ms: float = 0.0


@dataclass
class Environment:
    """What every scenario of a run shares."""

    dsn: str
    pgbouncer_dsn: str | None
    run_id: str
    capabilities: set[str]
    adapter_factory: Callable[[], Any]
    child_command: list[str]


class Scenario:
    """One scenario being run."""

    def __init__(self, name: str, spec: dict[str, Any], env: Environment) -> None:
        self.name = name
        self.spec = spec
        self.env = env
        self.adapter = env.adapter_factory()
        self.bindings: dict[str, Any] = {}
        self.tasks: dict[str, tuple[dict[str, Any], list[Future[Outcome]]]] = {}
        self.sessions: dict[str, psycopg.Connection[Any]] = {}
        self.clients: list[Any] = []
        self.children: dict[str, Child] = {}
        self.workers = ThreadPoolExecutor(max_workers=64, thread_name_prefix="step")
        self.apps = 0

    # ---- values -------------------------------------------------------------------------

    def key(self, name: str) -> str:
        return f"conf/{self.env.run_id}/{self.name}/{name}"

    def resolve(self, value: Any) -> Any:
        if isinstance(value, str):
            if value.startswith("$$"):
                return value[1:]
            if value.startswith("$"):
                name, _, path = value[1:].partition(".")
                if name not in self.bindings:
                    raise Failure(f"nothing is bound to {name!r}")
                bound = self.bindings[name]
                for part in filter(None, path.split(".")):
                    bound = bound[part] if isinstance(bound, dict) else getattr(bound, part)
                return bound
            return value
        if isinstance(value, list):
            return [self.resolve(v) for v in value]
        if isinstance(value, dict):
            if set(value) == {"key"}:
                return self.key(value["key"])
            if set(value) == {"raw"}:
                return value["raw"]
            if set(value) == {"repeat", "times"}:
                return value["repeat"] * value["times"]
            if set(value) == {"sequence", "count"}:
                return [self.key(f"{value['sequence']}{i}") for i in range(value["count"])]
            return {k: self.resolve(v) for k, v in value.items()}
        return value

    def key_arg(self, value: Any) -> Any:
        return self.key(value) if isinstance(value, str) and not value.startswith("$") else self.resolve(value)

    def keys_arg(self, value: Any) -> Any:
        return [self.key_arg(v) for v in value] if isinstance(value, list) else self.resolve(value)

    # ---- expectations ---------------------------------------------------------------------

    def mismatch(self, expected: Any, actual: Any, where: str) -> str | None:
        if isinstance(expected, dict) and expected and set(expected) <= OPERATORS:
            for op, operand in expected.items():
                want = self.resolve(operand)
                if not holds(op, actual, want):
                    return f"{where}: expected {op} {want!r}, got {actual!r}"
            return None
        if isinstance(expected, dict) and not set(expected) & {"key", "raw", "repeat", "sequence"}:
            if not isinstance(actual, dict):
                return f"{where}: expected an object like {expected!r}, got {actual!r}"
            for k, v in expected.items():
                problem = self.mismatch(v, actual.get(k), f"{where}.{k}")
                if problem:
                    return problem
            return None
        want = self.resolve(expected)
        if isinstance(want, list) and isinstance(actual, list) and len(want) == len(actual):
            for i, (w, a) in enumerate(zip(want, actual, strict=True)):
                problem = self.mismatch(w, a, f"{where}[{i}]")
                if problem:
                    return problem
            return None
        return None if want == actual else f"{where}: expected {want!r}, got {actual!r}"

    def check(self, step: dict[str, Any], outcome: Outcome) -> None:
        expect = step.get("expect", {})
        if outcome.error is not None and "error" not in expect:
            kind, sqlstate, message = outcome.error
            raise Failure(f"failed with {kind} (SQLSTATE {sqlstate}): {message}")
        if "error" in expect:
            if outcome.error is None:
                raise Failure(f"expected {expect['error']}, but it succeeded with {outcome.result!r}")
            kind, sqlstate, message = outcome.error
            if kind != expect["error"]:
                raise Failure(f"expected {expect['error']}, got {kind} (SQLSTATE {sqlstate}): {message}")
            if "sqlstate" in expect and expect["sqlstate"] != sqlstate:
                raise Failure(f"expected SQLSTATE {expect['sqlstate']}, got {sqlstate}: {message}")
        fields = {**outcome.result, "elapsed_ms": outcome.elapsed_ms}
        for name, expected in expect.items():
            if name in ("error", "sqlstate"):
                continue
            problem = self.mismatch(expected, fields.get(name), name)
            if problem:
                raise Failure(problem)

    # ---- running --------------------------------------------------------------------------

    def run(self) -> None:
        try:
            for index, step in enumerate(self.spec["steps"], 1):
                try:
                    self.step(step)
                except Failure as e:
                    raise Failure(f"step {index} ({step['do']}): {e}") from None
        finally:
            self.cleanup()

    def step(self, step: dict[str, Any]) -> None:
        if "background" in step:
            futures = [self.workers.submit(self.timed, step) for _ in range(step.get("count", 1))]
            self.tasks[step["background"]] = (step, futures)
            return
        if step["do"] == "join":
            self.join(step)
            return
        future = self.workers.submit(self.timed, step)
        try:
            outcome = future.result(timeout=STEP_LIMIT)
        except FutureTimeout:
            raise Failure(f"did not end within {STEP_LIMIT} s") from None
        self.finish(step, outcome)

    def finish(self, step: dict[str, Any], outcome: Outcome) -> None:
        self.check(step, outcome)
        if "as" in step and outcome.error is None:
            self.bindings[step["as"]] = outcome.result

    def join(self, step: dict[str, Any]) -> None:
        background, futures = self.tasks.pop(step["task"])
        deadline = time.monotonic() + step.get("timeout_ms", 30000) / 1000
        outcomes = []
        for future in futures:
            try:
                outcomes.append(future.result(timeout=max(deadline - time.monotonic(), 0)))
            except FutureTimeout:
                raise Failure(f"task {step['task']!r} had not ended within {step.get('timeout_ms', 30000)} ms") from None
        for outcome in outcomes:
            if len(futures) == 1:
                self.finish(background, outcome)
            else:
                self.check(background, outcome)

    def timed(self, step: dict[str, Any]) -> Outcome:
        started = time.monotonic()
        outcome = Outcome()
        try:
            outcome.result = self.perform(step) or {}
        except Failure:
            raise
        except BaseException as e:  # noqa: BLE001 - every error is an outcome to judge
            if isinstance(e, ChildError):
                kind: tuple[str, str | None] | None = (e.kind, e.sqlstate)
            elif isinstance(e, SqlError):
                kind = (SQLSTATE_KINDS.get(e.sqlstate or "", "Server"), e.sqlstate)
            else:
                kind = self.adapter.classify(e)
            if kind is None:
                kind = ("Unexpected", None)
            outcome.error = (kind[0], kind[1], f"{type(e).__name__}: {e}")
        outcome.elapsed_ms = (time.monotonic() - started) * 1000
        return outcome

    def perform(self, step: dict[str, Any]) -> dict[str, Any] | None:
        do = step["do"]
        action = getattr(self, f"do_{do}", None)
        if action is None:
            raise Failure(f"unknown action {do!r}")
        return action(step)

    # ---- the runner's actions -------------------------------------------------------------

    def app_name(self, name: str) -> str:
        self.apps += 1
        return f"conf-{self.env.run_id}-{self.apps}-{name}"[:63]

    def session(self, name: str | None) -> psycopg.Connection[Any]:
        name = name or "admin"
        if name not in self.sessions:
            if name != "admin":
                raise Failure(f"no session {name!r}")
            self.sessions[name] = psycopg.connect(self.env.dsn, autocommit=True, application_name=self.app_name("admin"))
        return self.sessions[name]

    def do_session(self, step: dict[str, Any]) -> dict[str, Any]:
        dsn = make_conninfo(self.env.dsn, user=step["role"], application_name=self.app_name(step["as"]))
        self.sessions[step["as"]] = psycopg.connect(dsn, autocommit=True)
        return {}

    def query(self, step: dict[str, Any]) -> list[tuple[Any, ...]]:
        connection = self.session(step.get("session"))
        params = self.resolve(step.get("params")) if step.get("params") is not None else None
        cursor = psycopg.RawCursor(connection)
        try:
            cursor.execute(step["query"], params)
        except psycopg.Error as e:
            raise SqlError(e) from e
        return cursor.fetchall() if cursor.description else []

    def do_sql(self, step: dict[str, Any]) -> dict[str, Any]:
        rows = self.query(step)
        return {"value": rows[0][0] if rows else None, "rows": [list(r) for r in rows]}

    def do_wait_until(self, step: dict[str, Any]) -> dict[str, Any]:
        timeout = step.get("timeout_ms", 10000) / 1000
        deadline = time.monotonic() + timeout
        while True:
            rows = self.query(step)
            value = rows[0][0] if rows else None
            if self.mismatch(step["value"], value, "value") is None:
                return {"value": value}
            if time.monotonic() >= deadline:
                raise Failure(f"the query never answered {step['value']!r} within {timeout} s (last {value!r})")
            time.sleep(0.05)

    def do_child_start(self, step: dict[str, Any]) -> dict[str, Any]:
        child = Child(self.env.child_command, self.client_dsn(step, step["as"])[0], step.get("via") == "pgbouncer")
        self.children[step["as"]] = child
        return {"pid": child.pid}

    def do_child_lock(self, step: dict[str, Any]) -> dict[str, Any]:
        fence = int(self.children[step["child"]].ask(f"lock {self.key_arg(step['key'])} {step['ttl_ms']}"))
        return {"fence": fence, "fences": [fence], "term": fence}

    def do_child_signal(self, step: dict[str, Any]) -> dict[str, Any]:
        os.kill(self.children[step["child"]].pid, {"STOP": signal.SIGSTOP, "CONT": signal.SIGCONT}[step["signal"]])
        return {}

    def do_child_wait_lost(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.children[step["child"]].ask(f"wait_lost {step['timeout_ms']}") == "true"}

    def do_child_release(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.children[step["child"]].ask("release") == "true"}

    def do_child_quit(self, step: dict[str, Any]) -> dict[str, Any]:
        self.children.pop(step["child"]).quit()
        return {}

    # ---- client actions -------------------------------------------------------------------

    def client_dsn(self, step: dict[str, Any], name: str) -> tuple[str, str]:
        """The URL of a client or child, and its application_name."""
        via_pgbouncer = step.get("via") == "pgbouncer"
        base = self.env.pgbouncer_dsn if via_pgbouncer else self.env.dsn
        if base is None:
            raise Failure("no pgbouncer (DLOCK_CONFORMANCE_PGBOUNCER_DSN)")
        app = self.app_name(name)
        extra: dict[str, Any] = {"application_name": app}
        if step.get("role"):
            extra["user"] = step["role"]
        if step.get("offline"):
            extra.update(host="127.0.0.1", port="1", connect_timeout="2")
        return make_conninfo(base, **extra), app

    def do_client(self, step: dict[str, Any]) -> dict[str, Any]:
        dsn, app = self.client_dsn(step, step["as"])
        owner = self.resolve(step["owner"]) if "owner" in step else None
        client = self.adapter.client(
            dsn,
            pooler="transaction" if step.get("via") == "pgbouncer" else "session",
            driver_pool=step.get("pool") == "driver",
            pool_size=step.get("pool_size", 4),
            owner=owner,
        )
        self.clients.append(client)
        return {"handle": client, "app": app, "owner": self.adapter.owner(client)}

    def client_of(self, step: dict[str, Any]) -> Any:
        return self.bindings[step["client"]]["handle"]

    def lease_of(self, step: dict[str, Any], name: str = "lease") -> Any:
        return self.bindings[step[name]]["handle"]

    def do_close(self, step: dict[str, Any]) -> None:
        self.adapter.close(self.client_of(step))

    def lock_args(self, step: dict[str, Any]) -> dict[str, Any]:
        ttl = step.get("ttl_ms", 30000)
        wait = step.get("wait_ms", 0)
        return dict(
            key=self.key_arg(step.get("key")),
            ttl=None if ttl is None else ttl / 1000,
            wait=None if wait is None else wait / 1000,
            mode=step.get("mode", "exclusive"),
            permits=step.get("permits"),
            watchdog=step.get("watchdog", True),
            lock_delay=step.get("lock_delay_ms", 0) / 1000,
        )

    def do_lock(self, step: dict[str, Any]) -> dict[str, Any]:
        return lease_result(self.adapter, self.adapter.lock(self.client_of(step), **self.lock_args(step)))

    def do_lock_all(self, step: dict[str, Any]) -> dict[str, Any]:
        ttl, wait = step.get("ttl_ms", 30000), step.get("wait_ms", 0)
        lease = self.adapter.lock_all(
            self.client_of(step), self.keys_arg(step["keys"]), ttl / 1000, None if wait is None else wait / 1000
        )
        return lease_result(self.adapter, lease)

    def do_with_lock(self, step: dict[str, Any]) -> dict[str, Any]:
        def body(lease: Any) -> None:
            self.bindings[step["as"]] = lease_result(self.adapter, lease)
            for inner in step["steps"]:
                self.step(inner)

        self.adapter.with_lock(self.client_of(step), body=body, **self.lock_args(step))
        return {}

    def do_release(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.adapter.release(self.lease_of(step))}

    def do_renew(self, step: dict[str, Any]) -> dict[str, Any]:
        self.adapter.renew(self.lease_of(step))
        return {}

    def do_holds(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.adapter.holds(self.lease_of(step))}

    def do_is_held(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.adapter.is_held(self.lease_of(step))}

    def do_wait_lost(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.adapter.wait_lost(self.lease_of(step), step["timeout_ms"] / 1000)}

    def do_campaign(self, step: dict[str, Any]) -> dict[str, Any]:
        wait = step.get("wait_ms")
        lead = self.adapter.campaign(
            self.client_of(step), self.key_arg(step["election"]), self.resolve(step.get("info")),
            step.get("ttl_ms", 30000) / 1000, None if wait is None else wait / 1000,
        )
        return lease_result(self.adapter, lead)

    def do_resign(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.adapter.resign(self.lease_of(step))}

    def do_leader(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.adapter.leader(self.client_of(step), self.key_arg(step["election"]))}

    def do_observe(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"handle": self.adapter.observe(self.client_of(step), self.key_arg(step["election"]))}

    def do_observe_until(self, step: dict[str, Any]) -> dict[str, Any]:
        observer = self.bindings[step["observer"]]["handle"]
        deadline = time.monotonic() + step["timeout_ms"] / 1000
        seen = []
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise Failure(f"no leader like {step['leader']!r} within {step['timeout_ms']} ms; saw {seen!r}")
            try:
                leader = self.adapter.observe_next(observer, remaining)
            except TimeoutError:
                continue
            seen.append(leader)
            want = step["leader"]
            if (want is None and leader is None) or (want is not None and leader is not None and self.mismatch(want, leader, "leader") is None):
                return {"value": leader}

    def do_stop_observing(self, step: dict[str, Any]) -> dict[str, Any]:
        self.adapter.stop_observing(self.bindings[step["observer"]]["handle"])
        return {}

    def do_wait_free(self, step: dict[str, Any]) -> dict[str, Any]:
        timeout = step.get("timeout_ms")
        return {"value": self.adapter.wait_free(self.client_of(step), self.key_arg(step["key"]), None if timeout is None else timeout / 1000)}

    def do_force_release(self, step: dict[str, Any]) -> dict[str, Any]:
        return {"value": self.adapter.force_release(self.client_of(step), self.key_arg(step["key"]))}

    # ---- the end ----------------------------------------------------------------------------

    def cleanup(self) -> None:
        for child in self.children.values():
            child.kill()
        for _, futures in self.tasks.values():
            for future in futures:
                try:
                    future.result(timeout=STEP_LIMIT)
                except Exception:
                    pass
        for client in self.clients:
            try:
                self.adapter.close(client)
            except Exception:
                pass
        self.adapter.shutdown()
        for connection in self.sessions.values():
            connection.close()
        self.workers.shutdown(wait=False)


class SqlError(Exception):
    """An error of a ``sql`` step, with its SQLSTATE."""

    def __init__(self, error: psycopg.Error) -> None:
        super().__init__(str(error))
        self.sqlstate = error.sqlstate


def lease_result(adapter: Any, lease: Any) -> dict[str, Any]:
    fences = adapter.fences(lease)
    return {"handle": lease, "fence": fences[0], "fences": fences, "term": fences[0]}


class Child:
    """A child process of the runner's language, holding a lease (README: the child protocol)."""

    def __init__(self, command: list[str], dsn: str, behind_pgbouncer: bool) -> None:
        env = {**os.environ, "DLOCK_CONFORMANCE_CHILD_DSN": dsn}
        if behind_pgbouncer:
            env["DLOCK_CONFORMANCE_CHILD_POOLER"] = "transaction"
        self.process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1
        )
        self._lines: list[str] = []
        self._ready = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()
        hello = self._next()
        if not hello.startswith("ready "):
            raise Failure(f"the child said {hello!r} instead of ready")
        self.pid = int(hello.split()[1])

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._ready:
                self._lines.append(line.rstrip("\n"))
                self._ready.notify()
        with self._ready:
            self._lines.append("eof")
            self._ready.notify()

    def _next(self, timeout: float = 30.0) -> str:
        with self._ready:
            if not self._ready.wait_for(lambda: self._lines, timeout):
                raise Failure(f"the child did not answer within {timeout} s")
            return self._lines.pop(0)

    def ask(self, request: str) -> str:
        assert self.process.stdin is not None
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        answer = self._next().split(" ")
        if answer[0] == "ok":
            return answer[1]
        if answer[0] == "error":
            raise ChildError(answer[1], None if answer[2] == "-" else answer[2])
        raise Failure(f"the child answered {' '.join(answer)!r} to {request!r}")

    def quit(self) -> None:
        self.ask("quit")
        self.process.wait(timeout=10)

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGCONT)
            self.process.kill()
            self.process.wait()


class ChildError(Exception):
    """An error the child reported: its kind and SQLSTATE."""

    def __init__(self, kind: str, sqlstate: str | None) -> None:
        super().__init__(f"{kind} ({sqlstate})")
        self.kind = kind
        self.sqlstate = sqlstate


def load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        spec: dict[str, Any] = json.load(f)
    return spec

