package dev.dlock.client;

/**
 * Anything that went wrong taking, keeping or giving back a lock, except a refused argument
 * ({@link InvalidArgumentException}, an {@link IllegalArgumentException}).
 *
 * <p>Those that come from the server keep its SQLSTATE ({@link #sqlState()}), its detail and hint,
 * and the driver's {@link java.sql.SQLException} as the cause, so callers match on the condition,
 * not on the text.
 */
public abstract class DlockException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final String sqlState;
    private final String detail;
    private final String hint;

    /**
     * An exception with the server's fields (any of them may be {@code null}).
     *
     * @param message what went wrong
     * @param sqlState the five-character SQLSTATE, or {@code null} when no server error stands behind it
     * @param detail the server's DETAIL, or {@code null}
     * @param hint the server's HINT, or {@code null}
     * @param cause the driver's exception, or {@code null}
     */
    protected DlockException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, cause);
        this.sqlState = sqlState;
        this.detail = detail;
        this.hint = hint;
    }

    /**
     * The SQLSTATE of the server error behind this exception.
     *
     * @return the five-character code, or {@code null} for conditions that are not server errors
     */
    public String sqlState() {
        return sqlState;
    }

    /**
     * The server's DETAIL line.
     *
     * @return the detail, or {@code null}
     */
    public String detail() {
        return detail;
    }

    /**
     * The server's HINT line.
     *
     * @return the hint, or {@code null}
     */
    public String hint() {
        return hint;
    }
}
