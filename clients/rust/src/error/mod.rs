//! The one error type of the client ([`Error`]), and what a refused call carries
//! ([`ServerError`]). Which server error becomes which variant is decided in one place,
//! [`server`]; TLS failures are described in [`tls`].

mod server;
mod tls;

use std::fmt;

use dlock_core::ArgError;
use tokio_postgres::error::{DbError, SqlState};

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// A refused call keeps what the server said ([`ServerError`]: SQLSTATE, message, detail,
/// hint), and the driver's error stays its [`source`](std::error::Error::source), so that
/// [`code`](Self::code) and [`as_db_error`](Self::as_db_error) reach the server's whole report.
/// dlock's own conditions ([`ModeConflict`](Self::ModeConflict), [`HeldHere`](Self::HeldHere),
/// [`InvalidArgument`](Self::InvalidArgument)) are told apart from PostgreSQL's errors of the
/// same SQLSTATE by the message dlock gives them: a `0A000` PostgreSQL raises for something
/// else is [`Database`](Self::Database), never a mode conflict.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// dlock (or the client, before sending) refused an argument (SQLSTATE 22023 or 22004):
    /// empty or over-long key or owner, ttl ≤ 0 or above `dlock.max_ttl`, a semaphore of no
    /// permits or of another size than its holders', an empty, duplicated or over-long key
    /// list, an over-long election `info`. PostgreSQL's own 22023s are [`Error::Database`].
    #[error(transparent)]
    InvalidArgument(ServerError),
    /// The owner already holds the key in the other mode (SQLSTATE 0A000, with dlock's message
    /// for it): a shared request on a key it holds exclusively, or the reverse. There is no
    /// silent upgrade or downgrade: let the lease go first. Other 0A000s — PostgreSQL's, or
    /// dlock's refusal to PREPARE a transaction with a session-bound lease — are
    /// [`Error::Database`].
    #[error(transparent)]
    ModeConflict(ServerError),
    /// A wait for a key to be free ([`Client::wait_free`](crate::Client::wait_free)) on a key
    /// a lease of this very server session holds (SQLSTATE 55006, with dlock's message for
    /// it): it could never end. Do not wait for keys this client holds.
    #[error(transparent)]
    HeldHere(ServerError),
    /// The role may not do this (SQLSTATE 42501): another role's lease, a force release by a
    /// role that is not a `dlock_admin` member, or a privilege PostgreSQL itself checks (no
    /// `USAGE` on the extension's schema).
    #[error(transparent)]
    PermissionDenied(ServerError),
    /// The statement was cancelled or ran into `statement_timeout` (SQLSTATE 57014); a cancelled
    /// wait leaves no trace on the server.
    #[error(transparent)]
    Cancelled(ServerError),
    /// A deadlock (SQLSTATE 40P01), found by PostgreSQL's deadlock detector or by dlock (an
    /// unbounded wait for a lease bound to the waiting session itself): give up leases and retry.
    #[error(transparent)]
    Deadlock(ServerError),
    /// The key belongs to another server under the server's shard map (SQLSTATE 0F001): the
    /// client routes with an older map than the server's, or (a renewal) the key moved away and
    /// its lease there runs out. A [`ShardedClient`](crate::ShardedClient) built from a file
    /// reads the file again and retries with the newer map.
    #[error(transparent)]
    WrongServer(ServerError),
    /// The client routes with a newer shard map than the server's (SQLSTATE 0F000): the
    /// operator's apply has not reached that server yet, and it may not know it lost the key.
    /// Retry later.
    #[error(transparent)]
    MapBehind(ServerError),
    /// Any other error the server raised; [`code`](Self::code) says which.
    #[error(transparent)]
    Database(ServerError),
    /// No usable connection: connecting, the pool, or the connection broke mid-call.
    #[error("connection: {message}")]
    Connection {
        /// What happened, for people.
        message: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// TLS could not be set up with the server: its certificate could not be verified (unknown
    /// issuer, wrong host name, expired), or it does not offer TLS although `sslmode` requires it.
    #[error("TLS: {message}")]
    Tls {
        /// What happened, for people.
        message: String,
        /// The underlying error.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// The connection string could not be understood (or a file it names could not be read).
    #[error("bad connection configuration: {0}")]
    Config(String),
    /// The dlock extension is not installed in the database the client connects to.
    #[error(
        "the dlock extension is not installed in database {database:?} \
         (CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock;)"
    )]
    NotInstalled {
        /// The database connected to.
        database: String,
    },
    /// The client cannot do this in its mode (e.g. a session-bound lease through a transaction
    /// pooler).
    #[error("not supported: {0}")]
    Unsupported(String),
    /// The wait elapsed before the key became free.
    #[error("timed out waiting for the lock")]
    Timeout,
    /// A try without waiting found the key held by another owner.
    #[error("the lock is held by another owner")]
    NotAcquired,
    /// The lease was lost (expired, force-released, or could not be renewed) while it was in use.
    #[error("the lease was lost")]
    LockLost,
}

/// A refused call: the SQLSTATE, message, detail and hint the server sent (or, for an
/// argument the client refuses before sending, those the server would have sent). Its
/// [`source`](std::error::Error::source) is the driver's error, whose own source is the
/// server's [`DbError`].
#[derive(Debug)]
pub struct ServerError {
    code: SqlState,
    message: String,
    detail: Option<String>,
    hint: Option<String>,
    /// `None`: refused by the client, nothing was sent.
    driver: Option<tokio_postgres::Error>,
}

impl ServerError {
    /// The SQLSTATE, e.g. [`SqlState::INVALID_PARAMETER_VALUE`] (`22023`).
    pub fn code(&self) -> &SqlState {
        &self.code
    }

