package dev.dlock.client;

import dev.dlock.client.sql.ConnectionSource;
import dev.dlock.client.sql.SqlText;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import org.postgresql.PGStatement;

/**
 * Sending a statement: on which connection, in which transaction, and whether the server may
 * prepare it. Each call commits on its own (a pool that lends connections outside autocommit gets
 * a commit after each call). In session mode pgjdbc prepares repeated statements on the server
 * after a few uses; behind a transaction pooler nothing is prepared (each call is one unnamed
 * statement that leaves nothing behind on the server connection the pooler lent).
 */
final class Connections {
    /** Reads the answer of one statement. */
    @FunctionalInterface
    interface Reader<T> {
        T read(ResultSet rows) throws SQLException;
    }

    private final ConnectionSource source;
    private final boolean transactionPooler;

    Connections(ConnectionSource source, boolean transactionPooler) {
        this.source = source;
        this.transactionPooler = transactionPooler;
    }

    boolean transactionPooler() {
        return transactionPooler;
    }

    ConnectionSource source() {
        return source;
    }

    /** A connection out of the pool, until {@link #giveBack}. */
    Connection take() {
        try {
            return source.take();
        } catch (SQLException e) {
            throw SqlErrors.map(e);
        }
    }

    void giveBack(Connection connection, boolean broken) {
        source.giveBack(connection, broken);
    }

    /** The answer of {@code sql} on {@code connection}, read by {@code reader}. */
    <T> T run(Connection connection, SqlText sql, Reader<T> reader, Object... params) {
        try {
            boolean autocommit = connection.getAutoCommit();
            try (PreparedStatement statement = connection.prepareStatement(sql.jdbc())) {
                if (transactionPooler) {
                    statement.unwrap(PGStatement.class).setPrepareThreshold(0);
                }
                sql.bind(connection, statement, params);
                T answer;
                try (ResultSet rows = statement.executeQuery()) {
                    answer = reader.read(rows);
                }
                if (!autocommit) {
                    connection.commit();
                }
                return answer;
            } catch (SQLException e) {
                if (!autocommit) {
                    rollbackQuietly(connection);
                }
                throw e;
            }
        } catch (SQLException e) {
            throw SqlErrors.map(e);
        }
    }

    /** The answer of {@code sql} on a pooled connection. */
    <T> T one(SqlText sql, Reader<T> reader, Object... params) {
        Connection connection = take();
        boolean broken = false;
        try {
            return run(connection, sql, reader, params);
        } catch (ConnectionFailedException e) {
            broken = true;
            throw e;
        } finally {
            giveBack(connection, broken);
        }
    }

    private static void rollbackQuietly(Connection connection) {
        try {
            connection.rollback();
        } catch (SQLException e) {
            // The connection is gone; the pool finds out.
        }
    }

    /** The first column of the one row, as a boolean (false for NULL). */
    static boolean bool(ResultSet rows) throws SQLException {
        return rows.next() && rows.getBoolean(1);
    }
}
