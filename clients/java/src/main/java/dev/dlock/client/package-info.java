/**
 * The Java client of dlock: distributed locks that live inside PostgreSQL, reached over JDBC.
 *
 * <p>{@link dev.dlock.client.Dlock} is the client; {@link dev.dlock.client.Dlock#lock} describes a
 * lock and gives a {@link dev.dlock.client.Lease} (try-with-resources) with a fence and a lost
 * signal; {@link dev.dlock.client.Locked} and {@link dev.dlock.client.Dlock#proxy} lock declaratively.
 * The sub-packages are not API.
 */
package dev.dlock.client;
