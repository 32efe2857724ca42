/**
 * Not API (it may change in any release): waiting for a key without holding a pooled connection
 * for the length of the wait, as the Rust client's {@code waiting/}. A client keeps a local FIFO
 * line per key; only its head talks to the server, in short tries, and sleeps in between until
 * the listener connection hears that the key was freed or the blocking lease runs out (behind a
 * transaction pooler, after growing, jittered pauses). Nothing here knows the client's
 * exceptions: failures leave as {@link java.sql.SQLException}s and {@link InterruptedException}s.
 */
package dev.dlock.client.waiting;
