package dev.dlock.conformance;

import dev.dlock.client.Dlock;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * One scenario being run (conformance/README.md): its steps, in the foreground or as background
 * tasks, the runner's own actions and the client actions, which go to the {@link Adapter}. What
 * the values and expectations mean is {@link Values}'; the runner's sessions are {@link Sessions}'.
 */
final class Scenario {
    /** How long one step may take before the scenario fails (never a measurement). */
    static final long STEP_LIMIT_SECONDS = 60;
    /** The error kinds of SQLSTATEs a {@code sql} step may expect. */
    private static final Map<String, String> SQLSTATE_KINDS = Map.of(
            "22023", "InvalidArgument", "22004", "InvalidArgument", "0A000", "ModeConflict",
            "42501", "PermissionDenied", "55006", "HeldHere");

    /** A step did not do what the scenario says. */
    static final class Failure extends RuntimeException {
        private static final long serialVersionUID = 1L;

        Failure(String message) {
            super(message);
        }
    }

    /** What one step did: its result fields, or the kind of error it failed with. */
    static final class Outcome {
        Map<String, Object> result = new LinkedHashMap<>();
        String[] error; // kind, sqlstate, message
        double elapsedMs;
    }

    private record Task(Map<String, Object> step, List<Future<Outcome>> futures) {}

    private final Map<String, Object> spec;
    private final Run.Environment env;
    private final Adapter adapter = new Adapter();
    private final Map<String, Task> tasks = new LinkedHashMap<>();
    private final List<Dlock> clients = java.util.Collections.synchronizedList(new ArrayList<>());
    private final Map<String, Child> children = new LinkedHashMap<>();
    private final ExecutorService workers = Executors.newFixedThreadPool(64, work -> {
        Thread thread = new Thread(work, "step");
        thread.setDaemon(true);
        return thread;
    });

    private final Values values;
    private final Sessions sessions;

    Scenario(String name, Map<String, Object> spec, Run.Environment env) {
        this.spec = spec;
        this.env = env;
        this.values = new Values(env.runId(), name);
        this.sessions = new Sessions(env);
    }

    // ---- running --------------------------------------------------------------------------

    @SuppressWarnings("unchecked")
    void run() {
        try {
            List<Object> steps = (List<Object>) spec.get("steps");
            for (int i = 0; i < steps.size(); i++) {
                Map<String, Object> step = (Map<String, Object>) steps.get(i);
                try {
                    step(step);
                } catch (Failure e) {
                    throw new Failure("step " + (i + 1) + " (" + step.get("do") + "): " + e.getMessage());
                }
            }
        } finally {
            cleanup();
        }
    }

    void step(Map<String, Object> step) {
        if (step.containsKey("background")) {
            int count = ((Number) step.getOrDefault("count", 1L)).intValue();
            List<Future<Outcome>> futures = new ArrayList<>();
            for (int i = 0; i < count; i++) {
                futures.add(workers.submit(timed(step)));
            }
            tasks.put((String) step.get("background"), new Task(step, futures));
            return;
        }
        if ("join".equals(step.get("do"))) {
            join(step);
            return;
        }
        Future<Outcome> future = workers.submit(timed(step));
        finish(step, result(future, STEP_LIMIT_SECONDS * 1000, "did not end within " + STEP_LIMIT_SECONDS + " s"));
    }

    private static Outcome result(Future<Outcome> future, long millis, String late) {
        try {
            return future.get(Math.max(millis, 0), TimeUnit.MILLISECONDS);
        } catch (TimeoutException e) {
            throw new Failure(late);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new Failure("interrupted");
        } catch (ExecutionException e) {
            if (e.getCause() instanceof Failure f) {
                throw f;
            }
            throw new Failure("the runner failed: " + e.getCause());
        }
    }

    void finish(Map<String, Object> step, Outcome outcome) {
        values.check(step, outcome);
        if (step.containsKey("as") && outcome.error == null) {
            values.bindings.put((String) step.get("as"), outcome.result);
        }
    }

