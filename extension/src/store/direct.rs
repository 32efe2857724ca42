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
    self, ACQUIRED_AT, EXPIRES_AT, FENCE, HOLD_COUNT, HOLDER_PID, INFO, KEY, KIND, LOCK_DELAY, MAX_HOLDERS,
    NewLease, OWNER, ROLE,
};
use crate::store::statements::{interval_datum, micros};
use dlock_core::lease::{Kind, Lease};
use dlock_core::{INFINITY, Timestamp};
use pgrx::datum::Interval;
use pgrx::pg_sys::{self, Datum, Oid};
use pgrx::{FromDatum, IntoDatum};

const COLUMNS: usize = row::COLUMNS.len();

/// The direct path does not apply; use the SQL statement.
pub struct Fallback;

/// The lease table and its indexes, opened for writing until the transaction ends.
struct Table {
    rel: pg_sys::Relation,
    pkey: pg_sys::Relation,
    /// The partial index of session-bound rows, opened only to insert one. Nothing else
    /// touches it: a read scans the primary key, a delete leaves index entries to vacuum, and a
    /// TTL row is outside its predicate.
    session_bound: Option<pg_sys::Relation>,
    sequence: Oid,
}

/// The lease table's relations, if the direct path may write them.
fn relations() -> Result<Relations, Fallback> {
    relation::relations().filter(|r| r.shape == relation::Shape::Exact).ok_or(Fallback)
}

/// What the table is opened for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Reading rows: in any transaction, read-only ones included (a read there never falls
    /// back to SQL).
    Read,
    /// Writing rows, the partial index of session-bound rows too if `session_bound_row`: in a
    /// transaction that may write (a read-only one gets the executor's 25006 from SQL).
    Write { session_bound_row: bool },
}

impl Table {
    /// Opens the table if it is exactly as dlock created it (its columns, and two indexes,
    /// ours).
    fn open(access: Access) -> Result<Table, Fallback> {
        let write = access != Access::Read;
        // SAFETY: catalog lookups and relation opens inside a transaction; locks are kept
        // until it ends, as the executor keeps them.
        unsafe {
            if (write && pg_sys::XactReadOnly) || pg_sys::IsInParallelMode() {
                return Err(Fallback);
            }
            let lock = if write { pg_sys::RowExclusiveLock } else { pg_sys::AccessShareLock } as i32;
            let Relations { table, pkey, session_bound, sequence, .. } = relations()?;
            let rel = pg_sys::table_open(table, lock);
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
            let session_bound_row = matches!(access, Access::Write { session_bound_row: true });
            Ok(Table {
                rel,
                pkey: pg_sys::index_open(pkey, lock),
                session_bound: session_bound_row.then(|| pg_sys::index_open(session_bound, lock)),
                sequence,
            })
        }
    }

    /// Runs `f` on the first visible row of `key` (of `owner`'s, if given), if any (its slot,
    /// with every column read).
    fn with_row<R>(
        &self,
        key: &str,
        owner: Option<&str>,
        f: impl FnOnce(Option<*mut pg_sys::TupleTableSlot>) -> R,
    ) -> R {
        let mut f = Some(f);
        let mut result = None;
        self.scan(key, owner, |slot| {
            result = f.take().map(|f| f(slot));
            false
        });
        result.expect("the scan calls back at least once")
    }

