//! The lease table's relations (table, its two indexes, the fence sequence), looked up once per
//! session and forgotten on any relcache invalidation of them; its owner, as whom dlock's own
//! statements run; and whether its shape is exactly what the direct path writes.

use crate::store::row::COLUMNS;
use pgrx::PgTupleDesc;
use pgrx::pg_sys::{self, Datum, Oid};

/// The lease table's relations and owner.
#[derive(Clone, Copy)]
pub struct Relations {
    pub table: Oid,
    pub pkey: Oid,
    pub session_bound: Oid,
    pub sequence: Oid,
    /// The lease table's owner: dlock's own statements run as this role (`pg::role::as_owner`).
    pub owner: Oid,
    /// The table has exactly the columns of `row::COLUMNS`, in that order and with those types,
    /// and nothing else (no column added by hand or by a later release's upgrade): only then may
    /// the direct path form and read its tuples.
    pub exact_shape: bool,
}

thread_local! {
    static CACHED: std::cell::Cell<Option<Relations>> = const { std::cell::Cell::new(None) };
    static FORGETTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Relcache invalidation: DROP/CREATE EXTENSION, an index or a column added, ... (`InvalidOid`:
/// all).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn forget(_arg: Datum, relid: Oid) {
    CACHED.with(|cached| {
        if let Some(r) = cached.get()
            && (relid == pg_sys::InvalidOid
                || [r.table, r.pkey, r.session_bound, r.sequence].contains(&relid))
        {
            cached.set(None);
        }
    });
}

fn relid(schema: Oid, name: &std::ffi::CStr) -> Oid {
    // SAFETY: a syscache lookup.
    unsafe { pg_sys::get_relname_relid(name.as_ptr(), schema) }
}

/// Whether `desc` has exactly the columns dlock writes.
fn exact_shape(desc: pg_sys::TupleDesc) -> bool {
    // SAFETY: the descriptor of an open relation, not freed while we read it.
    let desc = unsafe { PgTupleDesc::from_pg_unchecked(desc) };
    desc.len() == COLUMNS.len()
        && desc.iter().zip(COLUMNS).all(|(attribute, (name, type_oid))| {
            !attribute.attisdropped && attribute.name() == name && attribute.atttypid == type_oid
        })
}

/// The lease table's relations, if the extension is installed in this database.
pub fn relations() -> Option<Relations> {
    if let Some(cached) = CACHED.with(|c| c.get()) {
        return Some(cached);
    }
    // SAFETY: a syscache lookup inside a transaction.
    let schema = unsafe { pg_sys::get_namespace_oid(c"dlock_internal".as_ptr(), true) };
    let table = relid(schema, c"lease");
    let found = Relations {
        table,
        pkey: relid(schema, c"lease_pkey"),
        session_bound: relid(schema, c"lease_session_bound"),
        sequence: relid(schema, c"fence_seq"),
        owner: pg_sys::InvalidOid,
        exact_shape: false,
    };
    if [found.table, found.pkey, found.session_bound, found.sequence].contains(&pg_sys::InvalidOid) {
        return None;
    }
    // SAFETY: opens the table to read its owner and shape from the relcache; the lock is kept,
    // as any statement on it would keep it.
    let found = unsafe {
        let rel = pg_sys::table_open(table, pg_sys::AccessShareLock as i32);
        let found =
            Relations { owner: (*(*rel).rd_rel).relowner, exact_shape: exact_shape((*rel).rd_att), ..found };
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
        found
    };
    if !FORGETTING.with(|f| f.replace(true)) {
        // SAFETY: registers a callback with no argument, once per backend.
        unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(forget), Datum::from(0)) };
    }
    CACHED.with(|c| c.set(Some(found)));
    Some(found)
}
