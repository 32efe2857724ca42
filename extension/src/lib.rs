//! dlock: distributed locks that live inside PostgreSQL.
//!
//! Leases with TTLs (or bound to a session), fencing tokens from a WAL-logged sequence,
//! server-side waiting, reentrancy, and role scoping — as SQL functions any client can call.
//! Layout: `api` (the SQL functions) → `ops` (lock, read, decide, write) → `lease` (the pure
//! rules) and `store` (the lease table via `spi`); `keylock` and `session` hold the
//! heavyweight locks; `wait` the server-side waiting; `sweep` keeps the table small.

use pgrx::prelude::*;

mod api;
mod args;
mod current;
mod durability;
mod error;
mod fast;
mod guc;
mod handoff;
mod heap;
mod interrupt;
mod keylock;
mod lease;
mod lockwait;
mod ops;
mod pending;
mod queue;
mod role;
mod session;
mod shmem;
mod spi;
mod store;
mod subxact;
mod sweep;
mod wait;
mod waitslot;
mod watch;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("sql/bootstrap.sql", name = "bootstrap", bootstrap);
extension_sql_file!("sql/finalize.sql", name = "finalize", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    guc::register();
    keylock::register_callbacks();
    session::register_callbacks();
    durability::register_callbacks();
    handoff::register_callbacks();
    watch::register_callbacks();
    subxact::register_callback();
    shmem::request_at_preload();
    interrupt::install();
}

#[cfg(any(test, feature = "pg_test"))]
mod tests;

/// Required by `cargo pgrx test`.
#[cfg(test)]
pub mod pg_test {
    pub fn setup(_options: Vec<&str>) {}

    #[must_use]
    pub fn postgresql_conf_options() -> Vec<&'static str> {
        vec![]
    }
}