    /// The primary message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The DETAIL line, if any.
    pub fn detail(&self) -> Option<&str> {
        self.detail.as_deref()
    }

    /// The HINT line, if any.
    pub fn hint(&self) -> Option<&str> {
        self.hint.as_deref()
    }

    /// The server's whole report (routine, position, context, ...); `None` when the client
    /// refused the call before sending it.
    pub fn as_db_error(&self) -> Option<&DbError> {
        self.driver.as_ref().and_then(tokio_postgres::Error::as_db_error)
    }

    /// What the server said, kept with the driver's error `driver`; `Err(driver)` if it
    /// carries no report of the server's.
    fn reported(driver: tokio_postgres::Error) -> Result<ServerError, tokio_postgres::Error> {
        let Some(db) = driver.as_db_error() else { return Err(driver) };
        Ok(ServerError {
            code: db.code().clone(),
            message: db.message().to_owned(),
            detail: db.detail().map(str::to_owned),
            hint: db.hint().map(str::to_owned),
            driver: Some(driver),
        })
    }
}

impl fmt::Display for ServerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.code.code())?;
        if let Some(detail) = &self.detail {
            write!(f, "; detail: {detail}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "; hint: {hint}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ServerError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.driver.as_ref().map(|e| e as &(dyn std::error::Error + 'static))
    }
}

impl Error {
    /// An argument refused before anything is sent, with the SQLSTATE and message the server
    /// would answer (`dlock_core` words both).
    pub(crate) fn refused(error: ArgError) -> Error {
        let code = match error {
            ArgError::Null(_) | ArgError::NullElement(_) => SqlState::NULL_VALUE_NOT_ALLOWED,
            _ => SqlState::INVALID_PARAMETER_VALUE,
        };
        Error::refused_with(code, format!("dlock: {error}"))
    }

    /// An argument the client refuses before sending for a reason of its own (22023): a value
    /// its types allow but the server's do not.
    pub(crate) fn refused_by_client(message: String) -> Error {
        Error::refused_with(SqlState::INVALID_PARAMETER_VALUE, message)
    }

    fn refused_with(code: SqlState, message: String) -> Error {
        Error::InvalidArgument(ServerError {
            code,
            message,
            detail: Some("checked by the client before sending".into()),
            hint: None,
            driver: None,
        })
    }

    /// What the server said, if it refused the call (or the client did in its stead).
    pub fn server_error(&self) -> Option<&ServerError> {
        match self {
            Error::InvalidArgument(e)
            | Error::ModeConflict(e)
            | Error::HeldHere(e)
            | Error::WrongServer(e)
            | Error::MapBehind(e)
            | Error::PermissionDenied(e)
            | Error::Cancelled(e)
            | Error::Deadlock(e)
            | Error::Database(e) => Some(e),
            _ => None,
        }
    }

    /// The SQLSTATE of the error, if it has one: every refused call's, and a connection's that
    /// the server ended or refused (classes 08, 28, 57P).
    pub fn code(&self) -> Option<&SqlState> {
        if let Some(e) = self.server_error() {
            return Some(e.code());
        }
        self.driver_error().and_then(tokio_postgres::Error::code)
    }

    /// The server's whole report of the error (routine, position, context, ...), if the
    /// server sent one.
    pub fn as_db_error(&self) -> Option<&DbError> {
        match self.server_error() {
            Some(e) => e.as_db_error(),
            None => self.driver_error().and_then(tokio_postgres::Error::as_db_error),
        }
    }

    /// The SQLSTATE as text (`"22023"`), if the error has one (see [`code`](Self::code)).
    pub fn sqlstate(&self) -> Option<&str> {
        self.code().map(SqlState::code)
    }

    /// The driver's error under a connection failure.
    fn driver_error(&self) -> Option<&tokio_postgres::Error> {
        match self {
            Error::Connection { source: Some(source), .. } | Error::Tls { source: Some(source), .. } => {
                source.downcast_ref()
            }
            _ => None,
        }
    }

    /// Whether retrying the same call later may succeed: connection trouble (a TLS failure on
    /// a new connection included: the client connected before), but not a refusal.
    pub(crate) fn is_transient(&self) -> bool {
        matches!(self, Error::Connection { .. } | Error::Tls { .. })
    }

    fn connection(message: String, source: Box<dyn std::error::Error + Send + Sync>) -> Error {
        Error::Connection { message, source: Some(source) }
    }
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => Error::from(e),
            other => Error::connection(format!("connection pool: {other}"), Box::new(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_side_refusal_has_the_servers_sqlstate_and_message_but_no_report() {
        let e = Error::refused(ArgError::Empty("key"));
        assert!(matches!(e, Error::InvalidArgument(_)));
        assert_eq!(e.code(), Some(&SqlState::INVALID_PARAMETER_VALUE));
        assert_eq!(e.sqlstate(), Some("22023"));
        assert_eq!(e.server_error().map(ServerError::message), Some("dlock: key must not be empty"));
        assert!(e.as_db_error().is_none() && std::error::Error::source(&e).is_none());
        let null = Error::refused(ArgError::NullElement("keys"));
        assert_eq!(null.code(), Some(&SqlState::NULL_VALUE_NOT_ALLOWED));
        assert_eq!(
            e.to_string(),
            "dlock: key must not be empty (SQLSTATE 22023); detail: checked by the client before sending"
        );
    }

    #[test]
    fn errors_without_a_server_have_no_code() {
        for e in [Error::NotAcquired, Error::Timeout, Error::LockLost, Error::Unsupported("x".into())] {
            assert!(e.code().is_none() && e.server_error().is_none() && e.as_db_error().is_none(), "{e}");
        }
        let e = Error::Connection { message: "gone".into(), source: Some("io".into()) };
        assert!(e.code().is_none());
    }
}
