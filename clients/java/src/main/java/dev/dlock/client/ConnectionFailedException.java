package dev.dlock.client;

/**
 * No usable connection: connecting, the pool, or a connection that broke mid-call (SQLSTATE
 * classes 08, 28 and 57P, or none). Retrying later may work.
 */
public final class ConnectionFailedException extends DlockException {
    private static final long serialVersionUID = 1L;

    ConnectionFailedException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}
