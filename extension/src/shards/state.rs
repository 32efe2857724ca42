//! This server's shard map, its previous one and its gates (`dlock_internal.shard_map` and
//! `shard_gate`), kept per backend as a `dlock_core::shards::Gates` and forgotten on any relcache
//! invalidation of `shard_map`, which every change of them sends.
//!
//! Every grant pins the map: it takes `shard_map` in ACCESS SHARE mode until its transaction
//! ends (a fast-path lock, no statement). An install takes it in ACCESS EXCLUSIVE mode, so it
//! waits for the grants made under the old map to commit or abort, and every grant after it
//! sees the new map: once a server has acknowledged a map, no grant it makes can contradict it.
//! Taking the lock also reads the invalidations that came in, so a pinned map is never stale.

use crate::pg::role;
use crate::pg::spi::{self, Spi, Statement, arg};
use crate::store::relation;
use dlock_core::Timestamp;
use dlock_core::shards::{Gate, Gates, ShardMap};
use pgrx::pg_sys::{self, Datum, Oid};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

const TEXT: Oid = pg_sys::TEXTOID;
const TEXT_ARRAY: Oid = pg_sys::TEXTARRAYOID;
const INT8: Oid = pg_sys::INT8OID;
const TSTZ: Oid = pg_sys::TIMESTAMPTZOID;

