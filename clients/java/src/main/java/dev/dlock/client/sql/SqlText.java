package dev.dlock.client.sql;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.sql.Types;
import java.util.ArrayList;
import java.util.List;

/**
 * A statement written with PostgreSQL's {@code $n} parameters (as the other clients write the
 * same texts), turned into JDBC's {@code ?} placeholders once: a parameter used twice is bound
 * twice. Every parameter is cast to its type in the text, so that NULL and untyped values
 * resolve on the server and nothing asks it for types.
 */
public final class SqlText {
    private final String jdbc;
    private final int[] order;

    private SqlText(String jdbc, int[] order) {
        this.jdbc = jdbc;
        this.order = order;
    }

    /**
     * A statement of the client's own (no quoted {@code $} or {@code ?} in it).
     *
     * @param text the SQL with {@code $1}, {@code $2}, ... parameters
     * @return the statement
     */
    public static SqlText of(String text) {
        StringBuilder out = new StringBuilder(text.length());
        List<Integer> order = new ArrayList<>();
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '$' && i + 1 < text.length() && Character.isDigit(text.charAt(i + 1))) {
                int end = i + 1;
                while (end < text.length() && Character.isDigit(text.charAt(end))) {
                    end++;
                }
                order.add(Integer.parseInt(text.substring(i + 1, end)));
                out.append('?');
                i = end - 1;
            } else {
                out.append(c);
            }
        }
        return new SqlText(out.toString(), order.stream().mapToInt(Integer::intValue).toArray());
    }

    /**
     * The text as JDBC takes it.
     *
     * @return the SQL with {@code ?} placeholders
     */
    public String jdbc() {
        return jdbc;
    }

    /**
     * Binds {@code params} ({@code params[0]} is {@code $1}) to a statement prepared from {@link #jdbc()}.
     * Values are {@code String}, {@code Double}, {@code Long}, {@code Integer}, {@code String[]}
     * (a {@code text[]}), {@code Long[]} (an {@code int8[]}) or {@code null}.
     *
     * @param connection the connection the statement belongs to (arrays are made by it)
     * @param statement the prepared statement
     * @param params the values of {@code $1}, {@code $2}, ...
     * @throws SQLException if the driver refuses a value
     */
    public void bind(Connection connection, PreparedStatement statement, Object... params) throws SQLException {
        for (int i = 0; i < order.length; i++) {
            int at = i + 1;
            Object value = params[order[i] - 1];
            if (value == null) {
                statement.setNull(at, Types.OTHER);
            } else if (value instanceof String s) {
                statement.setString(at, s);
            } else if (value instanceof Double d) {
                statement.setDouble(at, d);
            } else if (value instanceof Long l) {
                statement.setLong(at, l);
            } else if (value instanceof Integer n) {
                statement.setInt(at, n);
            } else if (value instanceof String[] texts) {
                statement.setArray(at, connection.createArrayOf("text", texts));
            } else if (value instanceof Long[] numbers) {
                statement.setArray(at, connection.createArrayOf("int8", numbers));
            } else {
                throw new IllegalArgumentException("dlock: no binding for " + value.getClass().getName());
            }
        }
    }

    @Override
    public String toString() {
        return jdbc;
    }
}
