//! One granted lease (or multi-key grant) of a primitive worker, from just after its grant to
//! its release: checks that it is live, renewals, and the release, each recorded in the history
//! with the server's clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio_postgres::Client;

use super::statements::{CHECK, RELEASE, RENEW};
use crate::history::{Event, Log};

/// A lease held by this worker: one key, or every key of a multi-key grant.
pub struct Held {
    pub owner: String,
    pub keys: Vec<String>,
    pub fences: Vec<i64>,
    pub ttl: f64,
    /// The last server time the worker saw it held (a lower bound of any release).
    pub last_seen: f64,
}

/// How a lease is held before its release.
pub struct Plan {
    /// Seconds from the grant to the release.
    pub hold: f64,
    /// Renewals spread over the hold (0: the lease may run out under its holder).
    pub renewals: u32,
    /// Check every key again just before the release (a multi-key grant's keys all at once).
    pub check_before_release: bool,
}

impl Held {
    /// Looks right after the grant (expiries, and whether every key is live), holds as
    /// planned (looking again at the end if asked) and releases. An error (connection cut, server
    /// down) ends it early: the lease then lives to its expiry, or may have been released if the
    /// release was sent.
    pub async fn hold_and_release(
        mut self,
        db: &Client,
        log: &mut Log,
        plan: Plan,
    ) -> Result<(), tokio_postgres::Error> {
        self.check(db, log, true).await?;
        let parts = plan.renewals + 1;
        for part in 0..parts {
            tokio::time::sleep(Duration::from_secs_f64(plan.hold / f64::from(parts))).await;
            if part + 1 < parts {
                self.renew(db, log).await?;
            }
        }
        if plan.check_before_release {
            self.check(db, log, false).await?;
        }
        self.release(db, log).await
    }

    /// Whether each key's lease is live (`dlock_holds`); with `expiries`, also reads each one's
    /// exact expiry from `dlock_locks`.
    async fn check(
        &mut self,
        db: &Client,
        log: &mut Log,
        expiries: bool,
    ) -> Result<(), tokio_postgres::Error> {
        let rows = db.query(CHECK, &[&self.keys, &self.fences]).await?;
        let mut held = Vec::with_capacity(rows.len());
        let mut at = self.last_seen;
        for (row, (key, fence)) in rows.iter().zip(self.keys.iter().zip(&self.fences)) {
            held.push(row.get::<_, bool>(0));
            at = at.max(row.get(2));
            if let (true, Some(live_until)) = (expiries, row.get::<_, Option<f64>>(1)) {
                log.record(&Event::Expiry {
                    owner: self.owner.clone(),
                    key: key.clone(),
                    fence: *fence,
                    live_until,
                });
            }
        }
        log.record(&Event::Check {
            owner: self.owner.clone(),
            keys: self.keys.clone(),
            fences: self.fences.clone(),
            held: held.clone(),
            at,
        });
        if held.iter().all(|h| *h) {
            self.last_seen = at;
        }
        Ok(())
    }

    /// Renews every key for another ttl: each new expiry, or a check that found it gone.
    async fn renew(&mut self, db: &Client, log: &mut Log) -> Result<(), tokio_postgres::Error> {
        let rows = db.query(RENEW, &[&self.keys, &self.owner, &self.ttl]).await?;
        let mut held = Vec::with_capacity(rows.len());
        let mut at = self.last_seen;
        for (row, (key, fence)) in rows.iter().zip(self.keys.iter().zip(&self.fences)) {
            let renewed: Option<f64> = row.get(0);
            at = at.max(row.get(1));
            if let Some(live_until) = renewed {
                log.record(&Event::Renewed {
                    owner: self.owner.clone(),
                    key: key.clone(),
                    fence: *fence,
                    live_until,
                });
            }
            held.push(renewed.is_some());
        }
        if held.iter().all(|h| *h) {
            self.last_seen = at;
        } else {
            log.record(&Event::Check {
                owner: self.owner.clone(),
                keys: self.keys.clone(),
                fences: self.fences.clone(),
                held,
                at,
            });
        }
        Ok(())
    }

    /// Releases every key in one statement; records the answer (none if the call failed).
    async fn release(&self, db: &Client, log: &mut Log) -> Result<(), tokio_postgres::Error> {
        let local = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        for (key, fence) in self.keys.iter().zip(&self.fences) {
            log.record(&Event::Releasing {
                owner: self.owner.clone(),
                key: key.clone(),
                fence: *fence,
                local,
                lb: Some(self.last_seen),
            });
        }
        let rows = match db.query(RELEASE, &[&self.keys, &self.owner]).await {
            Ok(rows) => rows,
            Err(e) => {
                for (key, fence) in self.keys.iter().zip(&self.fences) {
                    log.record(&Event::Release {
                        owner: self.owner.clone(),
                        key: key.clone(),
                        fence: *fence,
                        ok: None,
                        lb: None,
                        ub: None,
                    });
                }
                return Err(e);
            }
        };
        for (row, (key, fence)) in rows.iter().zip(self.keys.iter().zip(&self.fences)) {
            log.record(&Event::Release {
                owner: self.owner.clone(),
                key: key.clone(),
                fence: *fence,
                ok: Some(row.get(0)),
                lb: Some(row.get(1)),
                ub: Some(row.get(2)),
            });
        }
        Ok(())
    }
}
