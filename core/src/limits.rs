//! The size limits of the contract, in bytes (not characters). The server enforces them; the
//! client checks them too, to fail before a round trip.

/// Longest durable key.
pub const MAX_KEY_BYTES: usize = 1024;
/// Longest durable owner string.
pub const MAX_OWNER_BYTES: usize = 256;
/// Longest fast-mode key (entries are fixed-size in shared memory).
pub const MAX_FAST_KEY_BYTES: usize = 256;
/// Longest fast-mode owner string.
pub const MAX_FAST_OWNER_BYTES: usize = 128;
/// Most keys of one `dlock_acquire_all`.
pub const MAX_KEYS_PER_CALL: usize = 64;
/// Longest election `info`.
pub const MAX_INFO_BYTES: usize = 1024;
