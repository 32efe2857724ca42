//! A lock: describing it ([`LockBuilder`]), the kind of lease it is ([`Mode`]), and once
//! taken, the guard that holds it and the watchdog that renews it.

mod all;
mod builder;
mod guard;
mod mode;
mod request;
mod state;
mod watchdog;

pub use all::{LockAllBuilder, MultiGuard};
pub use builder::{DEFAULT_TTL, LockBuilder};
pub(crate) use builder::{InFlight, MAX_DURATION};
pub use guard::{Guard, Lease, LockInfo};
pub(crate) use mode::Mode;
pub(crate) use request::Kind;