    /// Calls `f` on each visible row of `key` (of `owner`'s, if given) while it returns true,
    /// then once with `None` after the last (its slot, with every column read).
    fn scan(
        &self,
        key: &str,
        owner: Option<&str>,
        mut f: impl FnMut(Option<*mut pg_sys::TupleTableSlot>) -> bool,
    ) {
        // SAFETY: an index scan on the primary key with a registered snapshot, as the executor
        // does; the slot and scan are released before returning (an error releases them with
        // the transaction's resources).
        unsafe {
            pg_sys::CommandCounterIncrement();
            let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
            // The primary key is (key, owner): equality on the key, and on the owner if given.
            let mut scankeys: [pg_sys::ScanKeyData; 2] = std::mem::zeroed();
            let values = [Some(key), owner];
            let n = values.iter().flatten().count();
            for (i, value) in values.iter().flatten().enumerate() {
                pg_sys::ScanKeyInit(
                    &mut scankeys[i],
                    (i + 1) as pg_sys::AttrNumber,
                    pg_sys::BTEqualStrategyNumber as u16,
                    pg_sys::Oid::from(pg_sys::F_TEXTEQ),
                    value.into_datum().expect("text datum"),
                );
            }
            let scan = version::index_beginscan(self.rel, self.pkey, snapshot, n as i32);
            pg_sys::index_rescan(scan, scankeys.as_mut_ptr(), n as i32, std::ptr::null_mut(), 0);
            let slot = pg_sys::table_slot_create(self.rel, std::ptr::null_mut());
            loop {
                let found =
                    pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot);
                if found {
                    pg_sys::slot_getsomeattrs_int(slot, COLUMNS as i32);
                }
                if !f(found.then_some(slot)) || !found {
                    break;
                }
            }
            pg_sys::ExecDropSingleTupleTableSlot(slot);
            pg_sys::index_endscan(scan);
            pg_sys::UnregisterSnapshot(snapshot);
        }
    }

    fn close(self) {
        // SAFETY: closes what `open` opened; the locks stay until the transaction ends.
        unsafe {
            if let Some(session_bound) = self.session_bound {
                pg_sys::index_close(session_bound, pg_sys::NoLock as i32);
            }
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

    /// (key, owner) of the visible rows on heap page `page` whose TTL and lock-delay ran out by
    /// `now`: a TID range scan of that one page, as the SQL statement's plan does.
    pub fn expired_on(&self, page: i64, now: Timestamp) -> Vec<(String, String)> {
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
                let delay = column::<Interval>(slot, LOCK_DELAY).map_or(0, micros);
                if column::<i64>(slot, EXPIRES_AT).is_some_and(|e| e.saturating_add(delay) <= now)
                    && let (Some(key), Some(owner)) =
                        (column::<String>(slot, KEY), column::<String>(slot, OWNER))
                {
                    expired.push((key, owner));
                }
            }
            pg_sys::ExecDropSingleTupleTableSlot(slot);
            end(scan);
            pg_sys::UnregisterSnapshot(snapshot);
            expired
        }
    }

    /// (election, term, expires_at) of every election's leader with a TTL, live or expired: a
    /// sequential scan of the whole table, as the SQL statement's plan is (a handful of rows
    /// match, one per election).
    pub fn leaders(&self) -> Vec<(String, i64, Timestamp)> {
        let am = self.am;
        let (Some(begin), Some(next), Some(end)) = (am.scan_begin, am.scan_getnextslot, am.scan_end) else {
            return Vec::new();
        };
        // SAFETY: a table AM scan with a registered snapshot, as the executor's sequential scan
        // does; released before returning (an error releases it with the transaction).
        unsafe {
            pg_sys::CommandCounterIncrement();
            let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
            let flags = pg_sys::ScanOptions::SO_TYPE_SEQSCAN | pg_sys::ScanOptions::SO_ALLOW_PAGEMODE;
            let scan = begin(self.rel, snapshot, 0, std::ptr::null_mut(), std::ptr::null_mut(), flags);
            let slot = pg_sys::table_slot_create(self.rel, std::ptr::null_mut());
            let mut leaders = Vec::new();
            while next(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
                pg_sys::slot_getsomeattrs_int(slot, COLUMNS as i32);
                let leader = column::<i8>(slot, KIND) == Some(Kind::Leader.code() as i8);
                if let (true, Some(key), Some(fence), Some(expires_at)) = (
                    leader,
                    column::<String>(slot, KEY),
                    column::<i64>(slot, FENCE),
                    column::<i64>(slot, EXPIRES_AT),
                ) && expires_at < INFINITY
                {
                    leaders.push((key, fence, expires_at));
                }
            }
            pg_sys::ExecDropSingleTupleTableSlot(slot);
            end(scan);
            pg_sys::UnregisterSnapshot(snapshot);
            leaders
        }
    }

    pub fn close(self) {
        // SAFETY: closes what `open` opened; the lock stays until the transaction ends.
        unsafe { pg_sys::table_close(self.rel, pg_sys::NoLock as i32) };
    }
}

/// Every row of `key` (of `owner` only, if given), in fence order (as `statements::read`).
pub fn read(key: &str, owner: Option<&str>) -> Result<Vec<Lease>, Fallback> {
    let table = Table::open(Access::Read)?;
    let mut rows = Vec::new();
    table.scan(key, owner, |slot| {
        if let Some(slot) = slot {
            rows.push(lease_of(slot));
        }
        true
    });
    table.close();
    rows.sort_by_key(|l| l.fence);
    Ok(rows)
}

/// A column that must not be NULL: a NULL means the table is not what dlock made, which is an
/// internal error, never a lease with fence 0.
fn required<T: FromDatum>(slot: *mut pg_sys::TupleTableSlot, n: usize) -> T {
    column(slot, n).unwrap_or_else(|| {
        pgrx::error!("dlock: internal error: dlock_internal.lease.{} is NULL", row::COLUMNS[n].0)
    })
}

fn lease_of(slot: *mut pg_sys::TupleTableSlot) -> Lease {
    let kind = required::<i8>(slot, KIND) as u8;
    Lease {
        owner: required(slot, OWNER),
        role: required::<Oid>(slot, ROLE).to_u32(),
        fence: required(slot, FENCE),
        hold_count: required(slot, HOLD_COUNT),
        acquired_at: required(slot, ACQUIRED_AT),
        expires_at: required(slot, EXPIRES_AT),
        holder_pid: required(slot, HOLDER_PID),
        kind: Kind::from_code(kind)
            .unwrap_or_else(|| pgrx::error!("dlock: internal error: unknown lease kind {:?}", kind as char)),
        max_holders: column(slot, MAX_HOLDERS),
        lock_delay: micros(required::<Interval>(slot, LOCK_DELAY)),
        info: column(slot, INFO),
    }
}

