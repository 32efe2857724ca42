//! Fast mode's operations on its table: acquire (with waiting), renew, release, holds, and
//! the live leases.

use super::lease_table::{
    Books, Entry, Found, Key, Partition, Table, capacity, current_database, max_ttl_us, preloaded, table,
};
use super::wait_lines::{Asked, Line, NONE, State, Waiters};
use crate::pg::backend::now;
use crate::pg::latch::sleep_until;
use crate::pg::role;
use crate::pg::version::WaitEvent;
use crate::stats::{self, Counter, WaitOutcome};
use dlock_core::{DlockError, Micros, Share, Timestamp};
use std::sync::atomic::Ordering;

/// Who asks, and for how long.
pub struct Request<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub role: u32,
    pub ttl: Micros,
}

/// One look at a key, under its partition lock.
enum Step {
    Granted(i64),
    /// Not now: look again at this time (`Timestamp::MAX`: when woken), in line or not.
    Wait {
        until: Timestamp,
        queued: bool,
    },
    /// Not granted, and the caller may not wait (a try): the key is held, or others wait first.
    Busy,
    /// No room: the table is full, or the role or database holds its share.
    Full(Option<Share>),
    /// The fence epoch ran out under us: try again (a new one is drawn first).
    Again,
}

/// Who a grant is for: a caller, or a waiter a release grants to.
struct Grantee<'a> {
    key: &'a [u8],
    database: u32,
    owner: &'a [u8],
    role: u32,
    ttl: Micros,
}

/// Grants `entry` (a new one, or an expired one taken over) to `who`, charging its share: the
/// fence, `Err(None)` when the epoch ran out (the entry is left expired), or the share that
/// refuses it.
fn grant(books: &Books, entry: &mut Entry, who: &Grantee, now: Timestamp) -> Result<i64, Option<Share>> {
    if (entry.role, entry.database) != (who.role, who.database) {
        books.charge(who.role, who.database).map_err(Some)?;
        books.refund(entry.role, entry.database);
        entry.role = who.role;
        entry.database = who.database;
    }
    let Some(fence) = books.next_fence() else {
        entry.expires_at = 0;
        books.expires(0);
        return Err(None);
    };
    entry.key_len = who.key.len() as u16;
    entry.key[..who.key.len()].copy_from_slice(who.key);
    entry.owner_len = who.owner.len() as u16;
    entry.owner[..who.owner.len()].copy_from_slice(who.owner);
    entry.hold_count = 1;
    entry.fence = fence;
    entry.expires_at = now.saturating_add(who.ttl);
    books.expires(entry.expires_at);
    Ok(fence)
}

/// A look at `key` for `req` by the backend of slot `me`, in its partition `p`. `may_wait`: the
/// caller waits (and so joins the line) rather than trying once.
fn step(p: &mut Partition, key: &Key, req: &Request, me: i32, may_wait: bool, now: Timestamp) -> Step {
    let caller = Grantee {
        key: key.text.as_bytes(),
        database: key.database,
        owner: req.owner.as_bytes(),
        role: req.role,
        ttl: req.ttl,
    };
    // A release granted us the key, or refused us our turn, while we slept.
    let mine = p.waiters.get_mut(me);
    match mine.state {
        State::Granted => {
            mine.state = State::Idle;
            stats::note_handed();
            return Step::Granted(mine.fence);
        }
        State::Refused => {
            mine.state = State::Idle;
            return Step::Full(Some(mine.share()));
        }
        State::Idle | State::Waiting => {}
    }
    let queued = mine.state == State::Waiting;
    let mut entry = match p.entries.find() {
        Some(e) => e,
        None => {
            // A line lives on its key's entry, which is never removed while anyone is in it.
            debug_assert!(!queued, "a waiter's entry is gone");
            if p.books.shared.entries.load(Ordering::Acquire) as usize >= capacity() {
                return Step::Full(None);
            }
            if let Err(share) = p.books.charge(req.role, key.database) {
                return Step::Full(Some(share));
            }
            let Some(entry) = p.entries.enter() else {
                p.books.refund(req.role, key.database);
                return Step::Full(None);
            };
            p.books.shared.entries.fetch_add(1, Ordering::AcqRel);
            entry.line = Line::EMPTY;
            entry.role = req.role;
            entry.database = key.database;
            return match grant(&p.books, entry, &caller, now) {
                Ok(fence) => {
                    stats::count(Counter::FastGrants);
                    Step::Granted(fence)
                }
                Err(_) => Step::Again,
            };
        }
    };
    let live = entry.expires_at > now;
    if live && key.owns(&entry) && entry.owner() == req.owner.as_bytes() && entry.role == req.role {
        // Reentry by the holder (never queued behind others: it holds the key).
        entry.hold_count += 1;
        entry.expires_at = now.saturating_add(req.ttl);
        p.books.expires(entry.expires_at);
        stats::count(Counter::FastReentries);
        return Step::Granted(entry.fence);
    }
    let first = entry.line.first == NONE || entry.line.first == me;
    if !live && first {
        // Expired, and nobody is ahead of us: taken over.
        if queued {
            p.waiters.pop(&mut entry.line);
            p.waiters.get_mut(me).state = State::Idle;
        }
        let expired_in = entry.database;
        return match grant(&p.books, &mut entry, &caller, now) {
            Ok(fence) => {
                stats::count_for(expired_in, Counter::FastExpiries);
                stats::count(Counter::FastGrants);
                wake_first_if_sooner(&p.waiters, &entry);
                Step::Granted(fence)
            }
            Err(None) => Step::Again,
            Err(Some(share)) => {
                wake_first_if_sooner(&p.waiters, &entry);
                Step::Full(Some(share))
            }
        };
    }
    if !may_wait {
        return Step::Busy;
    }
    if !queued {
        p.waiters.enqueue(
            &mut entry.line,
            me,
            &Asked { key: key.text, database: key.database, owner: req.owner, role: req.role, ttl: req.ttl },
        );
    }
    // Held: look again at its expiry. Expired but others are first: the first takes it over
    // and wakes us when we come first.
    let until = if live { entry.expires_at } else { Timestamp::MAX };
    Step::Wait { until, queued: true }
}

