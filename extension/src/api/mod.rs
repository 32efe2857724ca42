//! The SQL surface: every function `CREATE EXTENSION dlock` installs. Each checks its arguments
//! (`dlock_core::args`), learns who calls (`pg::role`), runs an operation and raises its errors
//! with their SQLSTATEs (`pg::report`); nothing else happens here.

mod convert;
mod durable;
mod fast;
mod primitives;
mod shards;
mod stats;
mod views;
