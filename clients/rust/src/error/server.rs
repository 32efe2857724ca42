//! The single place where the driver's errors become [`Error`]s.
//!
//! | SQLSTATE | and | variant |
//! |---|---|---|
//! | 22023, 22004 | dlock's message (`dlock: ...`) | `InvalidArgument` |
//! | 0A000 | dlock's mode-conflict message | `ModeConflict` |
//! | 55006 | dlock's held-here message | `HeldHere` |
//! | 0F001 | dlock's message | `WrongServer` (the shard map) |
//! | 0F000 | dlock's message | `MapBehind` (the shard map) |
//! | 42501 | — | `PermissionDenied` |
//! | 57014 | — | `Cancelled` |
//! | 40P01 | — | `Deadlock` |
//! | 08xxx, 28xxx, 57Pxx | — | `Connection` |
//! | any other (and the above without dlock's message) | | `Database` |
//!
//! dlock's conditions are told by the message `dlock_core::DlockError` words for them, which
//! the server sends as `dlock: <message>`: both editions send it, whereas the routine and file
//! of the report differ between them (the native extension reports its SQL function and
//! `report.rs`, PL/pgSQL its own). PostgreSQL raises 0A000, 55006 and 22023 for many things of
//! its own, which no dlock message starts. The four that need no message mean the same
//! whoever raised them (a privilege, a cancel, a deadlock, a lost session).

use tokio_postgres::error::SqlState;

use super::{Error, ServerError, tls};

/// Every dlock message starts so (`extension/src/pg/report.rs`).
const DLOCK: &str = "dlock: ";
/// `DlockError::ModeConflict`, after [`DLOCK`]: `owner "o" holds an exclusive lease on this
/// key and cannot take a shared lease on it too (no upgrade or downgrade)`.
const MODE_CONFLICT: (&str, &str, &str) =
    ("owner ", " on this key and cannot take ", " on it too (no upgrade or downgrade)");
/// `DlockError::HeldHere`, after [`DLOCK`].
const HELD_HERE: &str = "this session holds a lease of the key itself";

/// One of dlock's own conditions that shares its SQLSTATE with PostgreSQL's errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Condition {
    Argument,
    ModeConflict,
    HeldHere,
    WrongServer,
    MapBehind,
}

/// Which of dlock's conditions a server error of `code` saying `message` is, if any.
fn dlock_condition(code: &SqlState, message: &str) -> Option<Condition> {
    let text = message.strip_prefix(DLOCK)?;
    if *code == SqlState::INVALID_PARAMETER_VALUE || *code == SqlState::NULL_VALUE_NOT_ALLOWED {
        return Some(Condition::Argument);
    }
    let (owner, middle, end) = MODE_CONFLICT;
    if *code == SqlState::FEATURE_NOT_SUPPORTED
        && text.starts_with(owner)
        && text.contains(middle)
        && text.ends_with(end)
    {
        return Some(Condition::ModeConflict);
    }
    if *code == SqlState::OBJECT_IN_USE && text.starts_with(HELD_HERE) {
        return Some(Condition::HeldHere);
    }
    if *code == SqlState::L_E_INVALID_SPECIFICATION {
        return Some(Condition::WrongServer);
    }
    if *code == SqlState::LOCATOR_EXCEPTION {
        return Some(Condition::MapBehind);
    }
    None
}

/// The variant of a server error of `code` saying `message`, given what it carries.
fn classify(code: &SqlState, message: &str) -> fn(ServerError) -> Error {
    match dlock_condition(code, message) {
        Some(Condition::Argument) => Error::InvalidArgument,
        Some(Condition::ModeConflict) => Error::ModeConflict,
        Some(Condition::HeldHere) => Error::HeldHere,
        Some(Condition::WrongServer) => Error::WrongServer,
        Some(Condition::MapBehind) => Error::MapBehind,
        None if *code == SqlState::INSUFFICIENT_PRIVILEGE => Error::PermissionDenied,
        None if *code == SqlState::QUERY_CANCELED => Error::Cancelled,
        None if *code == SqlState::T_R_DEADLOCK_DETECTED => Error::Deadlock,
        None => Error::Database,
    }
}

