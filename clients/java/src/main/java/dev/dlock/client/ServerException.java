package dev.dlock.client;

/**
 * Any other error the server raised ({@code statement_timeout} or a cancel, 57014; the deadlock
 * detector, 40P01; ...): {@link #sqlState()} says which.
 */
public final class ServerException extends DlockException {
    private static final long serialVersionUID = 1L;

    ServerException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}
