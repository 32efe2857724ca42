//! Who is calling, and whether they are a dlock administrator.

use pgrx::pg_sys;

/// The role a call runs for: the session's current role (`SET ROLE` respected). Inside our
/// SECURITY DEFINER functions `GetUserId()` is the extension owner, so we read the outer one.
pub fn caller() -> u32 {
    // SAFETY: set for every backend running SQL.
    unsafe { pg_sys::GetOuterUserId() }.to_u32()
}

/// Superuser, or a role with the privileges of `dlock_admin`.
pub fn is_admin(role: u32) -> bool {
    let role = pg_sys::Oid::from(role);
    // SAFETY: catalog lookups inside a transaction; a missing dlock_admin yields InvalidOid.
    unsafe {
        if pg_sys::superuser_arg(role) {
            return true;
        }
        let admin = pg_sys::get_role_oid(c"dlock_admin".as_ptr(), true);
        admin != pg_sys::InvalidOid && pg_sys::has_privs_of_role(role, admin)
    }
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
