//! Rust client of **dlock**, distributed locks inside PostgreSQL.
//!
//! A [`Client`] holds a connection pool and one owner identity (`host:pid:random`). A lock is
//! described with [`Client::lock`] and taken with [`LockBuilder::acquire`], which returns a
//! [`Guard`]: it carries the lease's fence token, is renewed by a watchdog while it lives, and
//! tells you through [`Guard::lost`] if the lease is lost anyway.
//!
//! ```no_run
//! use std::time::Duration;
//!
//! # async fn write_report(fence: i64) -> u64 { fence as u64 }
//! # async fn example() -> Result<(), dlock_client::Error> {
//! let client = dlock_client::Client::connect("postgresql://app@db.internal/app").await?;
//!
//! // Wait up to 10 s for the key; the 30 s lease is renewed every 10 s while `guard` lives.
//! let guard = client.lock("report:nightly").ttl(Duration::from_secs(30)).wait(Duration::from_secs(10)).acquire().await?;
//! let rows = write_report(guard.fence()).await; // the fence goes with every protected write
//! guard.release().await?;
//!
//! // Or run work under the lock; Err(LockLost) if the lease was lost before it ended.
//! let rows = client
//!     .with_lock("report:nightly", |lease| async move {
//!         tokio::select! {
//!             () = lease.lost().cancelled_owned() => 0, // stop: someone else may hold it now
//!             rows = write_report(lease.fence()) => rows,
//!         }
//!     })
//!     .await?;
//! # let _ = rows;
//! # Ok(())
//! # }
//! ```
//!
//! Behaviour worth knowing:
//! - **Reentrancy.** Acquiring a key this client (the same owner string) already holds
//!   succeeds at once with the same fence; each guard is one hold, and the key is free once
//!   every guard has let go.
//! - **Dropping a guard** inside a tokio runtime releases it in the background; outside one,
//!   a TTL lease runs out its ttl and a session-bound lease ends with its closed connection.
//! - **Waiting** holds no connection. All waits of a client (and its clones, whatever their
//!   owner) share one *listener* connection: the server sends it a NOTIFY when a watched key is
//!   freed, and the head of the client's local line for that key then tries once on a pooled
//!   connection. A thousand waiters need the listener and a few pooled connections, not a
//!   thousand. Within a client a key's waiters are granted in arrival order; across clients,
//!   the first to try after the key is freed wins, and waits in the server's queue
//!   ([`LockBuilder::server_queue`], or plain SQL) come first. Expiry needs no notification:
//!   the server says when the blocking lease runs out. Clients from [`Client::from_pool`] have
//!   no listener and wait on the server, one pooled connection per waiter
//!   ([`Client::from_pool_with_listener`] gives them one).
//! - **Time** is the server's: `expires_at` is the server's clock; the watchdog keeps a local
//!   monotonic deadline that never runs later than the server's expiry.

#![warn(missing_docs)]

mod builder;
mod client;
mod error;
mod guard;
mod sql;
mod waiting;
mod watchdog;

pub use builder::{DEFAULT_TTL, LockBuilder};
pub use client::{Client, DEFAULT_POOL_SIZE, IntoLockBuilder};
/// The connection pool crate, re-exported for [`Client::from_pool`].
pub use deadpool_postgres;
pub use error::{Error, ServerMessage};
pub use guard::{Guard, Lease, LockInfo};
pub use tokio_util::sync::CancellationToken;
