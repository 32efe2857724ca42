//! A lock: describing it ([`LockBuilder`]), the kind of lease it is ([`Mode`]), and once
//! taken, the guard that holds it and the watchdog that renews it.

mod builder;
mod guard;
mod mode;
mod state;
mod watchdog;

pub use builder::{DEFAULT_TTL, LockBuilder};
pub use guard::{Guard, Lease, LockInfo};
pub(crate) use mode::Mode;
