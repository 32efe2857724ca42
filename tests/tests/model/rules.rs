//! The model of the contract: the live leases of each key and the rules that decide what an
//! acquire, renew or release must answer. Pure: no server, no I/O.

use dlock_core::key::key_hash;

use super::{ADMIN, Actor, KEYS, Ttl, Who};

/// How a live lease ends on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// 60 s: not during the case.
    Long,
    /// With the session of its actor.
    Session,
}

/// What a lease holds its key as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Exclusive,
    /// Shared, with a semaphore's permits (`None`: no limit).
    Shared(Option<i32>),
}

impl Mode {
    /// As `dlock_locks.mode` shows it.
    pub(crate) fn shown(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared(_) => "shared",
        }
    }

    /// As `dlock_locks.max_holders` shows it.
    pub(crate) fn permits(self) -> Option<i32> {
        match self {
            Mode::Exclusive => None,
            Mode::Shared(permits) => permits,
        }
    }
}

/// A live lease in the model.
#[derive(Clone, Debug)]
pub(crate) struct Lease {
    pub(crate) holder: Actor,
    pub(crate) fence: i64,
    pub(crate) hold_count: i32,
    pub(crate) expiry: Expiry,
    pub(crate) mode: Mode,
}

/// The contract as a pure state machine over the keys of one case.
#[derive(Clone, Default)]
pub(crate) struct Model {
    /// The live leases of each key, oldest (smallest fence) first: one exclusive lease, or any
    /// number of shared ones.
    pub(crate) leases: [Vec<Lease>; KEYS],
    /// Every fence granted per key, in grant order.
    pub(crate) granted: [Vec<i64>; KEYS],
}

/// What an acquire of one key must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Decision {
    /// A new lease with a fence above every earlier one.
    Grant,
    /// The caller's own lease (its index among the key's leases): same fence, one hold more.
    Reenter(usize),
    /// NULL: why.
    Busy(&'static str),
    /// The owner holds the key in the other mode: 0A000.
    ModeConflict,
    /// A semaphore's holders hold it with another number of permits: 22023.
    SizeMismatch,
}

/// How a caller stands to its own live lease of a key, for renew and release.
pub(crate) enum Standing {
    /// Its lease, by index among the key's leases.
    Holder(usize),
    /// The right owner string from another role (not `dlock_admin`): 42501.
    ForeignRole,
    /// No live lease of this owner.
    Stranger,
}

impl Model {
    pub(crate) fn resolve(&self, who: Who, key: usize) -> Actor {
        match who {
            Who::Actor(a) => a,
            Who::HolderElse(a) => self.leases[key].first().map_or(a, |l| l.holder),
        }
    }

    /// The owner's lease of the key (one at most: the owner string is the holder's identity).
    pub(crate) fn own(&self, by: Actor, key: usize) -> Option<usize> {
        self.leases[key].iter().position(|l| l.holder.owner == by.owner)
    }

    pub(crate) fn standing(&self, by: Actor, key: usize) -> Standing {
        match self.own(by, key) {
            Some(i) if self.leases[key][i].holder.role == by.role || by.role == ADMIN => Standing::Holder(i),
            Some(_) => Standing::ForeignRole,
            None => Standing::Stranger,
        }
    }

    /// The acquire rules: reentry (same owner, role and mode, and permits), then the modes and
    /// the semaphore's permits. Nobody waits in the model, so no queue holds a newcomer back.
    pub(crate) fn decide(&self, by: Actor, key: usize, mode: Mode) -> Decision {
        let leases = &self.leases[key];
        if let Some(i) = self.own(by, key) {
            let own = &leases[i];
            if own.holder.role != by.role {
                return Decision::Busy("same owner, other role");
            }
            return match (own.mode, mode) {
                (held, wanted) if held == wanted => Decision::Reenter(i),
                (Mode::Shared(_), Mode::Shared(_)) => Decision::SizeMismatch,
                _ => Decision::ModeConflict,
            };
        }
        match mode {
            Mode::Exclusive if leases.is_empty() => Decision::Grant,
            Mode::Exclusive => Decision::Busy("held"),
            Mode::Shared(_) if leases.iter().any(|l| l.mode == Mode::Exclusive) => {
                Decision::Busy("held exclusively")
            }
            Mode::Shared(_) if leases.first().is_some_and(|l| l.mode != mode) => Decision::SizeMismatch,
            Mode::Shared(Some(n)) if leases.len() >= n as usize => Decision::Busy("semaphore full"),
            Mode::Shared(_) => Decision::Grant,
        }
    }

    /// Records a new grant of `key` answered with `fence`: above every earlier fence of the key.
    /// A lease with the short ttl is dead at once.
    pub(crate) fn grant(
        &mut self,
        by: Actor,
        key: usize,
        fence: i64,
        ttl: Ttl,
        mode: Mode,
    ) -> Result<(), String> {
        let highest = self.granted[key].iter().copied().max().unwrap_or(0);
        ensure!(fence > highest, "a new grant's fence {fence} must exceed every earlier one ({highest})");
        self.granted[key].push(fence);
        let expiry = match ttl {
            Ttl::Long => Expiry::Long,
            Ttl::Session => Expiry::Session,
            Ttl::Short => return Ok(()),
        };
        self.leases[key].push(Lease { holder: by, fence, hold_count: 1, expiry, mode });
        Ok(())
    }

    /// Records a reentry of lease `i` of `key` answered with `fence`: its own fence.
    pub(crate) fn reenter(
        &mut self,
        key: usize,
        i: usize,
        fence: Option<i64>,
        ttl: Ttl,
    ) -> Result<(), String> {
        let lease = &mut self.leases[key][i];
        ensure!(
            fence == Some(lease.fence),
            "reentry must return the same fence {}, got {fence:?}",
            lease.fence
        );
        lease.hold_count += 1;
        // expires_at = greatest(old, now + ttl): only ttl NULL changes how it ends.
        if ttl == Ttl::Session {
            lease.expiry = Expiry::Session;
        }
        Ok(())
    }
}

/// The order in which `dlock_acquire_all` visits keys (the global lock order: key hash, then
/// text; in the SQL-only edition, `DLOCK_SQL_EDITION`, the text's bytes, a declared
/// difference): the first key it cannot grant decides what the call answers.
pub(crate) fn lock_order(keys: &[usize], texts: &[String]) -> Vec<usize> {
    let mut order = keys.to_vec();
    if std::env::var_os("DLOCK_SQL_EDITION").is_some_and(|p| !p.is_empty()) {
        order.sort_by(|a, b| texts[*a].as_bytes().cmp(texts[*b].as_bytes()));
    } else {
        order.sort_by(|a, b| (key_hash(&texts[*a]), &texts[*a]).cmp(&(key_hash(&texts[*b]), &texts[*b])));
    }
    order
}
