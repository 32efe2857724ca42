//! Another backend's PGPROC, as dlock reaches it: a handle into the shared proc array with the
//! few things dlock does to another backend — wake it, read its pid and proc number. Never a
//! Rust reference: a PGPROC is written by its own backend and by the lock manager while others
//! look at it.

use crate::pg::version;
use pgrx::pg_sys;
use std::ptr::NonNull;

/// An entry of the shared proc array (`ProcGlobal->allProcs`), which lives as long as the
/// postmaster.
#[derive(Clone, Copy)]
pub struct Proc(NonNull<pg_sys::PGPROC>);

impl Proc {
    /// The entry `proc` points to (`None` for null).
    ///
    /// # Safety
    /// `proc` is null or points to an entry of the shared proc array.
    pub unsafe fn from_ptr(proc: *mut pg_sys::PGPROC) -> Option<Proc> {
        NonNull::new(proc).map(Proc)
    }

    /// The entry with this proc number, if the proc array has one.
    pub fn by_number(number: usize) -> Option<Proc> {
        // SAFETY: ProcGlobal is set up by the postmaster before any backend (null before that),
        // and its array has `allProcCount` entries.
        unsafe {
            let global = pg_sys::ProcGlobal;
            if global.is_null() || number >= (*global).allProcCount as usize {
                return None;
            }
            Proc::from_ptr((*global).allProcs.add(number))
        }
    }

    /// The backend running the virtual transaction `vxid`, if it still runs it.
    ///
    /// # Safety
    /// The proc array must be attached (any backend).
    pub unsafe fn of(vxid: pg_sys::VirtualTransactionId) -> Option<Proc> {
        // SAFETY: as the caller promised.
        unsafe { Proc::all_of(std::slice::from_ref(&vxid)).pop() }
    }

    /// The backends running these virtual transactions (those still running them), in one pass
    /// over the proc array however many there are.
    ///
    /// # Safety
    /// The proc array must be attached (any backend).
    pub unsafe fn all_of(vxids: &[pg_sys::VirtualTransactionId]) -> Vec<Proc> {
        // SAFETY: as the caller promised; `procs_of` returns entries of the proc array.
        unsafe { version::procs_of(vxids).into_iter().filter_map(|proc| Proc::from_ptr(proc)).collect() }
    }

    /// Sets the backend's latch: how PostgreSQL wakes another backend.
    pub fn set_latch(self) {
        // SAFETY: an entry of the proc array; SetLatch is made to be called on another
        // backend's latch (a latch nobody owns is left alone).
        unsafe { pg_sys::SetLatch(std::ptr::addr_of_mut!((*self.0.as_ptr()).procLatch)) }
    }

    /// The pid of the backend using the entry (0: none).
    pub fn pid(self) -> i32 {
        // SAFETY: an entry of the proc array; a plain read of an int.
        unsafe { (*self.0.as_ptr()).pid }
    }

    /// The entry's proc number (its index in the proc array).
    pub fn number(self) -> usize {
        // SAFETY: an entry of the proc array.
        unsafe { version::proc_number(self.0.as_ptr()) }
    }
}
