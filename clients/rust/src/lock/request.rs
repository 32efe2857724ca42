//! What a single-key acquire asks for — an exclusive lease, a shared one (or a semaphore's
//! permit), or an election's lead — and which statements take it.

use std::time::Duration;

use super::Mode;
use crate::statements::Statements;

/// The kind of lease a single-key request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Alone on the key (`dlock_acquire`).
    Exclusive,
    /// Beside other shared holders, never beside an exclusive one (`dlock_acquire_shared`);
    /// with `max_holders`, one of at most that many (a counting semaphore).
    Shared { max_holders: Option<u32> },
    /// The lead of the election named by the key (`dlock_campaign`), with what
    /// `dlock_leader` shows of it.
    Leader { info: Option<String> },
}

/// The statements that take a request.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Calls<'a> {
    /// Waits up to `$4` on the server: the fence or NULL, and the two clock readings.
    pub(crate) acquire: &'a str,
    /// One try that never queues, then when to try again (`rows::tried`); `None` where
    /// `acquire` without a wait is the only try (fast mode, which says nothing about when).
    pub(crate) try_once: Option<&'a str>,
    /// Whether they take version 2's parameters (`primitives::REQUEST`) rather than key,
    /// owner, ttl and wait.
    pub(crate) v2: bool,
}

impl Kind {
    /// The statements for this kind of lease of `mode`, with `lock_delay`. Exclusive leases
    /// without a lock-delay keep version 1's calls, which every server has.
    pub(crate) fn calls<'a>(
        &self,
        mode: Mode,
        lock_delay: Duration,
        statements: &'a Statements,
    ) -> Calls<'a> {
        let v2 = &statements.primitives;
        let (acquire, try_once, v2) = match (self, mode) {
            (_, Mode::Fast) => (mode.acquire(statements), None, false),
            (Kind::Exclusive, Mode::Durable) if lock_delay.is_zero() => {
                (mode.acquire(statements), mode.try_acquire(statements), false)
            }
            (Kind::Exclusive, Mode::Durable) => (&*v2.acquire_delayed, Some(&*v2.try_delayed), true),
            (Kind::Shared { .. }, Mode::Durable) => (&*v2.acquire_shared, Some(&*v2.try_shared), true),
            (Kind::Leader { .. }, Mode::Durable) => (&*v2.campaign, Some(&*v2.try_campaign), true),
        };
        Calls { acquire, try_once, v2 }
    }

    /// `max_holders` as the server takes it (`None`: no limit, or not a shared lease).
    pub(crate) fn max_holders(&self) -> Option<u32> {
        match self {
            Kind::Shared { max_holders } => *max_holders,
            _ => None,
        }
    }

    /// The election's `info` (`None` for a lock).
    pub(crate) fn info(&self) -> Option<&str> {
        match self {
            Kind::Leader { info } => info.as_deref(),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_takes_its_own_statements() {
        let statements = Statements::new("dlock");
        let calls = |kind: Kind, mode, delay| kind.calls(mode, Duration::from_secs(delay), &statements);
        let plain = calls(Kind::Exclusive, Mode::Durable, 0);
        assert!(!plain.v2 && plain.acquire.contains(".dlock_acquire($1"));
        assert!(plain.try_once.is_some_and(|s| s.contains(".dlock_try_acquire(")));
        let delayed = calls(Kind::Exclusive, Mode::Durable, 5);
        assert!(delayed.v2 && delayed.acquire.contains("$5"));
        let shared = calls(Kind::Shared { max_holders: Some(3) }, Mode::Durable, 0);
        assert!(shared.v2 && shared.acquire.contains(".dlock_acquire_shared("));
        assert!(shared.try_once.is_some_and(|s| s.contains("'0 seconds'")), "a try never queues");
        let leader = calls(Kind::Leader { info: None }, Mode::Durable, 0);
        assert!(leader.v2 && leader.acquire.contains(".dlock_campaign("));
        let fast = calls(Kind::Exclusive, Mode::Fast, 0);
        assert!(!fast.v2 && fast.try_once.is_none() && fast.acquire.contains(".dlock_fast_acquire("));
    }
}
