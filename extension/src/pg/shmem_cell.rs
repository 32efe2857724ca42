//! What the postmaster sets for every backend: where dlock's shared memory lies, and the hooks
//! dlock chained in front of. The postmaster writes these while no backend runs — in
//! `_PG_init` (the hooks) and in its shared-memory startup hook (the shared memory), again
//! after a crash restart, once every backend is gone — and backends inherit them at fork and
//! only read them. Atomics make that a plain, safe read (and one a signal handler may do),
//! where a mutable static would need `unsafe` and a comment at every use.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicPtr, Ordering};

use bytemuck::Zeroable;
use pgrx::pg_sys;

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

/// A structure of `T`s, all zero bytes when the postmaster makes it: counters and slots of
/// atomics. Its memory is asked for by `request` (in the request hook) and found by `attach`
/// (in the startup hook), under one name per structure.
impl<T: Sync + Zeroable + 'static> ShmemCell<&'static [T]> {
    /// Asks for room for `len` of `T` (the postmaster's shared memory request hook).
    pub fn request(len: usize) {
        // SAFETY: a plain request; PostgreSQL itself refuses one outside the request phase.
        unsafe { pg_sys::RequestAddinShmemSpace(len * size_of::<T>()) };
    }

    /// Finds `name`'s `len` of `T` in shared memory, made all zero if this is where they are
    /// made, and sets the cell to them. Whether they were made now (the caller may then set
    /// values other than zero, before any backend runs).
    ///
    /// # Safety
    /// Only from the postmaster's shared memory startup hook (run again after a crash
    /// restart, once every backend is gone), with the `len` asked for by [`Self::request`].
    pub unsafe fn attach(&self, name: &CStr, len: usize) -> bool {
        let size = len * size_of::<T>();
        let mut found = false;
        // SAFETY: the startup hook (our caller's promise) may create and find shared memory;
        // the memory is `size` bytes, MAXALIGNed (8 bytes, every atomic's alignment), ours
        // alone by its name; all-zero bytes are a `T` (`Zeroable`).
        let slice = unsafe {
            let base = pg_sys::ShmemInitStruct(name.as_ptr(), size, &mut found).cast::<T>();
            if !found {
                std::ptr::write_bytes(base.cast::<u8>(), 0, size);
            }
            std::slice::from_raw_parts(base.cast_const(), len)
        };
        // One slice (two words) leaked per server start, crash restarts included.
        self.set(Box::leak(Box::new(slice)));
        !found
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
