package dev.dlock.client;

import com.zaxxer.hikari.HikariConfig;
import com.zaxxer.hikari.HikariDataSource;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.function.BooleanSupplier;
import java.util.function.Consumer;
import java.util.function.Supplier;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.TestInfo;

/**
 * What the client's tests share: a real server ({@code DLOCK_TEST_JDBC_URL}, with dlock in schema
 * {@code dlock}; {@code tests/scripts/java.sh test} starts one), clients and pools closed after
 * each test, keys no other test uses, and an admin session.
 */
abstract class ServerTest {
    static final String URL = required("DLOCK_TEST_JDBC_URL");

    private final List<AutoCloseable> made = new ArrayList<>();
    private String prefix;
    Connection admin;

    static String required(String name) {
        String value = System.getenv(name);
        if (value == null || value.isEmpty()) {
            throw new IllegalStateException(name + " is not set: run tests/scripts/java.sh test (it starts a server)");
        }
        return value;
    }

    @BeforeEach
    void open(TestInfo test) throws SQLException {
        prefix = "java/" + test.getTestMethod().map(m -> m.getName()).orElse("test") + "/"
                + UUID.randomUUID().toString().substring(0, 8);
        admin = DriverManager.getConnection(URL);
    }

    @AfterEach
    void closeAll() throws Exception {
        for (int i = made.size() - 1; i >= 0; i--) {
            made.get(i).close();
        }
        admin.close();
    }

    /** A key of this test alone. */
    String key(String name) {
        return prefix + "/" + name;
    }

    String key() {
        return key("k");
    }

    /** A client with a pool of its own, closed after the test. */
    Dlock client() {
        return client(b -> { });
    }

    Dlock client(Consumer<DlockBuilder> configure) {
        DlockBuilder builder = Dlock.builder(URL);
        configure.accept(builder);
        return closing(builder.build());
    }

    /** A HikariCP pool of {@code size}, with this application_name, closed after the test. */
    HikariDataSource hikari(String url, int size, String app) {
        HikariConfig config = new HikariConfig();
        config.setJdbcUrl(url);
        config.setMaximumPoolSize(size);
        config.setMinimumIdle(1);
        config.addDataSourceProperty("ApplicationName", app);
        return closing(new HikariDataSource(config));
    }

    <T extends AutoCloseable> T closing(T resource) {
        made.add(resource);
        return resource;
    }

    /** A unique application_name for counting a client's sessions. */
    static String app(String what) {
        return "jt-" + what + "-" + UUID.randomUUID().toString().substring(0, 8);
    }

    /** The first column of the first row of {@code sql} on the admin session. */
    Object scalar(String sql, Object... params) throws SQLException {
        try (PreparedStatement statement = admin.prepareStatement(sql)) {
            for (int i = 0; i < params.length; i++) {
                statement.setObject(i + 1, params[i]);
            }
            try (ResultSet rows = statement.executeQuery()) {
                return rows.next() ? rows.getObject(1) : null;
            }
        }
    }

    long count(String sql, Object... params) throws SQLException {
        return ((Number) scalar(sql, params)).longValue();
    }

    /** How many sessions of this application_name the server has. */
    long sessions(String app) throws SQLException {
        return count("SELECT count(*) FROM pg_stat_activity WHERE application_name = ?", app);
    }

    /** {@code work} on a thread of its own (the common pool has one thread on two cores). */
    static <T> CompletableFuture<T> async(Supplier<T> work) {
        return CompletableFuture.supplyAsync(work, run -> {
            Thread thread = new Thread(run, "test-async");
            thread.setDaemon(true);
            thread.start();
        });
    }

    /** Polls {@code condition} until it holds (a generous limit, never a measurement). */
    static void eventually(String what, BooleanSupplier condition) throws InterruptedException {
        long deadline = System.nanoTime() + Duration.ofSeconds(15).toNanos();
        while (!condition.getAsBoolean()) {
            if (System.nanoTime() - deadline > 0) {
                throw new AssertionError(what + " did not hold within 15 s");
            }
            Thread.sleep(20);
        }
    }

    /** A condition that may throw SQLException. */
    interface Check {
        boolean holds() throws SQLException;
    }

    static BooleanSupplier sql(Check check) {
        return () -> {
            try {
                return check.holds();
            } catch (SQLException e) {
                throw new AssertionError(e);
            }
        };
    }
}
