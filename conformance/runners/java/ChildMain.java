package dev.dlock.conformance;

import dev.dlock.client.Dlock;
import dev.dlock.client.Lease;
import dev.dlock.client.Pooler;
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

/**
 * The child process of the conformance suite (conformance/README.md, "The child process
 * protocol"): it holds one lease for the runner, which stops and continues it with signals.
 * Stdout carries answers only; the client's log goes to stderr.
 */
public final class ChildMain {
    private ChildMain() {}

    /**
     * Runs the protocol on stdin and stdout.
     *
     * @param args none
     * @throws Exception on an I/O failure of the protocol itself
     */
    public static void main(String[] args) throws Exception {
        Run.quietClientLog();
        PrintStream out = new PrintStream(System.out, true, StandardCharsets.UTF_8);
        String url = Urls.parse(System.getenv("DLOCK_CONFORMANCE_CHILD_DSN")).jdbc();
        boolean pooler = "transaction".equals(System.getenv("DLOCK_CONFORMANCE_CHILD_POOLER"));
        try (Dlock client = Dlock.builder(url).pooler(pooler ? Pooler.TRANSACTION : Pooler.SESSION).build()) {
            Lease lease = null;
            out.println("ready " + ProcessHandle.current().pid());
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                String[] words = line.split(" ");
                String answer;
                try {
                    if (words[0].equals("lock") && words.length == 3) {
                        lease = client.lock(words[1]).ttl(Duration.ofMillis(Long.parseLong(words[2]))).acquire();
                        answer = "ok " + lease.fence();
                    } else if (words[0].equals("wait_lost") && words.length == 2 && lease != null) {
                        answer = "ok " + lost(lease, Long.parseLong(words[1]));
                    } else if (line.equals("release") && lease != null) {
                        answer = "ok " + lease.release();
                    } else if (line.equals("quit")) {
                        out.println("ok bye");
                        break;
                    } else {
                        answer = "error Protocol -";
                    }
                } catch (RuntimeException e) {
                    String[] kind = Kinds.classify(e);
                    answer = "error " + (kind == null ? "Unexpected" : kind[0]) + " "
                            + (kind == null || kind[1] == null ? "-" : kind[1]);
                }
                out.println(answer);
            }
        }
        System.exit(0);
    }

    private static boolean lost(Lease lease, long timeoutMillis) throws Exception {
        try {
            lease.lost().get(timeoutMillis, TimeUnit.MILLISECONDS);
            return true;
        } catch (TimeoutException e) {
            return false;
        }
    }
}
