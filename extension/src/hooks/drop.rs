//! The event trigger `dlock_end_waits_before_drop` (`sql/finalize.sql`), run at the start of
//! every `DROP EXTENSION`: when dlock is among the extensions dropped, it announces the drop and
//! wakes every waiter, whose wait then ends with an error (`locks/dropping.rs`). pgrx has no
//! event-trigger functions, so this is a plain version-1 C function.

use crate::locks::dropping;
use crate::wait::queue;
use pgrx::pg_sys;

#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_dlock_end_waits_before_drop() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// Whether the statement the event trigger fires for drops the extension dlock.
///
/// # Safety
/// `fcinfo` is an event trigger's call.
unsafe fn drops_dlock(fcinfo: pg_sys::FunctionCallInfo) -> bool {
    // SAFETY: as the caller promised; the parse tree lives for the statement.
    unsafe {
        let context = (*fcinfo).context;
        if context.is_null() || (*context).type_ != pg_sys::NodeTag::T_EventTriggerData {
            return false;
        }
        let data = context as *mut pg_sys::EventTriggerData;
        let tree = (*data).parsetree;
        if tree.is_null() || (*tree).type_ != pg_sys::NodeTag::T_DropStmt {
            return false;
        }
        let drop = tree as *mut pg_sys::DropStmt;
        if (*drop).removeType != pg_sys::ObjectType::OBJECT_EXTENSION {
            return false;
        }
        let objects = pgrx::PgList::<pg_sys::Node>::from_pg((*drop).objects);
        objects.iter_ptr().any(|name| {
            // An extension's name is a String node (strVal).
            !name.is_null()
                && (*name).type_ == pg_sys::NodeTag::T_String
                && !(*(name as *mut pg_sys::String)).sval.is_null()
                && std::ffi::CStr::from_ptr((*(name as *mut pg_sys::String)).sval).to_bytes() == b"dlock"
        })
    }
}

/// # Safety
/// Called by PostgreSQL as an event trigger function.
#[unsafe(no_mangle)]
#[pgrx::pg_guard]
pub unsafe extern "C-unwind" fn dlock_end_waits_before_drop(
    fcinfo: pg_sys::FunctionCallInfo,
) -> pg_sys::Datum {
    // SAFETY: PostgreSQL calls this as an event trigger.
    if unsafe { drops_dlock(fcinfo) } {
        dropping::announce();
        queue::wake_every_waiter();
    }
    pg_sys::Datum::from(0)
}
