//! Keys spread over several dlock servers: a shard map read from TOML or given in code
//! ([`ShardsConfig`]), a client that sends every call on a key to the server the map says it
//! belongs to ([`ShardedClient`]), and the operator's change of the map on every server
//! ([`apply`]). Routing is dlock-core's (`dlock_core::shards`): rendezvous hashing over the
//! servers' names, on the key's hash tag if it has one. Servers check the map: a key is granted
//! only by its server, only to a client whose map is not newer, and a key that moves waits
//! until its old server holds it no more.

mod apply;
mod client;
mod config;
mod error;

pub use apply::{Applied, ApplyError, ApplyOptions, Progress, apply};
pub use client::{IntoRoutedLock, ShardedClient, ShardedClientBuilder};
pub use config::ShardsConfig;
pub use error::ShardsError;
