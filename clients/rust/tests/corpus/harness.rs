//! The machinery of the client corpus: what a call must come back as, the state it must leave
//! alone, and the run that checks both for every call and counts them.

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

use dlock_client::{Client, Error};
use dlock_tests::{Session, within};

use crate::common::admin;

/// Whole-state snapshots are only meaningful while no other test of this file runs.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A plain role: not a superuser, not a `dlock_admin` member.
pub const PLAIN: &str = "client_corpus_plain";
/// Longer than any call of the corpus may take: beyond it, the call hangs.
const HANG: Duration = Duration::from_secs(30);
/// How long the state may take to settle after a call (the client unwatches in the background).
const SETTLE: Duration = Duration::from_secs(5);

/// A client of the shared cluster logging in as `role`, with a fresh owner.
pub fn client_as(role: &str) -> Client {
    let port = dlock_tests::Cluster::shared().port();
    Client::connect_lazy(&format!("host=127.0.0.1 port={port} user={role} dbname=postgres"))
        .expect("client config")
}

/// What a call must come back as.
#[derive(Debug, Clone, Copy)]
pub enum Want {
    /// `Error::InvalidArgument` with this SQLSTATE (22023 or 22004).
    Invalid(&'static str),
    /// `Error::Database` with this SQLSTATE: the server refused the value before dlock saw it.
    Database(&'static str),
    /// `Error::PermissionDenied` (42501).
    Denied,
    /// Either of the two: a plain role force-releasing an empty key (the order of the checks is
    /// not part of the contract).
    InvalidOrDenied,
    NotAcquired,
    Timeout,
    LockLost,
    Config,
    /// `Ok` with a value whose `Debug` text is this (`None`, `false`).
    Answer(&'static str),
}

fn matches_want<T: Debug>(want: Want, got: &Result<T, Error>) -> bool {
    match (want, got) {
        (Want::Invalid(code), Err(e @ Error::InvalidArgument(_))) => e.sqlstate() == Some(code),
        (Want::Database(code), Err(e @ Error::Database(_))) => e.sqlstate() == Some(code),
        (Want::Denied, Err(Error::PermissionDenied(m))) => m.code().code() == "42501",
        (Want::InvalidOrDenied, Err(Error::PermissionDenied(_) | Error::InvalidArgument(_))) => true,
        (Want::NotAcquired, Err(Error::NotAcquired))
        | (Want::Timeout, Err(Error::Timeout))
        | (Want::LockLost, Err(Error::LockLost))
        | (Want::Config, Err(Error::Config(_))) => true,
        (Want::Answer(text), Ok(value)) => format!("{value:?}") == text,
        _ => false,
    }
}

/// The state a bad call must not change: every `dlock_locks` row and every watch lock.
pub async fn state(admin: &Session) -> Vec<String> {
    let rows = admin
        .query(
            "SELECT format('lease %s|%s|%s|%s|%s|%s|%s|%s', key, owner, fence, hold_count, expires_at, \
                           holder_pid, holder_role, waiters) FROM dlock_locks \
             UNION ALL \
             SELECT format('watch pid %s: %s/%s', pid, classid, objid) FROM pg_catalog.pg_locks \
              WHERE locktype = 'advisory' AND objsubid = 27396 \
             ORDER BY 1",
            &[],
        )
        .await
        .expect("read dlock_locks and pg_locks");
    rows.iter().map(|r| r.get(0)).collect()
}

/// One test's run of bad calls: counts them and collects what went wrong.
pub struct Corpus {
    test: &'static str,
    pub admin: Session,
    pub tried: usize,
    pub failures: Vec<String>,
}

impl Corpus {
    /// Also creates the plain role (once per cluster).
    pub async fn new(test: &'static str) -> Corpus {
        let admin = admin().await;
        admin
            .batch_execute(&format!(
                "DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{PLAIN}') THEN \
                   CREATE ROLE {PLAIN} LOGIN; END IF; END $$"
            ))
            .await
            .expect("create the plain role");
        Corpus { test, admin, tried: 0, failures: Vec::new() }
    }

    /// Runs one call: it must come back as `want` and leave the state as it found it.
    pub async fn bad<T: Debug>(
        &mut self,
        what: &str,
        want: Want,
        call: impl Future<Output = Result<T, Error>>,
    ) {
        let before = state(&self.admin).await;
        // A hang guard, not a timing assertion: every call here answers at once or within a
        // short wait.
        let got = within(HANG, what, call).await;
        if !matches_want(want, &got) {
            self.failures.push(format!("{what}: expected {want:?}, got {got:?}"));
        }
        // An unexpected guard is released in the background; the state check below then fails.
        drop(got);
        let start = Instant::now();
        let mut after = state(&self.admin).await;
        while after != before && start.elapsed() < SETTLE {
            tokio::time::sleep(Duration::from_millis(10)).await;
            after = state(&self.admin).await;
        }
        if after != before {
            self.failures
                .push(format!("{what}: the state changed\n  before: {before:?}\n  after:  {after:?}"));
        }
        self.tried += 1;
    }

    pub fn finish(self) {
        println!("client corpus: {} bad inputs tried ({})", self.tried, self.test);
        assert!(
            self.failures.is_empty(),
            "{} of {} calls failed:\n{}",
            self.failures.len(),
            self.tried,
            self.failures.join("\n")
        );
    }
}