/// Class 08 (connection exception), 28 (authorization), 57P (shutdown, terminated backend):
/// the session is gone or never was; retrying on a new one may work.
fn is_connection_class(code: &SqlState) -> bool {
    let code = code.code();
    code.starts_with("08") || code.starts_with("28") || code.starts_with("57P")
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        let Some(code) = e.code().cloned() else {
            if let Some(message) = tls::failure(&e) {
                return Error::Tls { message, source: Some(Box::new(e)) };
            }
            // No SQLSTATE: I/O, a closed connection, a protocol error.
            return Error::connection(e.to_string(), Box::new(e));
        };
        if is_connection_class(&code) {
            let message = e.as_db_error().map_or_else(|| e.to_string(), |db| db.message().to_owned());
            return Error::connection(format!("{message} (SQLSTATE {})", code.code()), Box::new(e));
        }
        match ServerError::reported(e) {
            Ok(reported) => classify(&code, reported.message())(reported),
            Err(e) => Error::connection(e.to_string(), Box::new(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use dlock_core::lease::Kind;
    use dlock_core::{ArgError, DlockError};

    use super::*;

    /// The message the extension sends for `error` (`report.rs`: `message()`).
    fn sent(error: &DlockError) -> String {
        match error {
            DlockError::ModeConflict { .. } => format!("dlock: owner {error}"),
            _ => format!("dlock: {error}"),
        }
    }

    fn variant(code: &SqlState, message: &str) -> &'static str {
        let error = classify(code, message)(ServerError {
            code: code.clone(),
            message: message.into(),
            detail: None,
            hint: None,
            driver: None,
        });
        match error {
            Error::InvalidArgument(_) => "InvalidArgument",
            Error::ModeConflict(_) => "ModeConflict",
            Error::HeldHere(_) => "HeldHere",
            Error::PermissionDenied(_) => "PermissionDenied",
            Error::Cancelled(_) => "Cancelled",
            Error::Deadlock(_) => "Deadlock",
            Error::Database(_) => "Database",
            _ => "other",
        }
    }

    #[test]
    fn dlocks_mode_conflict_is_told_by_its_message_as_dlock_core_words_it() {
        for (held, wanted) in [(Kind::Exclusive, Kind::Shared), (Kind::Shared, Kind::Exclusive)] {
            // An owner string may contain anything, the wording itself included.
            for owner in ["host:1:abc", "o\" on this key and cannot take x", ""] {
                let error = DlockError::ModeConflict {
                    owner: owner.into(),
                    held: held.describe(),
                    wanted: wanted.describe(),
                };
                let message = sent(&error);
                assert_eq!(variant(&SqlState::FEATURE_NOT_SUPPORTED, &message), "ModeConflict", "{message}");
            }
        }
    }

    #[test]
    fn a_0a000_that_is_not_dlocks_mode_conflict_is_a_database_error() {
        let no_prepare = sent(&DlockError::NoPrepare { what: "acquired or released a session-bound lease" });
        for message in [
            no_prepare.as_str(),
            "cannot PREPARE a transaction that has operated on temporary objects",
            "FOR UPDATE is not allowed with aggregate functions",
            // PostgreSQL's wording that happens to look like dlock's, without its prefix.
            "owner x holds y on this key and cannot take z on it too (no upgrade or downgrade)",
        ] {
            assert_eq!(variant(&SqlState::FEATURE_NOT_SUPPORTED, message), "Database", "{message}");
        }
        let conflict = sent(&DlockError::ModeConflict {
            owner: "o".into(),
            held: Kind::Exclusive.describe(),
            wanted: Kind::Shared.describe(),
        });
        assert_eq!(
            variant(&SqlState::OBJECT_IN_USE, &conflict),
            "Database",
            "the wording needs its SQLSTATE"
        );
    }

    #[test]
    fn held_here_and_argument_errors_need_dlocks_message_too() {
        let held_here = sent(&DlockError::HeldHere { owner: "o".into() });
        assert_eq!(variant(&SqlState::OBJECT_IN_USE, &held_here), "HeldHere");
        assert_eq!(
            variant(&SqlState::OBJECT_IN_USE, "database \"x\" is being accessed by other users"),
            "Database"
        );

        for error in [
            DlockError::Arg(ArgError::Empty("key")),
            DlockError::Arg(ArgError::TooLong { arg: "owner", len: 257, max: 256 }),
            DlockError::Arg(ArgError::AboveMax("ttl")),
            DlockError::SizeMismatch { held: "2".into(), asked: "3".into() },
        ] {
            assert_eq!(
                variant(&SqlState::INVALID_PARAMETER_VALUE, &sent(&error)),
                "InvalidArgument",
                "{error}"
            );
        }
        let null = sent(&DlockError::Arg(ArgError::Null("key")));
        assert_eq!(variant(&SqlState::NULL_VALUE_NOT_ALLOWED, &null), "InvalidArgument");
        let foreign = "-5 kB is outside the valid range for parameter \"work_mem\" (64 .. 2147483647)";
        assert_eq!(variant(&SqlState::INVALID_PARAMETER_VALUE, foreign), "Database");
        // dlock's other conditions keep their SQLSTATE but have no variant of their own.
        assert_eq!(
            variant(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE, &sent(&DlockError::NotPreloaded)),
            "Database"
        );
    }

    #[test]
    fn privilege_cancel_and_deadlock_mean_the_same_whoever_raised_them() {
        let denied = sent(&DlockError::NotAdmin { function: "dlock_force_release" });
        assert_eq!(variant(&SqlState::INSUFFICIENT_PRIVILEGE, &denied), "PermissionDenied");
        assert_eq!(
            variant(&SqlState::INSUFFICIENT_PRIVILEGE, "permission denied for schema dlock"),
            "PermissionDenied"
        );
        assert_eq!(
            variant(&SqlState::QUERY_CANCELED, "canceling statement due to statement timeout"),
            "Cancelled"
        );
        assert_eq!(variant(&SqlState::T_R_DEADLOCK_DETECTED, &sent(&DlockError::SelfDeadlock)), "Deadlock");
        assert_eq!(variant(&SqlState::T_R_DEADLOCK_DETECTED, "deadlock detected"), "Deadlock");
    }

    #[test]
    fn lost_sessions_are_connection_errors() {
        for code in [
            SqlState::ADMIN_SHUTDOWN,
            SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            SqlState::CONNECTION_FAILURE,
        ] {
            assert!(is_connection_class(&code), "{}", code.code());
        }
        assert!(!is_connection_class(&SqlState::QUERY_CANCELED), "57014 is a cancel, not 57P");
    }
}
