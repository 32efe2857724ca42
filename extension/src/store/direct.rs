//! The lock cycle — read a key, grant it, release it — done on the lease table directly (heap
//! and index access methods), without the executor: no plan check, no executor start-up, no ON
//! CONFLICT machinery. A grant of a key nobody waits for writes over the key's row in place and
//! a release marks it free (HOT updates: no indexed column changes); owner rows are inserted and
//! deleted (`row.rs`). Also the sweep's read of one heap page and the election worker's read of
//! every leader. Everything else goes through SQL (`statements.rs`), and so do these whenever
//! anything is unusual — an index dlock did not create, a table whose columns are not exactly
//! those dlock writes (`relation.rs`) — then `Fallback` sends the caller to the SQL statement.
//!
//! The same rules as the SQL path: the caller holds the key lock, so no other transaction is
//! writing this key; rows are read with the latest snapshot (like `pg/spi.rs`), after a command
//! counter increment, so this transaction's own earlier changes are seen too.

use crate::pg::ffi::nextval_internal;
use crate::pg::version;
use crate::store::relation::{self, Relations};
use crate::store::row::{
    self, ACQUIRED_AT, Deleted, EXPIRES_AT, FENCE, HOLD_COUNT, HOLDER, HOLDER_PID, INFO, KEY, KEY_ROW, KIND,
    LOCK_DELAY, MAX_HOLDERS, NewLease, OWNER, ROLE, Slot, Stored,
};
use crate::store::statements::{interval_datum, micros};
use dlock_core::lease::{Kind, Lease};
use dlock_core::{INFINITY, Timestamp};
use pgrx::datum::Interval;
use pgrx::pg_sys::{self, Datum, Oid};
use pgrx::{FromDatum, IntoDatum};

const COLUMNS: usize = row::COLUMNS.len();

thread_local! {
    /// What this session knows of the key whose key row it last wrote (see `KeyRowNote`).
    static LAST_KEY_ROW: std::cell::RefCell<Option<KeyRowNote>> = const { std::cell::RefCell::new(None) };
}

/// Where this session last wrote a key row, and what it saw of the key's other rows. A release
/// of that key (the second half of a pair) reads that version first, one heap fetch instead of
/// an index scan; so does the next grant, if no owner row of the key can have been inserted
/// since this session last scanned the key and found none (`owner_rows.rs`). Whatever became
/// of the version since (written over, pruned, rolled back) it is used only if still visible
/// and still that key's row, and only in the same table (not one made again or rewritten).
struct KeyRowNote {
    key: String,
    relfile: Oid,
    /// Where it wrote the key row last (none yet: it only scanned the key).
    tid: Option<pg_sys::ItemPointerData>,
    /// The owner-row count of the key's bucket when this session's scan found no owner row.
    alone_at: Option<u64>,
}

/// The direct path does not apply; use the SQL statement.
pub struct Fallback;

/// The lease table, opened until the transaction ends, and its primary key, opened (and
/// locked) when first used: a release that finds its row by a heap fetch never touches it.
struct Table {
    rel: pg_sys::Relation,
    pkey_oid: Oid,
    pkey: std::cell::Cell<Option<pg_sys::Relation>>,
    lock: pg_sys::LOCKMODE,
    sequence: Oid,
}

/// The lease table's relations, if the direct path may use them.
fn relations() -> Result<Relations, Fallback> {
    relation::relations().filter(|r| r.shape == relation::Shape::Exact).ok_or(Fallback)
}

/// What the table is opened for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    /// Reading rows: in any transaction, read-only ones included (a read there never falls
    /// back to SQL).
    Read,
    /// Writing rows: in a transaction that may write (a read-only one gets the executor's 25006
    /// from SQL).
    Write,
}

/// A row as read: where it is, what slot it is, and its lease if it holds one (read out of the
/// scan's slot, so nothing of the tuple is copied).
struct Found {
    tid: pg_sys::ItemPointerData,
    holder: String,
    /// The lease, if the row holds one (`hold_count > 0`).
    lease: Option<Lease>,
    /// What a free key row keeps: its kind, last fence and time of grant.
    kind: i8,
    fence: i64,
    acquired_at: Timestamp,
    /// The lease's expiry; when free, when it was freed.
    expires_at: Timestamp,
    /// Its lock-delay, µs (0 when free).
    lock_delay: i64,
}

