//! PostgreSQL glue, the layer everything else stands on: the backend's facts and clock, SPI,
//! settings, latches and signals, error reports, the caller's identity, changes kept per
//! subtransaction, other backends' PGPROCs (`proc`), what the postmaster sets for every backend
//! (`shmem_cell`), and every declaration pgrx does not bind (`ffi`) or that differs between
//! PostgreSQL versions (`version`).

pub mod backend;
pub mod ffi;
pub mod guc;
pub mod hangup;
pub mod latch;
pub mod loaded;
pub mod pending;
pub mod proc;
pub mod report;
pub mod role;
pub mod shmem_cell;
pub mod signals;
pub mod spi;
pub mod version;