/// Which rows stop `try_insert`.
pub enum Unless {
    /// Any row of the key: the insert is the grant's decision (a key with no row is free).
    KeyHasRows,
    /// A row of the new lease's owner (SQL replaces it): the caller decided the grant. This
    /// reads the owner's index entries only, not every dead one a hot key's hand-offs left.
    OwnerHasRow,
}

/// Inserts a new lease unless rows stop it; its fence, or `None` when one does.
pub fn try_insert(new: &NewLease, unless: Unless) -> Result<Option<i64>, Fallback> {
    let table = Table::open(Access::Write { session_bound_row: new.expires_at == INFINITY })?;
    let owner = match unless {
        Unless::KeyHasRows => None,
        Unless::OwnerHasRow => Some(new.owner),
    };
    let taken = table.with_row(new.key, owner, |row| row.is_some());
    if taken {
        table.close();
        return Ok(None);
    }
    // SAFETY: a tuple of the table's own descriptor, inserted with its index entries, as
    // ExecInsert does; the unique index still checks the key.
    let fence = unsafe {
        let fence = nextval_internal(table.sequence, false);
        let key = new.key.into_datum().expect("text datum");
        let owner = new.owner.into_datum().expect("text datum");
        let mut values = [Datum::from(0); COLUMNS];
        let mut nulls = [false; COLUMNS];
        values[KEY] = key;
        values[OWNER] = owner;
        values[ROLE] = Oid::from(new.role).into_datum().expect("oid datum");
        values[FENCE] = fence.into_datum().expect("int8 datum");
        values[HOLD_COUNT] = 1i32.into_datum().expect("int4 datum");
        values[ACQUIRED_AT] = Datum::from(new.acquired_at);
        values[EXPIRES_AT] = Datum::from(new.expires_at);
        values[HOLDER_PID] = new.holder_pid.into_datum().expect("int4 datum");
        values[KIND] = (new.kind.code() as i8).into_datum().expect("char datum");
        match new.max_holders {
            Some(n) => values[MAX_HOLDERS] = n.into_datum().expect("int4 datum"),
            None => nulls[MAX_HOLDERS] = true,
        }
        values[LOCK_DELAY] = interval_datum(new.lock_delay);
        match new.info {
            Some(info) => values[INFO] = info.into_datum().expect("text datum"),
            None => nulls[INFO] = true,
        }
        let tuple = pg_sys::heap_form_tuple((*table.rel).rd_att, values.as_mut_ptr(), nulls.as_mut_ptr());
        pg_sys::simple_heap_insert(table.rel, tuple);
        let insert =
            |index: pg_sys::Relation, values: &mut [Datum], unique: pg_sys::IndexUniqueCheck::Type| {
                let mut nulls = [false; 2];
                pg_sys::index_insert(
                    index,
                    values.as_mut_ptr(),
                    nulls.as_mut_ptr(),
                    &mut (*tuple).t_self,
                    table.rel,
                    unique,
                    false,
                    pg_sys::BuildIndexInfo(index),
                );
            };
        insert(table.pkey, &mut [key, owner], pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES);
        // The partial index holds session-bound rows only (`WHERE expires_at = 'infinity'`):
        // opened for one of those.
        if let Some(session_bound) = table.session_bound {
            insert(session_bound, &mut [key], pg_sys::IndexUniqueCheck::UNIQUE_CHECK_NO);
        }
        pg_sys::CommandCounterIncrement();
        fence
    };
    table.close();
    Ok(Some(fence))
}

/// Deletes a live TTL lease with one hold left, if `owner` and `role` hold it; the kind of the
/// lease it deleted.
pub fn delete_last_hold(
    key: &str,
    owner: &str,
    role: u32,
    now: Timestamp,
    only: Option<Kind>,
) -> Result<Option<Kind>, Fallback> {
    let table = Table::open(Access::Write { session_bound_row: false })?;
    let deleted = table.with_row(key, Some(owner), |row| {
        let slot = row?;
        let expires_at: Option<i64> = column(slot, EXPIRES_AT);
        let ours = column::<String>(slot, OWNER).as_deref() == Some(owner)
            && column::<Oid>(slot, ROLE) == Some(Oid::from(role))
            && column::<i32>(slot, HOLD_COUNT) == Some(1)
            && expires_at.is_some_and(|e| e > now && e < INFINITY)
            && column::<String>(slot, KEY).as_deref() == Some(key);
        let kind = column::<i8>(slot, KIND).and_then(|code| Kind::from_code(code as u8))?;
        if !ours || only.is_some_and(|only| only != kind) {
            return None;
        }
        // SAFETY: the row we just read; nobody else writes it (we hold its key lock).
        unsafe {
            pg_sys::simple_heap_delete(table.rel, &mut (*slot).tts_tid);
            pg_sys::CommandCounterIncrement();
        }
        Some(kind)
    });
    table.close();
    Ok(deleted)
}
