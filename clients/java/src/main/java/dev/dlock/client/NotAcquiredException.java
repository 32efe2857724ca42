package dev.dlock.client;

/** Another owner holds the key: at once (no wait was asked for) or until the wait ran out. */
public final class NotAcquiredException extends DlockException {
    private static final long serialVersionUID = 1L;

    private final String key;
    private final boolean waited;

    NotAcquiredException(String key, boolean waited) {
        super(waited
                ? "not acquired: the wait ran out before " + quoted(key) + " was free"
                : "not acquired: another owner holds " + quoted(key), null, null, null, null);
        this.key = key;
        this.waited = waited;
    }

    private static String quoted(String key) {
        return "'" + key + "'";
    }

    /**
     * The key (for a multi-key lock, its keys joined with {@code ", "}).
     *
     * @return the key that was busy
     */
    public String key() {
        return key;
    }

    /**
     * Whether a wait was asked for (and ran out), as opposed to a single try.
     *
     * @return true if the call waited
     */
    public boolean waited() {
        return waited;
    }
}
