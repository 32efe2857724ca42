//! Where PostgreSQL calls dlock back: the end of a transaction and of a subtransaction (one
//! dispatcher each, in a fixed order), the session's exit, and shared memory at server start.
//! Each calls down into the modules that keep work for that moment. Also the event trigger
//! that runs before `DROP EXTENSION dlock` (`drop`).

pub mod drop;
pub mod exit;
pub mod shmem;
pub mod subxact;
pub mod xact;

/// Registers every hook; once per backend, from `_PG_init`.
pub fn register() {
    xact::register();
    subxact::register();
    shmem::register();
}
