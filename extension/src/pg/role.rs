//! Who is calling, what standing they have, and the one place dlock acts as the extension's
//! owner.
//!
//! dlock's functions are not `SECURITY DEFINER`: they run as their caller, so the role they see
//! is the one PostgreSQL's own privilege checks use at that point. That is the role after
//! `SET ROLE`, the owner of a `SECURITY DEFINER` function that calls dlock, and the table's
//! owner where PostgreSQL runs user code on its behalf (ANALYZE and autovacuum, CREATE INDEX,
//! REINDEX, CLUSTER, REFRESH MATERIALIZED VIEW). Only dlock's own statements on
//! `dlock_internal` run as the extension's owner ([`as_owner`]), as a `SECURITY DEFINER`
//! function would, and inside a security-restricted operation.

use pgrx::pg_sys;

/// The role the SQL function called through `fcinfo` acts for: `GetUserId()`, the identity
/// PostgreSQL checks privileges against right now.
///
/// Release 0.1.0 declared its functions `SECURITY DEFINER`; between replacing `dlock.so` and
/// `ALTER EXTENSION dlock UPDATE`, this library runs behind those declarations, where
/// `GetUserId()` is the extension's owner. There it keeps 0.1.0's rule (the session's current
/// role) rather than lending everyone the owner's standing.
pub fn caller(fcinfo: pg_sys::FunctionCallInfo) -> u32 {
    // SAFETY: set for every backend running SQL; fcinfo is the call's own.
    unsafe { if called_as_definer(fcinfo) { pg_sys::GetOuterUserId() } else { pg_sys::GetUserId() }.to_u32() }
}

thread_local! {
    /// Which of dlock's functions (by OID) are declared SECURITY DEFINER, as looked up.
    static DEFINERS: std::cell::RefCell<std::collections::HashMap<pg_sys::Oid, bool>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
    static FORGETTING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Any change to pg_proc (ALTER EXTENSION UPDATE, CREATE OR REPLACE FUNCTION): look again.
#[pgrx::pg_guard]
unsafe extern "C-unwind" fn forget_definers(_arg: pg_sys::Datum, _cache: i32, _hash: u32) {
    DEFINERS.with(|d| d.borrow_mut().clear());
}

/// Whether the function called through `fcinfo` is declared SECURITY DEFINER.
///
/// # Safety
/// `fcinfo` is a live call's; inside a transaction.
unsafe fn called_as_definer(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    // SAFETY: as the caller promised; a syscache lookup of our own function.
    unsafe {
        if fcinfo.is_null() || (*fcinfo).flinfo.is_null() {
            return false;
        }
        let function = (*(*fcinfo).flinfo).fn_oid;
        if let Some(definer) = DEFINERS.with(|d| d.borrow().get(&function).copied()) {
            return definer;
        }
        if !FORGETTING.with(|f| f.replace(true)) {
            pg_sys::CacheRegisterSyscacheCallback(
                pg_sys::SysCacheIdentifier::PROCOID as i32,
                Some(forget_definers),
                pg_sys::Datum::from(0),
            );
        }
        let definer = security_definer(function);
        DEFINERS.with(|d| d.borrow_mut().insert(function, definer));
        definer
    }
}

/// pg_proc.prosecdef of `function`.
fn security_definer(function: pg_sys::Oid) -> bool {
    // SAFETY: a syscache lookup inside a transaction; the tuple is released before returning.
    unsafe {
        let tuple = pg_sys::SearchSysCache1(
            pg_sys::SysCacheIdentifier::PROCOID as i32,
            pg_sys::Datum::from(function),
        );
        if tuple.is_null() {
            return false;
        }
        let form = pg_sys::heap_tuple_get_struct::<pg_sys::FormData_pg_proc>(tuple);
        let definer = (*form).prosecdef;
        pg_sys::ReleaseSysCache(tuple);
        definer
    }
}

/// Whether PostgreSQL runs this call on someone else's behalf (an index expression during
/// ANALYZE, a materialized view's query during REFRESH...): no standing beyond the role's own.
fn restricted() -> bool {
    // SAFETY: reads the backend's security context.
    unsafe { pg_sys::InSecurityRestrictedOperation() }
}

fn has_privs_of(role: u32, group: &std::ffi::CStr) -> bool {
    // SAFETY: catalog lookups inside a transaction; a missing role yields InvalidOid.
    unsafe {
        let group = pg_sys::get_role_oid(group.as_ptr(), true);
        group != pg_sys::InvalidOid && pg_sys::has_privs_of_role(pg_sys::Oid::from(role), group)
    }
}

fn superuser(role: u32) -> bool {
    // SAFETY: a catalog lookup inside a transaction.
    unsafe { pg_sys::superuser_arg(pg_sys::Oid::from(role)) }
}

/// Superuser, or a role with the privileges of `dlock_admin` — never inside a
/// security-restricted operation.
pub fn is_admin(role: u32) -> bool {
    !restricted() && (superuser(role) || has_privs_of(role, c"dlock_admin"))
}

/// May pin other roles' leases with `dlock_holds` (fencing checks): administrators and roles
/// with the privileges of `dlock_fencer` — never inside a security-restricted operation.
pub fn may_fence_others(role: u32) -> bool {
    is_admin(role) || (!restricted() && has_privs_of(role, c"dlock_fencer"))
}

/// May see every database's counts in `dlock_stats` (others see their own database's):
/// administrators and roles with the privileges of `pg_read_all_stats` (which `pg_monitor`
/// has), as for `pg_stat_activity` — never inside a security-restricted operation.
pub fn sees_all_databases(role: u32) -> bool {
    is_admin(role) || (!restricted() && has_privs_of(role, c"pg_read_all_stats"))
}

/// The name of a role, for log lines.
pub fn name(role: u32) -> String {
    // SAFETY: noerr lookup; NULL for a dropped role.
    unsafe {
        let name = pg_sys::GetUserNameFromId(pg_sys::Oid::from(role), true);
        if name.is_null() {
            format!("role {role}")
        } else {
            std::ffi::CStr::from_ptr(name).to_string_lossy().into_owned()
        }
    }
}

/// Restores the caller's identity when dropped (also when an error unwinds through it; the
/// transaction's abort would restore it anyway).
struct Restore {
    user: pg_sys::Oid,
    context: i32,
}

impl Drop for Restore {
    fn drop(&mut self) {
        // SAFETY: puts back what `as_owner` saved.
        unsafe { pg_sys::SetUserIdAndSecContext(self.user, self.context) };
    }
}

/// Runs `f` (dlock's own statements on `dlock_internal`) as `owner`, the owner of the lease
/// table, in a security-restricted operation: what a `SECURITY DEFINER` function does, for the
/// statements only.
pub fn as_owner<R>(owner: pg_sys::Oid, f: impl FnOnce() -> R) -> R {
    let (mut user, mut context) = (pg_sys::InvalidOid, 0);
    // SAFETY: the save/switch/restore protocol of PostgreSQL's own RI triggers.
    unsafe {
        pg_sys::GetUserIdAndSecContext(&mut user, &mut context);
        pg_sys::SetUserIdAndSecContext(
            owner,
            context
                | pg_sys::SECURITY_LOCAL_USERID_CHANGE as i32
                | pg_sys::SECURITY_RESTRICTED_OPERATION as i32,
        );
    }
    let _restore = Restore { user, context };
    f()
}
