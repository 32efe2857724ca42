//! `dlock_watch` / `dlock_unwatch`: being told, on this session's connection, when a key may
//! have become free.

use crate::locks::watch;
use dlock_core::key::key_hash;

/// Watches `key`; its NOTIFY channel.
pub fn watch(key: &str) -> String {
    let hash = key_hash(key);
    watch::watch(hash);
    watch::channel(hash)
}

/// Ends the watch of `key`; whether there was one.
pub fn unwatch(key: &str) -> bool {
    watch::unwatch(key_hash(key))
}
