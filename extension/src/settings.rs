//! Every setting of dlock, in one place (the settings page, docs/src/operating/settings.md, is
//! checked against this file's definitions by tests/tests/docs.rs): each `dlock.*` GUC's
//! definition beside its doc line, and the accessors the rest of the extension reads them through.
//!
//! Two sets: those any backend defines when the library loads (`define`), and those that size
//! shared memory or only matter with it, defined only while preloading (`define_at_server_start`,
//! from `hooks/shmem.rs`).

use crate::pg::loaded::is_second_library;
use dlock_core::Micros;
use pgrx::pg_sys;
use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};
use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::atomic::{AtomicI64, Ordering};

// dlock.max_ttl: an interval, as the contract has it ('1 day', '36 hours', '90 min', 'P1D', or
// plain seconds '3600'), parsed by PostgreSQL's own interval parser.
const MAX_TTL_DEFAULT: &CStr = c"1 day";
const MAX_TTL_DEFAULT_US: i64 = 86_400_000_000;

/// The setting's text, as SHOW prints it.
static MAX_TTL: GucSetting<Option<CString>> = GucSetting::<Option<CString>>::new(Some(MAX_TTL_DEFAULT));
/// The same, in microseconds (a month counts 30 days, as when PostgreSQL compares intervals).
static MAX_TTL_US: AtomicI64 = AtomicI64::new(MAX_TTL_DEFAULT_US);

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
        .map_or(MAX_TTL_DEFAULT_US, |us| us as i64);
    MAX_TTL_US.store(us, Ordering::Relaxed);
}

/// `dlock.sweep_after`, in seconds.
static SWEEP_AFTER_S: GucSetting<i32> = GucSetting::<i32>::new(5);
/// `dlock.shard_epoch`: the shard map a sharded client routes with (0: it does not shard).
static SHARD_EPOCH: GucSetting<i32> = GucSetting::<i32>::new(0);
/// `dlock.track_stats`.
static TRACK_STATS: GucSetting<bool> = GucSetting::<bool>::new(true);
/// `dlock.log_min_wait`, in milliseconds (-1: off).
static LOG_MIN_WAIT_MS: GucSetting<i32> = GucSetting::<i32>::new(-1);
/// `dlock.wait_slots`: -1 means one per backend.
static WAIT_SLOTS: GucSetting<i32> = GucSetting::<i32>::new(-1);
/// `dlock.fast_max_leases`.
static FAST_MAX_LEASES: GucSetting<i32> = GucSetting::<i32>::new(16384);
/// `dlock.fast_max_ttl`, in seconds.
static FAST_MAX_TTL_S: GucSetting<i32> = GucSetting::<i32>::new(60);
/// `dlock.fast_max_leases_per_role` and `_per_database` (-1: half the table).
static FAST_PER_ROLE: GucSetting<i32> = GucSetting::<i32>::new(-1);
static FAST_PER_DATABASE: GucSetting<i32> = GucSetting::<i32>::new(-1);

/// Defines the settings every backend has; once, from `_PG_init`.
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
    GucRegistry::define_int_guc(
        c"dlock.sweep_after",
        c"How long a key's row stays once its lease is over, for the key's next grant to reuse.",
        c"Grants sweep rows whose lease was released, expired, or ended with its session this \
          long ago (a sample of them as they go: the table stays about the size of what the \
          keys of the last dlock.sweep_after need). A key taken again before that reuses its \
          row, updated in place.",
        &SWEEP_AFTER_S,
        0,
        86_400,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"dlock.shard_epoch",
        c"The epoch of the shard map the client routes with (0: the client does not shard).",
        c"A sharded client sets it for its sessions. A server whose own map is older refuses \
          the session's grants with SQLSTATE 0F000, as it may not know yet that it lost a key; \
          a key the server's map gives to another server is refused with 0F001 whatever it is.",
        &SHARD_EPOCH,
        0,
        dlock_core::shards::MAX_EPOCH as i32,
        GucContext::Userset,
        GucFlags::default(),
    );
    GucRegistry::define_bool_guc(
        c"dlock.track_stats",
        c"Counts what dlock does in dlock_stats (preloaded only).",
        c"Like track_counts: off, nothing is counted (the benchmark measures what counting costs).",
        &TRACK_STATS,
        GucContext::Suset,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"dlock.log_min_wait",
        c"Logs every dlock wait that took at least this long (-1: none).",
        c"Like log_lock_waits for dlock's waits: the key, owner, role, duration and outcome of \
          each wait that took this long or longer are logged when it ends.",
        &LOG_MIN_WAIT_MS,
        -1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_MS,
    );
}

