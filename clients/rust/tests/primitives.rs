//! The client's version 2 primitives against a throwaway cluster: shared locks, semaphores,
//! multi-key locks, elections (campaign, leader, observe), lock-delay and wait_free, with their
//! watchdogs, lost signals and error types.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use dlock_client::{Client, Error};
use dlock_tests::{Cluster, eventually, key, within};

mod common;
use common::{admin, free_for_others};

const SECOND: Duration = Duration::from_secs(1);

fn client() -> Client {
    let port = Cluster::shared().port();
    Client::connect_lazy(&format!("host=127.0.0.1 port={port} user=postgres dbname=postgres"))
        .expect("client config")
}

/// How many live leases `dlock_locks` shows on `key`.
async fn holders(key: &str) -> i64 {
    let admin = admin().await;
    let row = admin
        .client()
        .query_one("SELECT count(*) FROM dlock_locks WHERE key = $1", &[&key])
        .await
        .expect("dlock_locks");
    row.get(0)
}

#[tokio::test]
async fn readers_hold_a_key_together_and_exclude_a_writer() {
    let k = key("prim_readers", "k");
    let (a, b, writer) = (client(), client(), client());
    let ra = a.lock(&k).shared().acquire().await.unwrap();
    let rb = b.lock(&k).shared().acquire().await.expect("a second reader beside the first");
    assert_ne!(ra.fence(), rb.fence(), "each reader's lease is its own");
    assert_eq!(holders(&k).await, 2);
    assert!(matches!(writer.lock(&k).acquire().await, Err(Error::NotAcquired)), "no writer beside readers");
    assert!(ra.release().await.unwrap());
    assert!(rb.release().await.unwrap());

    let w = writer.lock(&k).acquire().await.expect("the writer once the readers are gone");
    assert!(
        matches!(a.lock(&k).shared().acquire().await, Err(Error::NotAcquired)),
        "no reader beside a writer"
    );
    // A waiting reader is granted when the writer releases (woken by the release's notification).
    let waiting = tokio::spawn(a.lock(&k).shared().wait(Duration::from_secs(10)).acquire());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(w.release().await.unwrap());
    let r = within(Duration::from_secs(5), "the waiting reader is granted", waiting).await.unwrap().unwrap();
    assert!(r.release().await.unwrap());
}

#[tokio::test]
async fn a_semaphore_never_has_more_holders_than_permits() {
    let k = key("prim_semaphore", "k");
    let base = client();
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            // One owner per task: clones of one client are one owner, and share one permit.
            let worker = base.with_owner(format!("{}-{i}", base.owner()));
            let (k, inside, most) = (k.clone(), inside.clone(), most.clone());
            tokio::spawn(async move {
                for _ in 0..3 {
                    let permit = worker
                        .semaphore(&k, 3)
                        .ttl(Duration::from_secs(10))
                        .wait(Duration::from_secs(30))
                        .acquire()
                        .await?;
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(permit.release().await?, "the permit was still ours");
                }
                Ok::<_, Error>(())
            })
        })
        .collect();
    for task in tasks {
        within(Duration::from_secs(60), "every worker gets its permits", task).await.unwrap().unwrap();
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders of a semaphore of 3");
    assert!(most >= 2, "permits are held side by side (at most {most} at once)");
    assert_eq!(holders(&k).await, 0);
}

#[tokio::test]
async fn bad_semaphores_are_invalid_arguments() {
    let k = key("prim_semaphore_bad", "k");
    let err = client().semaphore(&k, 0).acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    assert_eq!(err.sqlstate(), Some("22023"));

    let held = client().semaphore(&k, 3).acquire().await.unwrap();
    let err = client().semaphore(&k, 2).acquire().await.unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "another size than its holders': {err:?}");
    assert!(held.release().await.unwrap());
}

#[tokio::test]
async fn asking_for_a_held_key_in_the_other_mode_is_a_mode_conflict() {
    let k = key("prim_mode_conflict", "k");
    let client = client();
    let exclusive = client.lock(&k).acquire().await.unwrap();
    let err = client.lock(&k).shared().acquire().await.unwrap_err();
    assert!(matches!(err, Error::ModeConflict(_)), "{err:?}");
    assert_eq!(err.sqlstate(), Some("0A000"));
    assert!(exclusive.release().await.unwrap());

    let shared = client.lock(&k).shared().acquire().await.unwrap();
    assert!(matches!(client.lock(&k).acquire().await, Err(Error::ModeConflict(_))), "no upgrade either");
    let again = client.lock(&k).shared().acquire().await.expect("reentrant in its own mode");
    assert_eq!(again.fence(), shared.fence());
    assert!(again.release().await.unwrap() && shared.release().await.unwrap());
}

#[tokio::test]
async fn fast_leases_refuse_shared_modes_and_lock_delays() {
    let k = key("prim_fast", "k");
    for builder in [client().lock(&k).fast().shared(), client().lock(&k).fast().lock_delay(SECOND)] {
        assert!(matches!(builder.acquire().await, Err(Error::Unsupported(_))));
    }
}

