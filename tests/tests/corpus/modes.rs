//! Asking for a key in another mode than the one the same owner holds it in (0A000: no silent
//! upgrade or downgrade, and a lock is not an election of the same name), and semaphore
//! participants that disagree on the number of permits (22023). Nothing changes either way.

use dlock_tests::{Cluster, key, owner};
use tokio_postgres::error::SqlState;

use crate::callers::{Caller, Callers};
use crate::entries::{Entry, answer, entry, err, lit};
use crate::targets::Target;

/// On a key its owner holds exclusively (a TTL lease or a session-bound one).
pub fn on_exclusive(target: &Target) -> Vec<Entry> {
    if target.name == "free" {
        return Vec::new();
    }
    let (k, o) = (lit(&target.key), lit(&target.owner));
    let on = |what: &str| format!("{what} on the {} key", target.name);
    let conflict = || err(SqlState::FEATURE_NOT_SUPPORTED);
    // The TTL lease was taken by the caller's own session, the session-bound one by another.
    let wait_free = if target.session_bound { answer(Some("false")) } else { err(SqlState::OBJECT_IN_USE) };
    vec![
        entry(
            on("waiting for it to be free, for no time"),
            Caller::User,
            format!("SELECT dlock_wait_free({k}, '0')::text"),
            wait_free.clone(),
        ),
        entry(
            on("waiting for it to be free, without limit or for 50 ms"),
            Caller::User,
            if target.session_bound {
                format!("SELECT dlock_wait_free({k}, '50 ms')::text")
            } else {
                format!("SELECT dlock_wait_free({k}, NULL)::text")
            },
            wait_free,
        ),
        entry(
            on("shared by its exclusive owner"),
            Caller::User,
            format!("SELECT dlock_acquire_shared({k}, {o}, '1 hour')::text"),
            conflict(),
        ),
        entry(
            on("shared, session-bound, by its exclusive owner"),
            Caller::User,
            format!("SELECT dlock_acquire_shared({k}, {o}, NULL)::text"),
            conflict(),
        ),
        entry(
            on("a semaphore permit for its exclusive owner"),
            Caller::User,
            format!("SELECT dlock_acquire_shared({k}, {o}, '1 hour', max_holders => 3)::text"),
            conflict(),
        ),
        entry(
            on("a campaign by its exclusive owner"),
            Caller::User,
            format!("SELECT dlock_campaign({k}, {o}, '1 hour', wait => '0')::text"),
            conflict(),
        ),
        entry(
            on("all of it and a free key, by its exclusive owner with another lock-delay"),
            Caller::User,
            format!(
                "SELECT dlock_acquire_all(ARRAY[{k}, 'modes/free'], {o}, '1 hour', '0', '-1 second')::text"
            ),
            err(SqlState::INVALID_PARAMETER_VALUE),
        ),
    ]
}

/// A key held shared as a semaphore of 2 permits, and an election with a leader, by `USER`.
pub async fn run(test: &str) -> usize {
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    let (sk, so) = (key(test, "semaphore"), owner(test, "permit-holder"));
    let (ek, eo) = (key(test, "election"), owner(test, "leader"));
    let free = key(test, "free");
    let user = &callers.user;
    let fence: Option<i64> = user
        .query_one("SELECT dlock_acquire_shared($1, $2, '1 hour', max_holders => 2)", &[&sk, &so])
        .await
        .unwrap()
        .get(0);
    assert!(fence.is_some(), "the permit is granted");
    let term: Option<i64> = user
        .query_one("SELECT dlock_campaign($1, $2, '1 hour', 'node-1')", &[&ek, &eo])
        .await
        .unwrap()
        .get(0);
    assert!(term.is_some(), "the lead is won");

    let (k, o, e, l, f) = (lit(&sk), lit(&so), lit(&ek), lit(&eo), lit(&free));
    let other = lit(&owner(test, "someone-else"));
    let conflict = || err(SqlState::FEATURE_NOT_SUPPORTED);
    let mismatch = || err(SqlState::INVALID_PARAMETER_VALUE);
    let u = Caller::User;
    let entries = vec![
        entry(
            "exclusive by its shared owner",
            u,
            format!("SELECT dlock_acquire({k}, {o}, '1 hour')::text"),
            conflict(),
        ),
        entry(
            "exclusive, session-bound, by its shared owner",
            u,
            format!("SELECT dlock_acquire({k}, {o}, NULL)::text"),
            conflict(),
        ),
        entry(
            "exclusive with a lock-delay by its shared owner",
            u,
            format!("SELECT dlock_acquire({k}, {o}, '1 hour', '0', '1 second')::text"),
            conflict(),
        ),
        entry(
            "all of a set with it, by its shared owner",
            u,
            format!("SELECT dlock_acquire_all(ARRAY[{f}, {k}], {o}, '1 hour')::text"),
            conflict(),
        ),
        entry(
            "a campaign by its shared owner",
            u,
            format!("SELECT dlock_campaign({k}, {o}, '1 hour', wait => '0')::text"),
            conflict(),
        ),
        entry(
            "its shared owner with 3 permits",
            u,
            format!("SELECT dlock_acquire_shared({k}, {o}, '1 hour', '0', 3)::text"),
            mismatch(),
        ),
        entry(
            "its shared owner without a limit",
            u,
            format!("SELECT dlock_acquire_shared({k}, {o}, '1 hour')::text"),
            mismatch(),
        ),
        entry(
            "another owner with 3 permits",
            u,
            format!("SELECT dlock_acquire_shared({k}, {other}, '1 hour', '0', 3)::text"),
            mismatch(),
        ),
        entry(
            "another owner without a limit",
            u,
            format!("SELECT dlock_acquire_shared({k}, {other}, '1 hour')::text"),
            mismatch(),
        ),
        entry(
            "another role with 1 permit",
            Caller::Other,
            format!("SELECT dlock_acquire_shared({k}, {other}, '1 hour', '0', 1)::text"),
            mismatch(),
        ),
        entry(
            "exclusive by the leader",
            u,
            format!("SELECT dlock_acquire({e}, {l}, '1 hour')::text"),
            conflict(),
        ),
        entry(
            "shared by the leader",
            u,
            format!("SELECT dlock_acquire_shared({e}, {l}, '1 hour')::text"),
            conflict(),
        ),
        entry(
            "all of a set with it, by the leader",
            u,
            format!("SELECT dlock_acquire_all(ARRAY[{e}, {f}], {l}, '1 hour')::text"),
            conflict(),
        ),
    ];
    let tried = callers.try_all(&entries).await;

    for (key, owner) in [(&sk, &so), (&ek, &eo)] {
        assert!(user.release(key, owner).await.unwrap(), "release {key}");
    }
    tried
}
