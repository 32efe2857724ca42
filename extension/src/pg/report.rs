//! Raising dlock's errors in PostgreSQL: each with its SQLSTATE, the message the contract gives
//! it (`dlock_core::DlockError`'s `Display`), and a hint where one helps. Never a panic, never
//! XX000 on user input.

use crate::pg::guc;
use dlock_core::{ArgError, DlockError};
use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// The SQLSTATE of an error.
fn code(error: &DlockError) -> PgSqlErrorCode {
    use PgSqlErrorCode::*;
    match error {
        DlockError::Arg(ArgError::Null(_) | ArgError::NullElement(_)) => ERRCODE_NULL_VALUE_NOT_ALLOWED,
        DlockError::Arg(_) | DlockError::SizeMismatch { .. } => ERRCODE_INVALID_PARAMETER_VALUE,
        DlockError::ModeConflict { .. } => ERRCODE_FEATURE_NOT_SUPPORTED,
        DlockError::ForeignRole { .. } | DlockError::NotAdmin { .. } | DlockError::NotFencer => {
            ERRCODE_INSUFFICIENT_PRIVILEGE
        }
        DlockError::SelfDeadlock => ERRCODE_T_R_DEADLOCK_DETECTED,
        DlockError::HeldHere { .. } => ERRCODE_OBJECT_IN_USE,
        DlockError::NoPrepare { .. } => ERRCODE_FEATURE_NOT_SUPPORTED,
        DlockError::NotPreloaded
        | DlockError::SecondLibrary
        | DlockError::Dropping
        | DlockError::NotInstalled
        | DlockError::NeedsUpdate { .. } => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        DlockError::StaleBinding { .. } => ERRCODE_OBJECT_IN_USE,
        DlockError::OnStandby => ERRCODE_READ_ONLY_SQL_TRANSACTION,
        DlockError::FastTableFull { .. } | DlockError::FastShare { .. } => {
            ERRCODE_CONFIGURATION_LIMIT_EXCEEDED
        }
        DlockError::NotMine { .. } => ERRCODE_L_E_INVALID_SPECIFICATION,
        DlockError::MapBehind { .. } => ERRCODE_LOCATOR_EXCEPTION,
        DlockError::BadShardMap(_) => ERRCODE_INVALID_PARAMETER_VALUE,
        DlockError::ShardState(_) => ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        DlockError::FastSharded => ERRCODE_FEATURE_NOT_SUPPORTED,
        DlockError::FencesExhausted => ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        DlockError::Corrupted { .. } => ERRCODE_DATA_CORRUPTED,
        DlockError::Internal { .. } => ERRCODE_INTERNAL_ERROR,
    }
}

/// The message: the contract's, with the current value of the setting a limit comes from.
fn message(error: &DlockError) -> String {
    let setting = |name: &std::ffi::CStr| guc::show(name).unwrap_or_else(|| "unset".into());
    match error {
        DlockError::Arg(ArgError::AboveMax(_)) => format!("dlock: {error} ({})", setting(c"dlock.max_ttl")),
        DlockError::ModeConflict { .. } => format!("dlock: owner {error}"),
        DlockError::Arg(ArgError::AboveFastMax(_)) => {
            format!("dlock: {error} ({} s)", setting(c"dlock.fast_max_ttl"))
        }
        _ => format!("dlock: {error}"),
    }
}

