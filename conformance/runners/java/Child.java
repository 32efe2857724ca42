package dev.dlock.conformance;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

/** A child process of the runner's language, holding a lease (README: the child protocol). */
final class Child {
    private static final long ANSWER_SECONDS = 30;

    private final Process process;
    private final Writer requests;
    private final BlockingQueue<String> answers = new LinkedBlockingQueue<>();
    final long pid;

    Child(String dsn, boolean behindPgbouncer) throws IOException, InterruptedException {
        List<String> command = new ArrayList<>();
        command.add(ProcessHandle.current().info().command().orElse("java"));
        command.add("-XX:TieredStopAtLevel=1");
        command.add("-cp");
        command.add(System.getProperty("java.class.path"));
        command.add(ChildMain.class.getName());
        ProcessBuilder builder = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT);
        builder.environment().put("DLOCK_CONFORMANCE_CHILD_DSN", dsn);
        if (behindPgbouncer) {
            builder.environment().put("DLOCK_CONFORMANCE_CHILD_POOLER", "transaction");
        }
        process = builder.start();
        requests = new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8);
        Thread reader = new Thread(() -> {
            try (BufferedReader lines = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8))) {
                for (String line = lines.readLine(); line != null; line = lines.readLine()) {
                    answers.add(line);
                }
            } catch (IOException e) {
                // The child is gone.
            }
            answers.add("eof");
        }, "child-reader");
        reader.setDaemon(true);
        reader.start();
        String hello = next();
        if (!hello.startsWith("ready ")) {
            throw new Scenario.Failure("the child said '" + hello + "' instead of ready");
        }
        pid = Long.parseLong(hello.substring("ready ".length()).strip());
    }

    private String next() throws InterruptedException {
        String line = answers.poll(ANSWER_SECONDS, TimeUnit.SECONDS);
        if (line == null) {
            throw new Scenario.Failure("the child did not answer within " + ANSWER_SECONDS + " s");
        }
        return line;
    }

    /** Sends one request; the answer's value, or the child's error as a {@link ChildError}. */
    String ask(String request) throws IOException, InterruptedException {
        requests.write(request + "\n");
        requests.flush();
        String[] answer = next().split(" ");
        if (answer[0].equals("ok") && answer.length > 1) {
            return answer[1];
        }
        if (answer[0].equals("error") && answer.length > 2) {
            throw new ChildError(answer[1], answer[2].equals("-") ? null : answer[2]);
        }
        throw new Scenario.Failure("the child answered '" + String.join(" ", answer) + "' to '" + request + "'");
    }

    void signal(String name) throws IOException, InterruptedException {
        // Java has no API for SIGSTOP and SIGCONT: kill(1) sends them.
        Process kill = new ProcessBuilder("kill", "-" + name, Long.toString(pid)).inheritIO().start();
        if (kill.waitFor() != 0) {
            throw new Scenario.Failure("kill -" + name + " " + pid + " failed");
        }
    }

    void quit() throws IOException, InterruptedException {
        ask("quit");
        if (!process.waitFor(10, TimeUnit.SECONDS)) {
            throw new Scenario.Failure("the child did not exit after quit");
        }
    }

    void kill() {
        if (process.isAlive()) {
            try {
                signal("CONT");
            } catch (IOException | InterruptedException | RuntimeException e) {
                // Killed below anyway.
            }
            process.destroyForcibly();
            try {
                process.waitFor(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    /** An error the child reported: its kind and SQLSTATE. */
    static final class ChildError extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final String kind;
        final String sqlState;

        ChildError(String kind, String sqlState) {
            super(kind + " (" + sqlState + ")");
            this.kind = kind;
            this.sqlState = sqlState;
        }
    }
}
