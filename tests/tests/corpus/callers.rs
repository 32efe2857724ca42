//! The roles and sessions that run the entries, and the loop that runs them between snapshots.

use dlock_tests::{Cluster, Session};

use crate::entries::{Entry, judge};
use crate::snapshot::{listening, snapshot};

/// The role that holds the victim leases and makes most bad calls.
pub const USER: &str = "corpus_user";
/// Another plain role.
pub const OTHER: &str = "corpus_other";
/// A member of `dlock_admin`.
pub const ADMIN: &str = "corpus_admin";

/// Who runs an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    User,
    Other,
    Admin,
    Superuser,
}

/// The sessions of one test and the roles they run as.
pub struct Callers {
    pub superuser: Session,
    pub user: Session,
    pub other: Session,
    pub admin: Session,
}

impl Callers {
    /// The server's major version (what it accepts as an interval depends on it).
    pub async fn server_major(&self) -> u32 {
        let num: String = self.superuser.query_one("SHOW server_version_num", &[]).await.unwrap().get(0);
        num.parse::<u32>().expect("a number") / 10_000
    }

    pub async fn connect(cluster: &Cluster) -> Callers {
        let superuser = cluster.connect().await;
        superuser
            .batch_execute(&format!(
                "DO $$ BEGIN \
                   IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{USER}') THEN \
                     CREATE ROLE {USER} LOGIN; CREATE ROLE {OTHER} LOGIN; CREATE ROLE {ADMIN} LOGIN; \
                     GRANT dlock_admin TO {ADMIN}; \
                   END IF; \
                 END $$"
            ))
            .await
            .expect("create the roles of the corpus");
        let callers = Callers {
            superuser,
            user: cluster.connect_as(USER).await,
            other: cluster.connect_as(OTHER).await,
            admin: cluster.connect_as(ADMIN).await,
        };
        // Load dlock's library in every session, so that `dlock.max_ttl` is a real setting
        // there (not a placeholder any role may set).
        for s in [&callers.superuser, &callers.user, &callers.other, &callers.admin] {
            s.holds("corpus/load", 1).await.expect("load dlock");
        }
        callers
    }

    pub fn session(&self, caller: Caller) -> &Session {
        match caller {
            Caller::User => &self.user,
            Caller::Other => &self.other,
            Caller::Admin => &self.admin,
            Caller::Superuser => &self.superuser,
        }
    }

    /// Runs every entry, each between two snapshots (and two readings of what its caller
    /// LISTENs on); returns how many ran. Collects every failure before failing, so one run
    /// shows the whole picture.
    pub async fn try_all(&self, entries: &[Entry]) -> usize {
        let mut failures = Vec::new();
        for e in entries {
            let before = snapshot(&self.superuser).await;
            let s = self.session(e.caller);
            let listening_before = listening(s).await;
            if e.read_only {
                s.batch_execute("BEGIN READ ONLY").await.expect("BEGIN READ ONLY");
            }
            let result = s.simple_query(&e.sql).await;
            if e.read_only {
                s.batch_execute("ROLLBACK").await.expect("ROLLBACK");
            }
            if let Some(problem) = judge(&e.expect, result) {
                failures.push(format!("{e:?}: {problem}"));
            }
            let after = snapshot(&self.superuser).await;
            if after != before {
                failures.push(format!("{e:?}: the state changed\n  before: {before:?}\n  after:  {after:?}"));
            }
            let listening_after = listening(s).await;
            if listening_after != listening_before {
                failures.push(format!(
                    "{e:?}: what the caller LISTENs on changed: {listening_before:?} -> {listening_after:?}"
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} entries failed:\n{}",
            failures.len(),
            entries.len(),
            failures.join("\n")
        );
        entries.len()
    }
}
