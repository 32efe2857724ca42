//! Fast mode: TTL leases kept only in shared memory (preloaded only), for users who accept
//! Redis-like durability in exchange for no WAL and no table on the lock path.
//!
//! What holds, precisely:
//! - **Mutual exclusion while the server runs:** a fast key has at most one live lease; every
//!   check and change happens under the key's partition lock, on the server clock.
//! - **Across a restart or crash, by lock-delay:** leases live in memory, so a restart forgets
//!   them. Instead, after every server start no fast key is granted for `dlock.fast_max_ttl`
//!   (the longest fast ttl anyone may hold), so every lease granted before the restart has run
//!   out before its key can be granted again (Chubby's lock-delay).
//! - **Fences only grow, across restarts and failover:** a fence is `epoch << 20 | n`, where
//!   the epoch is read off the WAL position (cluster-wide, flushed, and replicated to the
//!   synchronous standbys; `epoch.rs`) the first time a fast key is granted after start, and
//!   again every 2^20 grants.
//! - **Fair shares:** one table serves every database and role; each role and each database
//!   may hold at most its share of it (`quota.rs`).
//! - **Not transactional:** a fast acquire, renew or release takes effect at once, and a
//!   ROLLBACK does not undo it (as advisory locks).
//! - Not replicated: a standby refuses fast calls; after a failover the new primary's
//!   lock-delay covers leases granted by the old one.
//! - **Waiting in arrival order:** waiters line up per key in shared memory (`wait_lines.rs`); a
//!   release grants the key to the first in line in place and wakes that one backend; the first
//!   in line takes over an expired lease at its expiry. A try never passes anyone in line.
//!
//! Keys belong to a database, as durable ones do. They are found by a 64-bit hash of key and
//! database; two different keys with the same hash (never seen in practice) count as one key
//! here: the second waits, which is safe.

mod epoch;
mod lease_table;
mod ops;
mod quota;
mod wait_lines;

pub use lease_table::{max_ttl_us, request, startup};
pub use ops::{Request, acquire, fill, holds, live, release, renew, reset};
