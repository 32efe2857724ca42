/**
 * Not API (it may change in any release): the watchdog that renews a client's TTL leases every
 * third of their ttl and declares them lost when its local deadline passes first, as the Rust
 * client's {@code lock/watchdog.rs}.
 */
package dev.dlock.client.renewal;
