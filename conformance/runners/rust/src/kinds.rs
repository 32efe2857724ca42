//! The scenarios' error kinds of the client's errors, and of the SQLSTATEs of the runner's own
//! `sql` steps.

use dlock_client::Error;

/// A failed step as the scenarios see it: its kind, its SQLSTATE if any, and what it said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kind {
    pub kind: String,
    pub sqlstate: Option<String>,
    pub message: String,
}

impl Kind {
    pub fn new(kind: &str, sqlstate: Option<&str>, message: impl Into<String>) -> Kind {
        Kind { kind: kind.to_owned(), sqlstate: sqlstate.map(str::to_owned), message: message.into() }
    }
}

/// The kind of one of the client's errors.
pub fn of_client(error: &Error) -> Kind {
    let kind = match error {
        // A try that found the key busy and a wait that ran out are one kind to the scenarios.
        Error::NotAcquired | Error::Timeout => "NotAcquired",
        Error::LockLost => "LeaseLost",
        Error::InvalidArgument(_) => "InvalidArgument",
        Error::ModeConflict(_) => "ModeConflict",
        Error::PermissionDenied(_) => "PermissionDenied",
        Error::HeldHere(_) => "HeldHere",
        Error::Unsupported(_) => "Unsupported",
        Error::Cancelled(_) | Error::Deadlock(_) | Error::Database(_) => "Server",
        // A session the server ended or refused carries its SQLSTATE; one never reached does not.
        Error::Connection { .. } | Error::Tls { .. } if error.code().is_some() => "Server",
        _ => "Unexpected",
    };
    Kind::new(kind, error.sqlstate(), error.to_string())
}

/// The kind of an error of a `sql` step, by its SQLSTATE.
pub fn of_sql(error: &tokio_postgres::Error) -> Kind {
    let sqlstate = error.code().map(|c| c.code());
    let kind = match sqlstate {
        Some("22023" | "22004") => "InvalidArgument",
        Some("0A000") => "ModeConflict",
        Some("42501") => "PermissionDenied",
        Some("55006") => "HeldHere",
        Some(_) => "Server",
        None => "Unexpected",
    };
    let message = error.as_db_error().map_or_else(|| error.to_string(), |db| db.message().to_owned());
    Kind::new(kind, sqlstate, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_that_ran_out_are_not_acquired_and_lost_leases_lease_lost() {
        assert_eq!(of_client(&Error::Timeout).kind, "NotAcquired");
        assert_eq!(of_client(&Error::NotAcquired).kind, "NotAcquired");
        assert_eq!(of_client(&Error::LockLost).kind, "LeaseLost");
        assert_eq!(of_client(&Error::Unsupported("x".into())).kind, "Unsupported");
        let unreached = Error::Connection { message: "refused".into(), source: None };
        assert_eq!(
            (of_client(&unreached).kind.as_str(), of_client(&unreached).sqlstate),
            ("Unexpected", None)
        );
    }
}
