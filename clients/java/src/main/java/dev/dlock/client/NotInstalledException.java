package dev.dlock.client;

/** The dlock extension is not installed in the database the client connects to. */
public final class NotInstalledException extends DlockException {
    private static final long serialVersionUID = 1L;

    NotInstalledException(String message) {
        super(message, null, null, null, null);
    }
}
