//! What the postmaster sets for every backend: where dlock's shared memory lies, and the hooks
//! dlock chained in front of. The postmaster writes these while no backend runs — in
//! `_PG_init` (the hooks) and in its shared-memory startup hook (the shared memory), again
//! after a crash restart, once every backend is gone — and backends inherit them at fork and
//! only read them. Atomics make that a plain, safe read (and one a signal handler may do),
//! where a mutable static would need `unsafe` and a comment at every use.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, Ordering};

/// A `&'static T` set by the postmaster's shared-memory startup hook (and set again after a
/// crash restart) and read by backends after fork: a structure in shared memory, or a
/// descriptor of one (its pointers and sizes) leaked by the hook. Empty without preload.
pub struct ShmemCell<T: 'static> {
    value: AtomicPtr<T>,
    /// Hands out `&'static T`: shareable between threads only if `T` is (`Sync`).
    _holds: PhantomData<&'static T>,
}

impl<T: Sync + 'static> ShmemCell<T> {
    /// An empty cell.
    pub const fn new() -> Self {
        ShmemCell { value: AtomicPtr::new(std::ptr::null_mut()), _holds: PhantomData }
    }

    /// Sets the cell: later reads return `value`. A reference read before stays what it was,
    /// valid for as long as its `'static` promised (a crash restart sets the cell again only
    /// once every backend that read it is gone).
    pub fn set(&self, value: &'static T) {
        self.value.store(std::ptr::from_ref(value).cast_mut(), Ordering::Release);
    }

    /// The value, if the cell was set.
    pub fn get(&self) -> Option<&'static T> {
        // SAFETY: null, or made from a `&'static T` by `set`; only ever read through.
        unsafe { self.value.load(Ordering::Acquire).as_ref() }
    }
}

/// A hook of the form `void (*)(void)` (`shmem_request_hook`, `shmem_startup_hook`).
pub type Hook = unsafe extern "C-unwind" fn();

// A function pointer round-trips through a data pointer on every platform PostgreSQL runs on.
const _: () = assert!(std::mem::size_of::<Hook>() == std::mem::size_of::<*mut ()>());

/// The hook dlock replaced, saved when chaining (`_PG_init` of the postmaster) and called first
/// by dlock's own.
pub struct PrevHook(AtomicPtr<()>);

impl PrevHook {
    /// No hook saved yet.
    pub const fn new() -> Self {
        PrevHook(AtomicPtr::new(std::ptr::null_mut()))
    }

    /// Saves the hook that was installed before dlock's (`None`: there was none).
    pub fn set(&self, hook: Option<Hook>) {
        self.0.store(hook.map_or(std::ptr::null_mut(), |hook| hook as *mut ()), Ordering::Release);
    }

    /// The saved hook, if there was one.
    pub fn get(&self) -> Option<Hook> {
        let hook = self.0.load(Ordering::Acquire);
        // SAFETY: non-null, so made by `set` from a `Hook`, which it is turned back into.
        (!hook.is_null()).then(|| unsafe { std::mem::transmute::<*mut (), Hook>(hook) })
    }
}