/// What the caller can do about it, where there is something to say.
fn hint(error: &DlockError) -> Option<String> {
    Some(match error {
        DlockError::Arg(ArgError::Null("ttl")) => {
            "A session-bound lease (acquired with ttl NULL) needs no renewal.".into()
        }
        DlockError::Arg(ArgError::TooLong { arg: "key", .. }) => {
            "Hash long names on the client, e.g. with sha256.".into()
        }
        DlockError::Arg(ArgError::NotPositive(_)) => {
            "Use ttl => NULL for a lease bound to this session.".into()
        }
        DlockError::Arg(ArgError::AboveMax("lock_delay")) => {
            "A lock-delay is at most dlock.max_ttl; a superuser may raise it.".into()
        }
        DlockError::Arg(ArgError::AboveMax(_)) => {
            "Renew the lease before it runs out, or have a superuser raise dlock.max_ttl.".into()
        }
        DlockError::Arg(ArgError::AboveFastMax(_)) => {
            "Renew the fast lease before it runs out; dlock.fast_max_ttl is set at server start.".into()
        }
        DlockError::Arg(ArgError::Negative("lock_delay")) => {
            "lock_delay => '0' (the default) frees the key as soon as the lease expires.".into()
        }
        DlockError::Arg(ArgError::NoPermits(_)) => {
            "max_holders => NULL takes the key shared without a limit.".into()
        }
        DlockError::Arg(ArgError::Negative(arg)) => {
            format!("Use {arg} => '0' to try once, or {arg} => NULL to wait without limit.")
        }
        DlockError::Arg(ArgError::TooMany { arg: "keys", .. }) => {
            "Take the keys in several calls, or lock a key that stands for the group.".into()
        }
        DlockError::Arg(_) => return None,
        DlockError::ModeConflict { .. } => {
            "A read-write lock is never upgraded or downgraded in place: release the \
                                            lease, then take the key in the other mode."
                .into()
        }
        DlockError::SizeMismatch { .. } => {
            "Every participant of a semaphore passes the same max_holders; it is fixed \
                                            by the holders while any hold the key."
                .into()
        }
        DlockError::NoPrepare { .. } => {
            "Commit it instead; two-phase commit works for TTL acquires, renews and releases.".into()
        }
        DlockError::NotPreloaded => {
            "Add dlock to shared_preload_libraries and restart, or use dlock_acquire.".into()
        }
        DlockError::OnStandby => "Fast leases live in the primary's memory; connect to the primary.".into(),
        DlockError::Dropping => "Take the lock again once the extension is created again.".into(),
        DlockError::SecondLibrary => {
            "Restart the server, so that every backend runs the installed dlock library \
                                      with its shared memory."
                .into()
        }
        DlockError::FastTableFull { .. } => {
            "Raise dlock.fast_max_leases (server start), or release leases sooner.".into()
        }
        DlockError::FastShare { share, .. } => {
            format!("Release fast leases sooner, or have a superuser raise {}.", share.setting())
        }
        DlockError::ForeignRole { .. } => {
            "A lease can be renewed or released only by the role that took it, \
                                           or by a member of dlock_admin."
                .into()
        }
        DlockError::NotFencer => {
            "A true dlock_holds keeps the key from changing hands until the transaction \
                                  ends, which would hold up the lease's role: only that role, members of \
                                  dlock_fencer and of dlock_admin may do that."
                .into()
        }
        DlockError::HeldHere { .. } => {
            "Release it first: dlock_wait_free waits for the leases of other sessions.".into()
        }
        DlockError::SelfDeadlock => {
            "Another owner string of this session holds it; release it first, or give \
                                     the wait a limit."
                .into()
        }
        DlockError::NotAdmin { .. } => "Only superusers and members of role dlock_admin may call it.".into(),
        DlockError::NotInstalled => {
            "CREATE EXTENSION dlock in this database (a session that saw it dropped may need to \
             reconnect)."
                .into()
        }
        DlockError::NeedsUpdate { .. } => {
            "Run ALTER EXTENSION dlock UPDATE: the installed library serves the update's tables.".into()
        }
        DlockError::StaleBinding { .. } => {
            "End that session (pg_terminate_backend): fences started again at 1 when the \
             extension was created again."
                .into()
        }
        DlockError::NotMine { .. } => {
            "Route the key with the server's shard map (dlock_shard_status()): a sharded client \
             refreshes its map and retries."
                .into()
        }
        DlockError::MapBehind { .. } => {
            "The operator's apply of the newer map has not reached this server yet: retry when \
             `dlock shards apply` has installed it here."
                .into()
        }
        DlockError::BadShardMap(_) | DlockError::ShardState(_) => {
            "dlock_shard_status() shows the map this server has; `dlock shards apply` installs \
             a map on every server in the right order."
                .into()
        }
        DlockError::FastSharded => {
            "Use durable leases (dlock_acquire) on a sharded server: their fences carry the map's \
             epoch."
                .into()
        }
        DlockError::FencesExhausted => {
            "Durable leases (dlock_acquire) still work: their fences do not come from the WAL \
             position."
                .into()
        }
        DlockError::Corrupted { .. } => {
            "If the installed library is newer than this database's dlock, run ALTER EXTENSION \
             dlock UPDATE; if not, the table was changed by hand, or this is a bug in dlock: \
             please report it."
                .into()
        }
        DlockError::Internal { .. } => "This is a bug in dlock: please report it with this message.".into(),
    })
}

/// Raises `error` in PostgreSQL on behalf of `function`; the current transaction aborts.
pub fn raise(error: DlockError, function: &'static str) -> ! {
    let mut report = ErrorReport::new(code(&error), message(&error), function);
    if let Some(hint) = hint(&error) {
        report = report.set_hint(hint);
    }
    report.report(PgLogLevel::ERROR);
    unreachable!("ereport(ERROR) returned")
}

/// Unwraps a result or raises its error.
pub trait OrRaise<T> {
    fn or_raise(self, function: &'static str) -> T;
}

impl<T, E: Into<DlockError>> OrRaise<T> for Result<T, E> {
    fn or_raise(self, function: &'static str) -> T {
        self.unwrap_or_else(|e| raise(e.into(), function))
    }
}
