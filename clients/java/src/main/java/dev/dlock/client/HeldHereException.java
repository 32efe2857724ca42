package dev.dlock.client;

/** A wait for a key to be free on a key that the waiting server session holds itself (SQLSTATE 55006). */
public final class HeldHereException extends DlockException {
    private static final long serialVersionUID = 1L;

    HeldHereException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}
