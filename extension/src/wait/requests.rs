//! The wait table in shared memory (only with `shared_preload_libraries = 'dlock'`): slots where
//! the head of a key's queue publishes what it asks for (key, owner, role, ttl). Whoever frees
//! that key can then grant it to the head **in its own transaction** (a direct hand-off): the
//! head wakes to a lease that is already committed and durable, and returns without a WAL flush
//! of its own.
//!
//! `dlock.wait_slots` sizes the table (default: one slot per backend, so it never runs out). A
//! head takes a slot from a free list and finds none only when the DBA made the table smaller
//! than the number of keys waited on at once; it then grants itself when woken, as without
//! preload. Releasers find a head's slot through its proc number (`by_proc`).
//!
//! Slot states: `IDLE` → `WAITING` (the head published) → `OFFERED` (a releaser wrote the grant
//! in its open transaction) → `GRANTED` at the releaser's commit, or back to `WAITING` at its
//! abort. Offers are only made under the key lock, which the releaser holds until its
//! transaction has ended, so a head that holds the key lock never sees `OFFERED`. A sequence
//! number per publication keeps a late commit from touching a slot that was published again.

use crate::pg::pending::Pending;
use crate::pg::proc::Proc;
use crate::pg::version;
use crate::wait::request_slots::{GRANTED, IDLE, OFFERED, WAITING, with_table};
use dlock_core::lease::{Kind, Request as LeaseRequest};
use dlock_core::limits::{MAX_KEY_BYTES, MAX_OWNER_BYTES};
use pgrx::pg_sys;
use std::cell::{Cell, RefCell};

pub use crate::wait::request_slots::{enabled, request, startup};

fn my_proc() -> usize {
    version::my_proc_number()
}

/// What a head asks for, as published in its slot.
pub struct Request {
    pub owner: String,
    pub role: u32,
    pub ttl_us: i64,
    pub pid: i32,
    pub kind: Kind,
    pub max_holders: Option<i32>,
    pub lock_delay: i64,
}

/// The head publishes its request (a TTL lease of `key` for `owner`, as `request` asks). False
/// without a table or a free slot.
pub fn publish(key: &str, hash: u64, owner: &str, role: u32, ttl_us: i64, request: &LeaseRequest) -> bool {
    if key.len() > MAX_KEY_BYTES || owner.len() > MAX_OWNER_BYTES {
        return false;
    }
    // SAFETY: set at backend start.
    let pid = unsafe { pg_sys::MyProcPid };
    let published = with_table(|t| {
        let Some(index) = t.take_slot(my_proc()) else { return false };
        let s = t.slot(index);
        s.seq = s.seq.wrapping_add(1);
        s.state = WAITING;
        s.pid = pid;
        s.role = role;
        s.hash = hash;
        s.ttl_us = ttl_us;
        s.kind = request.kind.code();
        s.max_holders = request.max_holders.unwrap_or(0);
        s.lock_delay = request.lock_delay;
        s.fence = 0;
        s.commit_lsn = 0;
        s.key_len = key.len() as u16;
        s.owner_len = owner.len() as u16;
        s.key[..key.len()].copy_from_slice(key.as_bytes());
        s.owner[..owner.len()].copy_from_slice(owner.as_bytes());
        true
    })
    .unwrap_or(false);
    PUBLISHED.with(|p| p.set(published));
    published
}

/// What the head finds in its slot.
pub enum Answer {
    /// Nothing yet (or no table).
    Waiting,
    /// A releaser's transaction is granting to us and has not ended yet.
    Offered,
    /// A releaser granted us the lease with this fence; it is committed locally, with its
    /// commit record ending at this WAL position (see `Handed::settle`).
    Granted(Handed),
}

/// A lease a releaser granted us, committed in its transaction.
#[derive(Clone, Copy, Debug)]
pub struct Handed {
    pub fence: i64,
    commit_lsn: u64,
}

impl Handed {
    /// Makes the grant as durable as this session's own commit would have been before it is
    /// reported: flushed locally, and replicated to the synchronous standbys when the session
    /// asks for that. The releaser's commit normally did both already, but its wait for the
    /// standbys can be cancelled (it then commits locally with a WARNING to *its* client), and
    /// it may run with a weaker `synchronous_commit` than ours.
    pub fn settle(self) -> i64 {
        crate::stats::note_handed();
        // SAFETY: the WAL machinery's own waits, on a position of a committed record; a cancel
        // of the standby wait ends it with a WARNING, as for any commit.
        unsafe {
            if pg_sys::synchronous_commit > pg_sys::SyncCommitLevel::SYNCHRONOUS_COMMIT_OFF as i32 {
                pg_sys::XLogFlush(self.commit_lsn);
            }
            pg_sys::SyncRepWaitForLSN(self.commit_lsn, true);
        }
        self.fence
    }
}

/// The head reads its slot.
pub fn answer() -> Answer {
    with_table(|t| {
        let Some(index) = t.slot_of(my_proc()) else { return Answer::Waiting };
        let s = t.slot(index);
        match s.state {
            GRANTED => Answer::Granted(Handed { fence: s.fence, commit_lsn: s.commit_lsn }),
            OFFERED => Answer::Offered,
            _ => Answer::Waiting,
        }
    })
    .unwrap_or(Answer::Waiting)
}