    void join(Map<String, Object> step) {
        Task task = tasks.remove((String) step.get("task"));
        if (task == null) {
            throw new Failure("no task '" + step.get("task") + "'");
        }
        long timeout = ((Number) step.getOrDefault("timeout_ms", 30000L)).longValue();
        long deadline = System.nanoTime() + timeout * 1_000_000;
        List<Outcome> outcomes = new ArrayList<>();
        for (Future<Outcome> future : task.futures()) {
            outcomes.add(result(future, (deadline - System.nanoTime()) / 1_000_000,
                    "task '" + step.get("task") + "' had not ended within " + timeout + " ms"));
        }
        for (Outcome outcome : outcomes) {
            if (task.futures().size() == 1) {
                finish(task.step(), outcome);
            } else {
                values.check(task.step(), outcome);
            }
        }
    }

    Callable<Outcome> timed(Map<String, Object> step) {
        return () -> {
            long started = System.nanoTime();
            Outcome outcome = new Outcome();
            try {
                Map<String, Object> result = perform(step);
                if (result != null) {
                    outcome.result = result;
                }
            } catch (Failure e) {
                throw e;
            } catch (Throwable e) {
                String[] kind;
                if (e instanceof Child.ChildError c) {
                    kind = new String[] {c.kind, c.sqlState};
                } else if (e instanceof Sessions.SqlError s) {
                    kind = new String[] {SQLSTATE_KINDS.getOrDefault(s.sqlState == null ? "" : s.sqlState, "Server"), s.sqlState};
                } else {
                    kind = Kinds.classify(e);
                }
                if (kind == null) {
                    kind = new String[] {"Unexpected", null};
                }
                outcome.error = new String[] {kind[0], kind[1], e.getClass().getSimpleName() + ": " + e.getMessage()};
            }
            outcome.elapsedMs = (System.nanoTime() - started) / 1e6;
            return outcome;
        };
    }

    private Map<String, Object> perform(Map<String, Object> step) throws Exception {
        return switch ((String) step.get("do")) {
            case "session" -> {
                sessions.open((String) step.get("as"), (String) step.get("role"));
                yield Map.of();
            }
            case "sql" -> doSql(step);
            case "wait_until" -> doWaitUntil(step);
            case "child_start" -> doChildStart(step);
            case "child_lock" -> doChildLock(step);
            case "child_signal" -> doChildSignal(step);
            case "child_wait_lost" -> value(child(step).ask("wait_lost " + number(step, "timeout_ms")).equals("true"));
            case "child_release" -> value(child(step).ask("release").equals("true"));
            case "child_quit" -> doChildQuit(step);
            case "client" -> doClient(step);
            case "close" -> doClose(step);
            case "lock" -> leaseResult(adapter.lock(client(step), lockArgs(step)));
            case "lock_all" -> leaseResult(adapter.lockAll(client(step), values.keysArg(step.get("keys")),
                    millis(step, "ttl_ms", 30000L), millis(step, "wait_ms", 0L)));
            case "with_lock" -> doWithLock(step);
            case "release" -> value(adapter.release(handle(step, "lease")));
            case "renew" -> {
                adapter.renew(handle(step, "lease"));
                yield Map.of();
            }
            case "holds" -> value(adapter.holds(handle(step, "lease")));
            case "is_held" -> value(adapter.isHeld(handle(step, "lease")));
            case "wait_lost" -> value(adapter.waitLost(handle(step, "lease"), number(step, "timeout_ms")));
            case "campaign" -> leaseResult(adapter.campaign(client(step), (String) values.keyArg(step.get("election")),
                    (String) values.resolve(step.get("info")), millis(step, "ttl_ms", 30000L), millis(step, "wait_ms", null)));
            case "resign" -> value(adapter.release(handle(step, "lease")));
            case "leader" -> value(adapter.leader(client(step), (String) values.keyArg(step.get("election"))));
            case "observe" -> Map.of("handle", adapter.observe(client(step), (String) values.keyArg(step.get("election"))));
            case "observe_until" -> doObserveUntil(step);
            case "stop_observing" -> {
                ((Adapter.Observation) handle(step, "observer")).observer().close();
                yield Map.of();
            }
            case "wait_free" -> value(adapter.waitFree(client(step), (String) values.keyArg(step.get("key")),
                    millis(step, "timeout_ms", null)));
            case "force_release" -> value(client(step).forceRelease((String) values.keyArg(step.get("key"))));
            default -> throw new Failure("unknown action '" + step.get("do") + "'");
        };
    }

