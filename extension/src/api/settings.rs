//! The `dlock.max_ttl` setting: an interval, as the contract has it (`'1 day'`, `'36 hours'`,
//! `'90 min'`, `'P1D'`, or plain seconds `'3600'`), parsed by PostgreSQL's own interval parser.

use pgrx::pg_sys;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::atomic::{AtomicI64, Ordering};

const DEFAULT: &CStr = c"1 day";
const DEFAULT_US: i64 = 86_400_000_000;

/// The setting's text, as SHOW prints it.
static MAX_TTL: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(DEFAULT));
/// The same, in microseconds (a month counts 30 days, as when PostgreSQL compares intervals).
static MAX_TTL_US: AtomicI64 = AtomicI64::new(DEFAULT_US);

/// Parses an interval without raising errors (a GUC check hook must not): `None` if invalid.
fn parse_interval(text: &CStr) -> Option<i128> {
    // SAFETY: the buffers are sized as interval_in sizes them; the parsers only write into them.
    unsafe {
        let mut workbuf = [0 as c_char; 256];
        let mut fields = [std::ptr::null_mut::<c_char>(); pg_sys::MAXDATEFIELDS as usize];
        let mut ftypes = [0 as c_int; pg_sys::MAXDATEFIELDS as usize];
        let mut nf: c_int = 0;
        let mut dtype: c_int = 0;
        let mut itm: pg_sys::pg_itm_in = std::mem::zeroed();
        let mut err = pg_sys::ParseDateTime(
            text.as_ptr(),
            workbuf.as_mut_ptr(),
            workbuf.len(),
            fields.as_mut_ptr(),
            ftypes.as_mut_ptr(),
            pg_sys::MAXDATEFIELDS as c_int,
            &mut nf,
        );
        if err == 0 {
            err = pg_sys::DecodeInterval(
                fields.as_mut_ptr(),
                ftypes.as_mut_ptr(),
                nf,
                pg_sys::INTERVAL_FULL_RANGE as c_int,
                &mut dtype,
                &mut itm,
            );
        }
        if err == pg_sys::DTERR_BAD_FORMAT {
            err = pg_sys::DecodeISO8601Interval(text.as_ptr() as *mut c_char, &mut dtype, &mut itm);
        }
        if err != 0 || dtype != pg_sys::DTK_DELTA as c_int {
            return None;
        }
        let mut span: pg_sys::Interval = std::mem::zeroed();
        if pg_sys::itmin2interval(&mut itm, &mut span) != 0 {
            return None;
        }
        Some(pgrx::datum::Interval::new(span.month, span.day, span.time).ok()?.as_micros())
    }
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn check_max_ttl(
    newval: *mut *mut c_char,
    _extra: *mut *mut c_void,
    _source: pg_sys::GucSource::Type,
) -> bool {
    // SAFETY: the GUC machinery passes a valid string (or NULL for a reset to no value).
    let text = unsafe { (*newval).cast_const() };
    let ok = !text.is_null()
        && parse_interval(unsafe { CStr::from_ptr(text) }).is_some_and(|us| us > 0 && us <= i64::MAX as i128);
    if !ok {
        // SAFETY: what the GUC_check_errdetail() macro does; pstrdup'd in the current context.
        unsafe {
            pg_sys::GUC_check_errdetail_string = pg_sys::pstrdup(
                c"dlock.max_ttl must be a positive interval, e.g. '1 day' or '12h'.".as_ptr(),
            );
        }
    }
    ok
}

#[pgrx::pg_guard]
unsafe extern "C-unwind" fn assign_max_ttl(newval: *const c_char, _extra: *mut c_void) {
    // Checked by check_max_ttl, so it parses.
    let us = (!newval.is_null())
        .then(|| parse_interval(unsafe { CStr::from_ptr(newval) }))
        .flatten()
        .map_or(DEFAULT_US, |us| us as i64);
    MAX_TTL_US.store(us, Ordering::Relaxed);
}

/// Defines the settings; once, from `_PG_init`.
pub fn define() {
    // SAFETY: hooks with the signatures PostgreSQL expects, registered once per backend.
    unsafe {
        GucRegistry::define_string_guc_with_hooks(
            c"dlock.max_ttl",
            c"Longest ttl a dlock lease may be taken or renewed for.",
            c"An interval. dlock_acquire and dlock_renew refuse a longer ttl with SQLSTATE 22023. \
              Only superusers may change it, so applications cannot outlive what the DBA allows.",
            &MAX_TTL,
            GucContext::Suset,
            GucFlags::default(),
            Some(check_max_ttl),
            Some(assign_max_ttl),
            None,
        );
    }
    crate::stats::define_settings();
}

/// The current `dlock.max_ttl` in microseconds. A second dlock library in this process reads it
/// by name: the first one defined the setting, and only its hooks see changes.
pub fn max_ttl_us() -> i64 {
    if crate::pg::loaded::is_second_library() {
        return crate::pg::guc::show(c"dlock.max_ttl")
            .and_then(|text| parse_interval(&CString::new(text).ok()?))
            .map_or(DEFAULT_US, |us| us.clamp(1, i64::MAX as i128) as i64);
    }
    MAX_TTL_US.load(Ordering::Relaxed)
}
