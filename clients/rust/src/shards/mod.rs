//! Keys spread over several dlock servers (a preview): a shard map read from TOML or given in
//! code ([`ShardsConfig`]), and a client that sends every call on a key to the server the map
//! says it belongs to ([`ShardedClient`]). Routing is dlock-core's (`dlock_core::shards`):
//! rendezvous hashing over the servers' names, on the key's hash tag if it has one.
//!
//! Servers do not check the map yet, so a map must not change while leases are held: a key
//! that moves would be granted by its new server while its old one still holds it.

mod client;
mod config;
mod error;

pub use client::{IntoRoutedLock, ShardedClient, ShardedClientBuilder};
pub use config::ShardsConfig;
pub use error::ShardsError;