/// After the holder of `entry` changed: wakes the first waiter if the new lease ends before it
/// would wake by itself (with equal ttls it never does: no extra wake-up per grant).
fn wake_first_if_sooner(waiters: &Waiters, entry: &Entry) {
    if entry.line.first != NONE && waiters.get(entry.line.first).wake_at > entry.expires_at {
        waiters.wake(entry.line.first);
    }
}

/// Leaves the line of `key` (a wait that ended without a grant): the fence if a release granted
/// us the key meanwhile (ours, then), else `None`; the next waiter is woken if we were first.
fn leave(t: &Table, key: &Key, me: i32) -> Option<i64> {
    let mut wake = NONE;
    let granted = t.locked(key, |p| {
        let mine = p.waiters.get_mut(me);
        match mine.state {
            State::Granted => {
                mine.state = State::Idle;
                return Some(mine.fence);
            }
            State::Idle | State::Refused => {
                mine.state = State::Idle;
                return None;
            }
            State::Waiting => {}
        }
        mine.state = State::Idle;
        if let Some(mut entry) = p.entries.find()
            && p.waiters.remove(&mut entry.line, me)
        {
            wake = entry.line.first;
        }
        None
    });
    if wake != NONE {
        t.waiters.wake(wake);
    }
    granted
}

/// `dlock_fast_acquire`: the fence, or `None` when `wait` ran out first. Waiters line up per
/// key and are served in arrival order.
pub fn acquire(req: &Request, wait: Option<Micros>) -> Result<Option<i64>, DlockError> {
    let table = table()?;
    let key = Key::new(req.key);
    let deadline = wait.map(|w| now().saturating_add(w));
    let may_wait = wait != Some(0);
    let me = table.waiters.mine().ok_or(DlockError::NotPreloaded)?;
    let guard = LeaveOnError;
    let outcome = wait_in_line(table, &key, req, me, deadline, may_wait);
    WAITING_ON.with(|w| w.borrow_mut().take());
    drop(guard);
    outcome
}

/// Leaves the line when an error (cancel, statement_timeout) unwinds out of a wait: at once,
/// before PostgreSQL reports the error to the client, and whether or not a savepoint or a
/// PL/pgSQL exception block keeps the transaction going. Waiting for the end of the
/// transaction would hand the key to a session that no longer waits, and its next call would
/// find that grant in its slot. A wait that returns has already taken `WAITING_ON`: nothing
/// to do then.
struct LeaveOnError;

impl Drop for LeaveOnError {
    fn drop(&mut self) {
        reset();
    }
}

