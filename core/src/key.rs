//! The 64-bit hash a key's locks are taken on. It is part of the lock format: every backend,
//! across restarts and across two library versions running side by side during an upgrade,
//! must take the same lock for the same key, so it never changes within a major version.

use xxhash_rust::xxh3::xxh3_64_with_seed;

/// Seed of the key hash: "dlock_v1".
const SEED: u64 = 0x646c_6f63_6b5f_7631;

/// The hash of `key`'s bytes (byte-exact: look-alike keys hash apart).
///
/// ```
/// // Pinned: a build that changes the hash would let two versions lock one key twice.
/// assert_eq!(dlock_core::key::key_hash("orders:42"), 0xcd81_a986_9476_4246);
/// ```
pub fn key_hash(key: &str) -> u64 {
    xxh3_64_with_seed(key.as_bytes(), SEED)
}

#[cfg(test)]
mod tests {
    use super::key_hash;

    #[test]
    fn the_hash_is_pinned_and_byte_exact() {
        assert_eq!(key_hash(""), 0x2594_8232_5be4_bb11);
        assert_ne!(key_hash("orders:42"), key_hash("orders:43"));
        // Look-alike keys (NFC vs NFD "é") are distinct keys.
        assert_ne!(key_hash("caf\u{e9}"), key_hash("cafe\u{301}"));
    }
}
