//! Signals that end a lock-manager wait early. A backend waiting in PostgreSQL's lock manager
//! wakes only for interrupts, so two events a dlock waiter must not sleep through reach it as
//! signals (SIGIO, which PostgreSQL 15 backends leave unused):
//!
//! - **Its client hanging up.** While it waits, the client socket is in `O_ASYNC` mode: the
//!   kernel sends SIGIO when the peer closes it (or sends anything), and the handler asks for
//!   PostgreSQL's own connection check, as `client_connection_check_interval`'s timer would. A
//!   gone client ends the backend at once (FATAL "connection to client lost"), at no cost while
//!   nothing happens — a timer fast enough for that would cost a core's worth of wake-ups.
//! - **A force release of the lease whose binding a head waits on.** The old holder keeps the
//!   binding, so the releaser pokes the head (`poke`). Inside a pokeable wait the handler turns
//!   the poke into a query cancel, which the wait catches as the end of its slice
//!   (`locks/deadline.rs`); a genuine cancel (SIGINT, which `statement_timeout` sends too) is
//!   recorded and never swallowed.

use crate::pg::version;
use pgrx::pg_sys;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};

/// The wait in progress may be ended by a poke.
static POKEABLE: AtomicBool = AtomicBool::new(false);
/// A poke arrived since the last `clear_poke`.
static POKED: AtomicBool = AtomicBool::new(false);
/// A genuine cancel arrived during the pokeable wait.
static CANCELLED: AtomicBool = AtomicBool::new(false);
/// Whether this backend put its client socket in `O_ASYNC` mode.
static ARMED: AtomicBool = AtomicBool::new(false);

/// The SIGIO handler installed before ours (`SIG_DFL`: none), which ours calls on.
static PREV_SIGIO: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
/// PostgreSQL's SIGINT handler and its flags, saved while a pokeable wait wraps it (`SIG_DFL`:
/// no wait wraps it), for `on_sigint` to call on.
static PREV_SIGINT: AtomicUsize = AtomicUsize::new(libc::SIG_DFL);
static PREV_SIGINT_FLAGS: AtomicI32 = AtomicI32::new(0);

thread_local! {
    /// PostgreSQL's whole SIGINT action (mask included), saved while a pokeable wait wraps it,
    /// to be put back by `close_pokeable`. Never touched by a handler.
    static SAVED_SIGINT: Cell<Option<libc::sigaction>> = const { Cell::new(None) };
}

// A signal handler must never unwind: plain "C".
extern "C" fn on_sigio(signal: libc::c_int) {
    // SAFETY: what PostgreSQL's own handlers do: set flags, set the latch, keep errno.
    unsafe {
        let errno = *libc::__errno_location();
        pg_sys::CheckClientConnectionPending = 1;
        POKED.store(true, Ordering::SeqCst);
        if POKEABLE.load(Ordering::SeqCst) {
            pg_sys::QueryCancelPending = 1;
        }
        pg_sys::InterruptPending = 1;
        if !pg_sys::MyLatch.is_null() {
            pg_sys::SetLatch(pg_sys::MyLatch);
        }
        call_handler(PREV_SIGIO.load(Ordering::SeqCst), 0, signal);
        *libc::__errno_location() = errno;
    }
}

extern "C" fn on_sigint(signal: libc::c_int) {
    CANCELLED.store(true, Ordering::SeqCst);
    // SAFETY: PostgreSQL's cancel handler, with its flags, which this one wraps during a
    // pokeable wait (SIG_DFL, never called, outside one).
    unsafe {
        call_handler(PREV_SIGINT.load(Ordering::SeqCst), PREV_SIGINT_FLAGS.load(Ordering::SeqCst), signal)
    };
}

/// Calls a saved signal handler (unless it is SIG_DFL or SIG_IGN) the way the kernel would.
///
/// # Safety
/// `handler` is a handler that was installed for `signal`, with `flags`.
unsafe fn call_handler(handler: libc::sighandler_t, flags: libc::c_int, signal: libc::c_int) {
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        return;
    }
    // SAFETY: as the caller promised; SA_SIGINFO handlers take three arguments.
    unsafe {
        if flags & libc::SA_SIGINFO != 0 {
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut std::ffi::c_void) =
                std::mem::transmute(handler);
            handler(signal, std::ptr::null_mut(), std::ptr::null_mut());
        } else {
            let handler: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            handler(signal);
        }
    }
}