thread_local! {
    /// `dlock_internal.shard_map`'s oid (`None`: not looked up since the last invalidation).
    static RELID: Cell<Option<Oid>> = const { Cell::new(None) };
    /// The stored state, as of the last invalidation.
    static CACHED: RefCell<Option<Rc<Gates>>> = const { RefCell::new(None) };
    static REGISTERED: Cell<bool> = const { Cell::new(false) };
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn forget(_arg: Datum, relid: Oid) {
    if relid == pg_sys::InvalidOid || RELID.with(Cell::get) == Some(relid) {
        RELID.with(|r| r.set(None));
        CACHED.with(|c| c.borrow_mut().take());
    }
}

/// `shard_map`'s oid, `InvalidOid` in a database whose dlock has no such table (not installed,
/// or an earlier release's SQL that `ALTER EXTENSION dlock UPDATE` has not brought up yet).
fn relid() -> Oid {
    if let Some(oid) = RELID.with(Cell::get) {
        return oid;
    }
    if !REGISTERED.with(|r| r.replace(true)) {
        // SAFETY: registers a callback with no argument, once per backend.
        unsafe { pg_sys::CacheRegisterRelcacheCallback(Some(forget), Datum::from(0)) };
    }
    // SAFETY: syscache lookups inside a transaction.
    let oid = unsafe {
        let schema = pg_sys::get_namespace_oid(c"dlock_internal".as_ptr(), true);
        if schema == pg_sys::InvalidOid {
            pg_sys::InvalidOid
        } else {
            pg_sys::get_relname_relid(c"shard_map".as_ptr(), schema)
        }
    };
    // Only a table found is remembered: one made later (ALTER EXTENSION dlock UPDATE, in
    // another session) sends no invalidation this backend would hear.
    if oid != pg_sys::InvalidOid {
        RELID.with(|r| r.set(Some(oid)));
    }
    oid
}

/// Takes `shard_map` in `mode` (reading the invalidations that came in) and returns its oid, or
/// `InvalidOid` when there is no such table; a table dropped and made again meanwhile is looked
/// up again.
fn lock(mode: u32, take: impl Fn(Oid)) -> Oid {
    loop {
        let oid = relid();
        if oid == pg_sys::InvalidOid {
            return oid;
        }
        take(oid);
        if RELID.with(Cell::get) == Some(oid) {
            return oid;
        }
        // SAFETY: gives back the lock just taken, on a relation that is gone.
        unsafe { pg_sys::UnlockRelationOid(oid, mode as pg_sys::LOCKMODE) };
    }
}

/// Pins the map until the transaction ends (see the module's comment).
pub fn pin() {
    let mode = pg_sys::AccessShareLock;
    // SAFETY: a relation lock, held until the transaction ends or `unpin`.
    lock(mode, |oid| unsafe { pg_sys::LockRelationOid(oid, mode as pg_sys::LOCKMODE) });
}

/// Gives back one `pin` of this transaction: after an attempt that wrote nothing, so that a
/// waiting acquire does not hold up an install while it waits.
pub fn unpin() {
    if let Some(oid) = RELID.with(Cell::get).filter(|oid| *oid != pg_sys::InvalidOid) {
        // SAFETY: gives back one count of the lock `pin` took (the lock manager counts them).
        unsafe { pg_sys::UnlockRelationOid(oid, pg_sys::AccessShareLock as pg_sys::LOCKMODE) };
    }
}

/// Takes the map exclusively for a change of it: waits, without queueing in front of grants,
/// until no transaction that granted under the map it replaces is still running. Cancel and
/// `statement_timeout` end the wait. `false` when there is no shard table.
pub fn lock_for_change() -> bool {
    let mode = pg_sys::AccessExclusiveLock;
    let oid = lock(mode, |oid| {
        // A try, then a short sleep: a queued ACCESS EXCLUSIVE request would hold up every
        // grant behind it until the oldest grant's transaction ended.
        // SAFETY: conditional relation locks; the sleep checks for interrupts.
        while !unsafe { pg_sys::ConditionalLockRelationOid(oid, mode as pg_sys::LOCKMODE) } {
            let soon = crate::pg::backend::now() + 10_000;
            crate::pg::latch::sleep_until(Some(soon), crate::pg::version::WaitEvent::DlockShardMap.id());
        }
    });
    oid != pg_sys::InvalidOid
}

/// Sends the change of the stored state to every backend at commit.
pub fn changed() {
    let oid = relid();
    if oid != pg_sys::InvalidOid {
        // SAFETY: queues a relcache invalidation, sent when this transaction commits.
        unsafe { pg_sys::CacheInvalidateRelcacheByRelid(oid) };
    }
    CACHED.with(|c| c.borrow_mut().take());
}

/// The pinned state (`pin` first): read from the tables once per invalidation.
pub fn current() -> Rc<Gates> {
    if let Some(gates) = CACHED.with(|c| c.borrow().clone()) {
        return gates;
    }
    let loaded = Rc::new(spi::connect(load));
    if RELID.with(Cell::get).is_some() {
        CACHED.with(|c| *c.borrow_mut() = Some(loaded.clone()));
    }
    loaded
}

static LOAD_MAP: Statement = Statement {
    sql: "SELECT me, epoch, servers, previous_epoch, previous_servers FROM dlock_internal.shard_map",
    args: &[],
};
static LOAD_GATES: Statement =
    Statement { sql: "SELECT from_server, opens_at FROM dlock_internal.shard_gate", args: &[] };

fn as_owner<R>(f: impl FnOnce() -> R) -> R {
    let owner = relation::relations().map_or(pg_sys::InvalidOid, |r| r.owner);
    if owner == pg_sys::InvalidOid {
        crate::pg::report::raise(dlock_core::DlockError::NotInstalled, "dlock")
    }
    role::as_owner(owner, f)
}

fn corrupted(what: &str) -> ! {
    crate::pg::report::raise(
        dlock_core::DlockError::Corrupted { what: format!("dlock_internal.shard_map: {what}") },
        "dlock",
    )
}

/// The stored state, read now (an install reads it after taking the map exclusively).
pub fn load(spi: &Spi) -> Gates {
    if relid() == pg_sys::InvalidOid {
        return Gates::unsharded("");
    }
    let rows = as_owner(|| {
        spi.query(&LOAD_MAP, &[], |row| {
            (
                row.get::<String>(1),
                row.get::<i64>(2),
                row.get::<Vec<String>>(3),
                row.get::<i64>(4),
                row.get::<Vec<String>>(5),
            )
        })
    });
    let Some((me, epoch, servers, previous_epoch, previous_servers)) = rows.into_iter().next() else {
        return Gates::unsharded("");
    };
    let (Some(me), Some(epoch), Some(servers)) = (me, epoch, servers) else { corrupted("a NULL in its row") };
    let map = ShardMap::new(epoch, servers).unwrap_or_else(|e| corrupted(&e.to_string()));
    let previous = match (previous_epoch, previous_servers) {
        (Some(epoch), Some(servers)) => {
            Some(ShardMap::new(epoch, servers).unwrap_or_else(|e| corrupted(&e.to_string())))
        }
        _ => None,
    };
    let gates: BTreeMap<String, Gate> = as_owner(|| {
        spi.query(&LOAD_GATES, &[], |row| {
            let from = row.get::<String>(1).unwrap_or_else(|| corrupted("a gate without its server"));
            (from, row.get::<Timestamp>(2).map_or(Gate::Closed, Gate::OpensAt))
        })
    })
    .into_iter()
    .collect();
    Gates::restore(me, Some(map), previous, gates)
}

static SAVE_MAP: Statement = Statement {
    sql: "INSERT INTO dlock_internal.shard_map AS m \
            (only_row, me, epoch, servers, previous_epoch, previous_servers, installed_at) \
          VALUES (true, $1, $2, $3, $4, $5, $6) \
          ON CONFLICT (only_row) DO UPDATE SET me = excluded.me, epoch = excluded.epoch, \
            servers = excluded.servers, previous_epoch = excluded.previous_epoch, \
            previous_servers = excluded.previous_servers, installed_at = excluded.installed_at",
    args: &[TEXT, INT8, TEXT_ARRAY, INT8, TEXT_ARRAY, TSTZ],
};
static CLEAR_GATES: Statement = Statement { sql: "DELETE FROM dlock_internal.shard_gate", args: &[] };
static SAVE_GATE: Statement = Statement {
    sql: "INSERT INTO dlock_internal.shard_gate AS g (from_server, opens_at) VALUES ($1, $2) \
          ON CONFLICT (from_server) DO UPDATE SET opens_at = excluded.opens_at",
    args: &[TEXT, TSTZ],
};

/// Stores `gates` (the map, the previous one, every gate), installed at `now`.
pub fn save(spi: &Spi, gates: &Gates, now: Timestamp) {
    let Some(map) = gates.map() else { return };
    let previous = gates.previous();
    as_owner(|| {
        spi.execute(
            &SAVE_MAP,
            &[
                arg(gates.me()),
                arg(map.epoch()),
                arg(map.servers().to_vec()),
                arg(previous.map(ShardMap::epoch)),
                arg(previous.map(|p| p.servers().to_vec())),
                arg(now),
            ],
        );
        spi.execute(&CLEAR_GATES, &[]);
        for (from, gate) in gates.gates() {
            let opens_at = match gate {
                Gate::Closed => None,
                Gate::OpensAt(t) => Some(*t),
            };
            spi.execute(&SAVE_GATE, &[arg(from.as_str()), arg(opens_at)]);
        }
    });
}

static OPEN_GATE: Statement = Statement {
    sql: "UPDATE dlock_internal.shard_gate SET opens_at = $2 WHERE from_server OPERATOR(pg_catalog.=) $1",
    args: &[TEXT, TSTZ],
};

/// Stores that the gate on keys from `from` opens at `at`.
pub fn open_gate(spi: &Spi, from: &str, at: Timestamp) {
    as_owner(|| spi.execute(&OPEN_GATE, &[arg(from), arg(at)]));
}

static LAST_FENCE: Statement = Statement {
    sql: "SELECT CASE WHEN is_called THEN last_value ELSE last_value OPERATOR(pg_catalog.-) 1::pg_catalog.int8 END \
          FROM dlock_internal.fence_seq",
    args: &[],
};
static JUMP_FENCES: Statement = Statement {
    sql: "SELECT pg_catalog.setval('dlock_internal.fence_seq'::pg_catalog.regclass, $1, true)",
    args: &[INT8],
};

/// The last fence this server handed out (0 if none).
pub fn last_fence(spi: &Spi) -> i64 {
    as_owner(|| spi.query(&LAST_FENCE, &[], |row| row.get::<i64>(1))).pop().flatten().unwrap_or(0)
}

/// Moves the fence sequence up to `floor`, so that the next fence is above it.
pub fn raise_fences_to(spi: &Spi, floor: i64) {
    as_owner(|| spi.execute(&JUMP_FENCES, &[arg(floor)]));
}