/// The waiting loop of [`acquire`]: the caller's line (once it joined one) is noted in
/// `WAITING_ON` until it returns, so that an error anywhere in it leaves the line (`reset`).
fn wait_in_line(
    table: &Table,
    key: &Key,
    req: &Request,
    me: i32,
    deadline: Option<Timestamp>,
    may_wait: bool,
) -> Result<Option<i64>, DlockError> {
    // A wait is counted from its first sleep (`stats::wait_ended` does nothing without one).
    let mut counted = None;
    loop {
        let now = now();
        let delay_ends = table.shared().started_at.saturating_add(max_ttl_us());
        let step = if now < delay_ends {
            // The lock-delay after a server start: nobody is granted, nobody queues.
            if may_wait { Step::Wait { until: delay_ends, queued: false } } else { Step::Busy }
        } else {
            table.ensure_epoch();
            table.locked(key, |p| step(p, key, req, me, may_wait, now))
        };
        let (until, queued) = match step {
            Step::Granted(fence) => {
                stats::wait_ended(WaitOutcome::Granted);
                return Ok(Some(fence));
            }
            Step::Busy => return Ok(None),
            Step::Again => continue,
            Step::Full(_) if table.sweep(now) > 0 => continue,
            Step::Full(share) => {
                if let Some(fence) = leave(table, key, me) {
                    stats::wait_ended(WaitOutcome::Granted);
                    return Ok(Some(fence));
                }
                return Err(match share {
                    None => DlockError::FastTableFull { max: capacity() },
                    Some(share) => DlockError::FastShare { share, role: role::name(req.role) },
                });
            }
            Step::Wait { until, queued } => (until, queued),
        };
        if queued {
            let waited = Waited { key: req.key.to_string(), owner: req.owner.to_string(), role: req.role };
            WAITING_ON.with(|w| *w.borrow_mut() = Some(waited));
        }
        if deadline.is_some_and(|d| now >= d) {
            let granted = if queued { leave(table, key, me) } else { None };
            stats::wait_ended(if granted.is_some() { WaitOutcome::Granted } else { WaitOutcome::TimedOut });
            return Ok(granted);
        }
        if counted.is_none() {
            counted = Some(stats::wait_started(true, req.key, req.owner, req.role));
        }
        let wake_at = deadline.map_or(until, |d| d.min(until));
        if queued {
            table.locked(key, |p| {
                let mine = p.waiters.get_mut(me);
                if mine.state == State::Waiting {
                    mine.wake_at = wake_at;
                }
            });
        }
        // Sleep until a release grants us the key (it sets our latch), our turn or the
        // holder's expiry, or our deadline; a client that hangs up ends the backend.
        sleep_until((wake_at < Timestamp::MAX).then_some(wake_at), WaitEvent::DlockFast.id());
    }
}

/// What this session waits in line for: the key, and the owner and role its waiter slot asks
/// for it (as `enqueue` wrote them).
struct Waited {
    key: String,
    owner: String,
    role: u32,
}

thread_local! {
    /// The fast key this session waits in line for, while it sleeps.
    static WAITING_ON: std::cell::RefCell<Option<Waited>> = const { std::cell::RefCell::new(None) };
}

/// A wait that ended in an error leaves its line; a grant a release made to it meanwhile is
/// given back, to the next in line. Run as an error unwinds out of the wait (`LeaveOnError`),
/// and at the end of the transaction, for a client that hung up: that FATAL exits the backend
/// from inside the wait, without unwinding it.
pub fn reset() {
    let Some(waited) = WAITING_ON.with(|w| w.borrow_mut().take()) else { return };
    let Some(table) = preloaded() else { return };
    let Some(me) = table.waiters.mine() else { return };
    let key = Key::new(&waited.key);
    if let Some(fence) = leave(table, &key, me) {
        // The grant went to what our slot asked for: `waited`'s owner and role.
        free_handed(table, &key, &waited.owner, waited.role, fence);
    }
}

/// Gives back a lease a release handed to a wait that then failed.
fn free_handed(table: &Table, key: &Key, owner: &str, role: u32, fence: i64) {
    let woken = table.locked(key, |p| match p.entries.find() {
        Some(mut e) if e.fence == fence && e.owner() == owner.as_bytes() && e.role == role => {
            e.hold_count = 1;
            hand_over_or_remove(&mut p.waiters, &p.books, e)
        }
        _ => NONE,
    });
    if woken != NONE {
        table.waiters.wake(woken);
    }
}

/// The holder of `entry` let it go (in its partition: `waiters` and `books` are the
/// partition's): the first waiter whose share allows it gets the lease in place, with a fresh
/// fence; refused ones are told so; with nobody left, the entry goes. The slot to wake, if any
/// (refused ones are woken here).
fn hand_over_or_remove(waiters: &mut Waiters, books: &Books, mut entry: Found) -> i32 {
    let now = now();
    while let Some(next) = waiters.pop(&mut entry.line) {
        let w = waiters.get_mut(next);
        let (key_text, owner) = (w.key().to_vec(), w.owner().to_vec());
        let waiter =
            Grantee { key: &key_text, database: w.database, owner: &owner, role: w.role, ttl: w.ttl };
        match grant(books, &mut entry, &waiter, now) {
            Ok(fence) => {
                stats::count_for(waiter.database, Counter::FastGrants);
                w.state = State::Granted;
                w.fence = fence;
                return next;
            }
            Err(Some(share)) => {
                w.refuse(share);
                waiters.wake(next);
            }
            Err(None) => {
                // The epoch ran out: the entry is left expired; the waiter, first again, takes
                // it over itself after drawing a new epoch.
                waiters.push_front(&mut entry.line, next);
                return next;
            }
        }
    }
    entry.remove(books);
    NONE
}

