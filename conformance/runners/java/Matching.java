package dev.dlock.conformance;

import java.math.BigDecimal;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/** How the suite compares values: numbers as numbers (64-bit integers exactly), lists element by
 *  element, objects field by field. */
final class Matching {
    private Matching() {}

    /** A value read from the server, as a scenario's JSON would hold it. */
    static Object plain(Object value) {
        if (value instanceof Integer || value instanceof Short || value instanceof Byte) {
            return ((Number) value).longValue();
        }
        if (value instanceof BigDecimal d) {
            return d.scale() <= 0 ? (Object) d.longValueExact() : (Object) d.doubleValue();
        }
        if (value instanceof Float f) {
            return f.doubleValue();
        }
        return value;
    }

    private static boolean integral(Object value) {
        return value instanceof Long || value instanceof Integer || value instanceof Short || value instanceof Byte;
    }

    /** Compares two numbers: exactly when both are integers. */
    private static int compare(Number a, Number b) {
        if (integral(a) && integral(b)) {
            return Long.compare(a.longValue(), b.longValue());
        }
        return Double.compare(a.doubleValue(), b.doubleValue());
    }

    static boolean same(Object want, Object actual) {
        if (want instanceof Number a && actual instanceof Number b) {
            return compare(a, b) == 0;
        }
        if (want instanceof List<?> a && actual instanceof List<?> b) {
            if (a.size() != b.size()) {
                return false;
            }
            for (int i = 0; i < a.size(); i++) {
                if (!same(a.get(i), b.get(i))) {
                    return false;
                }
            }
            return true;
        }
        if (want instanceof Map<?, ?> a && actual instanceof Map<?, ?> b) {
            if (!a.keySet().equals(b.keySet())) {
                return false;
            }
            for (Object k : a.keySet()) {
                if (!same(a.get(k), b.get(k))) {
                    return false;
                }
            }
            return true;
        }
        return Objects.equals(want, actual);
    }

    /** Whether {@code actual} compares with {@code want} as the operator says. */
    static boolean holds(String op, Object actual, Object want) {
        switch (op) {
            case "$any":
                return true;
            case "$ne":
                return !same(want, actual);
            case "$len":
                int length = actual instanceof List<?> l ? l.size() : actual instanceof String s ? s.length() : -1;
                return want instanceof Number n && length == n.longValue();
            default:
                int order;
                if (actual instanceof Number a && want instanceof Number w) {
                    order = compare(a, w);
                } else if (actual instanceof String a && want instanceof String w) {
                    order = a.compareTo(w);
                } else {
                    return false;
                }
                return switch (op) {
                    case "$gt" -> order > 0;
                    case "$ge" -> order >= 0;
                    case "$lt" -> order < 0;
                    case "$le" -> order <= 0;
                    default -> false;
                };
        }
    }

    /** A value as the failure messages show it (handles as their class names). */
    static String show(Object value) {
        if (value instanceof Map<?, ?> map) {
            Map<Object, Object> shown = new LinkedHashMap<>();
            map.forEach((k, v) -> shown.put(k, "handle".equals(k) && v != null ? v.getClass().getSimpleName() : v));
            return shown.toString();
        }
        if (value instanceof List<?> list) {
            List<String> shown = new ArrayList<>();
            list.forEach(v -> shown.add(show(v)));
            return shown.toString();
        }
        return value instanceof String s ? "'" + s + "'" : String.valueOf(value);
    }
}