impl Found {
    fn held(&self) -> bool {
        self.lease.is_some()
    }

    fn owner_is(&self, owner: &str) -> bool {
        self.lease.as_ref().is_some_and(|l| l.owner == owner)
    }

    /// The row as the sweep sees it.
    fn stored(&self, key: &str) -> Stored {
        Stored {
            key: key.to_owned(),
            holder: self.holder.clone(),
            owner: self.lease.as_ref().map(|l| l.owner.clone()),
            hold_count: self.lease.as_ref().map_or(0, |l| l.hold_count),
            expires_at: self.expires_at,
            lock_delay: self.lock_delay,
            fence: Some(self.fence),
        }
    }
}

impl Table {
    /// Opens the table if it is exactly as dlock created it (its columns, and its primary key
    /// as its one index).
    fn open(access: Access) -> Result<Table, Fallback> {
        let write = access == Access::Write;
        // SAFETY: catalog lookups and relation opens inside a transaction; locks are kept
        // until it ends, as the executor keeps them.
        unsafe {
            if (write && pg_sys::XactReadOnly) || pg_sys::IsInParallelMode() {
                return Err(Fallback);
            }
            let lock = if write { pg_sys::RowExclusiveLock } else { pg_sys::AccessShareLock } as i32;
            let Relations { table, pkey, sequence, .. } = relations()?;
            let rel = pg_sys::table_open(table, lock);
            if !only_index_is(rel, pkey) {
                pg_sys::table_close(rel, pg_sys::NoLock as i32);
                return Err(Fallback);
            }
            Ok(Table { rel, pkey_oid: pkey, pkey: std::cell::Cell::new(None), lock, sequence })
        }
    }

    /// The primary key, opened with the table's lock mode on first use.
    fn pkey(&self) -> pg_sys::Relation {
        if let Some(pkey) = self.pkey.get() {
            return pkey;
        }
        // SAFETY: an index of the open table (checked in `open`), locked as the executor locks
        // the indexes of a table it reads or writes; closed in `close`.
        let pkey = unsafe { pg_sys::index_open(self.pkey_oid, self.lock) };
        self.pkey.set(Some(pkey));
        pkey
    }

    /// The visible rows of `key` (of its holder `holder`, if given), with every column.
    fn rows(&self, key: &str, holder: Option<&str>) -> Vec<Found> {
        read_latest(self.rel, |snapshot, slot| {
            let mut rows = Vec::new();
            // SAFETY: an index scan on the primary key with the registered snapshot, as the
            // executor does; ended before returning (an error ends it with the transaction's
            // resources). Each row is read out of the slot before the next replaces it.
            unsafe {
                // The primary key is (key, holder): equality on the key, and on the holder if given.
                let mut scankeys: [pg_sys::ScanKeyData; 2] = std::mem::zeroed();
                let values = [Some(key), holder];
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
                let scan = version::index_beginscan(self.rel, self.pkey(), snapshot, n as i32);
                pg_sys::index_rescan(scan, scankeys.as_mut_ptr(), n as i32, std::ptr::null_mut(), 0);
                while pg_sys::index_getnext_slot(scan, pg_sys::ScanDirection::ForwardScanDirection, slot) {
                    pg_sys::slot_getsomeattrs_int(slot, COLUMNS as i32);
                    rows.push(found_in(slot));
                }
                pg_sys::index_endscan(scan);
            }
            rows
        })
    }

    /// The row of `key` and `holder`, if any.
    fn row(&self, key: &str, holder: &str) -> Option<Found> {
        self.rows(key, Some(holder)).pop()
    }

    /// The key row of `key`, read at the version this session last wrote if that is still
    /// the visible one (see `KeyRowNote`), else found through the primary key.
    fn key_row(&self, key: &str) -> Option<Found> {
        self.noted_key_row(key, None).or_else(|| self.row(key, KEY_ROW))
    }

