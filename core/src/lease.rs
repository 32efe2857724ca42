//! The lease rules of the contract as pure functions: given the leases of a key (read under its
//! key lock, liveness decided by the caller) and the caller, decide what a call answers and what
//! it changes. No I/O here, so every rule is unit-tested without a server.
//!
//! A key has any number of holders, one row each (one per owner string): one exclusive lease
//! (`dlock_acquire`, and an election's leader), or any number of shared ones (`dlock_acquire_shared`,
//! at most `max_holders` of them for a semaphore).

use crate::time::{INFINITY, Micros, Timestamp, expiry};

/// What a lease holds its key as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `dlock_acquire`: alone.
    Exclusive,
    /// `dlock_acquire_shared`: beside other shared holders.
    Shared,
    /// `dlock_campaign`: alone, as the election's leader.
    Leader,
}

impl Kind {
    /// Shared leases exclude the other two kinds, which exclude everything.
    pub fn is_shared(self) -> bool {
        self == Kind::Shared
    }

    /// The kind's code in the lease table.
    pub fn code(self) -> u8 {
        match self {
            Kind::Exclusive => b'x',
            Kind::Shared => b's',
            Kind::Leader => b'e',
        }
    }

    /// The kind of a code from the lease table.
    pub fn from_code(code: u8) -> Option<Kind> {
        match code {
            b'x' => Some(Kind::Exclusive),
            b's' => Some(Kind::Shared),
            b'e' => Some(Kind::Leader),
            _ => None,
        }
    }

    /// What a lease of this kind is, for messages.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::Exclusive => "an exclusive lease",
            Kind::Shared => "a shared lease",
            Kind::Leader => "the election's lead",
        }
    }

    /// As `dlock_locks.mode` shows it.
    pub fn mode(self) -> &'static str {
        if self.is_shared() { "shared" } else { "exclusive" }
    }
}

/// One row of the lease table: one holder of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub owner: String,
    /// The role that took the lease (its OID).
    pub role: u32,
    pub fence: i64,
    pub hold_count: i32,
    pub acquired_at: Timestamp,
    /// [`INFINITY`] for a session-bound lease.
    pub expires_at: Timestamp,
    /// The backend that last acquired it; for a session-bound lease, the session it is bound to.
    pub holder_pid: i32,
    pub kind: Kind,
    /// A semaphore's number of permits (shared leases), `None`: no limit.
    pub max_holders: Option<i32>,
    /// How long the key stays held back after this lease expires (not when released).
    pub lock_delay: Micros,
    /// An election leader's `info`.
    pub info: Option<String>,
}

impl Lease {
    /// A session-bound lease (`ttl NULL`) never expires; it ends with its session.
    pub fn is_session_bound(&self) -> bool {
        self.expires_at == INFINITY
    }

    /// Its TTL has not run out at `now` (a lease is dead at its `expires_at`, not after).
    pub fn unexpired_at(&self, now: Timestamp) -> bool {
        self.expires_at > now
    }

    /// When the key is free of this lease once it expired: after its lock-delay.
    pub fn delay_ends(&self) -> Timestamp {
        if self.is_session_bound() {
            self.expires_at
        } else {
            self.expires_at.saturating_add(self.lock_delay)
        }
    }

    /// What a caller blocked by this lease waits for.
    pub fn blocker(&self) -> Blocker {
        if self.is_session_bound() { Blocker::Session(self.fence) } else { Blocker::Expiry(self.expires_at) }
    }
}

/// Who is calling: the role the call runs for and the owner string it presents.
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub role: u32,
    pub owner: &'a str,
    /// Member of `dlock_admin` or superuser.
    pub admin: bool,
}

/// What an acquire asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    pub kind: Kind,
    /// For a shared request: the semaphore's permits (`None`: no limit).
    pub max_holders: Option<i32>,
    /// `None`: session-bound.
    pub ttl: Option<Micros>,
    pub lock_delay: Micros,
}

impl Request {
    /// An exclusive request (`dlock_acquire`).
    pub fn exclusive(ttl: Option<Micros>) -> Request {
        Request { kind: Kind::Exclusive, max_holders: None, ttl, lock_delay: 0 }
    }
}

