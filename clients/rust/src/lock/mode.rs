//! The two kinds of lease the extension keeps, each with its statements (their argument rules
//! are `dlock_core`'s, applied in [`crate::args`]).

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
    fn each_mode_has_its_own_statements() {
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
        assert!(Mode::Durable.notifies_watchers() && !Mode::Fast.notifies_watchers());
    }
}
