//! `dlock_watch` / `dlock_unwatch`: being told, on this session's connection, when a key may
//! have become free.

use crate::locks::watchers;
use dlock_core::key::key_hash;

/// Watches `key`; its NOTIFY channel.
pub fn watch(key: &str) -> String {
    let hash = key_hash(key);
    watchers::watch(hash);
    watchers::channel(hash)
}

/// Ends the watch of `key`; whether there was one.
pub fn unwatch(key: &str) -> bool {
    watchers::unwatch(key_hash(key))
}
