/**
 * Not API (it may change in any release): the statements the client sends, and where its
 * connections come from (the application's {@link javax.sql.DataSource}, the client's own small
 * pool, the listener connection opened outside the pool). Nothing here knows the client's
 * exceptions: failures leave as {@link java.sql.SQLException}s, mapped by the caller.
 */
package dev.dlock.client.sql;
