//! The Rust client against a throwaway cluster: guard lifecycle, waiting, watchdog, the lost
//! signal, Drop, reentrancy, error mapping and `with_lock`.

use std::time::{Duration, Instant, SystemTime};

use dlock_client::{Client, Error, SqlState};
use dlock_tests::{Cluster, eventually, key, within};

mod common;
use common::{admin, free_for_others};

const SECOND: Duration = Duration::from_secs(1);

/// A client of the shared cluster logging in as `role`, with a fresh owner.
fn client_as(role: &str) -> Client {
    let port = Cluster::shared().port();
    Client::connect_lazy(&format!("host=127.0.0.1 port={port} user={role} dbname=postgres"))
        .expect("client config")
}

fn client() -> Client {
    client_as("postgres")
}

#[tokio::test]
async fn guard_lifecycle_acquire_renew_holds_release() {
    let k = key("guard_lifecycle", "k");
    let client = client();
    let before = SystemTime::now();
    let guard = client.lock(&k).ttl(Duration::from_secs(5)).acquire().await.unwrap();
    assert!(guard.fence() > 0);
    assert_eq!(guard.key(), k);
    assert!(guard.is_held());
    let expires = guard.expires_at().expect("a TTL lease has an expiry");
    assert!(
        expires >= before + Duration::from_secs(4) && expires <= SystemTime::now() + Duration::from_secs(6)
    );

    let row = admin().await.lease(&k).await.unwrap().expect("the lease is on the server");
    assert_eq!((row.owner.as_deref(), row.fence, row.hold_count), (Some(client.owner()), guard.fence(), 1));
    assert_eq!(guard.info().owner, client.owner());

    tokio::time::sleep(Duration::from_millis(20)).await;
    let renewed = guard.renew().await.unwrap().expect("new expiry");
    assert!(renewed > expires, "renewal moves the expiry: {renewed:?} vs {expires:?}");
    assert_eq!(guard.expires_at(), Some(renewed));
    assert!(guard.holds().await.unwrap());
    assert!(!free_for_others(&k).await, "held keys are busy for other owners");

    let fence = guard.fence();
    assert!(guard.release().await.unwrap(), "release reports the lease was still ours");
    assert!(admin().await.lease(&k).await.unwrap().is_none(), "released leases leave no row");
    let next = client.lock(&k).acquire().await.unwrap();
    assert!(next.fence() > fence, "a new grant has a larger fence");
    assert!(next.release().await.unwrap());
}

#[tokio::test]
async fn release_after_the_ttl_ran_out_is_false_and_the_lost_token_fired() {
    let k = key("ran_out", "k");
    let guard = client().lock(&k).ttl(SECOND).watchdog(false).acquire().await.unwrap();
    let lost = guard.lost();
    within(Duration::from_secs(3), "lost fires when a fixed lease runs out", lost.cancelled()).await;
    assert!(!guard.is_held());
    // The local deadline runs out no later than the server's expiry, so the server may lag.
    eventually(SECOND, "the server sees the lease expired", || async { !guard.holds().await.unwrap() }).await;
    assert!(matches!(guard.renew().await, Err(Error::LockLost)), "an expired lease cannot be renewed");
    assert!(!guard.release().await.unwrap(), "release of an expired lease answers false");
}

#[tokio::test]
async fn leaked_lease_stays_until_its_ttl() {
    let k = key("leak", "k");
    let client = client();
    client.lock(&k).ttl(SECOND).acquire().await.unwrap().leak();
    assert!(!free_for_others(&k).await, "a leaked lease is not released");
    eventually(Duration::from_secs(3), "the leaked lease runs out", || free_for_others(&k)).await;
    // The leaked hold is gone: the owner's own second release finds nothing.
    let again = client.lock(&k).acquire().await.unwrap();
    assert!(again.release().await.unwrap());
    let stale = client.lock(&k).ttl(SECOND).watchdog(false).acquire().await.unwrap();
    assert!(admin().await.force_release(&k).await.unwrap());
    assert!(!stale.release().await.unwrap(), "a force-released lease is no longer ours");
}

#[tokio::test]
async fn losing_try_returns_none_and_acquire_not_acquired() {
    let k = key("try_loses", "k");
    let holder = client().lock(&k).acquire().await.unwrap();
    let other = client();
    assert!(other.lock(&k).try_acquire().await.unwrap().is_none());
    assert!(matches!(other.lock(&k).acquire().await, Err(Error::NotAcquired)));
    assert!(holder.release().await.unwrap());
}

#[tokio::test]
async fn waiting_acquire_times_out_or_is_granted_on_release() {
    let k = key("wait", "k");
    let holder = client().lock(&k).acquire().await.unwrap();
    let other = client();
    let start = Instant::now();
    let outcome = other.lock(&k).wait(Duration::from_millis(300)).acquire().await;
    assert!(matches!(outcome, Err(Error::Timeout)), "got {outcome:?}");
    assert!(start.elapsed() >= Duration::from_millis(300));

    let waiter = tokio::spawn(other.lock(&k).wait_forever().acquire());
    // The wait holds no connection: it watches the key on the client's listener.
    dlock_tests::wait_for_watchers(&admin().await, &k, 1).await;
    let fence = holder.fence();
    assert!(holder.release().await.unwrap());
    let granted = within(Duration::from_secs(5), "the waiter is granted", waiter).await.unwrap().unwrap();
    assert!(granted.fence() > fence);
    assert!(granted.release().await.unwrap());
}

