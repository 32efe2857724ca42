package dev.dlock.conformance;

import dev.dlock.client.DlockException;
import dev.dlock.client.HeldHereException;
import dev.dlock.client.InvalidArgumentException;
import dev.dlock.client.LeaseLostException;
import dev.dlock.client.ModeConflictException;
import dev.dlock.client.NotAcquiredException;
import dev.dlock.client.PermissionDeniedException;
import dev.dlock.client.ServerException;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeoutException;

/** The scenarios' error kinds of the client's exceptions (the most specific first). */
final class Kinds {
    private static final List<Map.Entry<Class<? extends Throwable>, String>> KINDS = List.of(
            Map.entry(NotAcquiredException.class, "NotAcquired"),
            Map.entry(LeaseLostException.class, "LeaseLost"),
            Map.entry(InvalidArgumentException.class, "InvalidArgument"),
            Map.entry(ModeConflictException.class, "ModeConflict"),
            Map.entry(PermissionDeniedException.class, "PermissionDenied"),
            Map.entry(HeldHereException.class, "HeldHere"),
            Map.entry(UnsupportedOperationException.class, "Unsupported"),
            // Java's types allow a null where a key belongs: refused as a missing argument.
            Map.entry(NullPointerException.class, "WrongType"),
            Map.entry(TimeoutException.class, "Timeout"),
            Map.entry(ServerException.class, "Server"),
            // A refused value without a SQLSTATE (a pool size, a duration's text).
            Map.entry(IllegalArgumentException.class, "InvalidArgument"));

    private Kinds() {}

    /** {@code [kind, sqlstate or null]}, or null if the error is none of the scenarios'. */
    static String[] classify(Throwable error) {
        for (Map.Entry<Class<? extends Throwable>, String> kind : KINDS) {
            if (kind.getKey().isInstance(error)) {
                return new String[] {kind.getValue(), sqlState(error)};
            }
        }
        return null;
    }

    static String sqlState(Throwable error) {
        if (error instanceof DlockException d) {
            return d.sqlState();
        }
        if (error instanceof InvalidArgumentException i) {
            return i.sqlState();
        }
        return null;
    }
}