    /// The key row of `key` at the version this session last wrote, if still visible; with
    /// `alone_at` (a grant), only if this session saw no owner row of the key at that count of
    /// them, and with its page pruned first if that is due (`prune_if_due`).
    fn noted_key_row(&self, key: &str, alone_at: Option<u64>) -> Option<Found> {
        let relfile = version::relfile_number(self.rel);
        let tid = LAST_KEY_ROW.with(|note| match &*note.borrow() {
            Some(n)
                if n.key == key
                    && n.relfile == relfile
                    && alone_at.is_none_or(|at| n.alone_at == Some(at)) =>
            {
                n.tid
            }
            _ => None,
        })?;
        self.fetch(tid, key, alone_at.is_some())
    }

    /// The row version at `tid` if it is visible and is the key row of `key`; its page pruned
    /// first if `prune` and that is due.
    fn fetch(&self, mut tid: pg_sys::ItemPointerData, key: &str, prune: bool) -> Option<Found> {
        // SAFETY: the table's access method routine lives as long as the backend; the block is
        // checked to exist before it is read (as the executor's TID scan does; a truncation
        // needs a lock that conflicts with ours).
        let fetch_row_version = unsafe { (*(*self.rel).rd_tableam).tuple_fetch_row_version }?;
        let (block, _) = pgrx::itemptr::item_pointer_get_both(tid);
        // SAFETY: an open relation; its size comes from the storage manager.
        if block
            >= unsafe { pg_sys::RelationGetNumberOfBlocksInFork(self.rel, pg_sys::ForkNumber::MAIN_FORKNUM) }
        {
            return None;
        }
        if prune {
            self.prune_if_due(block);
        }
        read_latest(self.rel, |snapshot, slot| {
            // SAFETY: a fetch of one row version with the registered snapshot into the table's
            // slot, read out of it before it goes.
            unsafe {
                if !fetch_row_version(self.rel, &mut tid, snapshot, slot) {
                    return None;
                }
                pg_sys::slot_getsomeattrs_int(slot, COLUMNS as i32);
            }
            (column::<&str>(slot, KEY) == Some(key) && column::<&str>(slot, HOLDER) == Some(KEY_ROW))
                .then(|| found_in(slot))
        })
    }

    /// Prunes heap page `block` if that is due, as an index fetch does before it reads a page: a
    /// heap fetch alone never prunes, and the versions a lock cycle leaves dead must go for the
    /// next update of the key row to find room on its page (a HOT update). Once a cycle is
    /// enough: a grant's fetch prunes, a release's does not.
    fn prune_if_due(&self, block: pg_sys::BlockNumber) {
        // SAFETY: a block of the open table that exists (the caller checked); pinned for the
        // call only. Only a heap has heap pages.
        unsafe {
            if std::ptr::eq((*self.rel).rd_tableam, pg_sys::GetHeapamTableAmRoutine()) {
                let buffer = pg_sys::ReadBuffer(self.rel, block);
                pg_sys::heap_page_prune_opt(self.rel, buffer);
                pg_sys::ReleaseBuffer(buffer);
            }
        }
    }

    /// Inserts a row with its index entry (the primary key still checks uniqueness); where it
    /// is.
    fn insert(&self, values: &mut [Datum; COLUMNS], nulls: &mut [bool; COLUMNS]) -> pg_sys::ItemPointerData {
        // SAFETY: a tuple of the table's own descriptor, inserted with its index entry, as
        // ExecInsert does.
        unsafe {
            let tuple = pg_sys::heap_form_tuple((*self.rel).rd_att, values.as_mut_ptr(), nulls.as_mut_ptr());
            pg_sys::simple_heap_insert(self.rel, tuple);
            self.index(tuple, values);
            pg_sys::CommandCounterIncrement();
            (*tuple).t_self
        }
    }

    /// Writes a new version of `row` with `values`: in place on its page when it fits (a HOT
    /// update, no index entry), else with the new version's index entry. Returns where the new
    /// version is.
    fn update(
        &self,
        row: &Found,
        values: &mut [Datum; COLUMNS],
        nulls: &mut [bool; COLUMNS],
    ) -> pg_sys::ItemPointerData {
        // SAFETY: the row we just read, which nobody else writes (we hold its key lock); a tuple
        // of the table's own descriptor.
        unsafe {
            let tuple = pg_sys::heap_form_tuple((*self.rel).rd_att, values.as_mut_ptr(), nulls.as_mut_ptr());
            let mut tid = row.tid;
            if update_needs_index_entries(self.rel, &mut tid, tuple) {
                self.index(tuple, values);
            }
            pg_sys::CommandCounterIncrement();
            (*tuple).t_self
        }
    }