/// The leases of a key as the store sees them, liveness already decided.
#[derive(Debug, Clone, Default)]
pub struct KeyState<'a> {
    /// Leases someone holds.
    pub live: Vec<&'a Lease>,
    /// The latest end of a lock-delay among leases that expired and still hold the key back.
    pub delayed_until: Option<Timestamp>,
    /// Those leases.
    pub held_back_by: Vec<&'a Lease>,
}

impl<'a> KeyState<'a> {
    /// No lease at all.
    pub fn free() -> KeyState<'a> {
        KeyState::default()
    }

    /// Whether nobody holds the key and no lock-delay holds it back.
    pub fn is_free(&self) -> bool {
        self.live.is_empty() && self.delayed_until.is_none()
    }

    /// Sorts `rows` by what they are at `now`: `alive` says whether a lease is held (a TTL
    /// lease until its expiry, a session-bound one while its session lives).
    pub fn of(rows: &'a [Lease], now: Timestamp, mut alive: impl FnMut(&Lease) -> bool) -> KeyState<'a> {
        let mut state = KeyState::free();
        for lease in rows {
            if alive(lease) {
                state.live.push(lease);
            } else if !lease.is_session_bound() && lease.delay_ends() > now {
                state.delayed_until = state.delayed_until.max(Some(lease.delay_ends()));
                state.held_back_by.push(lease);
            }
        }
        state
    }

    /// Whether `lease` (one of the rows this state was made of) still counts: held, or holding
    /// the key back. A row that does not is over and may be deleted.
    pub fn counts(&self, lease: &Lease) -> bool {
        self.live.iter().chain(&self.held_back_by).any(|l| std::ptr::eq(*l, lease))
    }

    /// The live lease of `owner`, if any.
    pub fn of_owner(&self, owner: &str) -> Option<&'a Lease> {
        self.live.iter().copied().find(|l| l.owner == owner)
    }

    /// The live leader of an election, if any.
    pub fn leader(&self) -> Option<&'a Lease> {
        self.live.iter().copied().find(|l| l.kind == Kind::Leader)
    }
}

/// What an acquire does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// A new lease with a fresh fence.
    Grant { expires_at: Timestamp },
    /// The holder again: same fence, one more hold; `bind_session` when a TTL lease becomes
    /// session-bound (reentered with `ttl NULL`) and must be tied to the caller's session.
    Reenter { fence: i64, expires_at: Timestamp, bind_session: bool },
    /// Not now: held by others, held back by a lock-delay, or others queue for it first.
    Busy(Blocker),
    /// The owner holds the key in the other mode: no silent upgrade or downgrade.
    ModeConflict { held: Kind },
    /// A semaphore's holders hold it with another number of permits.
    SizeMismatch { held: Option<i32> },
}

/// What a busy key waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocker {
    /// A TTL lease, dead at this time unless renewed (or a lock-delay, over at this time).
    Expiry(Timestamp),
    /// A session-bound lease: its release or the end of the session bound to this fence.
    Session(i64),
    /// Other sessions queue for the key first.
    Queue,
}

/// What `dlock_renew` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renew {
    /// New `expires_at` to store and return.
    Extend(Timestamp),
    /// Session-bound: nothing to extend; answers `'infinity'`.
    SessionBound,
    /// Not a holder, expired or unknown: `NULL`, nothing changes.
    NotHeld,
    /// The right owner string from another role: 42501.
    Forbidden,
}

/// What `dlock_release` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Release {
    /// One hold fewer; the lease stays.
    Decrement,
    /// Last hold: the lease ends.
    Free,
    /// Not a holder, expired or unknown: `false`, nothing changes.
    NotHeld,
    /// The right owner string from another role: 42501.
    Forbidden,
}

/// How the caller stands to its own live lease for renew and release.
enum Standing<'a> {
    Holder(&'a Lease),
    ForeignRole,
    Stranger,
}

fn standing<'a>(state: &KeyState<'a>, caller: &Caller) -> Standing<'a> {
    match state.of_owner(caller.owner) {
        None => Standing::Stranger,
        Some(lease) if lease.role == caller.role || caller.admin => Standing::Holder(lease),
        Some(_) => Standing::ForeignRole,
    }
}

