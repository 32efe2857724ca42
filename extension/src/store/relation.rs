//! The lease table's relations (table, its primary key, the fence sequence), looked up once per
//! session and forgotten on any relcache invalidation of them; its owner, as whom dlock's own
//! statements run; and its shape: exactly what the direct path writes, an earlier release's
//! (a database whose `ALTER EXTENSION dlock UPDATE` has not run yet), or other.

use crate::store::row::{COLUMNS, RELEASE_010_COLUMNS, RELEASE_020_COLUMNS};
use pgrx::PgTupleDesc;
use pgrx::pg_sys::{self, Datum, Oid};

/// The lease table's relations and owner.
#[derive(Clone, Copy)]
pub struct Relations {
    pub table: Oid,
    pub pkey: Oid,
    pub sequence: Oid,
    /// The lease table's owner: dlock's own statements run as this role (`pg::role::as_owner`).
    pub owner: Oid,
    /// What the table's columns are.
    pub shape: Shape,
}

/// The lease table's columns, as the direct path and the statements need to know them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Shape {
    /// Exactly `row::COLUMNS`, in that order and with those types, and nothing else: only then
    /// may the direct path form and read its tuples.
    Exact,
    /// Release 0.2.0's table (its first twelve columns: a row per holder, no key rows).
    Release020,
    /// Release 0.1.0's table (its first eight columns, one row per key): this library serves a
    /// database whose `ALTER EXTENSION dlock UPDATE` has not run yet, with exclusive leases only
    /// (0.1.0's SQL declares no other).
    Release010,
    /// Anything else (a column added by hand, ...): dlock's statements, which name their columns.
    Other,
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
            && (relid == pg_sys::InvalidOid || [r.table, r.pkey, r.sequence].contains(&relid))
        {
            cached.set(None);
        }
    });
}

fn relid(schema: Oid, name: &std::ffi::CStr) -> Oid {
    // SAFETY: a syscache lookup.
    unsafe { pg_sys::get_relname_relid(name.as_ptr(), schema) }
}

/// The shape of a table with descriptor `desc`.
fn shape(desc: pg_sys::TupleDesc) -> Shape {
    // SAFETY: the descriptor of an open relation, not freed while we read it.
    let desc = unsafe { PgTupleDesc::from_pg_unchecked(desc) };
    let columns_are = |expected: &[(&str, Oid)]| {
        desc.len() == expected.len()
            && desc.iter().zip(expected).all(|(attribute, &(name, type_oid))| {
                !attribute.attisdropped && attribute.name() == name && attribute.atttypid == type_oid
            })
    };
    if columns_are(&COLUMNS) {
        Shape::Exact
    } else if columns_are(&COLUMNS[..RELEASE_020_COLUMNS]) {
        Shape::Release020
    } else if columns_are(&COLUMNS[..RELEASE_010_COLUMNS]) {
        Shape::Release010
    } else {
        Shape::Other
    }
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
        sequence: relid(schema, c"fence_seq"),
        owner: pg_sys::InvalidOid,
        shape: Shape::Other,
    };
    if [found.table, found.pkey, found.sequence].contains(&pg_sys::InvalidOid) {
        return None;
    }
    // SAFETY: opens the table to read its owner and shape from the relcache; the lock is kept,
    // as any statement on it would keep it.
    let found = unsafe {
        let rel = pg_sys::table_open(table, pg_sys::AccessShareLock as i32);
        let found = Relations { owner: (*(*rel).rd_rel).relowner, shape: shape((*rel).rd_att), ..found };
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