    /// Deletes `row`.
    fn delete(&self, row: &Found) {
        // SAFETY: the row we just read; nobody else writes it (we hold its key lock).
        unsafe {
            let mut tid = row.tid;
            pg_sys::simple_heap_delete(self.rel, &mut tid);
            pg_sys::CommandCounterIncrement();
        }
    }

    /// The primary key's entry of `tuple`, whose columns are `values`.
    ///
    /// # Safety
    /// `tuple` was just inserted into the table (its `t_self` is set).
    unsafe fn index(&self, tuple: pg_sys::HeapTuple, values: &[Datum; COLUMNS]) {
        let mut key = [values[KEY], values[HOLDER]];
        let mut nulls = [false; 2];
        let pkey = self.pkey();
        // SAFETY: as the caller promised; the index's two columns, never NULL.
        unsafe {
            pg_sys::index_insert(
                pkey,
                key.as_mut_ptr(),
                nulls.as_mut_ptr(),
                &mut (*tuple).t_self,
                self.rel,
                pg_sys::IndexUniqueCheck::UNIQUE_CHECK_YES,
                false,
                pg_sys::BuildIndexInfo(pkey),
            );
        }
    }

    fn close(self) {
        // SAFETY: closes what `open` opened; the locks stay until the transaction ends.
        unsafe {
            if let Some(pkey) = self.pkey.get() {
                pg_sys::index_close(pkey, pg_sys::NoLock as i32);
            }
            pg_sys::table_close(self.rel, pg_sys::NoLock as i32);
        }
    }
}

/// Whether `pkey` is the one index of open relation `rel`: read from the relation cache's list
/// when it is valid (as `RelationGetIndexList` does, without copying it), else built by it.
///
/// # Safety
/// `rel` is open and locked.
unsafe fn only_index_is(rel: pg_sys::Relation, pkey: Oid) -> bool {
    // SAFETY: as the caller promised; the list belongs to the relation cache entry, which our
    // lock keeps from being rebuilt while we read it, or is our own copy, freed here.
    unsafe {
        let is_only = |list: *mut pg_sys::List| {
            list.as_ref().is_some_and(|l| l.length == 1 && (*l.elements).oid_value == pkey)
        };
        if (*rel).rd_indexvalid {
            return is_only((*rel).rd_indexlist);
        }
        let indexes = pg_sys::RelationGetIndexList(rel);
        let only = is_only(indexes);
        pg_sys::list_free(indexes);
        only
    }
}

/// `simple_heap_update`: whether the new version needs index entries (not a heap-only tuple).
/// 16 made the function say so; before, the tuple's flag did.
///
/// # Safety
/// As `simple_heap_update`'s: `tid` is a live row of `rel` that nobody else is updating.
unsafe fn update_needs_index_entries(
    rel: pg_sys::Relation,
    tid: &mut pg_sys::ItemPointerData,
    tuple: pg_sys::HeapTuple,
) -> bool {
    // SAFETY: as the caller promised.
    unsafe {
        #[cfg(feature = "pg15")]
        {
            pg_sys::simple_heap_update(rel, tid, tuple);
            (*(*tuple).t_data).t_infomask2 as u32 & pg_sys::HEAP_ONLY_TUPLE == 0
        }
        #[cfg(not(feature = "pg15"))]
        {
            let mut update_indexes = pg_sys::TU_UpdateIndexes::TU_None;
            pg_sys::simple_heap_update(rel, tid, tuple, &mut update_indexes);
            update_indexes == pg_sys::TU_UpdateIndexes::TU_All
        }
    }
}

/// A column that must not be NULL: a NULL means the table is not what dlock made, which is an
/// error, never a lease with fence 0.
fn required<T: FromDatum>(slot: *mut pg_sys::TupleTableSlot, n: usize) -> T {
    column(slot, n)
        .unwrap_or_else(|| super::corrupted(format!("dlock_internal.lease.{} is NULL", row::COLUMNS[n].0)))
}

