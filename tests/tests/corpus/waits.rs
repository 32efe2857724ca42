//! Waits ended by `statement_timeout` or a cancel request: 57014 and no trace.

use dlock_tests::{Cluster, expect_sqlstate, finish, owner, wait_for_waiters};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use crate::callers::{Callers, OTHER, USER};
use crate::snapshot::snapshot;
use crate::targets::{release_victims, victims};

/// How a wait is ended.
#[derive(Clone, Copy, Debug)]
enum End {
    /// `statement_timeout` with `wait => '10 seconds'`.
    TimeoutBoundedWait,
    /// `statement_timeout` with `wait => NULL`.
    TimeoutUnboundedWait,
    /// A cancel request while it waits.
    Cancel,
    /// A cancel request to the second waiter in line (queued behind a head).
    CancelQueued,
}

/// Ends waits in each way on the TTL-held and session-bound keys; returns how many ended.
pub async fn run(test: &str) -> usize {
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    let holder = cluster.connect_as(USER).await;
    let targets = victims(test, &callers.user, &holder).await;
    let limit = std::time::Duration::from_secs(10);
    let waiter_owner = owner(test, "waiter");
    let mut tried = 0;
    for target in &targets[..2] {
        for end in [End::TimeoutBoundedWait, End::TimeoutUnboundedWait, End::Cancel, End::CancelQueued] {
            let what = format!("{end:?} on the {} key", target.name);
            let before = snapshot(&callers.superuser).await;
            let waiter = cluster.connect_as(OTHER).await;
            // The sessions whose calls ended: the server sends the error before it aborts the
            // transaction, so a session has cleaned up once it answers its next query.
            let (result, ended) = match end {
                End::TimeoutBoundedWait | End::TimeoutUnboundedWait => {
                    waiter.batch_execute("SET statement_timeout = '200ms'").await.unwrap();
                    let wait = matches!(end, End::TimeoutBoundedWait).then_some("10 seconds");
                    (waiter.acquire(&target.key, &waiter_owner, Some("1 hour"), wait).await, vec![waiter])
                }
                End::Cancel => {
                    let cancel = waiter.cancel_token();
                    let attempt = waiter.spawn_acquire(&target.key, &waiter_owner, Some("1 hour"), None);
                    wait_for_waiters(&callers.superuser, &target.key, 1).await;
                    cancel.cancel_query(NoTls).await.unwrap();
                    let attempt = finish(attempt, limit, &what).await;
                    (attempt.result, vec![attempt.session])
                }
                End::CancelQueued => {
                    // A head waits first; the cancelled waiter queues behind it. Then the head
                    // is cancelled too.
                    let head = cluster.connect_as(OTHER).await;
                    let head_cancel = head.cancel_token();
                    let head_attempt =
                        head.spawn_acquire(&target.key, &owner(test, "head"), Some("1 hour"), None);
                    wait_for_waiters(&callers.superuser, &target.key, 1).await;
                    let cancel = waiter.cancel_token();
                    let attempt = waiter.spawn_acquire(&target.key, &waiter_owner, Some("1 hour"), None);
                    wait_for_waiters(&callers.superuser, &target.key, 2).await;
                    cancel.cancel_query(NoTls).await.unwrap();
                    let attempt = finish(attempt, limit, &what).await;
                    attempt.session.query_one("SELECT 1", &[]).await.expect("the cancelled session answers");
                    assert_eq!(
                        callers.superuser.waiters(&target.key).await.unwrap(),
                        1,
                        "{what}: only the head still waits"
                    );
                    head_cancel.cancel_query(NoTls).await.unwrap();
                    let head_attempt = finish(head_attempt, limit, &format!("{what}: the head")).await;
                    expect_sqlstate(
                        head_attempt.result,
                        &SqlState::QUERY_CANCELED,
                        &format!("{what}: the head"),
                    );
                    (attempt.result, vec![attempt.session, head_attempt.session])
                }
            };
            expect_sqlstate(result, &SqlState::QUERY_CANCELED, &what);
            for session in &ended {
                session.query_one("SELECT 1", &[]).await.expect("the session is still usable");
            }
            assert_eq!(snapshot(&callers.superuser).await, before, "{what}: the state changed");
            tried += 1;
        }
    }
    // No phantom waiter is left in any line: once the holders let go, a newcomer's try is
    // granted at once.
    release_victims(&callers.user, &targets).await;
    for target in &targets[..2] {
        let fence = callers.other.try_acquire(&target.key, &waiter_owner, "1 hour").await.unwrap();
        assert!(fence.is_some_and(|f| f > target.fence), "{}: granted after the ended waits", target.key);
        assert!(callers.other.release(&target.key, &waiter_owner).await.unwrap());
    }
    tried
}
