//! Fast mode's operations on its table: acquire (with waiting), renew, release, holds, and
//! the live leases.

use super::table::{Entry, Key, Table, capacity, current_database, max_ttl_us, preloaded, table};
use crate::pg::backend::now;
use crate::pg::client;
use crate::pg::role;
use crate::pg::version::WaitEvent;
use dlock_core::{DlockError, Micros, Share, Timestamp};
use pgrx::pg_sys;
use std::sync::atomic::Ordering;

/// Who asks, and for how long.
pub struct Request<'a> {
    pub key: &'a str,
    pub owner: &'a str,
    pub role: u32,
    pub ttl: Micros,
}

enum Try {
    Granted(i64),
    /// Busy until then (the holder's expiry, or the end of the lock-delay).
    Busy(Timestamp),
    /// No room: the table is full, or the role or database holds its share.
    Full(Option<Share>),
    /// The fence epoch ran out under us: try again (a new one is drawn first).
    Again,
}

fn try_grant(table: &Table, key: &Key, req: &Request, now: Timestamp) -> Try {
    let delay_ends = table.shared().started_at.saturating_add(max_ttl_us());
    if now < delay_ends {
        return Try::Busy(delay_ends);
    }
    table.ensure_epoch();
    table.locked(key, |t| {
        let (entry, found) = t.find(key, pg_sys::HASHACTION::HASH_FIND);
        let entry = match entry {
            Some(e) if found && e.expires_at > now => {
                let same = key.owns(e)
                    && &e.owner[..e.owner_len as usize] == req.owner.as_bytes()
                    && e.role == req.role;
                if !same {
                    return Try::Busy(e.expires_at);
                }
                // Reentry by the holder: one more hold, and the new ttl.
                e.hold_count += 1;
                e.expires_at = now.saturating_add(req.ttl);
                t.expires(e.expires_at);
                return Try::Granted(e.fence);
            }
            // An expired entry of this hash: taken over, its share passing to the new taker.
            Some(e) => {
                if (e.role, e.database) != (req.role, key.database) {
                    if let Err(share) = t.quotas.charge(req.role, key.database, capacity()) {
                        return Try::Full(Some(share));
                    }
                    t.quotas.refund(e.role, e.database);
                }
                e
            }
            None => {
                if t.shared().entries.load(Ordering::Acquire) as usize >= capacity() {
                    return Try::Full(None);
                }
                if let Err(share) = t.quotas.charge(req.role, key.database, capacity()) {
                    return Try::Full(Some(share));
                }
                let (entry, _) = t.find(key, pg_sys::HASHACTION::HASH_ENTER_NULL);
                let Some(entry) = entry else {
                    t.quotas.refund(req.role, key.database);
                    return Try::Full(None);
                };
                t.shared().entries.fetch_add(1, Ordering::AcqRel);
                entry
            }
        };
        entry.hash = key.hash;
        entry.database = key.database;
        entry.role = req.role;
        let Some(fence) = t.next_fence() else {
            // The epoch ran out under us: leave the entry expired (its share counted, until it is
            // taken again or swept) and draw again.
            entry.expires_at = 0;
            t.expires(0);
            return Try::Again;
        };
        entry.key_len = key.text.len() as u16;
        entry.key[..key.text.len()].copy_from_slice(key.text.as_bytes());
        entry.owner_len = req.owner.len() as u16;
        entry.owner[..req.owner.len()].copy_from_slice(req.owner.as_bytes());
        entry.hold_count = 1;
        entry.fence = fence;
        entry.expires_at = now.saturating_add(req.ttl);
        t.expires(entry.expires_at);
        Try::Granted(fence)
    })
}

