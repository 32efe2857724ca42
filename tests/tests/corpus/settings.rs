//! `dlock.max_ttl`: plain roles cannot raise it, nobody can set it to a non-positive value.

use dlock_tests::{Cluster, expect_sqlstate, key, owner};
use tokio_postgres::error::SqlState;

use crate::callers::{Caller, Callers, USER};
use crate::entries::{Entry, entry, err, lit};
use crate::snapshot::snapshot;

/// SET and set_config of `dlock.max_ttl`: plain roles and admins cannot raise it (42501), a
/// superuser cannot set it to garbage or a non-positive value (22023).
pub fn max_ttl_entries() -> Vec<Entry> {
    use SqlState as S;
    let mut entries = Vec::new();
    for (caller, value, code) in [
        (Caller::User, "10 days", S::INSUFFICIENT_PRIVILEGE),
        (Caller::User, "1 hour", S::INSUFFICIENT_PRIVILEGE),
        (Caller::Admin, "10 days", S::INSUFFICIENT_PRIVILEGE),
        (Caller::Superuser, "garbage", S::INVALID_PARAMETER_VALUE),
        (Caller::Superuser, "0", S::INVALID_PARAMETER_VALUE),
        (Caller::Superuser, "-1 day", S::INVALID_PARAMETER_VALUE),
        (Caller::Superuser, "infinity", S::INVALID_PARAMETER_VALUE),
    ] {
        entries.push(entry(
            format!("SET dlock.max_ttl = {value:?} by {caller:?}"),
            caller,
            format!("SET dlock.max_ttl = {}", lit(value)),
            err(code.clone()),
        ));
        entries.push(entry(
            format!("set_config('dlock.max_ttl', {value:?}) by {caller:?}"),
            caller,
            format!("SELECT set_config('dlock.max_ttl', {}, false)", lit(value)),
            err(code),
        ));
    }
    entries
}

/// The refused settings left `dlock.max_ttl` at its default for every caller.
pub async fn assert_max_ttl_unchanged(callers: &Callers) {
    for caller in [Caller::User, Caller::Admin, Caller::Superuser] {
        let s = callers.session(caller);
        let row =
            s.query_one("SELECT current_setting('dlock.max_ttl')::interval = '1 day'", &[]).await.unwrap();
        assert!(row.get::<_, bool>(0), "{caller:?}: dlock.max_ttl changed");
    }
}

/// A fresh session of a plain role sets `dlock.max_ttl` before dlock is loaded; returns 1.
pub async fn run(test: &str) -> usize {
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    // A fresh session: dlock's library is not loaded in it yet.
    let fresh = cluster.connect_as(USER).await;
    let loaded: bool = fresh
        .query_one("SELECT EXISTS (SELECT FROM pg_settings WHERE name = 'dlock.max_ttl')", &[])
        .await
        .unwrap()
        .get(0);
    let before = snapshot(&callers.superuser).await;
    // Whether PostgreSQL accepts the SET (placeholder) or refuses it (library loaded), the
    // limit must stay.
    let set = fresh.batch_execute("SET dlock.max_ttl = '10 days'").await;
    if loaded {
        expect_sqlstate(set, &SqlState::INSUFFICIENT_PRIVILEGE, "SET after load");
    }
    let (k, o) = (key(test, "k"), owner(test, "o"));
    expect_sqlstate(
        fresh.try_acquire(&k, &o, "2 days").await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "ttl of 2 days after a plain role's SET dlock.max_ttl = '10 days'",
    );
    assert_eq!(snapshot(&callers.superuser).await, before, "nothing changed");
    1
}
