//! The two statements of every lock cycle — grant a free key, delete a released lease — and the
//! sweep's read of one heap page (one grant in eight), done on the lease table directly (heap
//! and index access methods), without the executor: no plan check, no executor start-up, no ON
//! CONFLICT machinery. Everything else goes through SQL (`store.rs`), and so do these whenever
//! anything is unusual (an index dlock did not create, say): then `Fallback` sends the caller to
//! the SQL statement.
//!
//! The same rules as the SQL path: the caller holds the key lock, so no other transaction is
//! writing this key; rows are read with the latest snapshot (like `spi.rs`), after a command
//! counter increment, so this transaction's own earlier changes are seen too.

use crate::lease::{INFINITY, Timestamp};
use crate::store::NewLease;
use pgrx::pg_sys::{self, Datum, Oid};
use pgrx::{FromDatum, IntoDatum};

unsafe extern "C-unwind" {
    // commands/sequence.h, which pgrx does not bind.
    pub(crate) fn nextval_internal(relid: Oid, check_permissions: bool) -> i64;
}

/// The lease table's columns, in order.
const KEY: usize = 0;
const OWNER: usize = 1;
const ROLE: usize = 2;
const HOLD_COUNT: usize = 4;
const EXPIRES_AT: usize = 6;
const COLUMNS: usize = 8;

/// The owner of the lease table, as whom dlock's own statements run; `None` while the
/// extension is not (fully) installed in this database.
pub fn table_owner() -> Option<Oid> {
    oids().ok().map(|o| o.owner)
}

/// The direct path does not apply; use the SQL statement.
pub struct Fallback;

/// The lease table and its two indexes, opened for writing until the transaction ends.
struct Table {
    rel: pg_sys::Relation,
    pkey: pg_sys::Relation,
    session_bound: pg_sys::Relation,
    sequence: Oid,
}

fn relid(schema: Oid, name: &std::ffi::CStr) -> Oid {
    // SAFETY: a syscache lookup.
    unsafe { pg_sys::get_relname_relid(name.as_ptr(), schema) }
}

/// The OIDs of the lease table, its two indexes and the fence sequence.
#[derive(Clone, Copy)]
struct Oids {
    table: Oid,
    pkey: Oid,
    session_bound: Oid,
    sequence: Oid,
    /// The lease table's owner: dlock's own statements run as this role (`role::as_owner`).
    owner: Oid,
}

thread_local! {
    /// Looked up once per backend; forgotten when any of them is invalidated (`forget`).
    static OIDS: std::cell::Cell<Option<Oids>> = const { std::cell::Cell::new(None) };
    static FORGETTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Relcache invalidation: DROP/CREATE EXTENSION, an index added, ... (`InvalidOid`: all).
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn forget(_arg: Datum, relid: Oid) {
    OIDS.with(|cached| {
        if let Some(o) = cached.get()
            && (relid == pg_sys::InvalidOid
                || [o.table, o.pkey, o.session_bound, o.sequence].contains(&relid))
        {
            cached.set(None);
        }
    });
}

fn oids() -> Result<Oids, Fallback> {
    if let Some(oids) = OIDS.with(|o| o.get()) {
        return Ok(oids);
    }
    // SAFETY: a syscache lookup inside a transaction.
    let schema = unsafe { pg_sys::get_namespace_oid(c"dlock_internal".as_ptr(), true) };
    let oids = Oids {
        table: relid(schema, c"lease"),
        pkey: relid(schema, c"lease_pkey"),
        session_bound: relid(schema, c"lease_session_bound"),
        sequence: relid(schema, c"fence_seq"),
        owner: pg_sys::InvalidOid,
    };
    if [oids.table, oids.pkey, oids.session_bound, oids.sequence].contains(&pg_sys::InvalidOid) {
        return Err(Fallback);
    }
    // SAFETY: opens the table to read its owner from the relcache; the lock is kept, as any
    // statement on it would keep it.
    let oids = unsafe {
        let rel = pg_sys::table_open(oids.table, pg_sys::AccessShareLock as i32);
        let owner = (*(*rel).rd_rel).relowner;
        pg_sys::table_close(rel, pg_sys::NoLock as i32);
        Oids { owner, ..oids }
    };
    if !FORGETTING.with(|f| f.replace(true)) {
        // SAFETY: registers a callback with no argument, once per backend.
        unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(forget), Datum::from(0)) };
    }
    OIDS.with(|o| o.set(Some(oids)));
    Ok(oids)
}

