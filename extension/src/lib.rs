//! dlock: distributed locks that live inside PostgreSQL.
//!
//! Leases with TTLs (or bound to a session), fencing tokens that only grow, server-side waiting
//! in arrival order, reentrancy and role scoping, as SQL functions any client can call. The
//! contract's pure rules live in the `dlock-core` crate; this crate puts them into PostgreSQL,
//! in layers that call one way:
//!
//! - `api`: the SQL functions: argument checks, the caller's identity, error reports (their
//!   schema objects, tables and views, are `schema/`'s SQL);
//! - `ops`: the operations: take the key lock, read, decide, write, wait; `elections`: the
//!   election's operations and its background worker, together;
//! - `hooks`: where PostgreSQL calls back: transaction and subtransaction ends, session exit,
//!   shared memory at server start;
//! - `wait`, `store`, `fast`: server-side waiting, the lease table, fast mode's leases in shared
//!   memory;
//! - `locks`: dlock's advisory locks (key locks, session bindings, queues, watches);
//! - `stats`: what dlock did, counted per database in shared memory, and its LOG lines;
//! - `pg`: the PostgreSQL glue everything stands on.

use pgrx::prelude::*;

mod api;
mod elections;
mod fast;
mod hooks;
mod locks;
mod ops;
mod pg;
mod settings;
mod shards;
mod stats;
mod store;
mod wait;

::pgrx::pg_module_magic!(name, version);

extension_sql_file!("schema/bootstrap.sql", name = "bootstrap", bootstrap);
extension_sql_file!("schema/finalize.sql", name = "finalize", finalize);

#[pg_guard]
pub extern "C-unwind" fn _PG_init() {
    // A second dlock library in this process must not define the settings again (PostgreSQL
    // refuses) nor touch the first one's shared memory (`pg/loaded.rs`).
    if !pg::loaded::detect_second_library() {
        settings::define();
    }
    hooks::register();
    pg::signals::install();
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