/// Runs `f` on the caller's live lease of `key`, if it holds one, and wakes the waiter slot `f`
/// names, if any, once the partition lock is given back: `Err` for the right owner under another role (unless
/// admin).
fn with_own<R>(
    action: &'static str,
    key_text: &str,
    owner: &str,
    role: u32,
    admin: bool,
    f: impl FnOnce(Found, &mut Waiters, &Books, Timestamp) -> (R, i32),
) -> Result<Option<R>, DlockError> {
    let table = table()?;
    let key = Key::new(key_text);
    let now = now();
    let result = table.locked(&key, |p| match p.entries.find() {
        Some(e)
            if e.expires_at > now && key.owns(&e) && &e.owner[..e.owner_len as usize] == owner.as_bytes() =>
        {
            if e.role != role && !admin {
                return Err(DlockError::ForeignRole { action });
            }
            Ok(Some(f(e, &mut p.waiters, &p.books, now)))
        }
        _ => Ok(None),
    });
    let (result, wake) = match result {
        Ok(Some((r, wake))) => (Ok(Some(r)), wake),
        other => (other.map(|_| None), NONE),
    };
    if wake != NONE {
        table.waiters.wake(wake);
    }
    result
}

/// `dlock_fast_release`: gives back one hold; whether the caller held the key.
pub fn release(key: &str, owner: &str, role: u32, admin: bool) -> Result<bool, DlockError> {
    let released = with_own("release", key, owner, role, admin, |mut e, waiters, books, _| {
        e.hold_count -= 1;
        if e.hold_count > 0 {
            return ((), NONE);
        }
        stats::count(Counter::FastReleases);
        // The first in line gets it now; with nobody in line the entry goes at once, with its
        // share: released entries never wait for a sweep.
        ((), hand_over_or_remove(waiters, books, e))
    })?;
    Ok(released.is_some())
}

/// `dlock_fast_renew`: the new expiry, or `None` if the caller does not hold the key.
pub fn renew(
    key: &str,
    owner: &str,
    role: u32,
    admin: bool,
    ttl: Micros,
) -> Result<Option<Timestamp>, DlockError> {
    with_own("renew", key, owner, role, admin, |mut e, waiters, books, now| {
        let expires_at = now.saturating_add(ttl);
        e.expires_at = expires_at;
        books.expires(expires_at);
        // A shorter lease may end before the first waiter would look again: wake it.
        let first = e.line.first;
        (expires_at, if first != NONE && waiters.get(first).wake_at > expires_at { first } else { NONE })
    })
}

/// `dlock_fast_holds`: whether the live fast lease on `key` carries `fence`.
pub fn holds(key_text: &str, fence: i64) -> Result<bool, DlockError> {
    let table = table()?;
    let key = Key::new(key_text);
    let now = now();
    Ok(table.locked(&key, |p| match p.entries.find() {
        Some(e) => e.expires_at > now && key.owns(&e) && e.fence == fence,
        None => false,
    }))
}

/// A live fast lease, as `dlock_fast_locks` shows it.
pub struct Row {
    pub key: String,
    pub owner: String,
    pub role: u32,
    pub fence: i64,
    pub hold_count: i32,
    pub expires_at: Timestamp,
}

/// How full fast mode's table is: (entries of `database`, capacity), if preloaded.
pub fn fill(database: u32) -> Option<(i64, i64)> {
    let table = preloaded()?;
    Some((table.held_by_database(database), capacity() as i64))
}

/// Every live fast lease of this database.
pub fn live() -> Result<Vec<Row>, DlockError> {
    let table = table()?;
    let (now, database) = (now(), current_database());
    let mut rows = Vec::new();
    table.scan(|e| {
        if e.expires_at > now && e.database == database {
            rows.push(Row {
                key: String::from_utf8_lossy(&e.key[..e.key_len as usize]).into_owned(),
                owner: String::from_utf8_lossy(&e.owner[..e.owner_len as usize]).into_owned(),
                role: e.role,
                fence: e.fence,
                hold_count: e.hold_count,
                expires_at: e.expires_at,
            });
        }
    });
    Ok(rows)
}
