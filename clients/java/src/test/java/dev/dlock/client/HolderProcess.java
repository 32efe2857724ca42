package dev.dlock.client;

import java.io.PrintStream;
import java.nio.charset.StandardCharsets;

/**
 * The process the lost-lease test stops and continues: it holds a key through a {@link Locked}
 * method that sleeps, and says on stdout what happens to it (one word per line).
 */
public final class HolderProcess {
    private static final PrintStream OUT = new PrintStream(System.out, true, StandardCharsets.UTF_8);

    /** The work the lock guards. */
    interface Work {
        @Locked(key = "{0}", ttl = "1500ms")
        void hold(String key) throws InterruptedException;
    }

    private HolderProcess() {}

    private static synchronized void say(String line) {
        OUT.println(line);
    }

    /**
     * Holds {@code args[1]} on the server at {@code args[0]} until the lease is lost.
     *
     * @param args the JDBC URL and the key
     */
    public static void main(String[] args) {
        java.util.logging.Logger.getLogger("dev.dlock.client").setLevel(java.util.logging.Level.SEVERE);
        try (Dlock dlock = Dlock.connect(args[0])) {
            Work work = dlock.proxy(Work.class, key -> {
                Lease lease = Dlock.currentLease().orElseThrow();
                lease.lost().thenRun(() -> say("lost-signal"));
                say("holding " + lease.fence());
                try {
                    Thread.sleep(120_000);
                    say("slept");
                } catch (InterruptedException e) {
                    say("interrupted");
                    throw e;
                }
            });
            try {
                work.hold(args[1]);
                say("returned");
            } catch (LeaseLostException e) {
                say("lease-lost " + (e.getCause() == null ? "-" : e.getCause().getClass().getSimpleName()));
            } catch (InterruptedException e) {
                say("escaped " + e);
            }
            say("interrupt-flag " + Thread.currentThread().isInterrupted());
        }
    }
}
