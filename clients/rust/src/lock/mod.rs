//! A lock: describing it ([`LockBuilder`], [`LockAllBuilder`], with the options they share), the
//! kind of lease it is ([`Mode`]), and once taken, the guard that holds it and the watchdog that
//! renews it.

mod all;
mod builder;
mod guard;
mod mode;
mod options;
mod request;
mod state;
mod watchdog;

pub use all::{LockAllBuilder, MultiGuard};
pub(crate) use builder::InFlight;
pub use builder::LockBuilder;
pub use guard::{Guard, Lease, LockInfo};
pub(crate) use mode::Mode;
pub use options::DEFAULT_TTL;
pub(crate) use options::MAX_DURATION;
pub(crate) use request::Kind;
