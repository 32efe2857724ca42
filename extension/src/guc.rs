//! The `dlock.max_ttl` setting.

use pgrx::{GucContext, GucFlags, GucRegistry, GucSetting};

/// Upper bound of any ttl, in seconds (default one day). Only a superuser may change it, so an
/// application cannot take leases that outlive what the DBA allows.
pub static MAX_TTL_SECS: GucSetting<i32> = GucSetting::<i32>::new(86_400);

/// Registers the settings; called from `_PG_init`.
pub fn register() {
    GucRegistry::define_int_guc(
        c"dlock.max_ttl",
        c"Longest ttl a dlock lease may be taken or renewed for.",
        c"dlock_acquire and dlock_renew refuse a longer ttl with SQLSTATE 22023. Accepts units: 30s, 10min, 12h, 1d.",
        &MAX_TTL_SECS,
        1,
        i32::MAX,
        GucContext::Suset,
        GucFlags::UNIT_S,
    );
}

/// The current `dlock.max_ttl` in seconds.
pub fn max_ttl_secs() -> i64 {
    i64::from(MAX_TTL_SECS.get())
}