/// What waits for every lease of `leases` to end: a session-bound one's session (releases of the
/// others wake the waiter too), else the latest expiry.
fn blocker_of_all(leases: &[&Lease]) -> Blocker {
    match leases.iter().find(|l| l.is_session_bound()) {
        Some(bound) => bound.blocker(),
        None => Blocker::Expiry(leases.iter().map(|l| l.expires_at).max().unwrap_or(INFINITY)),
    }
}

/// What waits for any lease of `leases` to end (a semaphore's permit): the earliest expiry, else
/// a session-bound holder's session.
fn blocker_of_any(leases: &[&Lease]) -> Blocker {
    match leases.iter().filter(|l| !l.is_session_bound()).map(|l| l.expires_at).min() {
        Some(first) => Blocker::Expiry(first),
        None => leases.first().map_or(Blocker::Queue, |l| l.blocker()),
    }
}

/// The acquire rules (contract rules 1–5 and 7, and version 2's modes, semaphores and
/// lock-delay). Reentry needs the same owner string *and* role, and the same mode (and
/// permits). `queue_ahead`: other sessions already wait for this key, so a newcomer must not take
/// it from under them (it waits too, or gets NULL); the holder's reentry never queues.
pub fn acquire(
    state: &KeyState,
    caller: &Caller,
    request: &Request,
    now: Timestamp,
    queue_ahead: bool,
) -> Acquire {
    let expires_at = expiry(now, request.ttl);
    if let Some(own) = state.of_owner(caller.owner) {
        if own.role != caller.role {
            // The owner string is another role's: its lease, not ours to reenter.
            return Acquire::Busy(own.blocker());
        }
        if own.kind != request.kind {
            // Also a lock and an election of the same name: one is not the other.
            return Acquire::ModeConflict { held: own.kind };
        }
        if own.kind.is_shared() && own.max_holders != request.max_holders {
            return Acquire::SizeMismatch { held: own.max_holders };
        }
        return Acquire::Reenter {
            fence: own.fence,
            expires_at: own.expires_at.max(expires_at),
            bind_session: request.ttl.is_none() && !own.is_session_bound(),
        };
    }
    // A semaphore's size is its holders': a request with another size is refused whether or
    // not others wait (it must not join the queue only to be refused at its head).
    if request.kind.is_shared()
        && let Some(holder) = state.live.iter().find(|l| l.kind.is_shared())
        && holder.max_holders != request.max_holders
    {
        return Acquire::SizeMismatch { held: holder.max_holders };
    }
    if queue_ahead {
        return Acquire::Busy(Blocker::Queue);
    }
    if let Some(until) = state.delayed_until {
        return Acquire::Busy(Blocker::Expiry(until));
    }
    if !request.kind.is_shared() {
        return if state.live.is_empty() {
            Acquire::Grant { expires_at }
        } else {
            Acquire::Busy(blocker_of_all(&state.live))
        };
    }
    if let Some(exclusive) = state.live.iter().find(|l| !l.kind.is_shared()) {
        return Acquire::Busy(exclusive.blocker());
    }
    match request.max_holders {
        Some(permits) if state.live.len() >= permits.max(0) as usize => {
            Acquire::Busy(blocker_of_any(&state.live))
        }
        _ => Acquire::Grant { expires_at },
    }
}

/// `dlock_renew`: the holder of a live lease sets `expires_at = now + ttl`.
pub fn renew(state: &KeyState, caller: &Caller, ttl: Micros, now: Timestamp) -> Renew {
    match standing(state, caller) {
        Standing::Holder(lease) if lease.is_session_bound() => Renew::SessionBound,
        Standing::Holder(_) => Renew::Extend(expiry(now, Some(ttl))),
        Standing::ForeignRole => Renew::Forbidden,
        Standing::Stranger => Renew::NotHeld,
    }
}

/// `dlock_release`: the holder of a live lease gives up one hold.
pub fn release(state: &KeyState, caller: &Caller) -> Release {
    match standing(state, caller) {
        Standing::Holder(lease) if lease.hold_count > 1 => Release::Decrement,
        Standing::Holder(_) => Release::Free,
        Standing::ForeignRole => Release::Forbidden,
        Standing::Stranger => Release::NotHeld,
    }
}

#[cfg(test)]
mod tests;