#[tokio::test]
async fn watchdog_keeps_a_one_second_lease_alive_for_three_seconds() {
    let k = key("watchdog", "k");
    let guard = client().lock(&k).ttl(SECOND).acquire().await.unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        assert!(!free_for_others(&k).await, "no other owner gets the key after {:?}", start.elapsed());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(guard.is_held());
    assert!(!guard.lost().is_cancelled());
    assert!(guard.holds().await.unwrap());
    assert!(admin().await.holds(&k, guard.fence()).await.unwrap());
    assert!(guard.release().await.unwrap());
}

#[tokio::test]
async fn lost_fires_within_the_ttl_after_a_force_release() {
    let k = key("force_release", "k");
    let guard = client().lock(&k).ttl(SECOND).acquire().await.unwrap();
    let lost = guard.lost();
    assert!(admin().await.force_release(&k).await.unwrap());
    within(SECOND, "lost fires after the force release", lost.cancelled()).await;
    assert!(!guard.is_held());
    assert!(!guard.release().await.unwrap());
}

#[tokio::test]
async fn dropping_a_guard_releases_it_in_the_background() {
    let k = key("drop", "k");
    let guard = client().lock(&k).ttl(Duration::from_secs(60)).acquire().await.unwrap();
    assert!(!free_for_others(&k).await);
    drop(guard);
    eventually(Duration::from_secs(2), "another owner gets the dropped key", || free_for_others(&k)).await;
}

#[tokio::test]
async fn a_guard_dropped_outside_a_runtime_is_left_to_its_ttl() {
    let k = key("drop_no_runtime", "k");
    let key_for_thread = k.clone();
    // Acquired on a runtime of its own; dropped where no runtime is current.
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let guard = runtime.block_on(client().lock(&key_for_thread).ttl(SECOND).acquire()).unwrap();
        drop(guard);
        drop(runtime);
    })
    .join()
    .unwrap();
    assert!(!free_for_others(&k).await, "not released by the drop");
    eventually(Duration::from_secs(3), "the lease runs out", || free_for_others(&k)).await;
}

#[tokio::test]
async fn session_bound_lease_keeps_its_connection_and_ends_on_release() {
    let k = key("session_bound", "k");
    let guard = client().lock(&k).session_bound().acquire().await.unwrap();
    assert_eq!(guard.expires_at(), None);
    assert_eq!(guard.renew().await.unwrap(), None, "a session-bound lease is checked, not renewed");
    let row = admin().await.lease(&k).await.unwrap().unwrap();
    assert_eq!(row.expires_at, Some(f64::INFINITY));
    assert!(!free_for_others(&k).await);
    assert!(guard.release().await.unwrap());
    assert!(free_for_others(&k).await);

    let dropped = client().lock(&k).session_bound().acquire().await.unwrap();
    drop(dropped);
    eventually(Duration::from_secs(2), "a dropped session-bound guard frees the key", || free_for_others(&k))
        .await;
}

#[tokio::test]
async fn reentrant_guards_share_the_fence_and_each_hold_one_hold() {
    let k = key("reentrancy", "k");
    let client = client();
    let first = client.lock(&k).acquire().await.unwrap();
    let second = client.clone().lock(&k).acquire().await.unwrap();
    assert_eq!(first.fence(), second.fence());
    // Another pool under the same owner string is the same owner.
    let third = client_as("postgres").with_owner(client.owner()).lock(&k).acquire().await.unwrap();
    assert_eq!(third.fence(), first.fence());
    assert_eq!(admin().await.lease(&k).await.unwrap().unwrap().hold_count, 3);

    assert!(first.release().await.unwrap());
    assert!(second.release().await.unwrap());
    assert!(!free_for_others(&k).await, "one hold is left");
    assert!(third.release().await.unwrap());
    assert!(free_for_others(&k).await);
}

