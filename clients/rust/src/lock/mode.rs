//! The two kinds of lease the extension keeps, each with its statements and its limits.

use dlock_core::limits::{MAX_FAST_KEY_BYTES, MAX_FAST_OWNER_BYTES, MAX_KEY_BYTES, MAX_OWNER_BYTES};

use crate::statements::Statements;

/// Which kind of lease a lock is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Mode {
    /// `dlock_acquire` and friends: a table row, WAL-logged and transactional.
    Durable,
    /// `dlock_fast_*`: the server's shared memory, no WAL (see
    /// [`LockBuilder::fast`](crate::LockBuilder::fast)). Fast keys are a key space of their own.
    Fast,
}

impl Mode {
    /// The acquire statement: fence (or NULL), server clock, statement start.
    pub(crate) fn acquire(self, statements: &Statements) -> &str {
        match self {
            Mode::Durable => &statements.acquire,
            Mode::Fast => &statements.fast_acquire,
        }
    }

    /// The one-shot try that also says when the key may be free (durable only: a fast try is
    /// `acquire` without a wait, and says nothing about when to retry).
    pub(crate) fn try_acquire(self, statements: &Statements) -> Option<&str> {
        match self {
            Mode::Durable => Some(&statements.try_acquire),
            Mode::Fast => None,
        }
    }

    /// The renew statement: the new expiry, or NULL.
    pub(crate) fn renew(self, statements: &Statements) -> &str {
        match self {
            Mode::Durable => &statements.renew,
            Mode::Fast => &statements.fast_renew,
        }
    }

    /// The release statement: whether the lease was ours.
    pub(crate) fn release(self, statements: &Statements) -> &str {
        match self {
            Mode::Durable => &statements.release,
            Mode::Fast => &statements.fast_release,
        }
    }

    /// The fence check statement.
    pub(crate) fn holds(self, statements: &Statements) -> &str {
        match self {
            Mode::Durable => &statements.holds,
            Mode::Fast => &statements.fast_holds,
        }
    }

    /// Longest key, in bytes (the contract's limits; fast entries are fixed-size).
    pub(crate) fn max_key_bytes(self) -> usize {
        match self {
            Mode::Durable => MAX_KEY_BYTES,
            Mode::Fast => MAX_FAST_KEY_BYTES,
        }
    }

    /// Longest owner, in bytes.
    pub(crate) fn max_owner_bytes(self) -> usize {
        match self {
            Mode::Durable => MAX_OWNER_BYTES,
            Mode::Fast => MAX_FAST_OWNER_BYTES,
        }
    }

    /// Whether a lease of this kind can be session-bound (`ttl NULL`): fast leases cannot.
    pub(crate) fn allows_session_bound(self) -> bool {
        self == Mode::Durable
    }

    /// Whether a release of a key of this kind notifies its watchers (`dlock_watch`), so that
    /// a wait can sleep on the client's listener: durable keys only; fast waits wait on the
    /// server (or retry, behind a transaction pooler).
    pub(crate) fn notifies_watchers(self) -> bool {
        self == Mode::Durable
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_mode_has_its_own_statements_and_limits() {
        let statements = Statements::new("dlock");
        assert!(Mode::Durable.acquire(&statements).contains(".dlock_acquire("));
        assert!(Mode::Fast.acquire(&statements).contains(".dlock_fast_acquire("));
        assert!(Mode::Fast.try_acquire(&statements).is_none());
        for mode in [Mode::Durable, Mode::Fast] {
            let prefix = if mode == Mode::Fast { "dlock_fast_" } else { "dlock_" };
            for statement in [mode.renew(&statements), mode.release(&statements), mode.holds(&statements)] {
                assert!(statement.contains(&format!(".{prefix}")), "{mode:?}: {statement}");
            }
        }
        assert_eq!((Mode::Durable.max_key_bytes(), Mode::Durable.max_owner_bytes()), (1024, 256));
        assert_eq!((Mode::Fast.max_key_bytes(), Mode::Fast.max_owner_bytes()), (256, 128));
        assert!(Mode::Durable.allows_session_bound() && !Mode::Fast.allows_session_bound());
    }
}
