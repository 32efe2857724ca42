package dev.dlock.client;

import java.time.Duration;
import java.time.format.DateTimeParseException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Durations written in annotations: {@code "250ms"}, {@code "30s"}, {@code "1.5m"}, ISO-8601. */
final class DurationText {
    private static final Pattern SHORT = Pattern.compile("\\s*(\\d+(?:\\.\\d+)?)\\s*(ms|s|m|h|d)\\s*");
    /** A wait without limit. */
    static final String FOREVER = "forever";

    private DurationText() {}

    /**
     * The duration {@code text} says.
     *
     * @throws IllegalArgumentException if it says none
     */
    static Duration parse(String what, String text) {
        Matcher m = SHORT.matcher(text);
        if (m.matches()) {
            double number = Double.parseDouble(m.group(1));
            double nanosPerUnit = switch (m.group(2)) {
                case "ms" -> 1e6;
                case "s" -> 1e9;
                case "m" -> 60e9;
                case "h" -> 3600e9;
                default -> 86400e9;
            };
            double nanos = number * nanosPerUnit;
            if (nanos > Long.MAX_VALUE) {
                throw new IllegalArgumentException("dlock: " + what + " \"" + text + "\" is too long");
            }
            return Duration.ofNanos((long) nanos);
        }
        try {
            return Duration.parse(text.strip());
        } catch (DateTimeParseException e) {
            throw new IllegalArgumentException("dlock: " + what + " \"" + text
                    + "\" is not a duration (\"500ms\", \"30s\", \"5m\", \"1h\", \"1d\" or ISO-8601 such as \"PT30S\")", e);
        }
    }
}