impl Table {
    /// Opens the table if it is exactly as dlock created it (two indexes, ours), in a
    /// transaction that may write (a read-only one gets the executor's 25006 from SQL).
    fn open() -> Result<Table, Fallback> {
        // SAFETY: catalog lookups and relation opens inside a transaction; locks are kept
        // until it ends, as the executor keeps them.
        unsafe {
            if pg_sys::XactReadOnly || pg_sys::IsInParallelMode() {
                return Err(Fallback);
            }
            let Oids { table, pkey, session_bound, sequence, .. } = oids()?;
            let rel = pg_sys::table_open(table, pg_sys::RowExclusiveLock as i32);
            let indexes = pg_sys::RelationGetIndexList(rel);
            let oids: Vec<Oid> = match indexes.as_ref() {
                None => Vec::new(),
                Some(list) => (0..list.length as usize).map(|i| (*list.elements.add(i)).oid_value).collect(),
            };
            pg_sys::list_free(indexes);
            let ours = oids.len() == 2 && oids.contains(&pkey) && oids.contains(&session_bound);
            if !ours {
                pg_sys::table_close(rel, pg_sys::NoLock as i32);
                return Err(Fallback);
            }
            Ok(Table {
                rel,
                pkey: pg_sys::index_open(pkey, pg_sys::RowExclusiveLock as i32),
                session_bound: pg_sys::index_open(session_bound, pg_sys::RowExclusiveLock as i32),
                sequence,
            })
        }
    }

    /// Runs `f` on the visible row of `key`, if any (its slot, with every column read).
    fn with_row<R>(&self, key: &str, f: impl FnOnce(Option<*mut pg_sys::TupleTableSlot>) -> R) -> R {
        // SAFETY: an index scan on the primary key with a registered snapshot, as the executor
        // does; the slot and scan are released before returning (an error releases them with
        // the transaction's resources).
        unsafe {
            pg_sys::CommandCounterIncrement();
            let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
            let mut scankey: pg_sys::ScanKeyData = std::mem::zeroed();
            let key_datum = key.into_datum().expect("text datum");
            pg_sys::ScanKeyInit(
                &mut scankey,
                1,
                pg_sys::BTEqualStrategyNumber as u16,
                pg_sys::Oid::from(pg_sys::F_TEXTEQ),
                key_datum,
            );
            let scan = pg_sys::index_beginscan(self.rel, self.pkey, snapshot, 1, 0);
            pg_sys::index_rescan(scan, &mut scankey, 1, std::ptr::null_mut(), 0);
            let slot = pg_sys::table_slot_create(self.rel, std::ptr::null_mut());
            let found = pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot);
            if found {
                pg_sys::slot_getsomeattrs_int(slot, COLUMNS as i32);
            }
            let result = f(found.then_some(slot));
            pg_sys::ExecDropSingleTupleTableSlot(slot);
            pg_sys::index_endscan(scan);
            pg_sys::UnregisterSnapshot(snapshot);
            result
        }
    }

    fn close(self) {
        // SAFETY: closes what `open` opened; the locks stay until the transaction ends.
        unsafe {
            pg_sys::index_close(self.session_bound, pg_sys::NoLock as i32);
            pg_sys::index_close(self.pkey, pg_sys::NoLock as i32);
            pg_sys::table_close(self.rel, pg_sys::NoLock as i32);
        }
    }
}

fn column<T: FromDatum>(slot: *mut pg_sys::TupleTableSlot, n: usize) -> Option<T> {
    // SAFETY: `slot_getsomeattrs_int` filled the first COLUMNS values of the slot.
    unsafe {
        let slot = &*slot;
        T::from_datum(*slot.tts_values.add(n), *slot.tts_isnull.add(n))
    }
}

fn item_pointer(page: u32, offset: u16) -> pg_sys::ItemPointerData {
    pg_sys::ItemPointerData {
        ip_blkid: pg_sys::BlockIdData { bi_hi: (page >> 16) as u16, bi_lo: page as u16 },
        ip_posid: offset,
    }
}

/// The lease table opened for the sweep's page reads (its lock kept until the transaction ends),
/// if its access method has TID range scans.
pub struct Pages {
    rel: pg_sys::Relation,
    am: &'static pg_sys::TableAmRoutine,
}

impl Pages {
    pub fn open() -> Result<Pages, Fallback> {
        // SAFETY: a catalog lookup and a relation open inside a transaction; the access method
        // routine lives as long as the backend.
        unsafe {
            if pg_sys::IsInParallelMode() {
                return Err(Fallback);
            }
            let rel = pg_sys::table_open(oids()?.table, pg_sys::AccessShareLock as i32);
            let am = &*(*rel).rd_tableam;
            if am.scan_set_tidrange.is_none() || am.scan_getnextslot_tidrange.is_none() {
                pg_sys::table_close(rel, pg_sys::NoLock as i32);
                return Err(Fallback);
            }
            Ok(Pages { rel, am })
        }
    }

    /// Pages of the table.
    pub fn count(&self) -> i64 {
        // SAFETY: an open relation; its size is cached by the storage manager.
        i64::from(unsafe {
            pg_sys::RelationGetNumberOfBlocksInFork(self.rel, pg_sys::ForkNumber::MAIN_FORKNUM)
        })
    }