/// A releaser's transaction is granting to the head right now: wait for it to end (the key
/// lock) and ask again.
pub struct InFlight;

/// The head withdraws its request: `Ok(Some(handed))` if a releaser's grant had already
/// committed (the head takes it rather than losing it), `Err(InFlight)` while one is in flight.
pub fn withdraw() -> Result<Option<Handed>, InFlight> {
    let outcome = with_table(|t| {
        let proc = my_proc();
        let Some(index) = t.slot_of(proc) else { return Ok(None) };
        let s = t.slot(index);
        match s.state {
            OFFERED => Err(InFlight),
            state => {
                s.state = IDLE;
                let handed =
                    (state == GRANTED).then_some(Handed { fence: s.fence, commit_lsn: s.commit_lsn });
                t.put_slot(proc);
                Ok(handed)
            }
        }
    })
    .unwrap_or(Ok(None));
    if outcome.is_ok() {
        PUBLISHED.with(|p| p.set(false));
    }
    outcome
}

/// The head's wait ended in an error (cancel, timeout, the client gone): forget the request.
/// An offer in flight at this very moment still commits; that lease then runs out by its ttl.
pub fn abandon() {
    if PUBLISHED.with(|p| p.replace(false)) {
        with_table(|t| {
            let proc = my_proc();
            if let Some(index) = t.slot_of(proc) {
                t.slot(index).state = IDLE;
                t.put_slot(proc);
            }
        });
    }
}

/// While a head's request is published: dropped, it abandons the request (a no-op once
/// withdrawn), so that an error ending the wait takes it out as it unwinds, before the client
/// hears of the error, rather than at the transaction's abort.
pub struct AbandonOnDrop;

impl Drop for AbandonOnDrop {
    fn drop(&mut self) {
        abandon();
    }
}

/// A publication a releaser may grant: the slot and its sequence number.
#[derive(Clone, Copy)]
pub struct Ticket {
    slot: usize,
    seq: u64,
}

/// A releaser holding the key lock: the request of the head with proc number `proc`, if it
/// waits for exactly this key; marks nothing yet.
pub fn request_for(proc: usize, key: &str, hash: u64) -> Option<(Request, Ticket)> {
    with_table(|t| {
        let slot = t.slot_of(proc)?;
        let s = t.slot(slot);
        let same = s.state == WAITING && s.hash == hash && &s.key[..s.key_len as usize] == key.as_bytes();
        same.then(|| {
            let owner = String::from_utf8_lossy(&s.owner[..s.owner_len as usize]).into_owned();
            let request = Request {
                owner,
                role: s.role,
                ttl_us: s.ttl_us,
                pid: s.pid,
                kind: Kind::from_code(s.kind).unwrap_or(Kind::Exclusive),
                max_holders: (s.max_holders > 0).then_some(s.max_holders),
                lock_delay: s.lock_delay,
            };
            (request, Ticket { slot, seq: s.seq })
        })
    })
    .flatten()
}

thread_local! {
    /// Offers in flight in this transaction, by subtransaction: a rolled-back savepoint undid
    /// the grant it wrote, so its offers go back to waiting (`sub_abort`).
    static OFFERS: RefCell<Pending<(Ticket, i64)>> = const { RefCell::new(Pending::new()) };
    /// Whether this backend's slot holds a request of its own.
    static PUBLISHED: Cell<bool> = const { Cell::new(false) };
}

/// Whether this transaction granted a key to a waiting head (it cannot be prepared then).
pub fn has_offers() -> bool {
    OFFERS.with(|o| !o.borrow().is_empty())
}

/// The releaser wrote the grant for the head holding `ticket`.
pub fn offer(ticket: Ticket, fence: i64) {
    let marked = with_table(|t| {
        let s = t.slot(ticket.slot);
        let current = s.seq == ticket.seq && s.state == WAITING;
        if current {
            s.state = OFFERED;
            s.fence = fence;
        }
        current
    });
    if marked == Some(true) {
        OFFERS.with(|o| o.borrow_mut().push((ticket, fence)));
    }
}

/// The releaser's transaction ended: its offers become grants (commit) or are taken back.
pub fn settle(commit: bool) {
    settle_offers(OFFERS.with(|o| o.borrow_mut().take()), commit);
}

/// Subtransaction `sub` ended: its offers are its parent's, or (rolled back) waiting again.
pub fn settle_sub(sub: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId, commit: bool) {
    if commit {
        OFFERS.with(|o| o.borrow_mut().sub_commit(sub, parent));
    } else {
        settle_offers(OFFERS.with(|o| o.borrow_mut().sub_abort(sub)), false);
    }
}

fn settle_offers(offers: Vec<(Ticket, i64)>, commit: bool) {
    // SAFETY: set by RecordTransactionCommit, before the commit callbacks run.
    let commit_lsn = unsafe { pg_sys::XactLastCommitEnd };
    for (ticket, fence) in offers {
        with_table(|t| {
            let s = t.slot(ticket.slot);
            if s.seq == ticket.seq && s.state == OFFERED && s.fence == fence {
                s.state = if commit { GRANTED } else { WAITING };
                s.commit_lsn = commit_lsn;
            }
        });
    }
}

/// The proc number of a backend, by which its slot is found.
pub fn index_of(proc: Proc) -> usize {
    proc.number()
}