/// `dlock_fast_acquire`: the fence, or `None` when `wait` ran out first.
pub fn acquire(req: &Request, wait: Option<Micros>) -> Result<Option<i64>, DlockError> {
    let table = table()?;
    let key = Key::new(req.key);
    let deadline = wait.map(|w| now().saturating_add(w));
    let cv = &table.shared().wake[key.part] as *const _ as *mut pg_sys::ConditionVariable;
    let mut sleeping = false;
    let outcome = loop {
        let now = now();
        let busy_until = match try_grant(table, &key, req, now) {
            Try::Granted(fence) => break Ok(Some(fence)),
            Try::Busy(until) => until,
            Try::Again => continue,
            Try::Full(_) if table.sweep(now) > 0 => continue,
            Try::Full(share) => {
                if sleeping {
                    stop_waiting(table);
                }
                return Err(match share {
                    None => DlockError::FastTableFull { max: capacity() },
                    Some(share) => DlockError::FastShare { share, role: role::name(req.role) },
                });
            }
        };
        if deadline.is_some_and(|d| now >= d) {
            break Ok(None);
        }
        if !sleeping {
            // Counted and registered before the next check, so a release between it and the
            // sleep wakes us.
            table.shared().waiting[key.part].fetch_add(1, Ordering::SeqCst);
            WAITING_ON.with(|w| w.set(Some(key.part)));
            // SAFETY: a condition variable in shared memory.
            unsafe { pg_sys::ConditionVariablePrepareToSleep(cv) };
            sleeping = true;
            continue;
        }
        // Sleep until a release wakes us, the holder's expiry or our deadline; a client that
        // hangs up meanwhile ends the backend (its socket signals, see `interrupt.rs`).
        let until = deadline.map_or(busy_until, |d| d.min(busy_until));
        let ms = ((until - now + 999) / 1000).clamp(1, i64::from(i32::MAX));
        // SAFETY: the standard condition variable wait; interrupts are served inside.
        client::watching(|| unsafe {
            pg_sys::ConditionVariableTimedSleep(cv, ms, WaitEvent::DlockFast.id())
        });
    };
    if sleeping {
        stop_waiting(table);
    }
    outcome
}

thread_local! {
    /// The partition this session counted itself waiting on, until it stops.
    static WAITING_ON: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
}

/// Leaves the condition variable's wait list and the count.
fn stop_waiting(table: &Table) {
    // SAFETY: leaves whatever condition variable this session prepared to sleep on.
    unsafe { pg_sys::ConditionVariableCancelSleep() };
    if let Some(part) = WAITING_ON.with(|w| w.take()) {
        table.shared().waiting[part].fetch_sub(1, Ordering::SeqCst);
    }
}

/// End of transaction: a wait that ended in an error (cancel, timeout) is no longer counted.
pub fn reset() {
    if WAITING_ON.with(|w| w.get()).is_some()
        && let Some(table) = preloaded()
    {
        stop_waiting(table);
    }
}

/// Runs `f` on the caller's live lease of `key`, if it holds one, and wakes the key's waiters
/// if `f` says the change concerns them: `Err` for the right owner under another role (unless
/// admin).
fn with_own<R>(
    action: &'static str,
    key_text: &str,
    owner: &str,
    role: u32,
    admin: bool,
    f: impl FnOnce(&Table, &Key, &mut Entry, Timestamp) -> (R, bool),
) -> Result<Option<R>, DlockError> {
    let table = table()?;
    let key = Key::new(key_text);
    let now = now();
    let result = table.locked(&key, |t| {
        let (entry, found) = t.find(&key, pg_sys::HASHACTION::HASH_FIND);
        match entry {
            Some(e)
                if found
                    && e.expires_at > now
                    && key.owns(e)
                    && &e.owner[..e.owner_len as usize] == owner.as_bytes() =>
            {
                if e.role != role && !admin {
                    return Err(DlockError::ForeignRole { action });
                }
                Ok(Some(f(t, &key, e, now)))
            }
            _ => Ok(None),
        }
    });
    let (result, wake) = match result {
        Ok(Some((r, wake))) => (Ok(Some(r)), wake),
        other => (other.map(|_| None), false),
    };
    if wake {
        table.wake(&key);
    }
    result
}

/// `dlock_fast_release`: gives back one hold; whether the caller held the key.
pub fn release(key: &str, owner: &str, role: u32, admin: bool) -> Result<bool, DlockError> {
    let released = with_own("release", key, owner, role, admin, |t, key, e, _| {
        e.hold_count -= 1;
        let freed = e.hold_count == 0;
        if freed {
            // Gone at once, with its share: released entries never wait for a sweep.
            let (role, database) = (e.role, e.database);
            t.remove(key, role, database);
        }
        ((), freed)
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
    with_own("renew", key, owner, role, admin, |t, _, e, now| {
        let expires_at = now.saturating_add(ttl);
        // A shorter lease moves the waiters' deadline earlier: wake them to sleep less.
        let shorter = expires_at < e.expires_at;
        e.expires_at = expires_at;
        t.expires(expires_at);
        (expires_at, shorter)
    })
}

/// `dlock_fast_holds`: whether the live fast lease on `key` carries `fence`.
pub fn holds(key_text: &str, fence: i64) -> Result<bool, DlockError> {
    let table = table()?;
    let key = Key::new(key_text);
    let now = now();
    Ok(table.locked(&key, |t| match t.find(&key, pg_sys::HASHACTION::HASH_FIND) {
        (Some(e), true) => e.expires_at > now && key.owns(e) && e.fence == fence,
        _ => false,
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