/// The row in `slot` (its columns read), each column converted once.
fn found_in(slot: *mut pg_sys::TupleTableSlot) -> Found {
    let kind = required::<i8>(slot, KIND);
    let hold_count = required::<i32>(slot, HOLD_COUNT);
    let fence = required(slot, FENCE);
    let acquired_at = required(slot, ACQUIRED_AT);
    let expires_at = required(slot, EXPIRES_AT);
    let lock_delay = micros(required::<Interval>(slot, LOCK_DELAY));
    Found {
        // SAFETY: the slot holds the row just fetched.
        tid: unsafe { (*slot).tts_tid },
        holder: required(slot, HOLDER),
        lease: (hold_count > 0).then(|| Lease {
            owner: required(slot, OWNER),
            role: required::<Oid>(slot, ROLE).to_u32(),
            fence,
            hold_count,
            acquired_at,
            expires_at,
            holder_pid: required(slot, HOLDER_PID),
            kind: Kind::from_code(kind as u8)
                .unwrap_or_else(|| super::corrupted(format!("unknown lease kind {:?}", kind as u8 as char))),
            max_holders: column(slot, MAX_HOLDERS),
            lock_delay,
            info: column(slot, INFO),
        }),
        kind,
        fence,
        acquired_at,
        expires_at,
        lock_delay,
    }
}

/// The leases of `key` (of `owner` only, if given), in fence order (as `statements::read`).
/// For an owner, two probes of the primary key (its owner row, the key row), never a walk over
/// every entry of a key whose hand-offs left many.
pub fn read(key: &str, owner: Option<&str>) -> Result<Vec<Lease>, Fallback> {
    let table = Table::open(Access::Read)?;
    let rows = match owner {
        None => table.rows(key, None),
        Some(owner) => {
            let mut rows: Vec<Found> = table.row(key, owner).into_iter().collect();
            rows.extend(table.row(key, KEY_ROW).filter(|r| r.owner_is(owner)));
            rows
        }
    };
    table.close();
    let mut leases: Vec<Lease> = rows.into_iter().filter_map(|r| r.lease).collect();
    leases.sort_by_key(|l| l.fence);
    Ok(leases)
}

/// The columns of `new`'s lease in the row of `holder`, with a fresh fence.
fn lease_row(table: &Table, new: &NewLease, holder: &str) -> ([Datum; COLUMNS], [bool; COLUMNS], i64) {
    // SAFETY: draws from the fence sequence (WAL-logged; the grant's commit flushes it).
    let fence = unsafe { nextval_internal(table.sequence, false) };
    let mut values = [Datum::from(0); COLUMNS];
    let mut nulls = [false; COLUMNS];
    values[KEY] = new.key.into_datum().expect("text datum");
    values[OWNER] = new.owner.into_datum().expect("text datum");
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
    values[HOLDER] = holder.into_datum().expect("text datum");
    (values, nulls, fence)
}

/// Writes `new`'s lease into `slot`: over the slot's row (any lease in it is over: the caller
/// decided, or found the key free) or into a new one; its fence.
fn write(table: &Table, new: &NewLease, slot: Slot, existing: Option<&Found>) -> i64 {
    let holder = slot.holder(new.owner);
    let (mut values, mut nulls, fence) = lease_row(table, new, holder);
    let tid = match existing {
        Some(row) => table.update(row, &mut values, &mut nulls),
        None => {
            let tid = table.insert(&mut values, &mut nulls);
            super::sweep::row_added();
            tid
        }
    };
    if holder == KEY_ROW {
        wrote_key_row(table, new.key, tid);
    }
    fence
}

