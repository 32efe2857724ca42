//! The two statements of every lock cycle — grant a free key, delete a released lease — and the
//! sweep's read of one heap page (one grant in eight), done on the lease table directly (heap
//! and index access methods), without the executor: no plan check, no executor start-up, no ON
//! CONFLICT machinery. Everything else goes through SQL (`statements.rs`), and so do these
//! whenever anything is unusual — an index dlock did not create, a table whose columns are not
//! exactly those dlock writes (`relation.rs`) — then `Fallback` sends the caller to the SQL
//! statement.
//!
//! The same rules as the SQL path: the caller holds the key lock, so no other transaction is
//! writing this key; rows are read with the latest snapshot (like `pg/spi.rs`), after a command
//! counter increment, so this transaction's own earlier changes are seen too.

use crate::pg::ffi::nextval_internal;
use crate::pg::version;
use crate::store::relation::{self, Relations};
use crate::store::row::{
    self, ACQUIRED_AT, EXPIRES_AT, FENCE, HOLD_COUNT, HOLDER_PID, KEY, NewLease, OWNER, ROLE,
};
use dlock_core::{INFINITY, Timestamp};
use pgrx::pg_sys::{self, Datum, Oid};
use pgrx::{FromDatum, IntoDatum};

const COLUMNS: usize = row::COLUMNS.len();

/// The direct path does not apply; use the SQL statement.
pub struct Fallback;

/// The lease table and its two indexes, opened for writing until the transaction ends.
struct Table {
    rel: pg_sys::Relation,
    pkey: pg_sys::Relation,
    session_bound: pg_sys::Relation,
    sequence: Oid,
}

/// The lease table's relations, if the direct path may write them.
fn relations() -> Result<Relations, Fallback> {
    relation::relations().filter(|r| r.exact_shape).ok_or(Fallback)
}

impl Table {
    /// Opens the table if it is exactly as dlock created it (its columns, and two indexes,
    /// ours), in a transaction that may write (a read-only one gets the executor's 25006 from
    /// SQL).
    fn open() -> Result<Table, Fallback> {
        // SAFETY: catalog lookups and relation opens inside a transaction; locks are kept
        // until it ends, as the executor keeps them.
        unsafe {
            if pg_sys::XactReadOnly || pg_sys::IsInParallelMode() {
                return Err(Fallback);
            }
            let Relations { table, pkey, session_bound, sequence, .. } = relations()?;
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
            let scan = version::index_beginscan(self.rel, self.pkey, snapshot, 1);
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
            let rel = pg_sys::table_open(relations()?.table, pg_sys::AccessShareLock as i32);
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
        let mut values = [Datum::from(0); COLUMNS];
        values[KEY] = key;
        values[OWNER] = new.owner.into_datum().expect("text datum");
        values[ROLE] = Oid::from(new.role).into_datum().expect("oid datum");
        values[FENCE] = fence.into_datum().expect("int8 datum");
        values[HOLD_COUNT] = 1i32.into_datum().expect("int4 datum");
        values[ACQUIRED_AT] = Datum::from(new.acquired_at);
        values[EXPIRES_AT] = Datum::from(new.expires_at);
        values[HOLDER_PID] = new.holder_pid.into_datum().expect("int4 datum");
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
