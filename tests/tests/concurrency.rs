//! Many sessions on one key: exactly one winner per race, mutual exclusion among waiters,
//! and fences that only grow.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_tests::{Cluster, Session, key, owner, within};
use futures::future::try_join_all;
use tokio::sync::Barrier;

/// Opens `n` sessions and prepares the acquire statement on each (so every race starts with
/// one round trip per session, not a prepare).
async fn sessions(n: usize, test: &str) -> Vec<Session> {
    let cluster = Cluster::shared();
    let mut sessions = Vec::with_capacity(n);
    for i in 0..n {
        let s = cluster.connect().await;
        let (warm_key, warm_owner) = (key(test, &format!("warm-{i}")), owner(test, "warm"));
        s.try_acquire(&warm_key, &warm_owner, "10s").await.unwrap().unwrap();
        s.acquire(&warm_key, &warm_owner, Some("10s"), Some("1s")).await.unwrap().unwrap();
        assert_eq!(s.release_all(&warm_owner).await.unwrap(), 1);
        sessions.push(s);
    }
    sessions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_tries_on_a_free_key_have_exactly_one_winner() {
    const T: &str = "concurrent_tries_on_a_free_key_have_exactly_one_winner";
    const SESSIONS: usize = 8;
    const ROUNDS: usize = 100;
    let k = key(T, "k");
    let barrier = Arc::new(Barrier::new(SESSIONS));

    let mut tasks = Vec::new();
    for (i, s) in sessions(SESSIONS, T).await.into_iter().enumerate() {
        let (barrier, k, o) = (barrier.clone(), k.clone(), owner(T, &format!("s{i}")));
        tasks.push(tokio::spawn(async move {
            // Per round: (fence if won, release answer if won).
            let mut outcomes = Vec::with_capacity(ROUNDS);
            for _ in 0..ROUNDS {
                barrier.wait().await; // the key is free: everyone tries at once
                let won = s.try_acquire(&k, &o, "10s").await.expect("try_acquire");
                barrier.wait().await; // everyone has tried: the winner may release
                let released = match won {
                    Some(_) => Some(s.release(&k, &o).await.expect("release")),
                    None => None,
                };
                outcomes.push((won, released));
            }
            outcomes
        }));
    }
    let per_session = within(Duration::from_secs(120), "the races", try_join_all(tasks))
        .await
        .expect("a racing session failed");

    let mut last_fence = 0;
    for round in 0..ROUNDS {
        let winners: Vec<(usize, i64, Option<bool>)> = per_session
            .iter()
            .enumerate()
            .filter_map(|(i, outcomes)| outcomes[round].0.map(|f| (i, f, outcomes[round].1)))
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: winners (session, fence) {winners:?}");
        let (session, fence, released) = winners[0];
        assert_eq!(released, Some(true), "round {round}: the winner (session {session}) releases");
        assert!(fence > last_fence, "round {round}: fence {fence} after {last_fence}");
        last_fence = fence;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_sessions_take_turns_one_at_a_time() {
    const T: &str = "waiting_sessions_take_turns_one_at_a_time";
    const SESSIONS: usize = 8;
    const TURNS: usize = 10;
    let k = key(T, "k");
    let inside = Arc::new(AtomicBool::new(false));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let grants = Arc::new(Mutex::new(Vec::new()));

    let mut tasks = Vec::new();
    for (i, s) in sessions(SESSIONS, T).await.into_iter().enumerate() {
        let (k, o) = (k.clone(), owner(T, &format!("s{i}")));
        let (inside, overlaps, grants) = (inside.clone(), overlaps.clone(), grants.clone());
        tasks.push(tokio::spawn(async move {
            for turn in 0..TURNS {
                let fence = s.acquire(&k, &o, Some("30s"), Some("20s")).await.expect("acquire");
                let fence = fence.unwrap_or_else(|| panic!("session {i} turn {turn}: wait ran out"));
                if inside.swap(true, Ordering::SeqCst) {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                grants.lock().unwrap().push(fence);
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.store(false, Ordering::SeqCst);
                assert!(s.release(&k, &o).await.expect("release"), "session {i} releases");
            }
        }));
    }
    within(Duration::from_secs(60), "the turns", try_join_all(tasks))
        .await
        .expect("a waiting session failed");

    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "two sessions held the key at once");
    let grants = grants.lock().unwrap();
    assert_eq!(grants.len(), SESSIONS * TURNS);
    assert!(grants.windows(2).all(|w| w[0] < w[1]), "fences must grow grant after grant: {grants:?}");
}
