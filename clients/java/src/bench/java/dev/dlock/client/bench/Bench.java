package dev.dlock.client.bench;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import dev.dlock.client.Dlock;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicLong;

/**
 * What the client adds to an acquire+release pair: the client against the same SQL through raw
 * JDBC (pgjdbc on a HikariCP pool, a connection borrowed per statement), 8 threads at once, each
 * taking and releasing a key of its own per pair, in interleaved rounds on one server; the medians
 * of the rounds and the overhead ratio (client time per pair / raw time per pair; the target is
 * at most 1.3). The client is used as users use it: a 30 s lease renewed by its watchdog, on a
 * HikariCP pool like the raw side's, and on its own pool.
 *
 * <pre>java dev.dlock.client.bench.Bench --url jdbc:postgresql://127.0.0.1:5432/postgres?user=postgres
 *     [--threads 8] [--seconds 1] [--rounds 7]</pre>
 */
public final class Bench {
    private static final String ACQUIRE = "SELECT dlock.dlock_acquire(?, ?, '30 seconds')";
    private static final String RELEASE = "SELECT dlock.dlock_release(?, ?)";
    private static final int POOL = 16;
    private static final double TARGET = 1.3;

    /** One acquire+release of a key. */
    @FunctionalInterface
    interface Pair {
        void run(String key) throws Exception;
    }

    private Bench() {}

    /**
     * Runs the bench and prints one line per client.
     *
     * @param args {@code --url} and optionally {@code --threads}, {@code --seconds}, {@code --rounds}
     * @throws Exception if the server cannot be reached
     */
    public static void main(String[] args) throws Exception {
        Map<String, String> options = new LinkedHashMap<>(Map.of("--threads", "8", "--seconds", "1", "--rounds", "7"));
        for (int i = 0; i + 1 < args.length; i += 2) {
            options.put(args[i], args[i + 1]);
        }
        String url = options.get("--url");
        if (url == null) {
            throw new IllegalArgumentException("--url jdbc:postgresql://... is required");
        }
        int threads = Integer.parseInt(options.get("--threads"));
        double seconds = Double.parseDouble(options.get("--seconds"));
        int rounds = Integer.parseInt(options.get("--rounds"));

        try (HikariDataSource raw = pool(url); HikariDataSource forClient = pool(url);
             Dlock onHikari = Dlock.connect(forClient);
             Dlock onOwnPool = Dlock.builder(url).poolSize(POOL).build()) {
            String owner = "bench:" + UUID.randomUUID();
            Map<String, Pair> contenders = new LinkedHashMap<>();
            contenders.put("raw", key -> {
                statement(raw, ACQUIRE, key, owner);
                statement(raw, RELEASE, key, owner);
            });
            contenders.put("client on HikariCP", key -> onHikari.lock(key).acquire().release());
            contenders.put("client on its own pool", key -> onOwnPool.lock(key).acquire().release());

            for (Pair pair : contenders.values()) {
                threaded(threads, seconds / 2, pair); // warm-up: connections, JIT, prepared statements
            }
            Map<String, List<Double>> rates = new LinkedHashMap<>();
            contenders.keySet().forEach(name -> rates.put(name, new ArrayList<>()));
            List<String> order = new ArrayList<>(contenders.keySet());
            for (int r = 0; r < rounds; r++) {
                for (String name : order) {
                    rates.get(name).add(threaded(threads, seconds, contenders.get(name)));
                }
                java.util.Collections.rotate(order, 1); // interleaved: each goes first in turn
            }
            for (String name : contenders.keySet()) {
                if (!name.equals("raw")) {
                    report("java " + name + ", " + threads + " threads", rates.get("raw"), rates.get(name));
                }
            }
        }
    }

    private static HikariDataSource pool(String url) {
        HikariConfig config = new HikariConfig();
        config.setJdbcUrl(url);
        config.setMaximumPoolSize(POOL);
        config.setMinimumIdle(POOL);
        return new HikariDataSource(config);
    }

    private static void statement(HikariDataSource pool, String sql, String key, String owner) throws SQLException {
        try (Connection c = pool.getConnection(); PreparedStatement s = c.prepareStatement(sql)) {
            s.setString(1, key);
            s.setString(2, owner);
            try (ResultSet rows = s.executeQuery()) {
                rows.next();
            }
        }
    }

    /** Pairs per second of {@code threads} threads looping over {@code pair} for {@code seconds}. */
    private static double threaded(int threads, double seconds, Pair pair) throws InterruptedException {
        long stop = System.nanoTime() + (long) (seconds * 1e9);
        AtomicLong pairs = new AtomicLong();
        List<Throwable> failures = java.util.Collections.synchronizedList(new ArrayList<>());
        List<Thread> running = new ArrayList<>();
        long started = System.nanoTime();
        for (int t = 0; t < threads; t++) {
            String prefix = "bench/" + UUID.randomUUID().toString().substring(0, 8) + "/" + t + "/";
            Thread thread = new Thread(() -> {
                long n = 0;
                try {
                    while (System.nanoTime() - stop < 0) {
                        pair.run(prefix + n++);
                    }
                } catch (Exception e) {
                    failures.add(e);
                }
                pairs.addAndGet(n);
            });
            thread.start();
            running.add(thread);
        }
        for (Thread thread : running) {
            thread.join();
        }
        if (!failures.isEmpty()) {
            throw new IllegalStateException("a pair failed", failures.get(0));
        }
        return pairs.get() / ((System.nanoTime() - started) / 1e9);
    }

    private static double median(List<Double> values) {
        double[] sorted = values.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        int mid = sorted.length / 2;
        return sorted.length % 2 == 1 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
    }

    private static void report(String name, List<Double> raw, List<Double> client) {
        List<Double> ratios = new ArrayList<>();
        for (int i = 0; i < raw.size(); i++) {
            ratios.add(raw.get(i) / client.get(i));
        }
        double ratio = median(ratios);
        System.out.printf("%s: client %.0f pairs/s, raw %.0f pairs/s, overhead %.3fx (rounds: %s)%s%n", name,
                median(client), median(raw), ratio,
                String.join(", ", ratios.stream().map(r -> String.format("%.2f", r)).toArray(String[]::new)),
                ratio <= TARGET ? "" : "  ABOVE " + TARGET + "x");
    }
}
