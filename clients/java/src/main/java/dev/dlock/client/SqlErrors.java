package dev.dlock.client;

import java.sql.SQLException;
import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

/** The one place where SQLSTATEs become the client's exceptions. */
final class SqlErrors {
    private SqlErrors() {}

    /** Whether the session is gone or never was (08: connection, 28: authorization, 57P: shutdown,
     *  terminated backend), or there is no SQLSTATE at all (I/O, a pool that timed out). */
    static boolean isConnectionClass(String sqlState) {
        return sqlState == null || sqlState.startsWith("08") || sqlState.startsWith("28") || sqlState.startsWith("57P");
    }

    /** The exception for a failure of the driver or the pool. */
    static RuntimeException map(SQLException error) {
        String state = error.getSQLState();
        String message = error.getMessage();
        String detail = null;
        String hint = null;
        if (error instanceof PSQLException server && server.getServerErrorMessage() != null) {
            ServerErrorMessage fields = server.getServerErrorMessage();
            message = fields.getMessage() != null ? fields.getMessage() : message;
            detail = fields.getDetail();
            hint = fields.getHint();
        }
        if (isConnectionClass(state)) {
            return new ConnectionFailedException("connection: " + message, state, detail, hint, error);
        }
        return switch (state) {
            case "22023", "22004", "22021" -> new InvalidArgumentException(message, state, detail, error);
            case "0A000" -> new ModeConflictException(message, state, detail, hint, error);
            case "42501" -> new PermissionDeniedException(message, state, detail, hint, error);
            case "55006" -> new HeldHereException(message, state, detail, hint, error);
            default -> new ServerException(message, state, detail, hint, error);
        };
    }
}