#[tokio::test]
async fn a_force_released_shared_lease_fires_lost() {
    let k = key("prim_shared_lost", "k");
    let guard = client().lock(&k).shared().ttl(Duration::from_millis(1500)).acquire().await.unwrap();
    let lost = guard.lost();
    assert!(admin().await.force_release(&k).await.unwrap());
    within(Duration::from_secs(3), "the watchdog finds the shared lease gone", lost.cancelled()).await;
    assert!(!guard.is_held());
    assert!(!guard.release().await.unwrap(), "released by someone else");
}

#[tokio::test]
async fn lock_all_takes_every_key_or_none() {
    let (a, b, c) = (key("prim_all", "a"), key("prim_all", "b"), key("prim_all", "c"));
    let other = client();
    let held_b = other.lock(&b).acquire().await.unwrap();
    let client = client();
    let keys = [a.clone(), b.clone(), c.clone()];
    assert!(matches!(client.lock_all(keys.clone()).acquire().await, Err(Error::NotAcquired)));
    assert!(free_for_others(&a).await && free_for_others(&c).await, "no subset is held");
    let waiting = tokio::spawn(client.lock_all(keys.clone()).wait(Duration::from_secs(10)).acquire());
    tokio::time::sleep(Duration::from_millis(200)).await;
    // (A try on a is refused meanwhile: the waiter queues on every key, as the server's waits do.)
    assert!(admin().await.lease(&a).await.unwrap().is_none(), "nothing is held while waiting");
    assert!(held_b.release().await.unwrap());
    let all = within(Duration::from_secs(5), "granted once b is free", waiting).await.unwrap().unwrap();
    assert_eq!(all.keys(), keys);
    assert_eq!(all.fences().len(), 3);
    let admin = admin().await;
    for (k, fence) in keys.iter().zip(all.fences()) {
        let row = admin.lease(k).await.unwrap().expect("every key is held");
        assert_eq!((row.fence, row.owner.as_deref()), (*fence, Some(client.owner())));
    }
    assert!(all.holds().await.unwrap());
    assert!(all.renew().await.unwrap().is_some());
    assert!(all.release().await.unwrap());
    for k in &keys {
        assert!(admin.lease(k).await.unwrap().is_none(), "{k} released with the rest");
    }
}

