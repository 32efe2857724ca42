//! `DROP EXTENSION dlock` while sessions wait. A waiting call keeps the lease table locked for its
//! transaction, so the drop would wait for every wait to run out (forever, for `wait => NULL`).
//! Instead the drop announces itself before it takes any lock (an event trigger at
//! `ddl_command_start`, `hooks/drop.rs`): it holds this database's dropping lock until its
//! transaction ends and wakes every waiter; a waiter that sees the lock held ends its wait with
//! an error, which lets its locks go, and the drop goes on.

use crate::locks::tags::{self, Space, tag};
use pgrx::pg_sys;

fn dropping() -> pg_sys::LOCKTAG {
    tag(Space::Dropping, 0)
}

/// The drop under way in this transaction announces itself (until its transaction ends).
pub fn announce() {
    tags::acquire(&dropping(), pg_sys::ExclusiveLock, false, true);
}

/// Whether another session's `DROP EXTENSION dlock` is under way in this database.
pub fn under_way() -> bool {
    !tags::held_by_me(&dropping(), pg_sys::ExclusiveLock)
        && tags::held_elsewhere(&dropping(), pg_sys::ShareLock)
}
