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
//! # More than a mutex
//!
//! The contract's version 2 primitives (dlock 0.2.0 on the server), each with the same
//! watchdog, [`lost`](Guard::lost) token and fences as an exclusive lock:
//! - **read-write locks**: [`LockBuilder::shared`] — readers side by side, never beside a
//!   writer; asking for a key in the other mode than this owner holds it in is
//!   [`Error::ModeConflict`];
//! - **semaphores**: [`Client::semaphore`]`(key, n)` — at most `n` holders (each an owner: use
//!   [`Client::with_owner`] for tasks of one process that count separately);
//! - **multi-key locks**: [`Client::lock_all`] — every key or none, no deadlock whatever the
//!   order, one [`MultiGuard`] renewing and releasing them all (its waits wait on the server);
//! - **elections**: [`Client::election`] — [`Election::campaign`] returns a [`Leadership`]
//!   whose term is a fence; [`Election::leader`] shows who leads; [`Election::observe`]
//!   streams changes of leader as the server notifies them;
//! - **lock-delay**: [`LockBuilder::lock_delay`] — a lease that expires (rather than being
//!   released) holds its key back a while longer;
//! - **waiting for a key to be free** without taking it: [`Client::wait_free`].
//!
//! ```no_run
//! # async fn example(client: dlock_client::Client) -> Result<(), dlock_client::Error> {
//! use std::time::Duration;
//!
//! let read = client.lock("catalog").shared().wait(Duration::from_secs(5)).acquire().await?;
//! let permit = client.semaphore("gpu", 3).wait(Duration::from_secs(60)).acquire().await?;
//! let both = client.lock_all(["account:1", "account:2"]).wait(Duration::from_secs(5)).acquire().await?;
//! let lead = client.election("scheduler").campaign("node-1:8080").await?;
//! println!("leading in term {} with fences {:?}", lead.term(), both.fences());
//! # drop((read, permit, both, lead));
//! # Ok(())
//! # }
//! ```
//!
//! **Several servers.** A [`ShardedClient`] holds a client per server of a shard map
//! ([`ShardsConfig`], from a TOML file or from code) and sends every call on a key to the server
//! the map names for it ([`ShardedClient::locate`]); keys with one hash tag (`{order-7}:a`,
//! `{order-7}:b`) land together, and a [`ShardedClient::lock_all`] across servers is refused
//! before anything is sent. The servers check the map ([`Error::WrongServer`],
//! [`Error::MapBehind`]); [`apply_shard_map`] changes it on every server, moving keys without
//! two holders.
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
//!   ([`Client::from_pool_with_listener`] gives them one). Behind a transaction pooler waits
//!   retry instead (see below).
//! - **Time** is the server's: `expires_at` is the server's clock; the watchdog keeps a local
//!   monotonic deadline that never runs later than the server's expiry.
//! - **The extension's schema.** The client finds the schema dlock is installed in (once per
//!   client, on first use) and calls it qualified (`"dlock".dlock_acquire(...)`), so a
//!   `public.dlock_acquire` planted by someone who may create objects in `public` captures
//!   nothing. Install it in a schema of its own: `CREATE SCHEMA dlock; CREATE EXTENSION dlock
//!   SCHEMA dlock;`. Where it is not installed, every call is [`Error::NotInstalled`].
//! - **TLS** follows libpq's `sslmode` (`disable`, `prefer` — the default —, `require`,
//!   `verify-ca`, `verify-full`) and `sslrootcert`, from the connection string or `PGSSLMODE`
//!   and `PGSSLROOTCERT` (see [`ClientBuilder`]), for the pool and the listener alike. A
//!   certificate that cannot be verified is [`Error::Tls`].
//! - **Errors** are one [`Error`]: a call the server refused keeps what it said
//!   ([`ServerError`]), with the driver's error as its source and the SQLSTATE as
//!   [`Error::code`]. dlock's own conditions are variants of their own, told apart from
//!   PostgreSQL's errors of the same SQLSTATE by dlock's message (a `0A000` of PostgreSQL's is
//!   [`Error::Database`], never [`Error::ModeConflict`]). Arguments the contract refuses
//!   (empty or over-long keys and owners, a ttl of zero, an empty or over-long key list, ...)
//!   are [`Error::InvalidArgument`] before anything is sent, with the server's SQLSTATE and
//!   message.
//! - **Telemetry.** `tracing` spans `dlock.acquire`, `dlock.wait`, `dlock.renew` and
//!   `dlock.release` (level INFO) carry `key`, `fence` and `outcome` (`granted`, `busy`,
//!   `timeout`, `renewed`, `released`, `lost`, `error`); a lost lease is also a WARN event. With
//!   the `metrics` feature the client records, through the `metrics` facade and whatever
//!   recorder the application installed, the histogram `dlock_client_acquire_seconds` (waits
//!   included, label `outcome`) and the counter `dlock_client_leases_lost_total`.
//!
//! # Behind a transaction pooler
//!
//! Behind pgbouncer with `pool_mode = transaction` (or any pooler that lends a server
//! connection per transaction), say so: `Client::builder(url).pooler(PoolerMode::Transaction)`,
//! or `dlock_pooler=transaction` in the connection string. In the default mode the client
//! fails there: its named prepared statements are run on server connections that never saw
//! them (SQLSTATE 26000), and the LISTEN its waits rely on stays on whichever server connection
//! ran it, so releases go unnoticed.
//!
//! What you get in this mode:
//! - every call is one unnamed statement sent with its parameter types, in one round trip:
//!   nothing is prepared or left behind on the server connection;
//! - waits hold no server connection: the head of the client's local line for a key tries
//!   (`dlock_try_acquire` with no settle time), and while the key is busy sleeps between tries
//!   — from 10 ms, doubling, with a random half, up to
//!   [`ClientBuilder::max_poll_interval`] (250 ms) — never past the blocking lease's expiry,
//!   which the server tells; a thousand waiters cost the pooler no more server connections
//!   than the tries in flight;
//! - guards, fences, the watchdog's renewals, releases, `with_lock` and fast-mode leases work
//!   as usual (every call queues in the pooler like any other: size its pool so that renewals
//!   get through well within a ttl).
//!
//! What you lose:
//! - prompt wake-ups: a release is noticed at the next try, up to the longest pause later
//!   (and each waiting key costs the server a few tries per second);
//! - session-bound leases ([`LockBuilder::session_bound`]): refused with
//!   [`Error::Unsupported`], since the lease's session would be whichever server connection the
//!   pooler lent, which neither ends with the client nor carries its later calls;
//! - waits in the server's queue ([`LockBuilder::server_queue`]), and with them strict arrival
//!   order across clients: refused with [`Error::Unsupported`], since each would hold one of
//!   the pooler's server connections, and enough of them leave none for the holders' releases
//!   (a deadlock until leases expire). Between clients the first to try after a release wins;
//!   within a client, its waiters of a key still go in arrival order;
//! - a little speed per call: statements are parsed and planned each time.

#![warn(missing_docs)]

mod args;
mod client;
mod connect;
mod election;
mod error;
mod lock;
mod shards;
mod statements;
mod telemetry;
mod waiting;

pub use client::{Client, ClientBuilder, DEFAULT_POOL_SIZE, Expiry, IntoLockBuilder, LiveLease};
pub use connect::{PoolerMode, redact_conninfo};
/// The connection pool crate, re-exported for [`Client::from_pool`].
pub use deadpool_postgres;
/// The shard map a [`ShardedClient`] routes with, and why a map is refused (dlock-core's).
pub use dlock_core::shards::{MapError, ShardMap};
pub use election::{Election, Leader, LeaderChanges, Leadership};
pub use error::{Error, ServerError};
pub use lock::{DEFAULT_TTL, Guard, Lease, LockAllBuilder, LockBuilder, LockInfo, MultiGuard};
pub use shards::{
    Applied, ApplyError, ApplyOptions, IntoRoutedLock, Progress, ShardedClient, ShardedClientBuilder,
    ShardsConfig, ShardsError, apply as apply_shard_map,
};
/// The driver's SQLSTATE type, as [`Error::code`] gives it.
pub use tokio_postgres::error::SqlState;
pub use tokio_util::sync::CancellationToken;
