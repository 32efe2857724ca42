package dev.dlock.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * The proof of issue 32: a holder whose process is stopped (SIGSTOP) past its ttl loses the key to
 * another owner; continued, its {@code lost()} completes and its {@link Locked} method is
 * interrupted, and the call ends in {@link LeaseLostException}.
 */
class LostLeaseProcessTest extends ServerTest {
    private final BlockingQueue<String> lines = new LinkedBlockingQueue<>();

    private String next() throws InterruptedException {
        String line = lines.poll(30, TimeUnit.SECONDS);
        if (line == null) {
            throw new AssertionError("the holder said nothing within 30 s");
        }
        return line;
    }

    /** The holder's classpath: where this test, the client and the driver were loaded from. */
    private static String classpath() throws Exception {
        List<String> parts = new ArrayList<>();
        for (Class<?> c : List.of(HolderProcess.class, Dlock.class, org.postgresql.Driver.class)) {
            parts.add(new File(c.getProtectionDomain().getCodeSource().getLocation().toURI()).getPath());
        }
        return String.join(File.pathSeparator, parts);
    }

    private static void signal(Process process, String name) throws Exception {
        // Java has no API for SIGSTOP and SIGCONT: kill(1) sends them.
        assertEquals(0, new ProcessBuilder("kill", "-" + name, Long.toString(process.pid())).inheritIO().start().waitFor());
    }

    @Test
    void a_stopped_holder_loses_the_key_and_its_method_is_interrupted_when_continued() throws Exception {
        String java = ProcessHandle.current().info().command().orElse("java");
        Process holder = new ProcessBuilder(java, "-cp", classpath(), HolderProcess.class.getName(), URL, key())
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        try {
            Thread reader = new Thread(() -> {
                try (BufferedReader out = new BufferedReader(new InputStreamReader(holder.getInputStream(), StandardCharsets.UTF_8))) {
                    for (String line = out.readLine(); line != null; line = out.readLine()) {
                        lines.add(line);
                    }
                } catch (java.io.IOException e) {
                    // The holder is gone.
                }
            });
            reader.setDaemon(true);
            reader.start();
            String holding = next();
            assertTrue(holding.startsWith("holding "), holding);
            long staleFence = Long.parseLong(holding.substring("holding ".length()));

            signal(holder, "STOP");
            eventually("the lease expired: nobody renewed it",
                    sql(() -> count("SELECT count(*) FROM dlock.dlock_locks WHERE key = ?", key()) == 0));
            Dlock other = client();
            Lease fresh = other.lock(key()).waitAtMost(Duration.ofSeconds(10)).acquire();
            assertTrue(fresh.fence() > staleFence);
            signal(holder, "CONT");

            List<String> said = new ArrayList<>();
            for (String line = next(); !line.startsWith("interrupt-flag"); line = next()) {
                said.add(line);
            }
            said.sort(null);
            assertEquals(List.of("interrupted", "lease-lost InterruptedException", "lost-signal"), said);
            assertEquals(Boolean.FALSE, scalar("SELECT dlock.dlock_holds(?, ?)", key(), staleFence));
            assertTrue(fresh.holds(), "the new holder keeps the key");
            assertTrue(holder.waitFor(20, TimeUnit.SECONDS));
            assertEquals(0, holder.exitValue());
            fresh.release();
        } finally {
            if (holder.isAlive()) {
                signal(holder, "CONT");
                holder.destroyForcibly();
            }
        }
    }
}
