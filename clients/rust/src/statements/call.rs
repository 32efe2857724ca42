//! Sending a statement: on which connection, and whether it is prepared.

use std::ops::Deref;

use deadpool_postgres::{Object, Pool};
use tokio_postgres::Row;
use tokio_postgres::types::{ToSql, Type};

use crate::connect::PoolerMode;
use crate::error::Error;

/// How statements reach the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Protocol {
    /// Prepared once per connection (a named statement), then only bound and run: the fewest
    /// bytes per call, for connections that are one server session each.
    Prepared,
    /// Sent whole each time as the unnamed statement, with its parameter types, in one round
    /// trip: nothing outlives the call on the server connection a pooler lent for it.
    Unnamed,
}

impl From<PoolerMode> for Protocol {
    fn from(pooler: PoolerMode) -> Self {
        if pooler.is_transaction() { Protocol::Unnamed } else { Protocol::Prepared }
    }
}

impl Protocol {
    /// Runs `sql` with `values` of `types`, expecting exactly one row.
    pub(crate) async fn query_one(
        self,
        connection: &Object,
        sql: &str,
        types: &[Type],
        values: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, Error> {
        debug_assert_eq!(types.len(), values.len());
        Ok(match self {
            Protocol::Prepared => {
                let statement = connection.prepare_typed_cached(sql, types).await?;
                connection.query_one(&statement, values).await?
            }
            Protocol::Unnamed => connection.query_typed_one(sql, &typed(types, values)).await?,
        })
    }

    /// Runs `sql` with `values` of `types`: every row.
    pub(crate) async fn query(
        self,
        connection: &Object,
        sql: &str,
        types: &[Type],
        values: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, Error> {
        Ok(match self {
            Protocol::Prepared => {
                let statement = connection.prepare_typed_cached(sql, types).await?;
                connection.query(&statement, values).await?
            }
            Protocol::Unnamed => connection.query_typed(sql, &typed(types, values)).await?,
        })
    }
}

fn typed<'a>(types: &[Type], values: &[&'a (dyn ToSql + Sync)]) -> Vec<(&'a (dyn ToSql + Sync), Type)> {
    values.iter().zip(types).map(|(value, ty)| (*value, ty.clone())).collect()
}

/// A connection to send a call on: the lease's own session (a session-bound guard's, which
/// must carry its calls) or one from the pool.
#[expect(
    clippy::large_enum_variant,
    reason = "lives on the stack for one call; boxing would only add an allocation"
)]
pub(crate) enum Connection<'a> {
    Session(&'a Object),
    Pooled(Object),
}

impl Connection<'_> {
    /// `session` if there is one, else a connection from `pool`.
    pub(crate) async fn get<'a>(pool: &Pool, session: Option<&'a Object>) -> Result<Connection<'a>, Error> {
        Ok(match session {
            Some(session) => Connection::Session(session),
            None => Connection::Pooled(pool.get().await?),
        })
    }
}

impl Deref for Connection<'_> {
    type Target = Object;

    fn deref(&self) -> &Object {
        match self {
            Connection::Session(session) => session,
            Connection::Pooled(pooled) => pooled,
        }
    }
}
