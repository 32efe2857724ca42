package dev.dlock.client;

/**
 * An argument the contract refuses, with the SQLSTATE the server answers for it (22023, 22004
 * for a missing one, 22021 for text PostgreSQL cannot store). Thrown by the client before any
 * round trip for what it can check (the limits of {@code core/src/limits.rs}, in bytes), and for
 * what only the server knows ({@code dlock.max_ttl}, a semaphore's size) when it answers so.
 *
 * <p>It is an {@link IllegalArgumentException}, as Java callers expect of a refused argument; a
 * {@code null} where a value is required is a {@link NullPointerException} instead.
 */
public final class InvalidArgumentException extends IllegalArgumentException {
    private static final long serialVersionUID = 1L;

    private final String sqlState;
    private final String detail;

    InvalidArgumentException(String message, String sqlState, String detail, Throwable cause) {
        super(message, cause);
        this.sqlState = sqlState;
        this.detail = detail;
    }

    /**
     * The SQLSTATE the server answers (or would answer) for this argument.
     *
     * @return 22023, 22004 or 22021
     */
    public String sqlState() {
        return sqlState;
    }

    /**
     * The server's DETAIL line, or where the check was made.
     *
     * @return the detail, or {@code null}
     */
    public String detail() {
        return detail;
    }
}