    private static Map<String, Object> value(Object value) {
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("value", value);
        return result;
    }

    private static long number(Map<String, Object> step, String name) {
        return ((Number) step.get(name)).longValue();
    }

    /** A duration argument in milliseconds: the default when absent, {@code null} when null. */
    private static Duration millis(Map<String, Object> step, String name, Long otherwise) {
        Object value = step.containsKey(name) ? step.get(name) : otherwise;
        return value == null ? null : Duration.ofMillis(((Number) value).longValue());
    }

    // ---- the runner's actions -------------------------------------------------------------

    private List<List<Object>> query(Map<String, Object> step) throws SQLException {
        List<?> params = step.get("params") == null ? List.of() : (List<?>) values.resolve(step.get("params"));
        return sessions.query((String) step.get("session"), (String) step.get("query"), params);
    }

    private Map<String, Object> doSql(Map<String, Object> step) throws SQLException {
        List<List<Object>> rows = query(step);
        Map<String, Object> result = value(rows.isEmpty() ? null : rows.get(0).get(0));
        result.put("rows", rows);
        return result;
    }

    private Map<String, Object> doWaitUntil(Map<String, Object> step) throws SQLException, InterruptedException {
        long timeout = ((Number) step.getOrDefault("timeout_ms", 10000L)).longValue();
        long deadline = System.nanoTime() + timeout * 1_000_000;
        while (true) {
            List<List<Object>> rows = query(step);
            Object value = rows.isEmpty() ? null : rows.get(0).get(0);
            if (values.mismatch(step.get("value"), value, "value") == null) {
                return value(value);
            }
            if (System.nanoTime() - deadline >= 0) {
                throw new Failure("the query never answered " + Matching.show(step.get("value")) + " within "
                        + timeout + " ms (last " + Matching.show(value) + ")");
            }
            Thread.sleep(50);
        }
    }

    private Child child(Map<String, Object> step) {
        Child child = children.get((String) step.get("child"));
        if (child == null) {
            throw new Failure("no child '" + step.get("child") + "'");
        }
        return child;
    }

    private Map<String, Object> doChildStart(Map<String, Object> step) throws Exception {
        String as = (String) step.get("as");
        Child child = new Child(clientUrl(step, as).libpq, "pgbouncer".equals(step.get("via")));
        synchronized (children) {
            children.put(as, child);
        }
        return Map.of("pid", child.pid);
    }

    private Map<String, Object> doChildLock(Map<String, Object> step) throws Exception {
        long fence = Long.parseLong(child(step).ask("lock " + values.keyArg(step.get("key")) + " " + number(step, "ttl_ms")));
        return fenced(null, List.of(fence));
    }

    private Map<String, Object> doChildSignal(Map<String, Object> step) throws Exception {
        String signal = (String) step.get("signal");
        if (!signal.equals("STOP") && !signal.equals("CONT")) {
            throw new Failure("no signal " + signal);
        }
        child(step).signal(signal);
        return Map.of();
    }

    private Map<String, Object> doChildQuit(Map<String, Object> step) throws Exception {
        Child child;
        synchronized (children) {
            child = children.remove((String) step.get("child"));
        }
        child.quit();
        return Map.of();
    }

    // ---- client actions -------------------------------------------------------------------

    /** The URL of a client or child (libpq for a child, pgjdbc's for a client), and its app name. */
    private record ClientUrl(String libpq, String jdbc, String app) {}

    private ClientUrl clientUrl(Map<String, Object> step, String what) {
        boolean viaPgbouncer = "pgbouncer".equals(step.get("via"));
        String base = viaPgbouncer ? env.pgbouncerDsn() : env.dsn();
        if (base == null) {
            throw new Failure("no pgbouncer (DLOCK_CONFORMANCE_PGBOUNCER_DSN)");
        }
        String app = sessions.appName(what);
        Urls url = Urls.parse(base).withParam("application_name", app);
        if (step.get("role") != null) {
            url = url.withUser((String) step.get("role"));
        }
        if (Boolean.TRUE.equals(step.get("offline"))) {
            url = url.offline();
        }
        String libpq = base.contains("?") ? base + "&application_name=" + app : base + "?application_name=" + app;
        return new ClientUrl(libpq, url.jdbc(), app);
    }

