package dev.dlock.client.waiting;

import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The local line of one client's waiters for one key: a fair turn (granted in arrival order,
 * which {@code synchronized} does not promise), and a change counter that notifications bump.
 */
public final class KeyLine {
    final String key;
    private final ReentrantLock turn = new ReentrantLock(true);
    private long changes;
    /** Listener generation the key was watched in (0: not yet); guarded by {@link Waits}' lock. */
    long watchedIn;
    /** Waiters and watchers in the line; guarded by {@link Waits}' lock. */
    int users;

    KeyLine(String key) {
        this.key = key;
    }

    /**
     * The key of this line.
     *
     * @return the key
     */
    public String key() {
        return key;
    }

    /** Waits for the turn until the deadline; false if it passed first. */
    boolean takeTurn(Deadline deadline) throws InterruptedException {
        if (!deadline.limited()) {
            turn.lockInterruptibly();
            return true;
        }
        return turn.tryLock(deadline.remainingNanos(), TimeUnit.NANOSECONDS);
    }

    void endTurn() {
        turn.unlock();
    }

    /** The change count: read before watching and trying, so that no later change is missed. */
    synchronized long changes() {
        return changes;
    }

    /** Wakes whoever sleeps on the line: the key may be free, or the listener was lost. */
    synchronized void bump() {
        changes++;
        notifyAll();
    }

    /** Sleeps until the change count moves past {@code seen}, or {@code nanos} pass. */
    synchronized void awaitChange(long seen, long nanos) throws InterruptedException {
        long end = System.nanoTime() + nanos;
        long left = nanos;
        while (changes == seen && left > 0) {
            TimeUnit.NANOSECONDS.timedWait(this, left);
            left = end - System.nanoTime();
        }
    }
}
