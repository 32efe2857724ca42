//! The election watch: a background worker of one database (started on demand by the commit of
//! a leader's grant with a TTL, `elections/worker_start.rs`) that sleeps until the next leader's
//! expiry and, when a leader's lease ran out with nobody taking over, NOTIFYs the election's
//! watchers, as a resignation would. It holds the database's watch lock for its life (a second
//! one started by a race leaves at once), is woken by every new leader, and ends ten seconds
//! after the last leader with a TTL is gone, or at DROP EXTENSION.
//!
//! It runs with the least it needs: as the lease table's owner (chosen by the backend that
//! starts it, `elections/worker_start.rs`), reading the table directly, with no SQL; and whatever the
//! database's or the role's settings say, with dlock's own `search_path`, so that even a
//! statement it might come to run could resolve nothing a database owner put on a path.

use crate::elections::leader;
use crate::elections::worker_start;
use crate::locks::tags;
use crate::pg::backend::now;
use crate::pg::{spi, version};
use crate::store::relation;
use pgrx::bgworkers::{BackgroundWorker, SignalWakeFlags};
use pgrx::pg_sys;
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

/// How long the worker stays without any leader with a TTL before it ends (short: while it is
/// connected, a DROP DATABASE without FORCE waits for it).
const IDLE_US: i64 = 10_000_000;
/// The longest it sleeps between rounds (a renewal moves an expiry later, never earlier).
const MAX_SLEEP: Duration = Duration::from_secs(60);

/// The worker's entry point; `arg` is the database's OID.
#[pgrx::pg_guard]
#[unsafe(no_mangle)]
pub extern "C-unwind" fn dlock_election_watch_main(arg: pg_sys::Datum) {
    BackgroundWorker::attach_signal_handlers(SignalWakeFlags::SIGHUP | SignalWakeFlags::SIGTERM);
    let database = pg_sys::Oid::from(arg.value() as u32);
    let role = BackgroundWorker::get_extra().parse::<u32>().map_or(pg_sys::InvalidOid, pg_sys::Oid::from);
    // SAFETY: a registered background worker connecting once, before any transaction; then a
    // setting of the highest priority, so no database or role setting can replace it.
    unsafe {
        pg_sys::BackgroundWorkerInitializeConnectionByOid(database, role, version::BGWORKER_ANY_ROLE_FLAG);
        pg_sys::SetConfigOption(
            c"search_path".as_ptr(),
            spi::PINNED_SEARCH_PATH.as_ptr(),
            pg_sys::GucContext::PGC_SUSET,
            pg_sys::GucSource::PGC_S_OVERRIDE,
        );
    }
    let claimed = BackgroundWorker::transaction(|| {
        tags::acquire(&worker_start::watcher_lock(), pg_sys::ExclusiveLock, true, false)
    });
    if !claimed {
        return;
    }
    let mut announced = HashMap::new();
    let mut idle_since = None;
    loop {
        // (The map is the worker's own; an error ends the worker, so it is never seen torn.)
        let round = BackgroundWorker::transaction(AssertUnwindSafe(|| {
            relation::relations().map(|_| leader::announce_expired(&mut announced))
        }));
        // The extension was dropped: nothing left to watch.
        let Some((next, any)) = round else { return };
        let now = now();
        if any {
            idle_since = None;
        } else if now - *idle_since.get_or_insert(now) >= IDLE_US {
            return;
        }
        let sleep = next
            .map_or(MAX_SLEEP, |at| Duration::from_micros((at - now).max(0) as u64 + 1_000).min(MAX_SLEEP));
        if !BackgroundWorker::wait_latch(Some(sleep)) {
            return;
        }
    }
}