/// Installs the SIGIO handler; from `_PG_init`, so every backend that can wait has it before
/// anyone can poke it (a preloading postmaster's handler is inherited by its children).
pub fn install() {
    // SAFETY: installs a handler once per process; the previous one is chained.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGIO, std::ptr::null(), &mut current);
        let ours = on_sigio as *const () as libc::sighandler_t;
        if current.sa_sigaction == ours {
            return;
        }
        PREV_SIGIO.store(current.sa_sigaction, Ordering::SeqCst);
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = ours;
        action.sa_flags = libc::SA_RESTART;
        libc::sigfillset(&mut action.sa_mask);
        libc::sigaction(libc::SIGIO, &action, std::ptr::null_mut());
    }
}

/// Puts the client socket in `O_ASYNC` mode for a lock-manager wait, and has the connection
/// checked once right away (the client may have gone before). Undone by `disarm_socket`, or at
/// the end of the transaction.
pub fn arm_socket() {
    let Some(sock) = version::client_socket() else { return };
    if ARMED.swap(true, Ordering::SeqCst) {
        return;
    }
    // SAFETY: fcntl on our own client socket; flags as PostgreSQL set them, plus O_ASYNC.
    unsafe {
        libc::fcntl(sock, libc::F_SETOWN, libc::getpid());
        let flags = libc::fcntl(sock, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(sock, libc::F_SETFL, flags | libc::O_ASYNC);
        }
        pg_sys::CheckClientConnectionPending = 1;
        pg_sys::InterruptPending = 1;
    }
}

/// Takes the client socket out of `O_ASYNC` mode.
pub fn disarm_socket() {
    if !ARMED.swap(false, Ordering::SeqCst) {
        return;
    }
    let Some(sock) = version::client_socket() else { return };
    // SAFETY: as in `arm_socket`.
    unsafe {
        let flags = libc::fcntl(sock, libc::F_GETFL);
        if flags >= 0 {
            libc::fcntl(sock, libc::F_SETFL, flags & !libc::O_ASYNC);
        }
    }
}

/// Pokes the backend with this pid: it must be a dlock waiter (the head of a key's queue),
/// which has the handler.
pub fn poke(pid: i32) {
    // SAFETY: a signal to a backend that installed `on_sigio` in `_PG_init`.
    unsafe {
        libc::kill(pid, libc::SIGIO);
    }
}

/// Forgets earlier pokes; call before reading the lease a pokeable wait depends on.
pub fn clear_poke() {
    POKED.store(false, Ordering::SeqCst);
}

/// Blocks SIGIO and SIGINT while `f` runs (flag bookkeeping the handlers must not interleave).
fn masked<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: blocks and restores two signals of this (single-threaded) process.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGIO);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigprocmask(libc::SIG_BLOCK, &set, &mut old);
        let result = f();
        libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        result
    }
}

/// Opens a pokeable wait. `false` if a poke came since `clear_poke` (skip the wait: what it
/// waits for may be over already).
pub fn open_pokeable() -> bool {
    masked(|| {
        if POKED.load(Ordering::SeqCst) {
            return false;
        }
        CANCELLED.store(false, Ordering::SeqCst);
        // SAFETY: wraps PostgreSQL's cancel handler until `close_pokeable`, with the flags and
        // mask pqsignal gives handlers.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            let mut previous: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigint as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGINT, &action, &mut previous);
            PREV_SIGINT_FLAGS.store(previous.sa_flags, Ordering::SeqCst);
            PREV_SIGINT.store(previous.sa_sigaction, Ordering::SeqCst);
            SAVED_SIGINT.with(|saved| saved.set(Some(previous)));
        }
        POKEABLE.store(true, Ordering::SeqCst);
        true
    })
}

/// Closes the pokeable wait: whether a poke (and no genuine cancel) ended it. A poke that set
/// the cancel flag after the wait had ended is taken back, unless a genuine cancel came too.
pub fn close_pokeable() -> bool {
    // Only this backend opens a pokeable wait (the handlers never set the flag), so an unmasked
    // look that finds none open is exact, and spares every transaction's end two syscalls.
    if !POKEABLE.load(Ordering::SeqCst) {
        return false;
    }
    masked(|| {
        if !POKEABLE.swap(false, Ordering::SeqCst) {
            return false;
        }
        if let Some(previous) = SAVED_SIGINT.with(Cell::take) {
            PREV_SIGINT.store(libc::SIG_DFL, Ordering::SeqCst);
            // SAFETY: restores PostgreSQL's cancel handler.
            unsafe { libc::sigaction(libc::SIGINT, &previous, std::ptr::null_mut()) };
        }
        let poked = POKED.swap(false, Ordering::SeqCst);
        let cancelled = CANCELLED.swap(false, Ordering::SeqCst);
        if poked && !cancelled {
            // SAFETY: signals are blocked; only our poke set it.
            unsafe { pg_sys::QueryCancelPending = 0 };
        }
        poked && !cancelled
    })
}

/// End of transaction: nothing armed survives it (an error may have skipped the disarming).
pub fn reset() {
    close_pokeable();
    disarm_socket();
}