#[tokio::test]
async fn server_errors_map_to_error_variants_with_the_server_message() {
    let client = client();
    match client.lock("").try_acquire().await {
        Err(Error::InvalidArgument(m)) => {
            assert_eq!(m.code(), &SqlState::INVALID_PARAMETER_VALUE);
            assert!(!m.message().is_empty());
        }
        other => panic!("empty key: {other:?}"),
    }
    let zero_ttl = client.lock(key("errors", "k")).ttl(Duration::ZERO).try_acquire().await;
    assert!(matches!(&zero_ttl, Err(e @ Error::InvalidArgument(_)) if e.sqlstate() == Some("22023")));
    let empty_owner = client.with_owner("").lock(key("errors", "k")).try_acquire().await;
    assert!(matches!(empty_owner, Err(Error::InvalidArgument(_))), "{empty_owner:?}");

    // Force release is for dlock_admin members and superusers only.
    admin().await.batch_execute("CREATE ROLE client_errors_other LOGIN").await.unwrap();
    let k = key("errors", "role");
    let guard = client.lock(&k).acquire().await.unwrap();
    let outcome = client_as("client_errors_other").force_release(&k).await;
    assert!(
        matches!(&outcome, Err(Error::PermissionDenied(m)) if m.code() == &SqlState::INSUFFICIENT_PRIVILEGE),
        "{outcome:?}"
    );
    // Another role with the same owner string is another owner: the key is busy for it.
    let other_role = client_as("client_errors_other").with_owner(client.owner());
    assert!(other_role.lock(&k).try_acquire().await.unwrap().is_none());
    assert!(guard.holds().await.unwrap());
    assert!(client.force_release(&k).await.unwrap(), "a superuser may force-release");
    assert!(!guard.release().await.unwrap());

    let nowhere = "host=127.0.0.1 port=1 user=postgres connect_timeout=2";
    let outcome = Client::connect(nowhere).await;
    assert!(matches!(outcome, Err(Error::Connection { .. })), "{outcome:?}");
    let outcome = Client::connect_lazy(nowhere).unwrap().lock("k").try_acquire().await;
    assert!(matches!(outcome, Err(Error::Connection { .. })), "{outcome:?}");
    let port = Cluster::shared().port();
    let url = format!("postgresql://postgres@127.0.0.1:{port}/postgres");
    assert!(Client::connect(&url).await.is_ok(), "URLs connect too");
}

#[tokio::test]
async fn with_lock_runs_the_work_under_the_lock_and_releases() {
    let k = key("with_lock", "k");
    let client = client();
    let key_for_work = k.clone();
    let fence = client
        .with_lock(&k, |lease| async move {
            assert!(lease.is_held());
            assert!(lease.holds().await.unwrap(), "the work can check its fence on the server");
            assert!(!free_for_others(&key_for_work).await);
            lease.fence()
        })
        .await
        .unwrap();
    assert!(fence > 0);
    assert!(free_for_others(&k).await, "released after the work");
    let busy = client.lock(&k).acquire().await.unwrap();
    let outcome = client_as("postgres").with_lock(&k, |_| async {}).await;
    assert!(matches!(outcome, Err(Error::NotAcquired)), "{outcome:?}");
    assert!(busy.release().await.unwrap());
}

#[tokio::test]
async fn with_lock_returns_lock_lost_when_the_lease_is_force_released_mid_work() {
    let k = key("with_lock_lost", "k");
    let client = client();
    let key_for_work = k.clone();
    let outcome = client
        .with_lock(client.lock(&k).ttl(SECOND), |lease| async move {
            assert!(admin().await.force_release(&key_for_work).await.unwrap());
            assert!(!lease.holds().await.unwrap(), "the fence is no longer the key's");
            within(SECOND, "the work is told", lease.lost().cancelled()).await;
            "done"
        })
        .await;
    assert!(matches!(outcome, Err(Error::LockLost)), "{outcome:?}");

    // Lost before the watchdog noticed: the release answers false, which is enough.
    let key_for_work = k.clone();
    let outcome = client
        .with_lock(client.lock(&k).ttl(Duration::from_secs(30)), |_| async move {
            assert!(admin().await.force_release(&key_for_work).await.unwrap());
        })
        .await;
    assert!(matches!(outcome, Err(Error::LockLost)), "{outcome:?}");
}

#[tokio::test]
async fn a_dropped_waiting_acquire_leaves_no_waiter_and_gets_no_grant() {
    let k = key("dropped_wait", "k");
    let holder = client().lock(&k).acquire().await.unwrap();
    let waiter = client();
    let observer = admin().await;
    let attempt = tokio::spawn(waiter.lock(&k).wait_forever().acquire());
    dlock_tests::wait_for_watchers(&observer, &k, 1).await;
    attempt.abort();
    assert!(attempt.await.unwrap_err().is_cancelled(), "dropped while still waiting");
    // The last waiter of the key gone, the client stops watching it.
    dlock_tests::wait_for_watchers(&observer, &k, 0).await;
    assert!(holder.release().await.unwrap());
    assert!(free_for_others(&k).await, "the key went to nobody");
}

#[tokio::test]
async fn a_dropped_wait_in_the_servers_queue_leaves_no_waiter_and_gets_no_grant() {
    let k = key("dropped_server_wait", "k");
    let holder = client().lock(&k).acquire().await.unwrap();
    let waiter = client();
    let observer = admin().await;
    let attempt = tokio::spawn(waiter.lock(&k).server_queue().wait_forever().acquire());
    dlock_tests::wait_for_waiters(&observer, &k, 1).await;
    attempt.abort();
    assert!(attempt.await.unwrap_err().is_cancelled(), "dropped while still waiting");
    // Its connection was closed, not pooled: the server forgets the waiter.
    dlock_tests::wait_for_waiters(&observer, &k, 0).await;
    assert!(holder.release().await.unwrap());
    assert!(free_for_others(&k).await, "the key went to nobody");
    assert_eq!(waiter.pool().status().size, 0, "the waiting connection was not returned to the pool");
}
