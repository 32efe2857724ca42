//! The version 2 primitives across sessions, where one session's answer depends on what others
//! do at the same time: fairness across modes with TTL leases (the isolation specs use
//! session-bound ones), the semaphore cap and all-or-nothing multi-key grants under concurrent
//! load, election terms across resignation, expiry and session end, and lock-delay only after an
//! expiry. Timings are never asserted; where time matters, the server's own timestamps are
//! compared (a grant after a lock-delay is not earlier than the expiry plus the delay).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::time::Duration;

use dlock_tests::{Cluster, Session, eventually, expect_sqlstate, key, owner, wait_for_waiters, within};
use tokio_postgres::error::SqlState;

fn clusters() -> [&'static Cluster; 2] {
    [Cluster::shared(), Cluster::shared_named("preloaded", &["shared_preload_libraries = 'dlock'"])]
}

/// `dlock_acquire_shared(key, owner, ttl, wait, max_holders)`; `None` is SQL NULL.
async fn shared(
    s: &Session,
    key: &str,
    owner: &str,
    ttl: Option<&str>,
    wait: Option<&str>,
    max_holders: Option<i32>,
) -> Option<i64> {
    s.query_one(
        "SELECT dlock_acquire_shared($1, $2, $3::text::interval, $4::text::interval, $5)",
        &[&key, &owner, &ttl, &wait, &max_holders],
    )
    .await
    .unwrap()
    .get(0)
}

/// `dlock_acquire_all(keys, owner, ttl, wait)`.
async fn acquire_all(s: &Session, keys: &[String], owner: &str, wait: &str) -> Option<Vec<i64>> {
    s.query_one("SELECT dlock_acquire_all($1, $2, '1 minute', $3::text::interval)", &[&keys, &owner, &wait])
        .await
        .unwrap()
        .get(0)
}

/// `dlock_campaign(election, candidate, ttl, info, wait)` with info `'node ' || name`, where
/// the candidate is `owner(T, name)`: the term, or `None`.
async fn campaign(
    s: &Session,
    election: &str,
    candidate: &str,
    ttl: Option<&str>,
    wait: Option<&str>,
) -> Option<i64> {
    s.query_one(
        "SELECT dlock_campaign($1, $2, $3::text::interval, 'node ' || split_part($2, ':', 2), $4::text::interval)",
        &[&election, &candidate, &ttl, &wait],
    )
    .await
    .unwrap()
    .get(0)
}

/// `dlock_leader(election)`: the leader's info and term, if anyone leads.
async fn leader(s: &Session, election: &str) -> Option<(Option<String>, i64)> {
    s.query_opt("SELECT info, term FROM dlock_leader($1)", &[&election])
        .await
        .unwrap()
        .map(|row| (row.get(0), row.get(1)))
}

