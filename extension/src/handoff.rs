//! Hand-off: whoever frees a key wakes the head of its queue, and only once the freeing is
//! visible. Releases (and release_all, force release) note their keys; the commit callback
//! wakes the heads after the commit is visible and before the key locks are let go, so a woken
//! head blocks on the key lock for microseconds and then reads the freed lease. A rollback wakes
//! no one. Watchers of those keys (`watch.rs`) get a NOTIFY queued at pre-commit, which
//! PostgreSQL sends after the commit.
//!
//! A session that ends while holding session-bound leases lets its bindings go first thing on
//! its way out, in a transaction of its own that notifies the watchers; its queue heads are
//! granted by the lock manager the moment the bindings go (they wait on them), and woken again
//! once all its locks are gone.

use crate::current::now;
use crate::lease;
use crate::pending::Pending;
use crate::spi::Spi;
use crate::store;
use crate::{interrupt, queue, session, waitslot, watch};
use pgrx::pg_sys;
use std::cell::{Cell, RefCell};

thread_local! {
    /// Key hashes freed by the open transaction, by subtransaction (a rolled-back savepoint
    /// freed nothing, so it wakes and notifies no one).
    static FREED: RefCell<Pending<u64>> = const { RefCell::new(Pending::new()) };
    /// Key hashes force-released by the open transaction, likewise.
    static FORCED: RefCell<Pending<u64>> = const { RefCell::new(Pending::new()) };
    static EXIT_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Notes that the open transaction freed (or shortened) the lease of the key with this hash.
pub fn wake_at_commit(hash: u64) {
    FREED.with(|f| f.borrow_mut().push(hash));
}

/// Notes a force release: its key's head may wait on the old holder's binding, which stays
/// in place, so at commit the head is poked as well as woken.
pub fn poke_at_commit(hash: u64) {
    FORCED.with(|f| f.borrow_mut().push(hash));
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_xact(event: pg_sys::XactEvent::Type, _arg: *mut std::ffi::c_void) {
    use pg_sys::XactEvent::*;
    match event {
        // Still holding the key locks: a watch registered before our change is seen here.
        XACT_EVENT_PRE_COMMIT => {
            let freed: Vec<u64> = FREED.with(|f| f.borrow().iter().copied().collect());
            watch::notify_watched(freed);
        }
        XACT_EVENT_PRE_PREPARE if waitslot::has_offers() => {
            crate::error::DlockError::NoPrepare { what: "handed a released key to a waiting session" }
                .raise("PREPARE TRANSACTION")
        }
        XACT_EVENT_COMMIT | XACT_EVENT_PARALLEL_COMMIT => {
            // Grants to waiting heads first, so that the heads woken next find them.
            waitslot::settle(true);
            for hash in FREED.with(|f| f.borrow_mut().take()) {
                queue::wake_head(hash);
            }
            for hash in FORCED.with(|f| f.borrow_mut().take()) {
                queue::poke_head(hash);
            }
            queue::end_of_transaction();
            interrupt::reset();
        }
        XACT_EVENT_ABORT | XACT_EVENT_PARALLEL_ABORT | XACT_EVENT_PREPARE => {
            waitslot::settle(false);
            // A wait that ended in an error leaves nothing behind in its slot.
            waitslot::abandon();
            queue::end_of_transaction();
            interrupt::reset();
            crate::fast::reset();
            FORCED.with(|f| f.borrow_mut().take());
            FREED.with(|f| f.borrow_mut().take());
        }
        _ => {}
    }
}

/// Direct hand-off (preloaded only): grants the freed `key` to the head of its queue in this
/// transaction, if the head published a TTL request for exactly this key. Call after the
/// release wrote, holding the key lock, once the release's own durability was settled: the
/// grant makes the commit durable again (it is an acquire).
pub fn hand_over(spi: &Spi, key: &str, hash: u64) {
    if !waitslot::enabled() {
        return;
    }
    let Some(index) = queue::head(hash).map(|p| waitslot::index_of(p)) else { return };
    let Some((request, ticket)) = waitslot::request_for(index, key, hash) else { return };
    let now = now();
    let fence = store::grant(
        spi,
        &store::NewLease {
            key,
            owner: &request.owner,
            role: request.role,
            acquired_at: now,
            expires_at: lease::expiry(now, Some(request.ttl_us)),
            holder_pid: request.pid,
        },
    );
    waitslot::offer(ticket, fence);
}

/// A subtransaction ended (`subxact.rs`): a hand-off written in a savepoint that rolls back was
/// undone with it, and so was the freeing.
pub fn sub_end(sub: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId, commit: bool) {
    waitslot::settle_sub(sub, parent, commit);
    for list in [&FREED, &FORCED] {
        list.with(|l| {
            let mut l = l.borrow_mut();
            if commit {
                l.sub_commit(sub, parent);
            } else {
                l.sub_abort(sub);
            }
        });
    }
}

/// Registers the transaction callback; called once from `_PG_init`.
pub fn register_callbacks() {
    // SAFETY: a plain C callback with no argument, registered once per backend.
    unsafe {
        pg_sys::RegisterXactCallback(Some(on_xact), std::ptr::null_mut());
    }
}

/// First thing when the session ends: like temporary-table cleanup, leave whatever transaction
/// the exit interrupted, then let the bindings go and tell the watchers in a transaction of our
/// own. An error here ends the backend all the same (errors are FATAL during exit); the
/// bindings then go with the session's locks and only the NOTIFY is lost.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn before_exit(_code: i32, _arg: pg_sys::Datum) {
    // SAFETY: the backend's own transaction machinery, as used by RemoveTempRelationsCallback.
    unsafe {
        pg_sys::AbortOutOfAnyTransaction();
        if crate::session::bound_key_hashes().is_empty() {
            return;
        }
        pg_sys::StartTransactionCommand();
        let hashes = session::unbind_all();
        watch::notify_watched(hashes.iter().copied());
        pg_sys::CommitTransactionCommand();
        for hash in hashes {
            queue::wake_head(hash);
        }
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn on_exit(_code: i32, _arg: pg_sys::Datum) {
    for hash in crate::session::bound_key_hashes() {
        queue::wake_head(hash);
    }
}

/// Makes this backend free its session-bound leases when it exits: `before_exit` above, and as
/// a fallback an on_shmem_exit callback that runs after `ShutdownPostgres` released the
/// session's locks (so the woken heads find the bindings gone) and while the proc array is still
/// attached. Registered on the first binding, in the backend itself (a preloading postmaster's
/// callbacks are not inherited), so after `ShutdownPostgres`, and so run before it.
pub fn wake_on_exit() {
    if !EXIT_HOOK.with(|h| h.replace(true)) {
        // SAFETY: registers callbacks with no argument.
        unsafe {
            pg_sys::on_shmem_exit(Some(on_exit), pg_sys::Datum::from(0));
            pg_sys::before_shmem_exit(Some(before_exit), pg_sys::Datum::from(0));
        }
    }
}