#[tokio::test]
async fn lock_all_in_opposite_orders_never_deadlocks() {
    let (x, y) = (key("prim_all_orders", "x"), key("prim_all_orders", "y"));
    let run = |keys: [String; 2]| {
        let client = client();
        tokio::spawn(async move {
            for _ in 0..15 {
                let all = client.lock_all(keys.clone()).wait(Duration::from_secs(20)).acquire().await?;
                tokio::task::yield_now().await;
                assert!(all.release().await?);
            }
            Ok::<_, Error>(())
        })
    };
    let forward = run([x.clone(), y.clone()]);
    let backward = run([y, x]);
    for task in [forward, backward] {
        within(Duration::from_secs(60), "both callers finish", task).await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn lock_all_fires_lost_when_any_key_is_lost_and_checks_its_keys() {
    let (a, b) = (key("prim_all_lost", "a"), key("prim_all_lost", "b"));
    let all = client()
        .lock_all([&a, &b].map(String::as_str))
        .ttl(Duration::from_millis(1500))
        .acquire()
        .await
        .unwrap();
    let lost = all.lost();
    assert!(admin().await.force_release(&b).await.unwrap());
    within(Duration::from_secs(3), "lost fires for one key of the set", lost.cancelled()).await;
    assert!(!all.holds().await.unwrap());
    assert!(!all.release().await.unwrap(), "not every key was still ours");
    assert!(admin().await.lease(&a).await.unwrap().is_none(), "the other key is released anyway");

    let client = client();
    for bad in [vec![], vec![a.clone(), a.clone()], (0..65).map(|i| format!("{a}:{i}")).collect()] {
        let err = client.lock_all(bad).acquire().await.unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err:?}");
    }
}

#[tokio::test]
async fn campaigns_take_turns_with_growing_terms_and_leader_shows_info_only() {
    let name = key("prim_election", "e");
    let (a, b) = (client(), client());
    let first = a.election(&name).ttl(Duration::from_secs(10)).campaign("a:8080").await.unwrap();
    let leader = a.election(&name).leader().await.unwrap().expect("a leads");
    assert_eq!((leader.info.as_deref(), leader.term), (Some("a:8080"), first.term()));
    assert!(leader.expires_at.is_some());
    assert!(!format!("{leader:?}").contains(a.owner()), "the candidate string is never shown");
    assert!(matches!(b.election(&name).wait(Duration::ZERO).campaign("b").await, Err(Error::NotAcquired)));

    let second = tokio::spawn({
        let election = b.election(&name).ttl(Duration::from_secs(10));
        async move { election.campaign("b:8080").await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let term = first.term();
    assert!(first.resign().await.unwrap());
    let second = within(Duration::from_secs(5), "b takes over", second).await.unwrap().unwrap();
    assert!(second.term() > term, "terms grow: {} after {term}", second.term());
    let leader = b.election(&name).leader().await.unwrap().expect("b leads");
    assert_eq!((leader.info.as_deref(), leader.term), (Some("b:8080"), second.term()));
    assert!(second.resign().await.unwrap());
    assert!(b.election(&name).leader().await.unwrap().is_none(), "nobody leads");
}

#[tokio::test]
async fn a_force_released_leadership_fires_lost() {
    let name = key("prim_election_lost", "e");
    let lead =
        client().election(&name).ttl(Duration::from_millis(1500)).campaign_without_info().await.unwrap();
    assert_eq!(client().election(&name).leader().await.unwrap().unwrap().info, None);
    assert!(admin().await.force_release(&name).await.unwrap());
    within(Duration::from_secs(3), "lost fires for a deposed leader", lead.lost().cancelled()).await;
    assert!(!lead.is_leading());
}

/// The next leader `changes` yields (within a few seconds, and not an error).
async fn next(changes: &mut dlock_client::LeaderChanges) -> Option<dlock_client::Leader> {
    within(Duration::from_secs(5), "a change is observed", changes.next()).await.expect("not ended").unwrap()
}

#[tokio::test]
async fn observe_yields_each_change_of_leader() {
    let name = key("prim_observe", "e");
    let watcher = client();
    let mut changes = watcher.election(&name).observe().await.unwrap();
    assert_eq!(next(&mut changes).await, None, "nobody leads at first");
    let lead = client().election(&name).campaign("first").await.unwrap();
    let seen = next(&mut changes).await.expect("the new leader");
    assert_eq!((seen.info.as_deref(), seen.term), (Some("first"), lead.term()));
    assert!(lead.resign().await.unwrap());
    assert_eq!(next(&mut changes).await, None, "the resignation");
    // A leader whose ttl runs out unrenewed is announced by the server, not found by polling.
    let lapsing = client().election(&name).ttl(SECOND).campaign("lapsing").await.unwrap();
    assert_eq!(next(&mut changes).await.map(|l| l.term), Some(lapsing.term()));
    drop(lapsing); // resigns in the background
    assert_eq!(next(&mut changes).await, None);
}

#[tokio::test]
async fn leader_changes_are_a_stream() {
    use futures_util::StreamExt;

    let name = key("prim_observe_stream", "e");
    let changes = client().election(&name).observe().await.unwrap();
    // Through the futures adapters: only the terms, as they come.
    let mut terms = changes.map(|change| change.map(|leader| leader.map(|l| l.term)));
    let mut next = async || {
        within(Duration::from_secs(5), "a change is streamed", StreamExt::next(&mut terms))
            .await
            .expect("the stream goes on")
            .expect("no error")
    };
    assert_eq!(next().await, None, "nobody leads at first");
    let lead = client().election(&name).campaign("streamed").await.unwrap();
    assert_eq!(next().await, Some(lead.term()));
    assert!(lead.resign().await.unwrap());
    assert_eq!(next().await, None, "the resignation");
}

#[tokio::test]
async fn observe_is_unsupported_without_a_listener() {
    let port = Cluster::shared().port();
    let behind_pooler =
        Client::builder(&format!("host=127.0.0.1 port={port} user=postgres dlock_pooler=transaction"))
            .build()
            .unwrap();
    let err = behind_pooler.election("prim_observe_pooler").observe().await.unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err:?}");
}

#[tokio::test]
async fn a_lock_delay_holds_an_expired_key_back_but_not_a_released_one() {
    let k = key("prim_lock_delay", "k");
    let client = client();
    let released = client.lock(&k).lock_delay(Duration::from_secs(60)).acquire().await.unwrap();
    assert!(released.release().await.unwrap());
    assert!(free_for_others(&k).await, "a release frees the key at once");

    client
        .lock(&k)
        .ttl(SECOND)
        .watchdog(false)
        .lock_delay(Duration::from_secs(60))
        .acquire()
        .await
        .unwrap()
        .leak();
    eventually(Duration::from_secs(5), "the lease expires", || async { holders(&k).await == 0 }).await;
    assert!(!free_for_others(&k).await, "held back for the lock-delay after its expiry");
    assert!(!client.wait_free(&k, Duration::ZERO).await.unwrap());
}

#[tokio::test]
async fn wait_free_answers_once_the_key_is_free_without_taking_it() {
    let k = key("prim_wait_free", "k");
    let client = client();
    assert!(client.wait_free(&k, Duration::ZERO).await.unwrap(), "a free key");
    let holder = client.lock(&k).acquire().await.unwrap();
    let other = self::client();
    assert!(!other.wait_free(&k, Duration::from_millis(300)).await.unwrap(), "the wait elapses");
    let waiting = tokio::spawn({
        let (other, k) = (other.clone(), k.clone());
        async move { other.wait_free(&k, Duration::from_secs(10)).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(holder.release().await.unwrap());
    assert!(within(Duration::from_secs(5), "woken by the release", waiting).await.unwrap().unwrap());
    assert!(free_for_others(&k).await, "waiting took nothing");
}
