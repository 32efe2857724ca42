//! The operations behind the SQL functions, on checked arguments and the caller's role: each
//! takes the key's lock, reads the row, lets the contract's rules decide (`dlock_core::lease`)
//! and writes, waiting where the call asked to. They use the mechanisms below them (locks,
//! waiting, the lease table) and never reach up to the SQL surface.

pub mod acquire;
pub mod acquire_all;
pub mod attempt;
pub mod blocker;
pub mod fence;
pub mod handoff;
pub mod locking;
pub mod release;
pub mod renew;
pub mod wait_free;
pub mod watch;

use crate::hooks::exit;
use crate::locks::session;
use crate::pg::role;
use dlock_core::lease::Caller;

/// The caller of renew/release-like calls, admin standing included.
fn standing(owner: &str, role: u32) -> Caller<'_> {
    Caller { role, owner, admin: role::is_admin(role) }
}

/// Binds a just-granted lease to this session, which then frees it on its way out.
pub(crate) fn bind_to_session(fence: i64, hash: u64) {
    session::bind(fence, hash);
    exit::free_bound_leases_on_exit();
}