/// Grants `new` in `slot` if no row of its key holds a lease; its fence, or `None`.
///
/// A grant into the key row reads only that row when this session's note of the key says no
/// owner row can have come since it last saw none (`KeyRowNote`); else every row of the key,
/// noting whether there was an owner row among them.
pub fn try_grant(new: &NewLease, slot: Slot) -> Result<Option<i64>, Fallback> {
    let table = Table::open(Access::Write)?;
    // Read before the rows: an owner row counted after this is seen by the scan, or moves the
    // count away from what is noted.
    // Only for the key row: a grant into an owner row inserts one itself.
    let owner_rows = super::owner_rows::count(new.key).filter(|_| slot == Slot::Key);
    let noted = owner_rows.and_then(|at| table.noted_key_row(new.key, Some(at)));
    let rows = match noted {
        Some(row) => vec![row],
        None => {
            let rows = table.rows(new.key, None);
            if let Some(at) = owner_rows
                && rows.iter().all(|r| r.holder == KEY_ROW)
            {
                saw_no_owner_row(&table, new.key, at);
            }
            rows
        }
    };
    let fence = if rows.iter().any(Found::held) {
        None
    } else {
        let holder = slot.holder(new.owner);
        let existing = rows.iter().find(|r| r.holder == holder);
        Some(write(&table, new, slot, existing))
    };
    table.close();
    Ok(fence)
}

/// Writes a lease the caller decided to grant into `slot` (over the slot's row, if any); its
/// fence.
pub fn grant(new: &NewLease, slot: Slot) -> Result<i64, Fallback> {
    let table = Table::open(Access::Write)?;
    let existing = table.row(new.key, slot.holder(new.owner));
    let fence = write(&table, new, slot, existing.as_ref());
    table.close();
    Ok(fence)
}

/// Frees the last hold of a live TTL lease of `owner` and `role` (of kind `only`, if given):
/// the key row marked free at `now`, or the owner's row deleted. Its kind, if there was one.
pub fn release_last_hold(
    key: &str,
    owner: &str,
    role: u32,
    now: Timestamp,
    only: Option<Kind>,
) -> Result<Option<Kind>, Fallback> {
    let table = Table::open(Access::Write)?;
    let last_hold = |row: &Found| {
        let lease = row.lease.as_ref()?;
        let ours = lease.owner == owner
            && lease.role == role
            && lease.hold_count == 1
            && lease.expires_at > now
            && lease.expires_at < INFINITY;
        (ours && only.is_none_or(|only| only == lease.kind)).then_some(lease.kind)
    };
    let mut released = None;
    if let Some(row) = table.key_row(key)
        && let Some(kind) = last_hold(&row)
    {
        let (mut values, mut nulls) = freed(key, &row, now);
        let tid = table.update(&row, &mut values, &mut nulls);
        wrote_key_row(&table, key, tid);
        released = Some(kind);
    } else if let Some(row) = table.row(key, owner)
        && let Some(kind) = last_hold(&row)
    {
        table.delete(&row);
        released = Some(kind);
    }
    table.close();
    Ok(released)
}

/// Deletes the row of `key` and `holder` if `due` holds of it as it is now (the caller holds the
/// key's lock): what it deleted.
pub fn delete_row_if(
    key: &str,
    holder: &str,
    due: impl FnOnce(&Stored) -> bool,
) -> Result<Option<Deleted>, Fallback> {
    let table = Table::open(Access::Write)?;
    let deleted = table.row(key, holder).and_then(|row| {
        due(&row.stored(key)).then(|| {
            table.delete(&row);
            Deleted { lease: row.lease }
        })
    });
    table.close();
    Ok(deleted)
}

/// Notes where this session wrote `key`'s key row (see `KeyRowNote`); what it saw of the key's
/// owner rows stays noted (writing the key row adds none).
fn wrote_key_row(table: &Table, key: &str, tid: pg_sys::ItemPointerData) {
    note(table, key, |note| note.tid = Some(tid));
}

/// Notes that this session found no owner row of `key` when their count was `at` (the key
/// row's place is noted too: the caller read it, or found none, and writes it next).
fn saw_no_owner_row(table: &Table, key: &str, at: u64) {
    note(table, key, |note| note.alone_at = Some(at));
}

/// Changes this session's note of `key` in `table` by `change`, after starting it afresh if it
/// was of another key or table.
fn note(table: &Table, key: &str, change: impl FnOnce(&mut KeyRowNote)) {
    let relfile = version::relfile_number(table.rel);
    LAST_KEY_ROW.with(|last| {
        let mut last = last.borrow_mut();
        let note = match &mut *last {
            Some(n) if n.key == key && n.relfile == relfile => n,
            other => other.insert(KeyRowNote { key: key.to_owned(), relfile, tid: None, alone_at: None }),
        };
        change(note);
    });
}

