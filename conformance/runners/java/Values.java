package dev.dlock.conformance;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The Values and Expectations of conformance/README.md: what a step's arguments and expected
 * values stand for (bindings, namespaced keys, repeats, sequences), and whether an outcome matches.
 */
final class Values {
    private static final Set<String> OPERATORS = Set.of("$gt", "$ge", "$lt", "$le", "$ne", "$len", "$any");

    private final String prefix;
    /** What steps bound with {@code as}, by name. */
    final Map<String, Map<String, Object>> bindings = new java.util.concurrent.ConcurrentHashMap<>();

    Values(String runId, String scenario) {
        this.prefix = "conf/" + runId + "/" + scenario + "/";
    }

    /** The namespaced key {@code conf/<run id>/<scenario>/<name>}. */
    String key(String key) {
        return prefix + key;
    }

    @SuppressWarnings("unchecked")
    Object resolve(Object value) {
        if (value instanceof String s) {
            if (s.startsWith("$$")) {
                return s.substring(1);
            }
            if (s.startsWith("$")) {
                String[] path = s.substring(1).split("\\.");
                Object bound = bindings.get(path[0]);
                if (bound == null) {
                    throw new Scenario.Failure("nothing is bound to '" + path[0] + "'");
                }
                for (int i = 1; i < path.length; i++) {
                    bound = ((Map<String, Object>) bound).get(path[i]);
                }
                return bound;
            }
            return s;
        }
        if (value instanceof List<?> list) {
            List<Object> resolved = new ArrayList<>();
            for (Object v : list) {
                resolved.add(resolve(v));
            }
            return resolved;
        }
        if (value instanceof Map<?, ?> map) {
            Set<?> keys = map.keySet();
            if (keys.equals(Set.of("key"))) {
                return key((String) map.get("key"));
            }
            if (keys.equals(Set.of("raw"))) {
                return map.get("raw");
            }
            if (keys.equals(Set.of("repeat", "times"))) {
                return ((String) map.get("repeat")).repeat(((Number) map.get("times")).intValue());
            }
            if (keys.equals(Set.of("sequence", "count"))) {
                List<Object> sequence = new ArrayList<>();
                for (int i = 0; i < ((Number) map.get("count")).intValue(); i++) {
                    sequence.add(key(map.get("sequence") + Integer.toString(i)));
                }
                return sequence;
            }
            Map<String, Object> resolved = new LinkedHashMap<>();
            for (Map.Entry<?, ?> e : map.entrySet()) {
                resolved.put((String) e.getKey(), resolve(e.getValue()));
            }
            return resolved;
        }
        return value;
    }

    Object keyArg(Object value) {
        return value instanceof String s && !s.startsWith("$") ? key(s) : resolve(value);
    }

    @SuppressWarnings("unchecked")
    List<String> keysArg(Object value) {
        if (value instanceof List<?> list) {
            List<String> keys = new ArrayList<>();
            for (Object v : list) {
                keys.add((String) keyArg(v));
            }
            return keys;
        }
        return (List<String>) resolve(value);
    }

    String mismatch(Object expected, Object actual, String where) {
        if (expected instanceof Map<?, ?> map && !map.isEmpty() && OPERATORS.containsAll(map.keySet())) {
            for (Map.Entry<?, ?> e : map.entrySet()) {
                Object want = resolve(e.getValue());
                if (!Matching.holds((String) e.getKey(), actual, want)) {
                    return where + ": expected " + e.getKey() + " " + Matching.show(want) + ", got " + Matching.show(actual);
                }
            }
            return null;
        }
        if (expected instanceof Map<?, ?> map
                && map.keySet().stream().noneMatch(k -> Set.of("key", "raw", "repeat", "sequence").contains(k))) {
            if (!(actual instanceof Map<?, ?> got)) {
                return where + ": expected an object like " + Matching.show(expected) + ", got " + Matching.show(actual);
            }
            for (Map.Entry<?, ?> e : map.entrySet()) {
                String problem = mismatch(e.getValue(), got.get(e.getKey()), where + "." + e.getKey());
                if (problem != null) {
                    return problem;
                }
            }
            return null;
        }
        Object want = resolve(expected);
        if (want instanceof List<?> wants && actual instanceof List<?> got && wants.size() == got.size()) {
            for (int i = 0; i < wants.size(); i++) {
                String problem = mismatch(wants.get(i), got.get(i), where + "[" + i + "]");
                if (problem != null) {
                    return problem;
                }
            }
            return null;
        }
        return Matching.same(want, actual) ? null
                : where + ": expected " + Matching.show(want) + ", got " + Matching.show(actual);
    }

    @SuppressWarnings("unchecked")
    void check(Map<String, Object> step, Scenario.Outcome outcome) {
        Map<String, Object> expect = (Map<String, Object>) step.getOrDefault("expect", Map.of());
        if (outcome.error != null && !expect.containsKey("error")) {
            throw new Scenario.Failure("failed with " + outcome.error[0] + " (SQLSTATE " + outcome.error[1] + "): " + outcome.error[2]);
        }
        if (expect.containsKey("error")) {
            if (outcome.error == null) {
                throw new Scenario.Failure("expected " + expect.get("error") + ", but it succeeded with " + Matching.show(outcome.result));
            }
            if (!expect.get("error").equals(outcome.error[0])) {
                throw new Scenario.Failure("expected " + expect.get("error") + ", got " + outcome.error[0] + " (SQLSTATE "
                        + outcome.error[1] + "): " + outcome.error[2]);
            }
            if (expect.containsKey("sqlstate") && !expect.get("sqlstate").equals(outcome.error[1])) {
                throw new Scenario.Failure("expected SQLSTATE " + expect.get("sqlstate") + ", got " + outcome.error[1] + ": "
                        + outcome.error[2]);
            }
        }
        Map<String, Object> fields = new LinkedHashMap<>(outcome.result);
        fields.put("elapsed_ms", outcome.elapsedMs);
        for (Map.Entry<String, Object> e : expect.entrySet()) {
            if (e.getKey().equals("error") || e.getKey().equals("sqlstate")) {
                continue;
            }
            String problem = mismatch(e.getValue(), fields.get(e.getKey()), e.getKey());
            if (problem != null) {
                throw new Scenario.Failure(problem);
            }
        }
    }
}
