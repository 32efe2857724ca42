//! The event trigger `dlock_end_waits_before_drop` (`schema/finalize.sql`), run at the start of
//! every `DROP EXTENSION`: when dlock is among the extensions dropped and the drop will go
//! ahead, it announces the drop and wakes every waiter, whose wait then ends with an error
//! (`locks/dropping.rs`). pgrx has no event-trigger functions, so this is a plain version-1 C
//! function.
//!
//! `ddl_command_start` fires before PostgreSQL checks anything, so the trigger checks first
//! what would make the drop fail: an extension named that does not exist (without IF EXISTS),
//! one the caller does not own, or, without CASCADE, an object outside dlock that depends on
//! dlock's. Otherwise a role that may not drop dlock could end every wait in the database by
//! trying to, over and over.

use crate::locks::dropping;
use crate::pg::spi::{self, Statement, arg};
use crate::pg::version;
use crate::wait::key_queue;
use pgrx::pg_sys;
use std::ffi::CStr;

#[unsafe(no_mangle)]
pub extern "C" fn pg_finfo_dlock_end_waits_before_drop() -> &'static pg_sys::Pg_finfo_record {
    const V1: pg_sys::Pg_finfo_record = pg_sys::Pg_finfo_record { api_version: 1 };
    &V1
}

/// Whether another object than dlock's own depends on the extension or one of its objects, as
/// `DROP ... RESTRICT` would find: a normal dependency on it from something that is neither a
/// member of the extension nor a part of one (a member view's rewrite rule, a member table's
/// constraint: internal or automatic dependents of a member, which go with it).
static OUTSIDE_DEPENDENTS: Statement = Statement {
    sql: "SELECT EXISTS (SELECT FROM pg_catalog.pg_depend AS d \
            WHERE d.deptype OPERATOR(pg_catalog.=) 'n'::pg_catalog.\"char\" \
              AND ((d.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
                    AND d.refobjid OPERATOR(pg_catalog.=) $1) \
                   OR EXISTS (SELECT FROM pg_catalog.pg_depend AS m \
                      WHERE m.classid OPERATOR(pg_catalog.=) d.refclassid AND m.objid OPERATOR(pg_catalog.=) d.refobjid \
                        AND m.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
                        AND m.refobjid OPERATOR(pg_catalog.=) $1 \
                        AND m.deptype OPERATOR(pg_catalog.=) 'e'::pg_catalog.\"char\")) \
              AND NOT EXISTS (SELECT FROM pg_catalog.pg_depend AS own \
                      WHERE own.classid OPERATOR(pg_catalog.=) d.classid AND own.objid OPERATOR(pg_catalog.=) d.objid \
                        AND ((own.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
                              AND own.refobjid OPERATOR(pg_catalog.=) $1 \
                              AND own.deptype OPERATOR(pg_catalog.=) 'e'::pg_catalog.\"char\") \
                          OR (own.deptype OPERATOR(pg_catalog.=) ANY (ARRAY['i', 'a']::pg_catalog.\"char\"[]) \
                              AND EXISTS (SELECT FROM pg_catalog.pg_depend AS m \
                                  WHERE m.classid OPERATOR(pg_catalog.=) own.refclassid \
                                    AND m.objid OPERATOR(pg_catalog.=) own.refobjid \
                                    AND m.refclassid OPERATOR(pg_catalog.=) 'pg_catalog.pg_extension'::pg_catalog.regclass \
                                    AND m.refobjid OPERATOR(pg_catalog.=) $1 \
                                    AND m.deptype OPERATOR(pg_catalog.=) 'e'::pg_catalog.\"char\")))))",
    args: &[pg_sys::OIDOID],
};

/// Whether the statement the event trigger fires for is a `DROP EXTENSION` of dlock that will
/// go ahead.
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
        // An extension's name is a String node (strVal).
        let names: Vec<&CStr> = pgrx::PgList::<pg_sys::Node>::from_pg((*drop).objects)
            .iter_ptr()
            .filter(|name| !name.is_null() && (**name).type_ == pg_sys::NodeTag::T_String)
            .map(|name| (*(name as *mut pg_sys::String)).sval)
            .filter(|sval| !sval.is_null())
            .map(|sval| CStr::from_ptr(sval))
            .collect();
        let mut dlock = None;
        for name in names {
            let extension = pg_sys::get_extension_oid(name.as_ptr(), true);
            if extension == pg_sys::InvalidOid {
                if (*drop).missing_ok {
                    continue;
                }
                return false;
            }
            if !version::owns_extension(extension, pg_sys::GetUserId()) {
                return false;
            }
            if name.to_bytes() == b"dlock" {
                dlock = Some(extension);
            }
        }
        let Some(dlock) = dlock else { return false };
        (*drop).behavior == pg_sys::DropBehavior::DROP_CASCADE || !has_outside_dependents(dlock)
    }
}

fn has_outside_dependents(extension: pg_sys::Oid) -> bool {
    spi::connect(|spi| spi.query(&OUTSIDE_DEPENDENTS, &[arg(extension)], |row| row.get::<bool>(1)))
        .pop()
        .flatten()
        .unwrap_or(true)
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
        key_queue::wake_every_waiter();
    }
    pg_sys::Datum::from(0)
}