/// Defines the settings of shared memory: only while preloading (a server-start setting can
/// only be defined then; without preloading there is no shared memory to size).
pub fn define_at_server_start() {
    GucRegistry::define_int_guc(
        c"dlock.wait_slots",
        c"Slots of the wait table for direct hand-off (-1: one per backend).",
        c"Each key that has waiters uses one slot for its queue's head. A head that finds the \
          table full is still served, but grants itself when woken (one more WAL flush), as \
          without shared_preload_libraries. Each slot takes about 1.3 kB of shared memory.",
        &WAIT_SLOTS,
        -1,
        i32::MAX,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"dlock.fast_max_leases",
        c"How many fast-mode leases shared memory holds.",
        c"Each takes about 450 bytes. A fast acquire of a new key when the table is full \
          (after expired leases are cleared) fails with SQLSTATE 53400; so does one by a role \
          or in a database at its share (dlock.fast_max_leases_per_role, _per_database).",
        &FAST_MAX_LEASES,
        1,
        i32::MAX / 2,
        GucContext::Postmaster,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"dlock.fast_max_ttl",
        c"Longest ttl of a fast-mode lease; also the lock-delay after every server start.",
        c"No fast key is granted for this long after the server starts, so that leases \
          granted before a restart or crash have run out first.",
        &FAST_MAX_TTL_S,
        1,
        86_400,
        GucContext::Postmaster,
        GucFlags::UNIT_S,
    );
    GucRegistry::define_int_guc(
        c"dlock.fast_max_leases_per_role",
        c"Most fast-mode table entries one role may hold, in all databases (-1: half the table).",
        c"A fast acquire of a new key by a role at its share fails with SQLSTATE 53400, so that \
          one role cannot take the table from the others.",
        &FAST_PER_ROLE,
        -1,
        i32::MAX / 2,
        GucContext::Sighup,
        GucFlags::default(),
    );
    GucRegistry::define_int_guc(
        c"dlock.fast_max_leases_per_database",
        c"Most fast-mode table entries one database may hold (-1: half the table).",
        c"A fast acquire of a new key in a database at its share fails with SQLSTATE 53400, so \
          that one database cannot take the table from the others.",
        &FAST_PER_DATABASE,
        -1,
        i32::MAX / 2,
        GucContext::Sighup,
        GucFlags::default(),
    );
}

/// The current `dlock.max_ttl` in microseconds. A second dlock library in this process reads it
/// by name: the first one defined the setting, and only its hooks see changes.
pub fn max_ttl_us() -> i64 {
    if is_second_library() {
        return crate::pg::guc::show(c"dlock.max_ttl")
            .and_then(|text| parse_interval(&CString::new(text).ok()?))
            .map_or(MAX_TTL_DEFAULT_US, |us| us.clamp(1, i64::MAX as i128) as i64);
    }
    MAX_TTL_US.load(Ordering::Relaxed)
}

/// `dlock.sweep_after` in microseconds.
pub fn sweep_after_us() -> Micros {
    i64::from(SWEEP_AFTER_S.get()) * 1_000_000
}

/// `dlock.shard_epoch`. (A second dlock library reads it by name.)
pub fn shard_epoch() -> i64 {
    if is_second_library() {
        return crate::pg::guc::show(c"dlock.shard_epoch").and_then(|v| v.parse().ok()).unwrap_or(0);
    }
    i64::from(SHARD_EPOCH.get())
}

/// `dlock.track_stats`. (A second dlock library counts nothing anyway.)
pub fn track_stats() -> bool {
    TRACK_STATS.get()
}

/// `dlock.log_min_wait` in milliseconds, if set. (A second dlock library reads it by name.)
pub fn log_min_wait_ms() -> Option<i64> {
    let ms = if is_second_library() {
        crate::pg::guc::show(c"dlock.log_min_wait")
            .and_then(|v| v.trim_end_matches("ms").parse().ok())
            .unwrap_or(-1)
    } else {
        LOG_MIN_WAIT_MS.get()
    };
    (ms >= 0).then_some(i64::from(ms))
}

/// `dlock.wait_slots`, `None` for one per backend.
pub fn wait_slots() -> Option<usize> {
    usize::try_from(WAIT_SLOTS.get()).ok()
}

/// `dlock.fast_max_leases`: the fast table's entries.
pub fn fast_max_leases() -> usize {
    FAST_MAX_LEASES.get().max(1) as usize
}

/// `dlock.fast_max_ttl` in microseconds.
pub fn fast_max_ttl_us() -> Micros {
    i64::from(FAST_MAX_TTL_S.get()) * 1_000_000
}

/// `dlock.fast_max_leases_per_role` and `_per_database` for a table of `capacity` entries:
/// the set number, or half the table for -1.
pub fn fast_shares(capacity: usize) -> (i64, i64) {
    let share = |setting: &GucSetting<i32>| match setting.get() {
        n if n < 0 => (capacity as i64 / 2).max(1),
        n => i64::from(n),
    };
    (share(&FAST_PER_ROLE), share(&FAST_PER_DATABASE))
}
