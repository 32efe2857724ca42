//! Setting PostgreSQL settings from inside a call, with the protocol of a function's SET
//! clause: saved in a nest level and restored when it closes (or when the transaction ends).

use pgrx::pg_sys;
use std::ffi::{CStr, CString};

/// Sets `name` to `value` until the nest level the caller opened closes.
///
/// # Safety
/// The caller opened a GUC nest level (`NewGUCNestLevel`) that it closes with `AtEOXact_GUC`.
pub unsafe fn set_saved(name: &CStr, value: &str) {
    let value = CString::new(value).expect("no NUL in a setting's value");
    // SAFETY: as the caller promised.
    unsafe { set(name, &value, pg_sys::GucContext::PGC_USERSET, pg_sys::GucAction::GUC_ACTION_SAVE) }
}

/// [`set_saved`] for a superuser-only setting (`deadlock_timeout`): dlock sets it for its own
/// waits, whoever the caller is.
///
/// # Safety
/// As [`set_saved`].
pub unsafe fn set_saved_superuser(name: &CStr, value: &str) {
    let value = CString::new(value).expect("no NUL in a setting's value");
    // SAFETY: as the caller promised.
    unsafe { set(name, &value, pg_sys::GucContext::PGC_SUSET, pg_sys::GucAction::GUC_ACTION_SAVE) }
}

/// # Safety
/// A saved setting needs the caller's nest level (see [`set_saved`]).
unsafe fn set(name: &CStr, value: &CStr, context: pg_sys::GucContext::Type, action: pg_sys::GucAction::Type) {
    // SAFETY: as the caller promised.
    unsafe {
        pg_sys::set_config_option(
            name.as_ptr(),
            value.as_ptr(),
            context,
            pg_sys::GucSource::PGC_S_SESSION,
            action,
            true,
            0,
            false,
        );
    }
}

/// Runs `f` inside a GUC nest level (settings made with [`set_saved`] are undone after it).
pub fn nested<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the nesting protocol of fmgr's SET clauses; an error aborts and restores it.
    unsafe {
        let level = pg_sys::NewGUCNestLevel();
        let result = f();
        pg_sys::AtEOXact_GUC(true, level);
        result
    }
}

/// The current value of a setting as `SHOW` prints it, if it exists.
pub fn show(name: &CStr) -> Option<String> {
    // SAFETY: a lookup that returns NULL for an unknown setting (missing_ok).
    unsafe {
        let value = pg_sys::GetConfigOption(name.as_ptr(), true, false);
        (!value.is_null()).then(|| CStr::from_ptr(value).to_string_lossy().into_owned())
    }
}
