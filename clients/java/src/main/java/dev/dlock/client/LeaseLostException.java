package dev.dlock.client;

/**
 * The lease was lost (it expired, was force-released, or could not be renewed in time) while it
 * was in use: whatever was done under it may have overlapped another holder's work.
 */
public final class LeaseLostException extends DlockException {
    private static final long serialVersionUID = 1L;

    LeaseLostException(String message) {
        super(message, null, null, null, null);
    }

    LeaseLostException(String message, Throwable cause) {
        super(message, null, null, null, cause);
    }
}
