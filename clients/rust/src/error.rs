//! The one error type of the client, and the single place where SQLSTATEs are mapped to it.

use std::fmt;

use tokio_postgres::error::SqlState;

/// Everything that can go wrong when taking, keeping or giving back a lock.
///
/// Server errors keep the server's SQLSTATE, message, detail and hint ([`ServerMessage`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The server (or the client, before sending) refused an argument (SQLSTATE 22023 or
    /// 22004): empty or over-long key or owner, ttl ≤ 0 or above `dlock.max_ttl`, negative
    /// wait, a semaphore of no permits or of another size than its holders', an empty,
    /// duplicated or over-long key list, an over-long election `info`.
    #[error("invalid argument: {0}")]
    InvalidArgument(ServerMessage),
    /// The owner already holds the key in the other mode (SQLSTATE 0A000): a shared request on a
    /// key it holds exclusively, or the reverse. There is no silent upgrade or downgrade: let
    /// the lease go first.
    #[error("mode conflict: {0}")]
    ModeConflict(ServerMessage),
    /// A wait for a key to be free ([`Client::wait_free`](crate::Client::wait_free)) on a key
    /// a lease of this very server session holds (SQLSTATE 55006): it could never end. Do not
    /// wait for keys this client holds.
    #[error("the key is held by this session: {0}")]
    HeldHere(ServerMessage),
    /// The role may not do this (SQLSTATE 42501): another role's lease, or a force release by a
    /// role that is not a `dlock_admin` member.
    #[error("permission denied: {0}")]
    PermissionDenied(ServerMessage),
    /// The statement was cancelled or ran into `statement_timeout` (SQLSTATE 57014); a cancelled
    /// wait leaves no trace on the server.
    #[error("cancelled: {0}")]
    Cancelled(ServerMessage),
    /// PostgreSQL's deadlock detector chose this waiter (SQLSTATE 40P01): give up leases and retry.
    #[error("deadlock: {0}")]
    Deadlock(ServerMessage),
    /// Any other error the server raised.
    #[error("server error: {0}")]
    Database(ServerMessage),
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

/// What the server said about an error: SQLSTATE, message, and the optional detail and hint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerMessage {
    /// The five-character SQLSTATE, e.g. `22023`.
    pub code: String,
    /// The primary message.
    pub message: String,
    /// The DETAIL line, if any.
    pub detail: Option<String>,
    /// The HINT line, if any.
    pub hint: Option<String>,
}

impl fmt::Display for ServerMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (SQLSTATE {})", self.message, self.code)?;
        if let Some(detail) = &self.detail {
            write!(f, "; detail: {detail}")?;
        }
        if let Some(hint) = &self.hint {
            write!(f, "; hint: {hint}")?;
        }
        Ok(())
    }
}

impl Error {
    /// An argument the client refuses before sending anything, as the server would (22023).
    pub(crate) fn refused_by_client(message: String) -> Error {
        Error::InvalidArgument(ServerMessage {
            code: "22023".into(),
            message,
            detail: Some("checked by the client before sending".into()),
            hint: None,
        })
    }

    /// The SQLSTATE of a server error, if this is one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::InvalidArgument(m)
            | Error::ModeConflict(m)
            | Error::HeldHere(m)
            | Error::PermissionDenied(m)
            | Error::Cancelled(m)
            | Error::Deadlock(m)
            | Error::Database(m) => Some(&m.code),
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

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        let Some(db) = e.as_db_error() else {
            if let Some(message) = tls_failure(&e) {
                return Error::Tls { message, source: Some(Box::new(e)) };
            }
            // No SQLSTATE: I/O, a closed connection, a protocol error.
            return Error::connection(e.to_string(), Box::new(e));
        };
        let message = ServerMessage {
            code: db.code().code().to_string(),
            message: db.message().to_string(),
            detail: db.detail().map(str::to_string),
            hint: db.hint().map(str::to_string),
        };
        let code = db.code();
        if *code == SqlState::INVALID_PARAMETER_VALUE || *code == SqlState::NULL_VALUE_NOT_ALLOWED {
            Error::InvalidArgument(message)
        } else if *code == SqlState::FEATURE_NOT_SUPPORTED {
            // dlock raises 0A000 for a mode conflict, and for PREPARE TRANSACTION, which the
            // client never sends.
            Error::ModeConflict(message)
        } else if *code == SqlState::OBJECT_IN_USE {
            Error::HeldHere(message)
        } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
            Error::PermissionDenied(message)
        } else if *code == SqlState::QUERY_CANCELED {
            Error::Cancelled(message)
        } else if *code == SqlState::T_R_DEADLOCK_DETECTED {
            Error::Deadlock(message)
        } else if is_connection_class(code.code()) {
            // Class 08 (connection exception), 28 (authorization), 57P (shutdown, terminated
            // backend): the session is gone or never was; retrying on a new one may work.
            Error::connection(message.to_string(), Box::new(e))
        } else {
            Error::Database(message)
        }
    }
}

/// What went wrong setting up TLS, if that is what `e` is about: rustls' verdict (it is
/// wrapped in an `io::Error`, whose `source()` skips it, so it is looked for by hand), or
/// tokio-postgres' own (a server that does not offer TLS).
fn tls_failure(e: &tokio_postgres::Error) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(error) = cause {
        let rustls = error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .or_else(|| error.downcast_ref::<rustls::Error>());
        match rustls {
            Some(rustls::Error::InvalidCertificate(why)) => {
                return Some(format!(
                    "the server's certificate could not be verified: {}",
                    certificate_error(why)
                ));
            }
            Some(other) => return Some(format!("the TLS handshake failed: {other}")),
            None => cause = error.source(),
        }
    }
    // tokio-postgres' message for its TLS errors (it has no kind to ask for); its reason is
    // the error's source.
    let message = e.to_string();
    if !message.starts_with("error performing TLS handshake") {
        return None;
    }
    Some(match std::error::Error::source(e) {
        Some(reason) => format!("{message}: {reason}"),
        None => message,
    })
}

/// Why a certificate was refused, in words where rustls has none of its own.
fn certificate_error(error: &rustls::CertificateError) -> String {
    match error {
        rustls::CertificateError::UnknownIssuer => {
            "it is not signed by a certificate authority of sslrootcert (UnknownIssuer)".into()
        }
        // A self-signed server certificate marked CA:TRUE given as its own root (OpenSSL's
        // `req -x509` default): WebPKI takes no CA certificate as a server's.
        rustls::CertificateError::Other(other) if format!("{other:?}").contains("CaUsedAsEndEntity") => {
            "the server presents a CA certificate as its own (CaUsedAsEndEntity): give the server a \
             certificate signed by the CA in sslrootcert (a self-signed one must not be marked CA:TRUE)"
                .into()
        }
        other => other.to_string(),
    }
}

fn is_connection_class(code: &str) -> bool {
    code.starts_with("08") || code.starts_with("28") || code.starts_with("57P")
}

impl From<deadpool_postgres::PoolError> for Error {
    fn from(e: deadpool_postgres::PoolError) -> Self {
        match e {
            deadpool_postgres::PoolError::Backend(e) => Error::from(e),
            other => Error::connection(format!("connection pool: {other}"), Box::new(other)),
        }
    }
}