    private Map<String, Object> doClient(Map<String, Object> step) {
        ClientUrl url = clientUrl(step, (String) step.get("as"));
        String owner = step.containsKey("owner") ? (String) values.resolve(step.get("owner")) : null;
        Dlock client = adapter.client(url.jdbc, "pgbouncer".equals(step.get("via")), "driver".equals(step.get("pool")),
                ((Number) step.getOrDefault("pool_size", 4L)).intValue(), owner);
        clients.add(client);
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("handle", client);
        result.put("app", url.app);
        result.put("owner", client.owner());
        return result;
    }

    private Dlock client(Map<String, Object> step) {
        return (Dlock) handle(step, "client");
    }

    private Object handle(Map<String, Object> step, String field) {
        Map<String, Object> bound = values.bindings.get((String) step.get(field));
        if (bound == null) {
            throw new Failure("nothing is bound to '" + step.get(field) + "'");
        }
        return bound.get("handle");
    }

    private Map<String, Object> doClose(Map<String, Object> step) {
        client(step).close();
        return Map.of();
    }

    private Adapter.LockArgs lockArgs(Map<String, Object> step) {
        Object permits = step.get("permits");
        return new Adapter.LockArgs((String) values.keyArg(step.get("key")), millis(step, "ttl_ms", 30000L),
                millis(step, "wait_ms", 0L), "shared".equals(step.getOrDefault("mode", "exclusive")),
                permits == null ? null : ((Number) permits).intValue(),
                !Boolean.FALSE.equals(step.getOrDefault("watchdog", true)), millis(step, "lock_delay_ms", 0L));
    }

    private static Map<String, Object> fenced(Object handle, List<Long> fences) {
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("handle", handle);
        result.put("fence", fences.get(0));
        result.put("fences", new ArrayList<Object>(fences));
        result.put("term", fences.get(0));
        return result;
    }

    private static Map<String, Object> leaseResult(Object lease) {
        return fenced(lease, Adapter.fences(lease));
    }

    @SuppressWarnings("unchecked")
    private Map<String, Object> doWithLock(Map<String, Object> step) {
        adapter.withLock(client(step), lockArgs(step), lease -> {
            values.bindings.put((String) step.get("as"), leaseResult(lease));
            for (Object inner : (List<Object>) step.get("steps")) {
                step((Map<String, Object>) inner);
            }
        });
        return Map.of();
    }

    private Map<String, Object> doObserveUntil(Map<String, Object> step) throws InterruptedException {
        Adapter.Observation observation = (Adapter.Observation) handle(step, "observer");
        long timeout = number(step, "timeout_ms");
        long deadline = System.nanoTime() + timeout * 1_000_000;
        List<Object> seen = new ArrayList<>();
        Object want = step.get("leader");
        while (true) {
            long remaining = (deadline - System.nanoTime()) / 1_000_000;
            if (remaining <= 0) {
                throw new Failure("no leader like " + Matching.show(want) + " within " + timeout + " ms; saw " + Matching.show(seen));
            }
            Map<String, Object> leader;
            try {
                leader = adapter.observeNext(observation, remaining);
            } catch (TimeoutException e) {
                continue;
            }
            seen.add(leader);
            if ((want == null && leader == null) || (want != null && leader != null && values.mismatch(want, leader, "leader") == null)) {
                return value(leader);
            }
        }
    }

    // ---- the end --------------------------------------------------------------------------

    private void cleanup() {
        synchronized (children) {
            children.values().forEach(Child::kill);
            children.clear();
        }
        for (Task task : tasks.values()) {
            for (Future<Outcome> future : task.futures()) {
                try {
                    future.get(STEP_LIMIT_SECONDS, TimeUnit.SECONDS);
                } catch (Exception e) {
                    // Its outcome no longer matters.
                }
            }
        }
        for (Dlock client : new ArrayList<>(clients)) {
            try {
                client.close();
            } catch (RuntimeException e) {
                // Closing is best effort.
            }
        }
        adapter.shutdown();
        sessions.close();
        workers.shutdownNow();
    }
}
