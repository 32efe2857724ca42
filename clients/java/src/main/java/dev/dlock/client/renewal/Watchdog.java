package dev.dlock.client.renewal;

import java.util.concurrent.Executor;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.TimeUnit;

/**
 * The watchdog of a client's TTL leases: renews each at its interval (a third of its ttl by
 * default) while it is held, and declares it lost when a renewal is refused or its local deadline
 * passes first, whether or not a renewal is still on its way (a hung connection must not delay
 * the news).
 *
 * <p>The timers run on a {@link ScheduledExecutorService} (the application's, or the client's one
 * daemon thread); the renewal statements run on a separate executor, so that a renewal stuck on a
 * dead connection never delays another lease's timer, nor its lost signal.
 */
public final class Watchdog {
    private final ScheduledExecutorService timers;
    private final Executor renewals;

    /**
     * A watchdog.
     *
     * @param timers where the timers run (only short tasks)
     * @param renewals where the renewal statements run
     */
    public Watchdog(ScheduledExecutorService timers, Executor renewals) {
        this.timers = timers;
        this.renewals = renewals;
    }

    /**
     * Starts watching a lease.
     *
     * @param lease the lease
     * @param schedule its schedule (the watchdog guards it from now on)
     * @return the handle the lease keeps
     */
    public Watch watch(Renewable lease, Schedule schedule) {
        Watch watch = new Watch(lease, schedule);
        synchronized (watch) {
            watch.arm();
        }
        return watch;
    }

    /** One lease watched: its schedule and its pending timer. */
    public final class Watch {
        private final Renewable lease;
        private final Schedule schedule;
        private ScheduledFuture<?> timer;
        private boolean over;

        private Watch(Renewable lease, Schedule schedule) {
            this.lease = lease;
            this.schedule = schedule;
        }

        /**
         * The local deadline now.
         *
         * @return a {@link System#nanoTime()} reading
         */
        public synchronized long deadline() {
            return schedule.deadline();
        }

        /**
         * A renewal by hand, sent at {@code sent}, moved the lease's expiry.
         *
         * @param sent when it was sent
         */
        public synchronized void extended(long sent) {
            schedule.extended(sent);
        }

        /** Stops watching (the lease was released). */
        public synchronized void forget() {
            over = true;
            if (timer != null) {
                timer.cancel(false);
                timer = null;
            }
        }

        // Called with this watch's monitor held.
        private void arm() {
            if (over) {
                return;
            }
            long delay = schedule.nextWake() - System.nanoTime();
            try {
                timer = timers.schedule(this::wake, Math.max(delay, 0), TimeUnit.NANOSECONDS);
            } catch (RejectedExecutionException e) {
                over = true; // the scheduler was shut down: the client is closing
            }
        }

        private void wake() {
            Schedule.Due due;
            synchronized (this) {
                if (over) {
                    return;
                }
                due = schedule.due(System.nanoTime());
                if (due == Schedule.Due.LOST) {
                    over = true;
                } else {
                    arm();
                }
            }
            if (due == Schedule.Due.LOST) {
                lease.lost("the ttl ran out before the lease was renewed");
            } else if (due == Schedule.Due.RENEW) {
                try {
                    renewals.execute(this::renew);
                } catch (RejectedExecutionException e) {
                    forget();
                }
            }
        }

        private void renew() {
            long sent = System.nanoTime();
            Renewable.Outcome outcome = lease.renewNow();
            synchronized (this) {
                if (over) {
                    return;
                }
                long now = System.nanoTime();
                switch (outcome) {
                    case RENEWED -> schedule.renewed(sent, now);
                    case UNREACHABLE -> schedule.retrySoon(now);
                    case GONE -> over = true;
                    default -> throw new IllegalStateException(outcome.name());
                }
                if (!over) {
                    if (timer != null) {
                        timer.cancel(false);
                    }
                    arm();
                    return;
                }
                if (timer != null) {
                    timer.cancel(false);
                    timer = null;
                }
            }
            lease.lost("renewal answered that the lease is no longer ours");
        }
    }
}