/// The columns of key row `row` of `key` once free (at `now`): nobody's, no hold; its kind,
/// last fence and time of grant stay.
fn freed(key: &str, row: &Found, now: Timestamp) -> ([Datum; COLUMNS], [bool; COLUMNS]) {
    let mut values = [Datum::from(0); COLUMNS];
    let mut nulls = [true; COLUMNS];
    let mut set = |n: usize, value: Datum| {
        values[n] = value;
        nulls[n] = false;
    };
    set(KEY, key.into_datum().expect("text datum"));
    set(FENCE, row.fence.into_datum().expect("int8 datum"));
    set(HOLD_COUNT, 0i32.into_datum().expect("int4 datum"));
    set(ACQUIRED_AT, Datum::from(row.acquired_at));
    set(EXPIRES_AT, Datum::from(now));
    set(KIND, row.kind.into_datum().expect("char datum"));
    set(LOCK_DELAY, interval_datum(0));
    set(HOLDER, row.holder.as_str().into_datum().expect("text datum"));
    (values, nulls)
}

/// Runs `f` with the latest snapshot, taken after a command counter increment so that this
/// transaction's own changes are seen (as `pg/spi.rs` reads), and a slot of `rel`: both
/// registered for the call and released after it (an error releases them with the
/// transaction's resources).
fn read_latest<R>(
    rel: pg_sys::Relation,
    f: impl FnOnce(pg_sys::Snapshot, *mut pg_sys::TupleTableSlot) -> R,
) -> R {
    // SAFETY: inside a transaction, on an open relation; what is made here is released here.
    unsafe {
        pg_sys::CommandCounterIncrement();
        let snapshot = pg_sys::RegisterSnapshot(pg_sys::GetLatestSnapshot());
        let slot = pg_sys::table_slot_create(rel, std::ptr::null_mut());
        let result = f(snapshot, slot);
        pg_sys::ExecDropSingleTupleTableSlot(slot);
        pg_sys::UnregisterSnapshot(snapshot);
        result
    }
}

fn item_pointer(page: u32, offset: u16) -> pg_sys::ItemPointerData {
    pg_sys::ItemPointerData {
        ip_blkid: pg_sys::BlockIdData { bi_hi: (page >> 16) as u16, bi_lo: page as u16 },
        ip_posid: offset,
    }
}

/// The lease table opened for whole-page and whole-table reads (its lock kept until the
/// transaction ends), if its access method has TID range scans.
pub struct Pages {
    rel: pg_sys::Relation,
    am: &'static pg_sys::TableAmRoutine,
}

