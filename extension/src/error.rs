//! Every error dlock raises, with its SQLSTATE, a message that names the argument, and a hint
//! where one helps. Raised as PostgreSQL errors, never as panics (no XX000 on user input).

use crate::args::ArgError;
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// A refused call.
#[derive(Debug)]
pub enum DlockError {
    /// Bad argument (22004 / 22023).
    Arg(ArgError),
    /// The right owner string presented by another role (42501).
    ForeignRole { action: &'static str },
    /// A function for `dlock_admin` members called by someone else (42501).
    NotAdmin { function: &'static str },
    /// `dlock_holds` on another role's live lease by a role not trusted to fence (42501).
    NotFencer,
    /// An unbounded wait for a lease bound to the waiting session itself (40P01).
    SelfDeadlock,
    /// PREPARE TRANSACTION of a transaction whose dlock work cannot outlive its session (0A000).
    NoPrepare { what: &'static str },
    /// Fast mode without `shared_preload_libraries = 'dlock'` (55000).
    NotPreloaded,
    /// Fast mode on a standby (25006).
    OnStandby,
    /// No room for another fast lease (53400).
    FastTableFull { max: usize },
    /// The role or the database holds its share of the fast table (53400).
    FastShare { share: crate::fast::Share, role: u32 },
}

impl From<ArgError> for DlockError {
    fn from(e: ArgError) -> Self {
        DlockError::Arg(e)
    }
}

impl DlockError {
    fn parts(&self) -> (PgSqlErrorCode, String, Option<String>) {
        use PgSqlErrorCode::*;
        match self {
            DlockError::NoPrepare { what } => (
                ERRCODE_FEATURE_NOT_SUPPORTED,
                format!("dlock: cannot PREPARE a transaction that {what}"),
                Some("Commit it instead; two-phase commit works for TTL acquires, renews and releases.".into()),
            ),
            DlockError::Arg(ArgError::Null(arg)) => (
                ERRCODE_NULL_VALUE_NOT_ALLOWED,
                format!("dlock: {arg} must not be NULL"),
                (*arg == "ttl")
                    .then(|| "A session-bound lease (acquired with ttl NULL) needs no renewal.".into()),
            ),
            DlockError::Arg(ArgError::Empty(arg)) => {
                (ERRCODE_INVALID_PARAMETER_VALUE, format!("dlock: {arg} must not be empty"), None)
            }
            DlockError::Arg(ArgError::TooLong { arg, len, max }) => (
                ERRCODE_INVALID_PARAMETER_VALUE,
                format!("dlock: {arg} is {len} bytes long, the limit is {max} bytes"),
                (*arg == "key").then(|| "Hash long names on the client, e.g. with sha256.".into()),
            ),
            DlockError::Arg(ArgError::NotPositive(arg)) => (
                ERRCODE_INVALID_PARAMETER_VALUE,
                format!("dlock: {arg} must be positive"),
                Some("Use ttl => NULL for a lease bound to this session.".into()),
            ),
            DlockError::Arg(ArgError::AboveMax(arg)) => (
                ERRCODE_INVALID_PARAMETER_VALUE,
                format!("dlock: {arg} exceeds dlock.max_ttl ({})", crate::guc::max_ttl_text()),
                Some("Renew the lease before it runs out, or have a superuser raise dlock.max_ttl.".into()),
            ),
            DlockError::Arg(ArgError::AboveFastMax(arg)) => (
                ERRCODE_INVALID_PARAMETER_VALUE,
                format!("dlock: {arg} exceeds dlock.fast_max_ttl ({})", crate::fast::max_ttl_text()),
                Some("Renew the fast lease before it runs out; dlock.fast_max_ttl is set at server start.".into()),
            ),
            DlockError::NotPreloaded => (
                ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
                "dlock: fast mode needs shared_preload_libraries = 'dlock'".into(),
                Some("Add dlock to shared_preload_libraries and restart, or use dlock_acquire.".into()),
            ),
            DlockError::OnStandby => (
                ERRCODE_READ_ONLY_SQL_TRANSACTION,
                "dlock: fast-mode leases cannot be taken on a standby".into(),
                Some("Fast leases live in the primary's memory; connect to the primary.".into()),
            ),
            DlockError::FastTableFull { max } => (
                ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
                format!("dlock: the fast lease table is full ({max} live leases)"),
                Some("Raise dlock.fast_max_leases (server start), or release leases sooner.".into()),
            ),
            DlockError::FastShare { share, role } => {
                let (who, held, max, setting) = match share {
                    crate::fast::Share::Role { held, max } => {
                        (format!("role {}", crate::role::name(*role)), held, max, "dlock.fast_max_leases_per_role")
                    }
                    crate::fast::Share::Database { held, max } => {
                        ("this database".to_string(), held, max, "dlock.fast_max_leases_per_database")
                    }
                };
                (
                    ERRCODE_CONFIGURATION_LIMIT_EXCEEDED,
                    format!("dlock: {who} holds {held} fast leases, its share of the fast lease table ({setting} = {max})"),
                    Some(format!("Release fast leases sooner, or have a superuser raise {setting}.")),
                )
            }
            DlockError::Arg(ArgError::Negative(arg)) => (
                ERRCODE_INVALID_PARAMETER_VALUE,
                format!("dlock: {arg} must not be negative"),
                Some(format!("Use {arg} => '0' to try once, or {arg} => NULL to wait without limit.")),
            ),
            DlockError::ForeignRole { action } => (
                ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!("dlock: permission denied to {action} a lease taken by another role"),
                Some("A lease can be renewed or released only by the role that took it, or by a member of dlock_admin.".into()),
            ),
            DlockError::SelfDeadlock => (
                ERRCODE_T_R_DEADLOCK_DETECTED,
                "dlock: deadlock detected: the key is held by a lease bound to this same session".into(),
                Some("Another owner string of this session holds it; release it first, or give the wait a limit.".into()),
            ),
            DlockError::NotFencer => (
                ERRCODE_INSUFFICIENT_PRIVILEGE,
                "dlock: permission denied to check the fence of a lease taken by another role".into(),
                Some("A true dlock_holds keeps the key from changing hands until the transaction ends, \
                      which would hold up the lease's role: only that role, members of dlock_fencer \
                      and of dlock_admin may do that.".into()),
            ),
            DlockError::NotAdmin { function } => (
                ERRCODE_INSUFFICIENT_PRIVILEGE,
                format!("dlock: permission denied for {function}"),
                Some("Only superusers and members of role dlock_admin may call it.".into()),
            ),
        }
    }

    /// Raises this error in PostgreSQL; the current transaction aborts.
    pub fn raise(self, function: &'static str) -> ! {
        let (code, message, hint) = self.parts();
        let mut report = ErrorReport::new(code, message, function);
        if let Some(hint) = hint {
            report = report.set_hint(hint);
        }
        report.report(PgLogLevel::ERROR);
        unreachable!("ereport(ERROR) returned")
    }
}

/// Unwraps a checked argument or raises its error.
pub trait OrRaise<T> {
    fn or_raise(self, function: &'static str) -> T;
}

impl<T, E: Into<DlockError>> OrRaise<T> for Result<T, E> {
    fn or_raise(self, function: &'static str) -> T {
        self.unwrap_or_else(|e| e.into().raise(function))
    }
}
