//! What differs between the PostgreSQL versions dlock builds for (15 and 18), behind one small
//! shim each, so that no `cfg` is scattered through the code.

use pgrx::pg_sys;

/// `CLIENT_CONNECTION_CHECK_TIMEOUT` of utils/timeout.h's `TimeoutId`: 17 inserted
/// `TRANSACTION_TIMEOUT` before it.
#[cfg(feature = "pg15")]
pub const CLIENT_CONNECTION_CHECK_TIMEOUT: std::ffi::c_int = 10;
#[cfg(not(feature = "pg15"))]
pub const CLIENT_CONNECTION_CHECK_TIMEOUT: std::ffi::c_int = 11;

/// The client's socket, if this backend serves a client. `sock` is the first field of
/// libpq-be.h's `struct Port` (opaque to pgrx) in 15 through 18.
pub fn client_socket() -> Option<pg_sys::pgsocket> {
    // SAFETY: MyProcPort is null outside client backends, and points to a Port whose first
    // field is the socket otherwise.
    unsafe {
        let port = pg_sys::MyProcPort;
        (!port.is_null()).then(|| *(port as *const pg_sys::pgsocket))
    }
}

/// The wait events dlock's own waits show in `pg_stat_activity` (waits in the lock manager show
/// `Lock`/`advisory`). PostgreSQL 17 and later give extensions named events; 15 has only the
/// generic `Extension`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// The variants are the names pg_stat_activity shows (DlockLease, ...), prefix and all.
#[allow(clippy::enum_variant_names)]
pub enum WaitEvent {
    /// The head of a key's queue, watching the lease until it ends or is handed over.
    DlockLease,
    /// A fast-mode waiter, until the key is released or expires.
    DlockFast,
    /// A shard map's install, until the grants in progress have ended.
    DlockShardMap,
}

impl WaitEvent {
    /// The name shown in `pg_stat_activity.wait_event` (17 and later).
    #[cfg_attr(feature = "pg15", allow(dead_code))]
    pub fn name(self) -> &'static std::ffi::CStr {
        match self {
            WaitEvent::DlockLease => c"DlockLease",
            WaitEvent::DlockFast => c"DlockFast",
            WaitEvent::DlockShardMap => c"DlockShardMap",
        }
    }

    /// The event's id, for `WaitLatch` and condition variables.
    #[cfg(feature = "pg15")]
    pub fn id(self) -> u32 {
        pg_sys::PG_WAIT_EXTENSION
    }

    /// The event's id, registered once per backend (`WaitEventExtensionNew` returns the same
    /// id to every backend that asks for the same name).
    #[cfg(not(feature = "pg15"))]
    pub fn id(self) -> u32 {
        use std::cell::Cell;
        thread_local! {
            static IDS: [Cell<u32>; 3] = const { [Cell::new(0), Cell::new(0), Cell::new(0)] };
        }
        let slot = self as usize;
        IDS.with(|ids| {
            if ids[slot].get() == 0 {
                // SAFETY: registers (or looks up) a named event in shared memory.
                ids[slot].set(unsafe { pg_sys::WaitEventExtensionNew(self.name().as_ptr()) });
            }
            ids[slot].get()
        })
    }
}

/// `LockHeldByMe`: 17 added `orstronger`; dlock asks for the exact mode.
pub fn lock_held_by_me(tag: &pg_sys::LOCKTAG, mode: u32) -> bool {
    // SAFETY: a lookup in this backend's lock table.
    unsafe {
        #[cfg(feature = "pg15")]
        return pg_sys::LockHeldByMe(tag, mode as pg_sys::LOCKMODE);
        #[cfg(not(feature = "pg15"))]
        return pg_sys::LockHeldByMe(tag, mode as pg_sys::LOCKMODE, false);
    }
}

/// `index_beginscan`: 18 added the scan's instrumentation (none here).
///
/// # Safety
/// As `index_beginscan`'s: open relations and a registered snapshot.
pub unsafe fn index_beginscan(
    heap: pg_sys::Relation,
    index: pg_sys::Relation,
    snapshot: pg_sys::Snapshot,
    nkeys: i32,
) -> pg_sys::IndexScanDesc {
    // SAFETY: as the caller promised.
    unsafe {
        #[cfg(feature = "pg15")]
        return pg_sys::index_beginscan(heap, index, snapshot, nkeys, 0);
        #[cfg(not(feature = "pg15"))]
        return pg_sys::index_beginscan(heap, index, snapshot, std::ptr::null_mut(), nkeys, 0);
    }
}

