package dev.dlock.conformance;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.SecureRandom;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.stream.Stream;

/**
 * The conformance runner of the Java client (conformance/README.md).
 *
 * <pre>
 * DLOCK_CONFORMANCE_DSN=postgresql://postgres@127.0.0.1:5432/postgres \
 * DLOCK_CONFORMANCE_SUITE=conformance \
 *     java -cp runner:dlock-client.jar:postgresql.jar:HikariCP.jar:slf4j-api.jar:gson.jar \
 *     dev.dlock.conformance.Run [--strict] [--only a,b] [scenarios dir]
 * </pre>
 */
public final class Run {
    private static final String EDITION = "SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_proc p "
            + "JOIN pg_catalog.pg_language l ON l.oid = p.prolang "
            + "WHERE p.proname = 'dlock_acquire' AND l.lanname = 'c') THEN 'native' ELSE 'sql' END";
    /** Kept so that the logger's level holds (java.util.logging keeps loggers weakly). */
    private static java.util.logging.Logger clientLog;

    /** What every scenario of a run shares. */
    record Environment(String dsn, String pgbouncerDsn, String runId, Set<String> capabilities) {}

    private Run() {}

    /** The lost-lease warnings are expected in these scenarios: only errors are shown. */
    static void quietClientLog() {
        clientLog = java.util.logging.Logger.getLogger("dev.dlock.client");
        clientLog.setLevel(java.util.logging.Level.SEVERE);
    }

    /**
     * Runs the scenarios; exits 1 if any failed.
     *
     * @param args {@code --strict}, {@code --only a,b}, and optionally the scenarios' folder
     * @throws Exception if the suite could not be read or the server not reached
     */
    public static void main(String[] args) throws Exception {
        quietClientLog();
        boolean strict = false;
        Set<String> only = new HashSet<>();
        Path suite = Paths.get(System.getenv().getOrDefault("DLOCK_CONFORMANCE_SUITE", "conformance"));
        Path scenarios = suite.resolve("scenarios");
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--strict" -> strict = true;
                case "--only" -> only.addAll(List.of(args[++i].split(",")));
                default -> scenarios = Paths.get(args[i]);
            }
        }
        String dsn = System.getenv("DLOCK_CONFORMANCE_DSN");
        if (dsn == null) {
            System.err.println("DLOCK_CONFORMANCE_DSN is not set");
            System.exit(2);
        }
        String pgbouncer = System.getenv("DLOCK_CONFORMANCE_PGBOUNCER_DSN");
        pgbouncer = pgbouncer == null || pgbouncer.isEmpty() ? null : pgbouncer;
        Set<String> have = new TreeSet<>();
        String edition = capabilities(dsn, pgbouncer, have);
        Map<String, String> skippedByEdition = differences(suite, edition);
        byte[] id = new byte[4];
        new SecureRandom().nextBytes(id);
        Environment env = new Environment(dsn, pgbouncer, HexFormat.of().formatHex(id), have);
        System.out.println("conformance: java, edition " + edition + ", run " + env.runId() + ", has " + have);

        int passed = 0;
        int failed = 0;
        int skipped = 0;
        List<Path> files;
        try (Stream<Path> listed = Files.list(scenarios)) {
            files = listed.filter(p -> p.toString().endsWith(".json")).sorted().toList();
        }
        for (Path path : files) {
            String name = path.getFileName().toString().replaceFirst("\\.json$", "");
            if (!only.isEmpty() && !only.contains(name)) {
                continue;
            }
            Map<String, Object> spec = Json.readObject(path);
            @SuppressWarnings("unchecked")
            List<Object> needs = (List<Object>) spec.getOrDefault("needs", List.of());
            List<String> missing = new ArrayList<>();
            for (Object need : needs) {
                if (!have.contains((String) need)) {
                    missing.add((String) need);
                }
            }
            if (skippedByEdition.containsKey(name)) {
                System.out.println("skip " + name + ": a declared difference of the " + edition + " edition: "
                        + skippedByEdition.get(name));
                skipped++;
                continue;
            }
            if (!missing.isEmpty()) {
                if (strict) {
                    System.out.println("FAIL " + name + ": needs " + missing + ", which this run has not (--strict)");
                    failed++;
                } else {
                    System.out.println("skip " + name + ": needs " + missing);
                    skipped++;
                }
                continue;
            }
            long started = System.nanoTime();
            try {
                new Scenario(name, spec, env).run();
            } catch (Scenario.Failure e) {
                System.out.println("FAIL " + name + ": " + e.getMessage());
                failed++;
                continue;
            }
            System.out.printf("ok   %s (%.1f s)%n", name, (System.nanoTime() - started) / 1e9);
            passed++;
        }
        System.out.println("conformance: " + passed + " passed, " + failed + " failed, " + skipped + " skipped");
        System.exit(failed > 0 ? 1 : 0);
    }

    /** Fills {@code have} with what this run can do; the server's edition. */
    private static String capabilities(String dsn, String pgbouncer, Set<String> have) throws SQLException {
        String edition;
        try (Connection connection = DriverManager.getConnection(Urls.parse(dsn).jdbc());
             Statement statement = connection.createStatement()) {
            try (ResultSet row = statement.executeQuery(
                    "SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user")) {
                if (row.next() && row.getBoolean(1)) {
                    have.add("admin");
                }
            }
            try (ResultSet row = statement.executeQuery("SELECT current_setting('shared_preload_libraries')")) {
                row.next();
                for (String library : row.getString(1).split(",")) {
                    if (library.strip().equals("dlock")) {
                        have.add("preload");
                    }
                }
            }
            String forced = System.getenv("DLOCK_EDITION");
            if (forced != null && !forced.isEmpty()) {
                edition = forced;
            } else {
                try (ResultSet row = statement.executeQuery(EDITION)) {
                    row.next();
                    edition = row.getString(1);
                }
            }
        }
        if (pgbouncer != null) {
            have.add("pgbouncer");
        }
        // SIGSTOP and SIGCONT through kill(1), on a POSIX system.
        if (Files.isExecutable(Paths.get("/bin/kill")) || Files.isExecutable(Paths.get("/usr/bin/kill"))) {
            have.add("sigstop");
        }
        return edition;
    }

    /** The scenarios the edition's declared differences skip, with why. */
    @SuppressWarnings("unchecked")
    private static Map<String, String> differences(Path suite, String edition) throws IOException {
        Path path = suite.resolve("editions").resolve(edition + ".json");
        Map<String, String> skipped = new HashMap<>();
        if (!Files.exists(path)) {
            return skipped;
        }
        for (Object difference : (List<Object>) Json.readObject(path).getOrDefault("differences", List.of())) {
            Map<String, Object> d = (Map<String, Object>) difference;
            skipped.put((String) d.get("scenario"), (String) d.get("why"));
        }
        return skipped;
    }
}
