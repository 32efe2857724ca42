package dev.dlock.client;

/**
 * The role may not do this (SQLSTATE 42501): another role's lease, or a force release by a role
 * that is not a {@code dlock_admin} member.
 */
public final class PermissionDeniedException extends DlockException {
    private static final long serialVersionUID = 1L;

    PermissionDeniedException(String message, String sqlState, String detail, String hint, Throwable cause) {
        super(message, sqlState, detail, hint, cause);
    }
}
