//! The election watch's wake-ups: a committed grant of an election's leader with a TTL starts
//! this database's election-watch worker (`elections/worker.rs`) if it does not run, or
//! wakes it, so that it announces the new leader's expiry if nobody takes over. The worker
//! runs as the owner of the lease table (whose rows it reads), not as the bootstrap superuser.

use crate::locks::tags::{self, Space, tag};
use crate::pg::pending::Pending;
use pgrx::IntoDatum;
use pgrx::bgworkers::{BackgroundWorkerBuilder, BgWorkerStartTime};
use pgrx::pg_sys;
use std::cell::RefCell;

thread_local! {
    /// Leader grants of the open transaction, by subtransaction: the role the worker is to
    /// run as (`worker_role`).
    static PENDING: RefCell<Pending<pg_sys::Oid>> = const { RefCell::new(Pending::new()) };
}

/// The watcher's lock of this database: held by its worker for the worker's life.
pub fn watcher_lock() -> pg_sys::LOCKTAG {
    tag(Space::ElectionWatch, 0)
}

/// A leader with a TTL was granted in this transaction: at its commit, this database's worker
/// is started, or woken so that it sleeps until the new leader's expiry at the latest (woken
/// before the commit, it would read the election as it was).
pub fn wake_at_commit() {
    if let Some(role) = worker_role() {
        PENDING.with(|p| p.borrow_mut().push(role));
    }
}

/// The role the worker connects as: the owner of the lease table, the least that can read it
/// (it reads the table directly and runs no SQL). PostgreSQL 15 lets a background worker
/// connect only as a role that may log in; for an owner that may not, it connects as the
/// bootstrap superuser (`InvalidOid`), which changes nothing it does. `None`: no lease table.
fn worker_role() -> Option<pg_sys::Oid> {
    let owner = crate::store::relation::relations()?.owner;
    Some(if crate::pg::version::BGWORKER_ANY_ROLE || can_log_in(owner) { owner } else { pg_sys::InvalidOid })
}

/// pg_authid.rolcanlogin of `role`.
fn can_log_in(role: pg_sys::Oid) -> bool {
    // SAFETY: a syscache lookup inside a transaction; the tuple is released before returning.
    unsafe {
        let tuple =
            pg_sys::SearchSysCache1(pg_sys::SysCacheIdentifier::AUTHOID as i32, pg_sys::Datum::from(role));
        if tuple.is_null() {
            return false;
        }
        let login = (*pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_authid>(tuple)).rolcanlogin;
        pg_sys::ReleaseSysCache(tuple);
        login
    }
}

/// The transaction committed: start or wake the worker if a leader was granted.
pub fn at_commit() {
    if let Some(role) = PENDING.with(|p| p.borrow_mut().take()).pop() {
        start_or_wake(role);
    }
}

/// The transaction rolled back, or a savepoint did (`sub_end`): its grants never happened.
pub fn at_abort() {
    PENDING.with(|p| p.borrow_mut().take());
}

/// A subtransaction ended.
pub fn sub_end(sub: pg_sys::SubTransactionId, parent: pg_sys::SubTransactionId, commit: bool) {
    PENDING.with(|p| {
        let mut p = p.borrow_mut();
        if commit {
            p.sub_commit(sub, parent);
        } else {
            p.sub_abort(sub);
        }
    });
}

fn start_or_wake(role: pg_sys::Oid) {
    let lock = watcher_lock();
    if let Some(pid) = holder_pid(&lock) {
        // SAFETY: a lookup in the proc array, and the latch PostgreSQL wakes a backend with.
        unsafe {
            let proc = pg_sys::BackendPidGetProc(pid);
            if !proc.is_null() {
                pg_sys::SetLatch(&mut (*proc).procLatch);
            }
        }
        return;
    }
    if tags::held_elsewhere(&lock, pg_sys::ExclusiveLock) {
        return;
    }
    let database = crate::pg::backend::database();
    let started = BackgroundWorkerBuilder::new("dlock election watch")
        .set_type("dlock election watch")
        .set_library("dlock")
        .set_function("dlock_election_watch_main")
        .set_argument(database.into_datum())
        .set_extra(&role.to_u32().to_string())
        .enable_spi_access()
        .set_start_time(BgWorkerStartTime::RecoveryFinished)
        .set_restart_time(None)
        .load_dynamic();
    if started.is_err() {
        pgrx::log!(
            "dlock: no background worker slot (max_worker_processes) to announce the expiry of election leaders; watchers learn of it from dlock_leader's expires_at"
        );
    }
}

/// The pid of the session holding `lock` (the worker sits between transactions, so the lock
/// manager's list of conflicting transactions would not name it): from a snapshot of the lock
/// table, taken only when a leader is granted.
fn holder_pid(lock: &pg_sys::LOCKTAG) -> Option<i32> {
    // SAFETY: a snapshot of the lock table, palloc'd in the current memory context.
    unsafe {
        let data = pg_sys::GetLockStatusData();
        let locks = std::slice::from_raw_parts((*data).locks, (*data).nelements as usize);
        locks
            .iter()
            .find(|l| {
                let t = &l.locktag;
                l.holdMask != 0
                    && (
                        t.locktag_type,
                        t.locktag_field1,
                        t.locktag_field2,
                        t.locktag_field3,
                        t.locktag_field4,
                    ) == (
                        lock.locktag_type,
                        lock.locktag_field1,
                        lock.locktag_field2,
                        lock.locktag_field3,
                        lock.locktag_field4,
                    )
            })
            .map(|l| l.pid)
    }
}