    /// Keys of the visible rows on heap page `page` whose TTL ran out by `now`: a TID range scan
    /// of that one page, as the SQL statement's plan does.
    pub fn expired_on(&self, page: i64, now: Timestamp) -> Vec<String> {
        let Ok(page) = u32::try_from(page) else { return Vec::new() };
        let am = self.am;
        // Present: every access method has scan_begin/scan_end, `open` checked the other two.
        let (Some(begin), Some(set_range), Some(next), Some(end)) =
            (am.scan_begin, am.scan_set_tidrange, am.scan_getnextslot_tidrange, am.scan_end)
        else {
            return Vec::new();
        };
        // SAFETY: a table AM scan with a registered snapshot, as the executor's TID range scan
        // does; the slot and scan are released before returning (an error releases them with
        // the transaction's resources).
        unsafe {
            pg_sys::CommandCounterIncrement();
            let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
            let flags = pg_sys::ScanOptions::SO_TYPE_TIDRANGESCAN | pg_sys::ScanOptions::SO_ALLOW_PAGEMODE;
            let scan = begin(self.rel, snapshot, 0, std::ptr::null_mut(), std::ptr::null_mut(), flags);
            let (mut first, mut last) = (item_pointer(page, 1), item_pointer(page, u16::MAX));
            set_range(scan, &mut first, &mut last);
            let slot = pg_sys::table_slot_create(self.rel, std::ptr::null_mut());
            let mut expired = Vec::new();
            while next(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
                pg_sys::slot_getsomeattrs_int(slot, COLUMNS as i32);
                if column::<i64>(slot, EXPIRES_AT).is_some_and(|e| e <= now)
                    && let Some(key) = column::<String>(slot, KEY)
                {
                    expired.push(key);
                }
            }
            pg_sys::ExecDropSingleTupleTableSlot(slot);
            end(scan);
            pg_sys::UnregisterSnapshot(snapshot);
            expired
        }
    }

    pub fn close(self) {
        // SAFETY: closes what `open` opened; the lock stays until the transaction ends.
        unsafe { pg_sys::table_close(self.rel, pg_sys::NoLock as i32) };
    }
}

/// Inserts a new lease if the key has no row; its fence, or `None` when there is a row.
pub fn try_insert(new: &NewLease) -> Result<Option<i64>, Fallback> {
    let table = Table::open()?;
    let taken = table.with_row(new.key, |row| row.is_some());
    if taken {
        table.close();
        return Ok(None);
    }
    // SAFETY: a tuple of the table's own descriptor, inserted with its index entries, as
    // ExecInsert does; the unique index still checks the key.
    let fence = unsafe {
        let fence = nextval_internal(table.sequence, false);
        let key = new.key.into_datum().expect("text datum");
        let mut values: [Datum; COLUMNS] = [
            key,
            new.owner.into_datum().expect("text datum"),
            Oid::from(new.role).into_datum().expect("oid datum"),
            fence.into_datum().expect("int8 datum"),
            1i32.into_datum().expect("int4 datum"),
            Datum::from(new.acquired_at),
            Datum::from(new.expires_at),
            new.holder_pid.into_datum().expect("int4 datum"),
        ];
        let mut nulls = [false; COLUMNS];
        let tuple = pg_sys::heap_form_tuple((*table.rel).rd_att, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::simple_heap_insert(table.rel, tuple);
        let mut index_values = [key];
        let mut index_nulls = [false];
        let mut insert = |index: pg_sys::Relation, unique: pg_sys::IndexUniqueCheck::Type| {
            pg_sys::index_insert(
                index,
                index_values.as_mut_ptr(),
                index_nulls.as_mut_ptr(),
                &mut (*tuple).t_self,
                table.rel,
                unique,
                false,
                pg_sys::BuildIndexInfo(index),
            );
        };
        insert(table.pkey, pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES);
        // The partial index holds session-bound rows only (`WHERE expires_at = 'infinity'`).
        if new.expires_at == INFINITY {
            insert(table.session_bound, pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO);
        }
        pg_sys::CommandCounterIncrement();
        fence
    };
    table.close();
    Ok(Some(fence))
}

/// Deletes a live TTL lease with one hold left, if `owner` and `role` hold it; whether it did.
pub fn delete_last_hold(key: &str, owner: &str, role: u32, now: Timestamp) -> Result<bool, Fallback> {
    let table = Table::open()?;
    let deleted = table.with_row(key, |row| {
        let Some(slot) = row else { return false };
        let expires_at: Option<i64> = column(slot, EXPIRES_AT);
        let ours = column::<String>(slot, OWNER).as_deref() == Some(owner)
            && column::<Oid>(slot, ROLE) == Some(Oid::from(role))
            && column::<i32>(slot, HOLD_COUNT) == Some(1)
            && expires_at.is_some_and(|e| e > now && e < INFINITY)
            && column::<String>(slot, KEY).as_deref() == Some(key);
        if ours {
            // SAFETY: the row we just read; nobody else writes it (we hold its key lock).
            unsafe {
                pg_sys::simple_heap_delete(table.rel, &mut (*slot).tts_tid);
                pg_sys::CommandCounterIncrement();
            }
        }
        ours
    });
    table.close();
    Ok(deleted)
}
