package dev.dlock.client;

import dev.dlock.client.waiting.Waits;
import dev.dlock.client.waiting.Watched;
import java.lang.System.Logger.Level;
import java.sql.SQLException;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * An observation of an election's leaders (see {@link Election#observe}): a thread of its own
 * that reads the leader whenever the server notifies a change, and calls the observer when the
 * term differs from the last one it was given. Close it to stop.
 */
public final class LeaderObserver implements AutoCloseable {
    private final Election election;
    private final Core core;
    private final Consumer<Optional<Leader>> observer;
    private final Thread thread;
    private volatile boolean closed;

    LeaderObserver(Election election, Core core, Consumer<Optional<Leader>> observer) {
        this.election = election;
        this.core = core;
        this.observer = observer;
        this.thread = new Thread(this::run, "dlock-observer-" + election.name());
        this.thread.setDaemon(true);
        this.thread.start();
    }

    private void run() {
        Watched watched = null;
        boolean first = true;
        Long last = null;
        long retry = 10;
        try {
            while (!closed) {
                try {
                    if (watched == null) {
                        // Watched before the first read: a change after it is notified.
                        watched = core.waits.watched(election.name(), core.statements());
                    }
                    Optional<Leader> leader = election.leader();
                    Long term = leader.map(Leader::term).orElse(null);
                    if (first || !Objects.equals(term, last)) {
                        first = false;
                        last = term;
                        deliver(leader);
                    }
                    retry = 10;
                    // A safety net re-reads the leader now and then, should a notification go missing.
                    watched.changed(Waits.RECHECK_NANOS);
                } catch (DlockException | SQLException e) {
                    Core.LOG.log(Level.DEBUG, "dlock: observing {0}: {1}", election.name(), e.getMessage());
                    TimeUnit.MILLISECONDS.sleep(retry);
                    retry = Math.min(retry * 2, 2_000);
                }
            }
        } catch (InterruptedException e) {
            // Closed.
        } finally {
            if (watched != null) {
                watched.close();
            }
        }
    }

    private void deliver(Optional<Leader> leader) {
        try {
            observer.accept(leader);
        } catch (RuntimeException e) {
            Core.LOG.log(Level.WARNING, "dlock: the observer of {0} failed: {1}", election.name(), e);
        }
    }

    /**
     * The election observed.
     *
     * @return its name
     */
    public String election() {
        return election.name();
    }

    /** Stops observing (waits briefly for the observer thread to end). */
    @Override
    public void close() {
        closed = true;
        thread.interrupt();
        if (thread != Thread.currentThread()) {
            try {
                thread.join(TimeUnit.SECONDS.toMillis(5));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
