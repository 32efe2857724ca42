package dev.dlock.client;

import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * Argument checks made before anything is sent, with the limits of the contract
 * ({@code core/src/limits.rs} and {@code core/src/args.rs}): a call must not wait behind the
 * client's line for a key only to be refused. A missing value is a {@link NullPointerException};
 * a refused one an {@link InvalidArgumentException} with the SQLSTATE the server would answer.
 * {@code dlock.max_ttl} is the server's alone to check.
 */
final class Args {
    /** Longest key, in bytes (UTF-8), not characters. */
    static final int MAX_KEY_BYTES = 1024;
    /** Longest owner string, in bytes. */
    static final int MAX_OWNER_BYTES = 256;
    /** Most keys of one multi-key lock. */
    static final int MAX_KEYS_PER_CALL = 64;
    /** Longest election {@code info}, in bytes. */
    static final int MAX_INFO_BYTES = 1024;
    /** Longer durations are sent as this (about 285,000 years): PostgreSQL's intervals end not far
     *  beyond, and nothing real waits or lives that long (the Rust client's {@code MAX_DURATION}). */
    static final double MAX_SECONDS = 9_000_000_000_000.0;
    /** The server's unit: a ttl must be at least this. */
    static final Duration MICROSECOND = Duration.ofNanos(1_000);

    private Args() {}

    static InvalidArgumentException refuse(String message, String sqlState) {
        return new InvalidArgumentException("dlock: " + message, sqlState, "checked by the client before sending", null);
    }

    static InvalidArgumentException refuse(String message) {
        return refuse(message, "22023");
    }

    /** A key, owner or election name: non-empty, at most {@code maxBytes} of UTF-8, storable as text. */
    static String text(String what, String value, int maxBytes) {
        Objects.requireNonNull(value, () -> "dlock: " + what + " must not be null");
        if (value.isEmpty()) {
            throw refuse(what + " must not be empty");
        }
        long size = utf8Bytes(what, value);
        if (size > maxBytes) {
            throw refuse(what + " is " + size + " bytes long, the limit is " + maxBytes + " bytes");
        }
        return value;
    }

    /** The UTF-8 length of {@code value}; text PostgreSQL cannot store (NUL, a lone surrogate) is 22021. */
    private static long utf8Bytes(String what, String value) {
        long size = 0;
        for (int i = 0; i < value.length(); i++) {
            char c = value.charAt(i);
            if (c == 0) {
                throw refuse(what + " must not contain NUL characters", "22021");
            } else if (c < 0x80) {
                size += 1;
            } else if (c < 0x800) {
                size += 2;
            } else if (Character.isHighSurrogate(c) && i + 1 < value.length()
                    && Character.isLowSurrogate(value.charAt(i + 1))) {
                size += 4;
                i++;
            } else if (Character.isSurrogate(c)) {
                throw refuse(what + " is not valid UTF-8 (a lone surrogate)", "22021");
            } else {
                size += 3;
            }
        }
        return size;
    }

    static String key(String value) {
        return text("key", value, MAX_KEY_BYTES);
    }

    static String owner(String value) {
        return text("owner", value, MAX_OWNER_BYTES);
    }

    /** An election's {@code info}: none, or at most 1024 bytes. */
    static String info(String value) {
        if (value == null) {
            return null;
        }
        long size = value.isEmpty() ? 0 : utf8Bytes("info", value);
        if (size > MAX_INFO_BYTES) {
            throw refuse("info is " + size + " bytes long, the limit is " + MAX_INFO_BYTES + " bytes");
        }
        return value;
    }

    /** The keys of a multi-key lock: 1 to 64 valid keys, none twice. */
    static List<String> keys(Collection<String> value) {
        Objects.requireNonNull(value, "dlock: keys must not be null");
        List<String> checked = new ArrayList<>(value.size());
        for (String k : value) {
            checked.add(key(k));
        }
        if (checked.isEmpty()) {
            throw refuse("keys must not be empty");
        }
        if (checked.size() > MAX_KEYS_PER_CALL) {
            throw refuse("keys has " + checked.size() + " elements, the limit is " + MAX_KEYS_PER_CALL);
        }
        Set<String> seen = new HashSet<>();
        for (String k : checked) {
            if (!seen.add(k)) {
                throw refuse("keys lists '" + k + "' twice");
            }
        }
        return List.copyOf(checked);
    }

    /** A duration that must be positive (at least a microsecond, the server's unit): a ttl. */
    static Duration positive(String what, Duration value) {
        Objects.requireNonNull(value, () -> "dlock: " + what + " must not be null");
        if (value.compareTo(MICROSECOND) < 0) {
            throw refuse(what + " must be positive (at least 1 microsecond), not " + value);
        }
        return value;
    }

    /** A duration that may be zero: a wait, a lock-delay. */
    static Duration notNegative(String what, Duration value) {
        Objects.requireNonNull(value, () -> "dlock: " + what + " must not be null");
        if (value.isNegative()) {
            throw refuse(what + " must not be negative, not " + value);
        }
        return value;
    }

    /** A semaphore's size: 1 and up. */
    static int permits(int value) {
        if (value < 1) {
            throw refuse("a semaphore needs at least 1 permit (max_holders >= 1), not " + value);
        }
        return value;
    }

    /** A checked duration as the server takes it: seconds, huge ones clamped. */
    static double seconds(Duration value) {
        double seconds = value.getSeconds() + value.getNano() / 1e9;
        return Math.min(seconds, MAX_SECONDS);
    }
}
