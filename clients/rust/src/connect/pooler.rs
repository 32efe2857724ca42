//! What stands between the client and PostgreSQL: nothing (or a session pooler), or a
//! transaction-pooling proxy, which changes how the client may talk to the server.

use std::fmt;
use std::str::FromStr;

/// How the server connections behind the client's connections are pooled, named after
/// pgbouncer's `pool_mode`. Set with [`ClientBuilder::pooler`](crate::ClientBuilder::pooler)
/// or `dlock_pooler=transaction` in the connection string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PoolerMode {
    /// Every connection of the client is one server session for its whole life: a direct
    /// connection, or a pooler in session mode. Statements are prepared once per connection,
    /// waits share a listener connection, and session-bound leases work.
    #[default]
    Session,
    /// The connections reach PostgreSQL through a pooler that hands out a server connection per
    /// transaction (pgbouncer `pool_mode = transaction`): nothing is prepared on the server,
    /// waits retry instead of listening, and session-bound leases are refused (see the crate
    /// docs, "Behind a transaction pooler").
    Transaction,
}

impl PoolerMode {
    /// Whether each call must stand alone: no named prepared statement, no LISTEN, nothing that
    /// outlives the transaction on the server connection it happens to run on.
    pub(crate) fn is_transaction(self) -> bool {
        self == PoolerMode::Transaction
    }
}

impl FromStr for PoolerMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "session" => Ok(PoolerMode::Session),
            "transaction" => Ok(PoolerMode::Transaction),
            other => Err(format!("dlock_pooler={other:?}: expected session or transaction")),
        }
    }
}

impl fmt::Display for PoolerMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PoolerMode::Session => "session",
            PoolerMode::Transaction => "transaction",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_by_pgbouncers_names_and_print_back() {
        for mode in [PoolerMode::Session, PoolerMode::Transaction] {
            assert_eq!(mode.to_string().parse::<PoolerMode>(), Ok(mode));
        }
        assert!("statement".parse::<PoolerMode>().is_err(), "statement pooling is not supported");
        assert!("Transaction".parse::<PoolerMode>().is_err());
    }
}
