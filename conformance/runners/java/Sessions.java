package dev.dlock.conformance;

import java.sql.Array;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * The runner's own driver sessions (the admin session, and those of {@code session} steps), the
 * queries of {@code sql} and {@code wait_until} steps, and the application names that tell a
 * scenario's clients apart in {@code pg_stat_activity}.
 */
final class Sessions implements AutoCloseable {
    /** An error of a {@code sql} step, with its SQLSTATE. */
    static final class SqlError extends RuntimeException {
        private static final long serialVersionUID = 1L;
        final String sqlState;

        SqlError(SQLException e) {
            super(e.getMessage(), e);
            this.sqlState = e.getSQLState();
        }
    }

    private final Run.Environment env;
    private final Map<String, Connection> sessions = new java.util.concurrent.ConcurrentHashMap<>();
    private int apps;

    Sessions(Run.Environment env) {
        this.env = env;
    }

    /** A unique application_name: {@code conf-<run id>-<n>-<what>}, at most 63 bytes. */
    synchronized String appName(String what) {
        apps++;
        String app = "conf-" + env.runId() + "-" + apps + "-" + what;
        return app.length() > 63 ? app.substring(0, 63) : app;
    }

    /** The session named so ({@code null}: the admin session, opened on first use). */
    private Connection session(String which) throws SQLException {
        String name = which == null ? "admin" : which;
        Connection connection = sessions.get(name);
        if (connection == null) {
            if (!name.equals("admin")) {
                throw new Scenario.Failure("no session '" + name + "'");
            }
            connection = DriverManager.getConnection(Urls.parse(env.dsn()).withParam("application_name", appName("admin")).jdbc());
            sessions.put(name, connection);
        }
        return connection;
    }

    /** Opens a plain session (autocommit) as {@code role}, named {@code as}. */
    void open(String as, String role) throws SQLException {
        String url = Urls.parse(env.dsn()).withUser(role).withParam("application_name", appName(as)).jdbc();
        sessions.put(as, DriverManager.getConnection(url));
    }

    /** Every row of {@code query} (with {@code $1}-style parameters) on the session named so. */
    List<List<Object>> query(String which, String query, List<?> params) throws SQLException {
        Connection connection = session(which);
        Placeholders sql = Placeholders.of(query);
        try (PreparedStatement statement = connection.prepareStatement(sql.text())) {
            for (int i = 0; i < sql.order().length; i++) {
                bind(connection, statement, i + 1, params.get(sql.order()[i] - 1));
            }
            List<List<Object>> rows = new ArrayList<>();
            if (statement.execute()) {
                try (ResultSet result = statement.getResultSet()) {
                    int columns = result.getMetaData().getColumnCount();
                    while (result.next()) {
                        List<Object> row = new ArrayList<>();
                        for (int c = 1; c <= columns; c++) {
                            row.add(Matching.plain(result.getObject(c)));
                        }
                        rows.add(row);
                    }
                }
            }
            return rows;
        } catch (SQLException e) {
            throw new SqlError(e);
        }
    }

    private static void bind(Connection connection, PreparedStatement statement, int at, Object value) throws SQLException {
        if (value == null) {
            statement.setNull(at, Types.OTHER);
        } else if (value instanceof String s) {
            statement.setString(at, s);
        } else if (value instanceof Long l) {
            statement.setLong(at, l);
        } else if (value instanceof Double d) {
            statement.setDouble(at, d);
        } else if (value instanceof Boolean b) {
            statement.setBoolean(at, b);
        } else if (value instanceof List<?> list) {
            Array array = connection.createArrayOf("text", list.stream().map(String::valueOf).toArray());
            statement.setArray(at, array);
        } else {
            throw new Scenario.Failure("cannot bind " + value);
        }
    }

    @Override
    public void close() {
        for (Connection connection : sessions.values()) {
            try {
                connection.close();
            } catch (SQLException e) {
                // Gone already.
            }
        }
    }
}