/// The owners `dlock_locks` shows on `key`, sorted.
async fn holders(s: &Session, key: &str) -> Vec<String> {
    let rows = s.query("SELECT owner FROM dlock_locks WHERE key = $1 ORDER BY owner", &[&key]).await.unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

#[tokio::test]
async fn a_waiting_writer_holds_back_later_readers_and_readers_at_the_head_are_granted_together() {
    const T: &str = "fair_modes";
    for cluster in clusters() {
        let k = key(T, "k");
        let observer = cluster.connect().await;
        // A reader holds the key; a writer waits for it; then two readers arrive.
        let r0 = cluster.connect().await;
        shared(&r0, &k, &owner(T, "r0"), Some("1 minute"), Some("0"), None).await.expect("granted");
        let writer =
            cluster.connect().await.spawn_acquire(&k, &owner(T, "w"), Some("1 minute"), Some("30 seconds"));
        wait_for_waiters(&observer, &k, 1).await;
        let mut readers = Vec::new();
        for name in ["r1", "r2"] {
            let s = cluster.connect().await;
            let (k, o) = (k.clone(), owner(T, name));
            readers.push(tokio::spawn(async move {
                let fence = shared(&s, &k, &o, Some("1 minute"), Some("30 seconds"), None).await;
                (fence, s)
            }));
        }
        wait_for_waiters(&observer, &k, 3).await;
        // The key is held only shared, yet a reader's try does not pass the waiting writer.
        let late = cluster.connect().await;
        assert_eq!(shared(&late, &k, &owner(T, "late"), Some("1 minute"), Some("0"), None).await, None);
        assert_eq!(holders(&observer, &k).await, vec![owner(T, "r0")], "nobody passed the writer");

        // The reader leaves: the writer, first in line, gets the key; the readers still wait.
        assert!(r0.release(&k, &owner(T, "r0")).await.unwrap());
        let writer = within(Duration::from_secs(10), "the writer", writer).await.unwrap();
        let w_fence = writer.result.unwrap().expect("the writer is granted first");
        assert_eq!(holders(&observer, &k).await, vec![owner(T, "w")]);
        assert!(readers.iter().all(|r| !r.is_finished()), "readers wait for the writer");

        // The writer leaves: both readers, consecutive at the head, hold the key together.
        assert!(writer.session.release(&k, &owner(T, "w")).await.unwrap());
        let mut fences = Vec::new();
        for reader in readers {
            let (fence, s) = within(Duration::from_secs(10), "a reader", reader).await.unwrap();
            fences.push(fence.expect("granted after the writer"));
            drop(s);
        }
        assert!(
            fences.iter().all(|f| *f > w_fence),
            "readers' fences {fences:?} above the writer's {w_fence}"
        );
        assert_eq!(holders(&observer, &k).await, vec![owner(T, "r1"), owner(T, "r2")], "granted together");
        for name in ["r1", "r2"] {
            assert!(observer.release(&k, &owner(T, name)).await.unwrap());
        }
    }
}

#[tokio::test]
async fn a_semaphore_of_another_size_is_refused_at_once_while_others_wait() {
    const T: &str = "semaphore_size_queue";
    for cluster in clusters() {
        let k = key(T, "k");
        let (holder, waiter, newcomer) =
            (cluster.connect().await, cluster.connect().await, cluster.connect().await);
        assert!(shared(&holder, &k, &owner(T, "h"), Some("1 minute"), None, Some(1)).await.is_some());
        let queued = {
            let k = k.clone();
            tokio::spawn(async move {
                shared(&waiter, &k, &owner(T, "w"), Some("1 minute"), Some("60 seconds"), Some(1)).await
            })
        };
        wait_for_waiters(&holder, &k, 1).await;
        for size in [Some(3), None] {
            let refused = newcomer
                .query_one(
                    "SELECT dlock_acquire_shared($1, $2, '1 minute', '10 seconds', $3)",
                    &[&k, &owner(T, "n"), &size],
                )
                .await;
            expect_sqlstate(
                refused,
                &SqlState::INVALID_PARAMETER_VALUE,
                "another size while a waiter queues",
            );
        }
        // The newcomer left nothing behind: the waiter is next.
        assert!(holder.release(&k, &owner(T, "h")).await.unwrap());
        let fence = within(Duration::from_secs(30), "the queued waiter", queued).await.unwrap();
        assert!(fence.is_some());
        assert!(holder.force_release(&k).await.unwrap());
    }
}

#[tokio::test]
async fn a_semaphore_never_has_more_holders_than_permits_under_concurrency() {
    const T: &str = "semaphore_cap";
    const PERMITS: i32 = 3;
    const WORKERS: usize = 10;
    const ROUNDS: usize = 8;
    for cluster in clusters() {
        let k = Arc::new(key(T, "k"));
        let most = Arc::new(AtomicI64::new(0));
        let grants = Arc::new(AtomicUsize::new(0));
        let mut workers = Vec::new();
        for w in 0..WORKERS {
            let s = cluster.connect().await;
            let (k, most, grants) = (k.clone(), most.clone(), grants.clone());
            workers.push(tokio::spawn(async move {
                let o = owner(T, &format!("w{w}"));
                for round in 0..ROUNDS {
                    // Some permits session-bound, some with a TTL: both kinds count.
                    let ttl = if (w + round) % 2 == 0 { None } else { Some("1 minute") };
                    let fence = shared(&s, &k, &o, ttl, Some("60 seconds"), Some(PERMITS)).await;
                    assert!(fence.is_some(), "worker {w} round {round}: no permit within 60 s");
                    grants.fetch_add(1, Ordering::SeqCst);
                    // Counted by the holder itself, while it holds its permit.
                    let count: i64 = s
                        .query_one("SELECT count(*) FROM dlock_locks WHERE key = $1", &[&*k])
                        .await
                        .unwrap()
                        .get(0);
                    most.fetch_max(count, Ordering::SeqCst);
                    assert!(count <= i64::from(PERMITS), "{count} holders of a semaphore of {PERMITS}");
                    tokio::time::sleep(Duration::from_millis(2 + (w as u64 * 3) % 7)).await;
                    assert!(s.release(&k, &o).await.unwrap());
                }
            }));
        }
        for worker in workers {
            within(Duration::from_secs(120), "a semaphore worker", worker).await.unwrap();
        }
        assert_eq!(grants.load(Ordering::SeqCst), WORKERS * ROUNDS);
        let most = most.load(Ordering::SeqCst);
        assert!((1..=i64::from(PERMITS)).contains(&most), "most holders seen: {most}");
        println!("semaphore of {PERMITS}: {} grants, at most {most} holders seen at once", WORKERS * ROUNDS);
        assert!(holders(&cluster.connect().await, &k).await.is_empty());
    }
}

#[tokio::test]
async fn acquire_all_is_never_seen_partially_held_and_never_deadlocks_whatever_the_key_order() {
    const T: &str = "all_or_nothing";
    const WORKERS: usize = 6;
    const ROUNDS: usize = 10;
    let cluster = Cluster::shared();
    let keys: Vec<String> = (0..4).map(|i| key(T, &format!("k{i}"))).collect();
    let done = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for w in 0..WORKERS {
        let s = cluster.connect().await;
        // Every worker lists the keys in another order: rotated, and reversed for odd ones.
        let mut mine = keys.clone();
        mine.rotate_left(w % keys.len());
        if w % 2 == 1 {
            mine.reverse();
        }
        let done = done.clone();
        workers.push(tokio::spawn(async move {
            let o = owner(T, &format!("w{w}"));
            for round in 0..ROUNDS {
                let fences = acquire_all(&s, &mine, &o, "60 seconds").await;
                let fences =
                    fences.unwrap_or_else(|| panic!("worker {w} round {round}: not granted in 60 s"));
                assert_eq!(fences.len(), mine.len());
                // Each fence is the one its key's lease carries, in the order given.
                for (k, fence) in mine.iter().zip(&fences) {
                    assert!(s.holds(k, *fence).await.unwrap(), "{k} holds fence {fence}");
                }
                assert_eq!(s.release_all(&o).await.unwrap(), mine.len() as i32);
            }
            done.fetch_add(1, Ordering::SeqCst);
        }));
    }
    // Meanwhile another session looks: every snapshot shows none of the keys held, or all of
    // them by one owner.
    let observer = cluster.connect().await;
    let mut looks = 0usize;
    let mut all_held_seen = 0usize;
    while done.load(Ordering::SeqCst) < WORKERS {
        let rows =
            observer.query("SELECT key, owner FROM dlock_locks WHERE key = ANY($1)", &[&keys]).await.unwrap();
        let owners: BTreeSet<String> = rows.iter().map(|r| r.get(1)).collect();
        assert!(
            rows.is_empty() || (rows.len() == keys.len() && owners.len() == 1),
            "a partial or mixed grant seen: {:?}",
            rows.iter().map(|r| (r.get::<_, String>(0), r.get::<_, String>(1))).collect::<Vec<_>>()
        );
        looks += 1;
        all_held_seen += usize::from(!rows.is_empty());
        assert!(looks < 1_000_000, "the workers never finished");
    }
    for worker in workers {
        within(Duration::from_secs(120), "an acquire_all worker (a deadlock?)", worker).await.unwrap();
    }
    println!(
        "acquire_all: {} grants of {} keys, {looks} looks ({all_held_seen} saw a set held)",
        WORKERS * ROUNDS,
        keys.len()
    );
}

#[tokio::test]
async fn terms_grow_across_resignation_expiry_and_session_end_and_the_leader_hides_the_candidate() {
    const T: &str = "terms";
    let cluster = Cluster::shared();
    let e = key(T, "e");
    let observer = cluster.connect().await;
    let mut listener = cluster.listen().await;
    let channel = listener.watch(&e).await.unwrap();
    let mut terms = Vec::new();

    // A leads, bound to its session; B campaigns and waits.
    let a = cluster.connect().await;
    terms.push(campaign(&a, &e, &owner(T, "a"), None, Some("0")).await.expect("a leads"));
    assert_eq!(listener.next(Duration::from_secs(5)).await, Some(channel.clone()), "a new leader");
    let b = cluster.connect().await;
    let (e2, ob) = (e.clone(), owner(T, "b"));
    let b_campaign = tokio::spawn(async move {
        let term = campaign(&b, &e2, &ob, Some("1 minute"), Some("30 seconds")).await;
        (term, b)
    });
    wait_for_waiters(&observer, &e, 1).await;

    // A's session ends: B leads with a larger term.
    drop(a);
    let (term, b) = within(Duration::from_secs(20), "b's campaign", b_campaign).await.unwrap();
    terms.push(term.expect("b leads once a's session ended"));
    assert_eq!(leader(&observer, &e).await, Some((Some("node b".to_string()), terms[1])));
    listener.drain(Duration::from_millis(200)).await;

    // B renews (the term stays), then resigns: C, waiting, leads with a larger term.
    assert!(b.renew(&e, &owner(T, "b"), Some("1 minute")).await.unwrap().is_some());
    assert_eq!(leader(&observer, &e).await.map(|l| l.1), Some(terms[1]), "renewing keeps the term");
    let c = cluster.connect().await;
    let (e3, oc) = (e.clone(), owner(T, "c"));
    let c_campaign =
        tokio::spawn(async move { campaign(&c, &e3, &oc, Some("1 second"), Some("30 seconds")).await });
    wait_for_waiters(&observer, &e, 1).await;
    assert!(b.release(&e, &owner(T, "b")).await.unwrap());
    terms.push(within(Duration::from_secs(10), "c's campaign", c_campaign).await.unwrap().expect("c leads"));
    assert!(listener.next(Duration::from_secs(5)).await.is_some(), "the resignation is announced");

    // C's lease expires: D, waiting, leads with a larger term.
    let d = cluster.connect().await;
    terms
        .push(campaign(&d, &e, &owner(T, "d"), Some("1 minute"), Some("30 seconds")).await.expect("d leads"));
    assert!(terms.windows(2).all(|w| w[1] > w[0]), "terms only grow: {terms:?}");
    let (info, term) = leader(&observer, &e).await.expect("d leads");
    assert_eq!((info.as_deref(), term), (Some("node d"), terms[3]));

    // dlock_leader shows info, term, since and expires_at, and never the candidate string, to
    // any role.
    observer.batch_execute("DROP ROLE IF EXISTS terms_reader; CREATE ROLE terms_reader LOGIN").await.unwrap();
    let reader = cluster.connect_as("terms_reader").await;
    let row = reader.query_one("SELECT * FROM dlock_leader($1)", &[&e]).await.unwrap();
    let columns: Vec<&str> = row.columns().iter().map(|c| c.name()).collect();
    assert_eq!(columns, ["info", "term", "since", "expires_at"]);
    let shown: String =
        reader.query_one("SELECT l::text FROM dlock_leader($1) AS l", &[&e]).await.unwrap().get(0);
    assert!(!shown.contains(&owner(T, "d")), "the candidate string is shown: {shown}");
    assert_eq!(row.get::<_, i64>(1), terms[3]);
    drop(reader);
    assert!(d.release(&e, &owner(T, "d")).await.unwrap());
    observer.batch_execute("DROP ROLE terms_reader").await.unwrap();
}

#[tokio::test]
async fn lock_delay_holds_a_key_back_after_an_expiry_and_never_after_a_release() {
    const T: &str = "lock_delay";
    for cluster in clusters() {
        let (a, b) = (cluster.connect().await, cluster.connect().await);
        let k = key(T, "k");
        let acquire_delayed = "SELECT dlock_acquire($1, $2, $3::text::interval, '0', '3 seconds')";
        // Released: the next owner is granted at once.
        let f1: Option<i64> =
            a.query_one(acquire_delayed, &[&k, &owner(T, "a"), &"1 minute"]).await.unwrap().get(0);
        assert!(f1.is_some());
        assert!(a.release(&k, &owner(T, "a")).await.unwrap());
        assert!(
            b.try_acquire(&k, &owner(T, "b"), "1 minute").await.unwrap().is_some(),
            "no delay after a release"
        );
        assert!(b.release(&k, &owner(T, "b")).await.unwrap());

        // Expired: nobody is granted before expires_at + lock_delay, on the server's clock.
        let f2: Option<i64> =
            a.query_one(acquire_delayed, &[&k, &owner(T, "a"), &"300 milliseconds"]).await.unwrap().get(0);
        let f2 = f2.expect("granted");
        let expires_at: f64 = a
            .query_one("SELECT extract(epoch FROM expires_at)::float8 FROM dlock_locks WHERE key = $1", &[&k])
            .await
            .unwrap()
            .get(0);
        eventually(Duration::from_secs(10), "the lease expired", || async {
            b.lease(&k).await.unwrap().is_none()
        })
        .await;
        assert!(!b.holds(&k, f2).await.unwrap(), "the expired fence no longer holds");
        let tried_at = b.server_now().await.unwrap();
        let refused = b.try_acquire(&k, &owner(T, "b"), "1 minute").await.unwrap();
        if tried_at < expires_at + 3.0 {
            assert_eq!(refused, None, "a try during the lock-delay is refused");
        }
        let f3 = b.acquire(&k, &owner(T, "b"), Some("1 minute"), Some("30 seconds")).await.unwrap();
        assert!(f3.expect("granted after the delay") > f2);
        let acquired_at: f64 = b
            .query_one(
                "SELECT extract(epoch FROM acquired_at)::float8 FROM dlock_locks WHERE key = $1",
                &[&k],
            )
            .await
            .unwrap()
            .get(0);
        assert!(
            acquired_at >= expires_at + 3.0,
            "granted at {acquired_at}, before the expiry {expires_at} plus the 3 s delay"
        );
        println!("lock-delay: granted {:.3} s after the expiry (delay 3 s)", acquired_at - expires_at);
        assert!(b.release(&k, &owner(T, "b")).await.unwrap());
    }
}