/// A column of the slot just read.
fn column<T: FromDatum>(slot: *mut pg_sys::TupleTableSlot, n: usize) -> Option<T> {
    // SAFETY: `slot_getsomeattrs_int` filled the first COLUMNS values of the slot.
    unsafe {
        let slot = &*slot;
        T::from_datum(*slot.tts_values.add(n), *slot.tts_isnull.add(n))
    }
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

    /// Calls `f` on every visible row of heap page `page` (a TID range scan of that page, as
    /// the SQL statement's plan does), or of the whole table (`None`: a sequential scan).
    fn each(&self, page: Option<u32>, mut f: impl FnMut(*mut pg_sys::TupleTableSlot)) {
        let am = self.am;
        // Present: every access method has scan_begin/scan_end, `open` checked the other two.
        let (Some(begin), Some(set_range), Some(next_in_range), Some(next), Some(end)) = (
            am.scan_begin,
            am.scan_set_tidrange,
            am.scan_getnextslot_tidrange,
            am.scan_getnextslot,
            am.scan_end,
        ) else {
            return;
        };
        read_latest(self.rel, |snapshot, slot| {
            // SAFETY: a table AM scan with the registered snapshot, as the executor's TID range
            // and sequential scans do; ended before returning (an error ends it with the
            // transaction's resources).
            unsafe {
                let kind = if page.is_some() {
                    pg_sys::ScanOptions::SO_TYPE_TIDRANGESCAN
                } else {
                    pg_sys::ScanOptions::SO_TYPE_SEQSCAN
                };
                let flags = kind | pg_sys::ScanOptions::SO_ALLOW_PAGEMODE;
                let scan = begin(self.rel, snapshot, 0, std::ptr::null_mut(), std::ptr::null_mut(), flags);
                if let Some(page) = page {
                    let (mut first, mut last) = (item_pointer(page, 1), item_pointer(page, u16::MAX));
                    set_range(scan, &mut first, &mut last);
                }
                let direction = pg_sys::ScanDirection::ForwardScanDirection;
                while if page.is_some() {
                    next_in_range(scan, direction, slot)
                } else {
                    next(scan, direction, slot)
                } {
                    pg_sys::slot_getsomeattrs_int(slot, COLUMNS as i32);
                    f(slot);
                }
                end(scan);
            }
        });
    }

    /// Tells the free space map how much room heap page `page` has now. The scan that read it
    /// pruned it, but only VACUUM records what pruning freed: without this, inserts of new keys
    /// extend the table until autovacuum comes round, and a churn of fresh keys leaves it many
    /// times the size its rows need.
    pub fn record_free_space(&self, page: i64) {
        let Ok(block) = u32::try_from(page) else { return };
        if i64::from(block) >= self.count() {
            return;
        }
        // SAFETY: a block of an open relation (below its size; truncation needs a lock that
        // conflicts with ours), pinned and share-locked while its page is read.
        unsafe {
            let buffer = pg_sys::ReadBuffer(self.rel, block);
            pg_sys::LockBuffer(buffer, pg_sys::BUFFER_LOCK_SHARE as i32);
            let free = pg_sys::PageGetHeapFreeSpace(pg_sys::BufferGetPage(buffer).cast());
            pg_sys::UnlockReleaseBuffer(buffer);
            pg_sys::RecordPageWithFreeSpace(self.rel, block, free);
            // Inserts search the map from its top: tell the upper levels too.
            pg_sys::FreeSpaceMapVacuumRange(self.rel, block, block + 1);
        }
    }

    /// The rows of heap page `page`, as the sweep sees them.
    pub fn rows_on(&self, page: i64) -> Vec<Stored> {
        let Ok(page) = u32::try_from(page) else { return Vec::new() };
        let mut rows = Vec::new();
        self.each(Some(page), |slot| {
            let (Some(key), Some(holder), Some(hold_count), Some(expires_at)) = (
                column::<String>(slot, KEY),
                column::<String>(slot, HOLDER),
                column::<i32>(slot, HOLD_COUNT),
                column::<i64>(slot, EXPIRES_AT),
            ) else {
                return;
            };
            rows.push(Stored {
                key,
                holder,
                hold_count,
                expires_at,
                lock_delay: column::<Interval>(slot, LOCK_DELAY).map_or(0, micros),
                fence: column(slot, FENCE),
                owner: column(slot, OWNER),
            });
        });
        rows
    }

    /// (election, term, expires_at) of every election's leader with a TTL, live or expired: a
    /// sequential scan of the whole table, as the SQL statement's plan is (a handful of rows
    /// match, one per election).
    pub fn leaders(&self) -> Vec<(String, i64, Timestamp)> {
        let mut leaders = Vec::new();
        self.each(None, |slot| {
            let leader = column::<i8>(slot, KIND) == Some(Kind::Leader.code() as i8)
                && column::<i32>(slot, HOLD_COUNT).is_some_and(|n| n > 0);
            if let (true, Some(key), Some(fence), Some(expires_at)) = (
                leader,
                column::<String>(slot, KEY),
                column::<i64>(slot, FENCE),
                column::<i64>(slot, EXPIRES_AT),
            ) && expires_at < INFINITY
            {
                leaders.push((key, fence, expires_at));
            }
        });
        leaders
    }

    pub fn close(self) {
        // SAFETY: closes what `open` opened; the lock stays until the transaction ends.
        unsafe { pg_sys::table_close(self.rel, pg_sys::NoLock as i32) };
    }
}
