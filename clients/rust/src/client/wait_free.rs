//! Waiting until no lease holds a key, without taking it (`dlock_wait_free`): for a cache to
//! rebuild once its writer is done, or a reader that only needs the writer gone.

use std::time::Duration;

use tokio::time::Instant;
use tokio_postgres::types::ToSql;

use crate::args;
use crate::client::Client;
use crate::error::Error;
use crate::lock::{InFlight, MAX_DURATION};
use crate::statements::KEY;
use crate::statements::Statements;
use crate::statements::primitives::KEY_WAIT;
use crate::statements::rows::Tried;
use crate::waiting::{self, RECHECK};

impl Client {
    /// Waits up to `wait` until no lease holds `key` (and no lock-delay holds it back), without
    /// taking it: `true` once it is free, `false` if `wait` elapsed first (zero: look once).
    ///
    /// Like a lock's wait, it holds no connection: it watches the key on the client's
    /// listener and looks again when the key is freed or its leases' ttls run out (behind a
    /// transaction pooler it looks again after growing pauses; a client from
    /// [`Client::from_pool`] waits on the server, holding a pooled connection).
    ///
    /// [`Error::HeldHere`] when the server session that looks holds a lease of the key itself:
    /// do not wait for keys this client holds. Behind a transaction pooler the server cannot
    /// tell (the session that looks is whichever one the pooler lends, perhaps the one that
    /// took another client's lease), so there a lease on the key is waited for whoever holds it.
    pub async fn wait_free(&self, key: &str, wait: Duration) -> Result<bool, Error> {
        args::key(key)?;
        let statements = self.statements().await?;
        if wait.is_zero() {
            return Ok(self.is_free(&statements, key).await?.0);
        }
        let deadline = Instant::now() + wait.min(MAX_DURATION);
        let Some(waits) = self.shared.waits.as_ref() else {
            return self.wait_free_on_server(&statements, key, wait).await;
        };
        if let Some(max_interval) = waits.max_poll_interval() {
            let look = |_| async {
                Ok(match self.is_free(&statements, key).await? {
                    (true, _) => Tried::Granted(()),
                    (false, retry_after) => Tried::Busy(retry_after),
                })
            };
            return Ok(waiting::retry(Some(deadline), max_interval, look).await?.is_some());
        }
        let mut watched = waits.watch_key(key, &statements).await?;
        loop {
            let (free, retry_after) = self.is_free(&statements, key).await?;
            let now = Instant::now();
            if free {
                return Ok(true);
            }
            if now >= deadline {
                return Ok(false);
            }
            watched.changed(Some(deadline.min(now + retry_after.unwrap_or(RECHECK))), &statements).await?;
        }
    }

    /// One look: whether `key` is free, and if not, how long until its earliest lease expires.
    async fn is_free(&self, statements: &Statements, key: &str) -> Result<(bool, Option<Duration>), Error> {
        let connection = self.pool.get().await?;
        let values: [&(dyn ToSql + Sync); 1] = [&key];
        let statement = &statements.primitives.is_free;
        let row = match self.protocol().query_one(&connection, statement, &KEY, &values).await {
            // The server connection the pooler lent holds a lease of the key, which need not
            // be this client's: the key is held, that is all it says.
            Err(Error::HeldHere(_)) if self.shared.pooler.is_transaction() => return Ok((false, None)),
            row => row?,
        };
        let retry_after: Option<f64> = row.try_get(1)?;
        let retry_after =
            retry_after.map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX));
        Ok((row.try_get(0)?, retry_after))
    }

    /// `dlock_wait_free` waiting on the server, holding a pooled connection.
    async fn wait_free_on_server(
        &self,
        statements: &Statements,
        key: &str,
        wait: Duration,
    ) -> Result<bool, Error> {
        // Closed rather than pooled if this future is dropped mid-wait, ending the server's wait.
        let mut connection = InFlight(Some(self.pool.get().await?));
        let wait = wait.min(MAX_DURATION).as_secs_f64();
        let values: [&(dyn ToSql + Sync); 2] = [&key, &wait];
        let statement = &statements.primitives.wait_free;
        let answer = self.protocol().query_one(connection.get(), statement, &KEY_WAIT, &values).await;
        drop(connection.finish());
        Ok(answer?.try_get(0)?)
    }
}
