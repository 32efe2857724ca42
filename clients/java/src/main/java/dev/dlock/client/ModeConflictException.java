package dev.dlock.client;

/**
 * The owner holds the key in the other mode (SQLSTATE 0A000): the contract never upgrades or
 * downgrades a lease silently.
 */
public final class ModeConflictException extends DlockException {
    private static final long serialVersionUID = 1L;

    ModeConflictException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}