/// The proc number of a PGPROC: its index in the proc array (a field until 17, which made the
/// index itself the number).
///
/// # Safety
/// `proc` points to an entry of the shared proc array.
pub unsafe fn proc_number(proc: *const pg_sys::PGPROC) -> usize {
    #[cfg(feature = "pg15")]
    // SAFETY: as the caller promised.
    return unsafe { (*proc).pgprocno as usize };
    #[cfg(not(feature = "pg15"))]
    // SAFETY: as the caller promised: `proc` lies in the proc array.
    return unsafe { proc.offset_from((*pg_sys::ProcGlobal).allProcs) as usize };
}

/// This backend's proc number.
pub fn my_proc_number() -> usize {
    // SAFETY: MyProc is set for every backend that runs SQL, to its entry of the proc array.
    unsafe { proc_number(pg_sys::MyProc) }
}

/// The entries of the proc array running these virtual transactions (those still running
/// them), in one pass over the array however many there are (15 names backends by backend id,
/// 17 and later by proc number). Raw pointers: `pg/proc.rs`'s `Proc` wraps them.
///
/// # Safety
/// The proc array must be attached (any backend).
pub unsafe fn procs_of(vxids: &[pg_sys::VirtualTransactionId]) -> Vec<*mut pg_sys::PGPROC> {
    // SAFETY: as the caller promised; entries are read through raw pointers, never referenced,
    // since their backends write them meanwhile.
    unsafe {
        let procs = (*pg_sys::ProcGlobal).allProcs;
        let count = (*pg_sys::ProcGlobal).allProcCount as usize;
        #[cfg(feature = "pg15")]
        {
            // Backend ids are not indexes into the array: match them, by a binary search in
            // the sorted wanted ids (no allocation per proc, whatever the count).
            let id = |backend: i32, lxid: u32| (u64::from(backend as u32) << 32) | u64::from(lxid);
            let mut wanted: Vec<u64> = vxids.iter().map(|v| id(v.backendId, v.localTransactionId)).collect();
            wanted.sort_unstable();
            (0..count)
                .map(|i| procs.add(i))
                .filter(|&p| wanted.binary_search(&id((*p).backendId, (*p).lxid)).is_ok())
                .collect()
        }
        #[cfg(not(feature = "pg15"))]
        {
            let mut found = Vec::with_capacity(vxids.len());
            for vxid in vxids {
                let number = vxid.procNumber as usize;
                if number < count {
                    let proc = procs.add(number);
                    if (*proc).vxid.lxid == vxid.localTransactionId {
                        found.push(proc);
                    }
                }
            }
            found
        }
    }
}

/// Whether a background worker may connect as a role that cannot log in (17 added
/// `BGWORKER_BYPASS_ROLELOGINCHECK`), and the flag that says so.
#[cfg(feature = "pg15")]
pub const BGWORKER_ANY_ROLE: bool = false;
#[cfg(feature = "pg15")]
pub const BGWORKER_ANY_ROLE_FLAG: u32 = 0;
#[cfg(not(feature = "pg15"))]
pub const BGWORKER_ANY_ROLE: bool = true;
#[cfg(not(feature = "pg15"))]
pub const BGWORKER_ANY_ROLE_FLAG: u32 = pg_sys::BGWORKER_BYPASS_ROLELOGINCHECK;

/// Whether `role` owns extension `extension` (or is a superuser): 16 replaced the per-kind
/// ownership checks with `object_ownercheck`.
pub fn owns_extension(extension: pg_sys::Oid, role: pg_sys::Oid) -> bool {
    // SAFETY: a catalog lookup inside a transaction.
    unsafe {
        #[cfg(feature = "pg15")]
        return pg_sys::pg_extension_ownercheck(extension, role);
        #[cfg(not(feature = "pg15"))]
        return pg_sys::object_ownercheck(pg_sys::ExtensionRelationId, extension, role);
    }
}

/// The number of the file `rel` is stored in: a table made again, truncated or rewritten
/// (`VACUUM FULL`, `CLUSTER`) gets a new one. 16 renamed the field.
pub fn relfile_number(rel: pg_sys::Relation) -> pg_sys::Oid {
    // SAFETY: an open relation's cache entry.
    unsafe {
        #[cfg(feature = "pg15")]
        return (*rel).rd_node.relNode;
        #[cfg(not(feature = "pg15"))]
        return (*rel).rd_locator.relNumber;
    }
}
