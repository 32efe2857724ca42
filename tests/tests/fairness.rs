//! Fair waiting: waiters are granted one at a time in arrival order, newcomers (tries and waits
//! alike) never barge past them, the holder's own reentry never queues, and a waiter that leaves
//! (cancelled, timed out) never holds up the ones behind it. Every way a key becomes free hands
//! it to the head of the queue promptly — but never before the freeing commits.
//!
//! The waiters of a key line up for its *queue lock* in PostgreSQL's lock manager (an advisory
//! lock whose `pg_locks.objsubid` is 0x6b03): the holder of that lock is the head of the queue,
//! the sessions blocked on it are the rest. Some tests look at it through `pg_locks`.
//!
//! Every test runs twice: on the binary's shared cluster (dlock loaded on first use) and on one
//! started with `shared_preload_libraries = 'dlock'`. Timings are asserted loosely.

use std::time::{Duration, Instant};

use dlock_tests::{
    Attempt, Cluster, Error, NoTls, Session, SqlState, eventually, expect_sqlstate, finish, key, owner,
    sql_edition, wait_for_waiters, within,
};
use tokio::task::JoinHandle;

/// The most a grant may lag behind the event that freed the key (generous on purpose).
const GRANT_LAG: Duration = Duration::from_secs(2);
/// How long a test waits for a spawned waiter before failing instead of hanging.
const LIMIT: Duration = Duration::from_secs(15);
/// A `wait = 0` try (or the holder's reentry) must answer well within this.
const AT_ONCE: Duration = Duration::from_secs(1);
/// `pg_locks.objsubid` (lock tag field 4) of dlock's queue locks.
const QUEUE_LOCK_SPACE: i16 = 0x6b03;

/// Runs each named `async fn(&Cluster)` as two tests: `default_cluster::<name>` on the shared
/// cluster and `preload_cluster::<name>` on the cluster with `shared_preload_libraries`.
macro_rules! on_both_clusters {
    ($($test:ident),+ $(,)?) => {
        mod default_cluster {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(dlock_tests::Cluster::shared()).await;
                }
            )+
        }
        mod preload_cluster {
            $(
                #[tokio::test]
                async fn $test() {
                    super::$test(super::preloading_cluster()).await;
                }
            )+
        }
    };
}

on_both_clusters!(
    fifo_order_of_50_waiters_is_their_arrival_order,
    a_try_does_not_barge_past_queued_waiters,
    the_holder_reentry_never_queues,
    cancelled_waiters_in_the_middle_do_not_block_the_rest,
    a_timed_out_waiter_leaves_the_queue_at_once,
    no_waiter_wakes_before_the_release_commits,
    handoff_on_force_release_of_a_session_bound_lease,
    handoff_on_force_release_of_a_ttl_lease,
    a_head_on_a_session_bound_holder_ends_only_for_the_right_signals,
    handoff_on_termination_of_a_session_bound_holder,
    handoff_on_expiry_comes_right_after_the_old_expires_at,
    a_shortened_renew_wakes_the_head,
    waiters_count_is_exact,
    a_head_granted_in_a_transaction_block_is_no_waiter,
    a_session_waiting_for_a_key_it_took_under_another_owner_is_a_waiter,
    a_newcomer_behind_a_queue_reads_only_its_own_index_entries,
    a_session_bound_waiter_gets_a_lease_bound_to_its_own_session,
    a_prepared_hand_off_is_refused_and_the_key_still_passes_on,
    a_wait_undone_by_a_savepoint_leaves_its_queue,
    a_hand_off_undone_by_a_savepoint_grants_nothing,
);

/// The cluster of this binary that loads dlock at server start.
/// Whether the session's server preloads dlock (and so hands keys to waiters directly).
/// (Never in the SQL edition: it has no library, its heads take keys themselves.)
async fn preloaded(session: &Session) -> bool {
    if sql_edition() {
        return false;
    }
    let preload: String = session.query_one("SHOW shared_preload_libraries", &[]).await.unwrap().get(0);
    preload.split(',').any(|l| l.trim() == "dlock")
}

fn preloading_cluster() -> &'static Cluster {
    Cluster::shared_named(
        "fairness-preload",
        &["shared_preload_libraries = 'dlock'", "max_prepared_transactions = 4"],
    )
}

/// The second cluster really loads dlock at server start (so both configurations are covered).
#[tokio::test]
async fn the_preload_cluster_preloads_dlock() {
    let session = preloading_cluster().connect().await;
    let preload: String = session.query_one("SHOW shared_preload_libraries", &[]).await.unwrap().get(0);
    assert_eq!(preload, "dlock");
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The outcome of a waiter that releases its lease as soon as it is granted.
struct Taken {
    /// What `dlock_acquire` answered.
    result: Result<Option<i64>, Error>,
    /// When the answer arrived.
    answered_at: Instant,
    session: Session,
}

/// Runs `dlock_acquire(key, owner, '30s', wait)` in a task of its own and, when granted,
/// releases at once (so the next in line can be granted).
fn spawn_take_and_release(session: Session, key: &str, owner: &str, wait: Option<&str>) -> JoinHandle<Taken> {
    let (key, owner, wait) = (key.to_string(), owner.to_string(), wait.map(str::to_string));
    tokio::spawn(async move {
        let result = session.acquire(&key, &owner, Some("30s"), wait.as_deref()).await;
        let answered_at = Instant::now();
        if let Ok(Some(fence)) = result {
            let released = session.release(&key, &owner).await.expect("release after the grant");
            assert!(released, "{owner} could not release {key:?} (fence {fence}) right after its grant");
        }
        Taken { result, answered_at, session }
    })
}

async fn finish_taken(task: JoinHandle<Taken>, what: &str) -> Taken {
    within(LIMIT, what, task).await.unwrap_or_else(|e| panic!("{what}: the waiting task failed: {e}"))
}

/// The queue locks (any key) held or awaited by the sessions `pids`: (pid, granted), by pid.
/// The granted one is the head of its key's queue.
/// (In the SQL edition a queue lock is the advisory lock on `hashtextextended(key, 7632)`, of
/// the keys in the lease table: `dlock_internal.queue_lock`.)
async fn queue_locks(observer: &Session, pids: &[i32]) -> Vec<(i32, bool)> {
    let rows = if sql_edition() {
        observer
            .query(
                "SELECT g.pid, g.granted FROM pg_catalog.pg_locks AS g \
                  WHERE g.locktype = 'advisory' AND g.objsubid = 1 AND g.mode = 'ExclusiveLock' \
                    AND g.pid = ANY($1) \
                    AND (g.classid::int8 << 32 | g.objid::int8) IN \
                        (SELECT hashtextextended(l.key COLLATE \"C\", 7632) FROM dlock_internal.lease AS l) \
                  ORDER BY g.pid",
                &[&pids],
            )
            .await
    } else {
        observer
            .query(
                "SELECT pid, granted FROM pg_catalog.pg_locks \
                 WHERE locktype = 'advisory' AND objsubid = $1::int2 AND pid = ANY($2) ORDER BY pid",
                &[&QUEUE_LOCK_SPACE, &pids],
            )
            .await
    }
    .expect("read pg_locks");
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// `pg_stat_activity.wait_event_type` of backend `pid`.
async fn wait_event_type(observer: &Session, pid: i32) -> Option<String> {
    observer
        .query_opt("SELECT wait_event_type FROM pg_catalog.pg_stat_activity WHERE pid = $1", &[&pid])
        .await
        .expect("read pg_stat_activity")
        .and_then(|row| row.get(0))
}

/// Waits until the head `pid` sleeps on its latch (`wait_event_type = 'Extension'`; in the SQL
/// edition, between two looks: `Timeout`, `PgSleep`), i.e. it has read the lease, found it busy,
/// and let go of the key lock.
async fn wait_until_sleeping(observer: &Session, pid: i32) {
    let sleeping = if sql_edition() { "Timeout" } else { "Extension" };
    eventually(Duration::from_secs(5), &format!("backend {pid} sleeping on its latch"), || async move {
        wait_event_type(observer, pid).await.as_deref() == Some(sleeping)
    })
    .await;
}

/// A backend stopped with SIGSTOP; continued (SIGCONT) when dropped, also when a test fails.
struct Stopped(i32);

impl Stopped {
    async fn stop(pid: i32) -> Stopped {
        // SAFETY: kill(2) with a plain signal number; the pid is a backend of our test cluster.
        let rc = unsafe { libc::kill(pid, libc::SIGSTOP) };
        assert_eq!(rc, 0, "SIGSTOP to backend {pid}: {}", std::io::Error::last_os_error());
        let stopped = Stopped(pid);
        eventually(Duration::from_secs(5), &format!("backend {pid} stopped"), || async move {
            process_state(pid) == Some('T')
        })
        .await;
        stopped
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: as above.
        unsafe {
            libc::kill(self.0, libc::SIGCONT);
        }
    }
}

/// The state letter of process `pid` in /proc/<pid>/stat.
fn process_state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// 50 waiters, each joining only once the previous one is visibly queued, are granted in
/// exactly that order after the holder releases: fences (strictly increasing per key) sorted
/// give the grant order.
async fn fifo_order_of_50_waiters_is_their_arrival_order(cluster: &Cluster) {
    const T: &str = "fifo_order_of_50_waiters_is_their_arrival_order";
    const N: usize = 50;
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();

    let mut sessions = Vec::with_capacity(N);
    for _ in 0..N {
        sessions.push(cluster.connect().await);
    }
    let mut waiters = Vec::with_capacity(N);
    for (i, session) in sessions.into_iter().enumerate() {
        waiters.push(spawn_take_and_release(session, &k, &owner(T, &format!("w{i:02}")), Some("30s")));
        wait_for_waiters(&observer, &k, i as i32 + 1).await;
    }
    assert!(waiters.iter().all(|w| !w.is_finished()), "all 50 wait while the key is held");

    assert!(holder.release(&k, &o).await.unwrap());
    let mut grants = Vec::with_capacity(N);
    for (i, waiter) in waiters.into_iter().enumerate() {
        let taken = finish_taken(waiter, &format!("waiter {i}")).await;
        let fence = taken.result.unwrap().unwrap_or_else(|| panic!("waiter {i} was not granted"));
        assert!(fence > held, "waiter {i}: fence {fence} after the holder's {held}");
        grants.push((fence, taken.answered_at, i));
    }
    grants.sort();
    let answered: Vec<Instant> = grants.iter().map(|&(_, at, _)| at).collect();
    assert!(answered.windows(2).all(|w| w[0] < w[1]), "answers arrive in the order of the grants");
    let fences: Vec<i64> = grants.iter().map(|&(f, _, _)| f).collect();
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "fences strictly increasing: {fences:?}");
    let order: Vec<usize> = grants.iter().map(|&(_, _, i)| i).collect();
    assert_eq!(order, (0..N).collect::<Vec<_>>(), "grant order (by fence) vs arrival order");
    assert_eq!(observer.lease(&k).await.unwrap(), None, "every waiter released: the key is free");
}

/// A newcomer never takes a key from under a queued waiter, even while the key is free and not
/// locked by anyone: the head is frozen (SIGSTOP) so that the window stays open. Its `wait = 0`
/// try answers NULL at once, its wait lines up behind; the head gets the key when it runs again.
/// Then, with nobody frozen, a third session tries in a loop across release and hand-off.
async fn a_try_does_not_barge_past_queued_waiters(cluster: &Cluster) {
    const T: &str = "a_try_does_not_barge_past_queued_waiters";
    let (holder, observer, third) =
        (cluster.connect().await, cluster.connect().await, cluster.connect().await);
    let (k, o, ow, o3) = (key(T, "k"), owner(T, "holder"), owner(T, "waiter"), owner(T, "third"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();

    let waiting = cluster.connect().await;
    let head_pid = waiting.pid();
    let head = waiting.spawn_acquire(&k, &ow, Some("30s"), Some("20s"));
    wait_for_waiters(&observer, &k, 1).await;
    wait_until_sleeping(&observer, head_pid).await;

    let late = cluster.connect().await;
    let late_pid = late.pid();
    let (late_task, resumed_at) = {
        let frozen = Stopped::stop(head_pid).await;
        assert!(holder.release(&k, &o).await.unwrap());
        // Preloaded, the release hands the key to the (frozen) head in its own transaction;
        // otherwise the key is free until the head runs again. Either way no one else gets it.
        let handed = observer.lease(&k).await.unwrap().map(|row| (row.owner, row.fence, row.holder_pid));
        if preloaded(&observer).await {
            let (owner, fence, pid) = handed.clone().expect("handed to the head");
            assert_eq!((owner.as_deref(), pid), (Some(ow.as_str()), Some(head_pid)), "handed to the head");
            assert!(fence > held);
        } else {
            assert_eq!(handed, None, "released: the key is free");
        }
        let unchanged =
            || async { observer.lease(&k).await.unwrap().map(|row| (row.owner, row.fence, row.holder_pid)) };
        assert_eq!(queue_locks(&observer, &[head_pid]).await, vec![(head_pid, true)], "the head is queued");

        let started = Instant::now();
        assert_eq!(third.try_acquire(&k, &o3, "30s").await.unwrap(), None, "wait = 0 try past a waiter");
        assert_eq!(
            third.acquire_default_wait(&k, &o3, Some("30s")).await.unwrap(),
            None,
            "default-wait try past a waiter"
        );
        assert!(started.elapsed() < AT_ONCE, "the tries answered after {:?}", started.elapsed());
        assert_eq!(unchanged().await, handed, "the tries took nothing");

        // A newcomer that may wait lines up behind the head instead of taking the free key.
        let late_task = late.spawn_acquire(&k, &owner(T, "late"), Some("30s"), Some("20s"));
        eventually(Duration::from_secs(5), "the late waiter queued behind the head", || async {
            queue_locks(&observer, &[head_pid, late_pid]).await == vec![(head_pid, true), (late_pid, false)]
                || late_task.is_finished()
        })
        .await;
        assert!(!late_task.is_finished(), "the late waiter took the key from under the frozen head");
        assert_eq!(unchanged().await, handed, "the late waiter took nothing");
        let resumed_at = Instant::now();
        drop(frozen);
        (late_task, resumed_at)
    };

    let attempt = finish(head, LIMIT, "head after it runs again").await;
    let granted = attempt.result.unwrap().expect("the queued head is granted");
    assert!(granted > held, "fence {granted} after {held}");
    assert!(attempt.finished_at.duration_since(resumed_at) < GRANT_LAG);
    let row = observer.lease(&k).await.unwrap().unwrap();
    assert_eq!((row.owner.as_deref(), row.fence, row.waiters), (Some(ow.as_str()), granted, 1));
    assert!(!late_task.is_finished(), "the late waiter still waits");
    assert!(attempt.session.release(&k, &ow).await.unwrap());
    let late_attempt = finish(late_task, LIMIT, "late waiter").await;
    let late_fence = late_attempt.result.unwrap().expect("the late waiter is granted next");
    assert!(late_fence > granted);
    assert!(late_attempt.session.release(&k, &owner(T, "late")).await.unwrap());

    // Unfrozen: a third session tries over and over while the holder releases and the key passes
    // to the waiter. Every try answers NULL.
    let mut waiting = attempt.session;
    for round in 0..3 {
        let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
        let waiter = waiting.spawn_acquire(&k, &ow, Some("30s"), Some("20s"));
        wait_for_waiters(&observer, &k, 1).await;
        let tries = async {
            let started = Instant::now();
            let mut tries = 0;
            while !waiter.is_finished() && started.elapsed() < LIMIT {
                let answer = third.try_acquire(&k, &o3, "30s").await.unwrap();
                assert_eq!(answer, None, "round {round}: try {tries} barged past the waiter");
                tries += 1;
            }
            tries
        };
        let (released, tries) = tokio::join!(holder.release(&k, &o), tries);
        assert!(released.unwrap());
        assert!(tries > 0);
        let attempt = finish(waiter, LIMIT, "waiter").await;
        let granted = attempt.result.unwrap().expect("the waiter is granted");
        assert!(granted > held);
        waiting = attempt.session;
        assert!(waiting.release(&k, &ow).await.unwrap());
    }
}

/// The holder's own acquire while others wait reenters at once — with `wait = 0` and with a
/// wait alike — with the same fence, and never joins the queue.
async fn the_holder_reentry_never_queues(cluster: &Cluster) {
    const T: &str = "the_holder_reentry_never_queues";
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(T, "waiter"), Some("30s"), Some("20s"));
    wait_for_waiters(&observer, &k, 1).await;

    let started = Instant::now();
    assert_eq!(holder.try_acquire(&k, &o, "30s").await.unwrap(), Some(held), "reentry with wait 0");
    assert!(started.elapsed() < AT_ONCE, "reentry (wait 0) answered after {:?}", started.elapsed());
    let row = observer.lease(&k).await.unwrap().unwrap();
    assert_eq!((row.fence, row.hold_count, row.waiters), (held, 2, 1));

    let started = Instant::now();
    assert_eq!(
        holder.acquire(&k, &o, Some("30s"), Some("10s")).await.unwrap(),
        Some(held),
        "reentry, wait 10s"
    );
    assert!(started.elapsed() < AT_ONCE, "reentry (wait 10s) answered after {:?}", started.elapsed());
    let row = observer.lease(&k).await.unwrap().unwrap();
    assert_eq!((row.fence, row.hold_count, row.waiters), (held, 3, 1));
    assert_eq!(queue_locks(&observer, &[holder.pid()]).await, vec![], "the holder is not in the queue");

    assert!(holder.release(&k, &o).await.unwrap());
    assert!(holder.release(&k, &o).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter waits while the holder keeps one hold");
    let released_at = Instant::now();
    assert!(holder.release(&k, &o).await.unwrap());
    let attempt = finish(waiter, LIMIT, "waiter after the last release").await;
    let granted = attempt.result.unwrap().expect("granted after the last hold is released");
    assert!(granted > held);
    assert!(attempt.finished_at.duration_since(released_at) < GRANT_LAG);
}

/// Five waiters in line; #2 (waiting without limit) and #3 (waiting 30 s) are cancelled: they
/// fail with 57014 and leave, and at the release #1, #4, #5 are granted in that order.
async fn cancelled_waiters_in_the_middle_do_not_block_the_rest(cluster: &Cluster) {
    const T: &str = "cancelled_waiters_in_the_middle_do_not_block_the_rest";
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();

    let mut cancels = Vec::new();
    let mut waiters = Vec::new();
    for i in 0..5 {
        let session = cluster.connect().await;
        cancels.push(session.cancel_token());
        let wait = if i == 1 { None } else { Some("30s") };
        waiters.push(Some(spawn_take_and_release(session, &k, &owner(T, &format!("w{}", i + 1)), wait)));
        wait_for_waiters(&observer, &k, i + 1).await;
    }

    for i in [1, 2] {
        cancels[i].cancel_query(NoTls).await.unwrap();
        let taken = finish_taken(waiters[i].take().unwrap(), &format!("cancelled waiter #{}", i + 1)).await;
        expect_sqlstate(taken.result, &SqlState::QUERY_CANCELED, &format!("cancelled waiter #{}", i + 1));
        // Once the session answers again, its cancelled call is fully cleaned up.
        taken.session.query_one("SELECT 1", &[]).await.expect("the cancelled session is usable");
    }
    assert_eq!(observer.waiters(&k).await.unwrap(), 3, "two of five waiters cancelled");
    assert!(waiters.iter().flatten().all(|w| !w.is_finished()), "the others still wait");

    let released_at = Instant::now();
    assert!(holder.release(&k, &o).await.unwrap());
    let mut grants = Vec::new();
    for i in [0, 3, 4] {
        let taken = finish_taken(waiters[i].take().unwrap(), &format!("waiter #{}", i + 1)).await;
        let fence = taken.result.unwrap().unwrap_or_else(|| panic!("waiter #{} was not granted", i + 1));
        assert!(fence > held);
        let lag = taken.answered_at.duration_since(released_at);
        assert!(lag < GRANT_LAG, "waiter #{} granted {lag:?} after the release", i + 1);
        grants.push((fence, i + 1));
    }
    grants.sort();
    let order: Vec<usize> = grants.iter().map(|&(_, n)| n).collect();
    assert_eq!(order, vec![1, 4, 5], "grant order (by fence) of the waiters left");
    assert_eq!(observer.lease(&k).await.unwrap(), None, "all released: the key is free");
}

/// A waiter whose wait ends answers NULL and is out of the queue by then: the one behind it is
/// the head at once and is granted promptly at the release.
async fn a_timed_out_waiter_leaves_the_queue_at_once(cluster: &Cluster) {
    const T: &str = "a_timed_out_waiter_leaves_the_queue_at_once";
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();

    let (first, second) = (cluster.connect().await, cluster.connect().await);
    let (first_pid, second_pid) = (first.pid(), second.pid());
    let started = Instant::now();
    let first = first.spawn_acquire(&k, &owner(T, "w1"), Some("30s"), Some("500ms"));
    wait_for_waiters(&observer, &k, 1).await;
    let second = second.spawn_acquire(&k, &owner(T, "w2"), Some("30s"), Some("30s"));
    wait_for_waiters(&observer, &k, 2).await;
    let mut line = vec![(first_pid, true), (second_pid, false)];
    line.sort();
    assert_eq!(queue_locks(&observer, &[first_pid, second_pid]).await, line, "#1 is the head, #2 behind");

    let timed_out = finish(first, LIMIT, "waiter #1 (wait 500ms)").await;
    assert_eq!(timed_out.result.unwrap(), None, "waiter #1's wait ends with NULL");
    let elapsed = timed_out.finished_at.duration_since(started);
    assert!(elapsed >= Duration::from_millis(500), "waiter #1 answered after {elapsed:?}");
    assert!(elapsed < Duration::from_millis(500) + GRANT_LAG, "waiter #1 answered after {elapsed:?}");
    assert_eq!(observer.waiters(&k).await.unwrap(), 1, "waiter #1 left the queue as it answered");
    assert_eq!(
        queue_locks(&observer, &[first_pid, second_pid]).await,
        vec![(second_pid, true)],
        "#2 is the head"
    );
    assert!(!second.is_finished(), "waiter #2 still waits");

    let released_at = Instant::now();
    assert!(holder.release(&k, &o).await.unwrap());
    let attempt = finish(second, LIMIT, "waiter #2").await;
    let granted = attempt.result.unwrap().expect("waiter #2 is granted at the release");
    assert!(granted > held);
    assert!(attempt.finished_at.duration_since(released_at) < GRANT_LAG);
}

/// A release inside a transaction wakes nobody: the head keeps waiting while it is open, and
/// after a ROLLBACK (the lease is back); it is granted only after a release COMMITs.
async fn no_waiter_wakes_before_the_release_commits(cluster: &Cluster) {
    const T: &str = "no_waiter_wakes_before_the_release_commits";
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(T, "waiter"), Some("30s"), Some("20s"));
    wait_for_waiters(&observer, &k, 1).await;

    holder.batch_execute("BEGIN").await.unwrap();
    assert!(holder.release(&k, &o).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter is granted while the release is uncommitted");

    holder.batch_execute("ROLLBACK").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter is granted after the release was rolled back");
    let row = observer.lease(&k).await.unwrap().unwrap();
    assert_eq!((row.owner.as_deref(), row.fence, row.waiters), (Some(o.as_str()), held, 1), "lease back");

    holder.batch_execute("BEGIN").await.unwrap();
    assert!(holder.release(&k, &o).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the waiter is granted while the release is uncommitted");
    let committed_at = Instant::now();
    holder.batch_execute("COMMIT").await.unwrap();
    let attempt = finish(waiter, LIMIT, "waiter after COMMIT").await;
    let granted = attempt.result.unwrap().expect("granted once the release commits");
    assert!(granted > held);
    assert!(attempt.finished_at >= committed_at);
    let lag = attempt.finished_at.duration_since(committed_at);
    assert!(lag < GRANT_LAG, "granted {lag:?} after the COMMIT");
}

/// A key held by a holder (with `ttl`; NULL: session-bound), and one waiter queued on it.
struct Queued {
    holder: Session,
    admin: Session,
    key: String,
    held: i64,
    waiter: JoinHandle<Attempt>,
}

async fn hold_and_queue(cluster: &Cluster, test: &str, ttl: Option<&str>) -> Queued {
    let (holder, admin) = (cluster.connect().await, cluster.connect().await);
    let k = key(test, "k");
    let held = holder.acquire(&k, &owner(test, "holder"), ttl, Some("0")).await.unwrap().unwrap();
    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(test, "waiter"), Some("30s"), Some("20s"));
    wait_for_waiters(&admin, &k, 1).await;
    Queued { holder, admin, key: k, held, waiter }
}

/// Asserts that `waiter` is granted, after `held` and within `GRANT_LAG` of `event_at`.
async fn granted_promptly(waiter: JoinHandle<Attempt>, held: i64, event_at: Instant, what: &str) -> i64 {
    let attempt = finish(waiter, LIMIT, what).await;
    let granted = attempt.result.unwrap().unwrap_or_else(|| panic!("{what}: not granted"));
    assert!(granted > held, "{what}: fence {granted} after {held}");
    let lag = attempt.finished_at.duration_since(event_at);
    assert!(lag < GRANT_LAG, "{what}: granted {lag:?} after the event");
    granted
}

async fn handoff_on_force_release_of_a_session_bound_lease(cluster: &Cluster) {
    const T: &str = "handoff_on_force_release_of_a_session_bound_lease";
    let q = hold_and_queue(cluster, T, None).await;
    let forced_at = Instant::now();
    assert!(q.admin.force_release(&q.key).await.unwrap());
    // The head waits in the lock manager on the old holder's binding, which stays in place: the
    // force release pokes it out, well before its wait slice (deadlock_timeout + 0.1 s) ends.
    let attempt = finish(q.waiter, LIMIT, "waiter after force release (session-bound)").await;
    let granted = attempt.result.unwrap().expect("waiter after force release (session-bound): granted");
    assert!(granted > q.held, "fence {granted} after {}", q.held);
    let lag = attempt.finished_at.duration_since(forced_at);
    assert!(lag < Duration::from_millis(500), "granted {lag:?} after the force release");
    eprintln!("head on a session-bound holder granted {lag:?} after the force release");
    assert!(!q.holder.release(&q.key, &owner(T, "holder")).await.unwrap(), "the old holder lost it");
}

/// A head waiting in the lock manager on a session-bound holder can be poked out by a force
/// release (SIGIO). A stray SIGIO (one that is not a force release) neither ends nor spoils its
/// wait, and a genuine cancel still cancels it.
async fn a_head_on_a_session_bound_holder_ends_only_for_the_right_signals(cluster: &Cluster) {
    const T: &str = "a_head_on_a_session_bound_holder_ends_only_for_the_right_signals";
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let o = owner(T, "holder");
    let held = holder.acquire(&k, &o, None, Some("0")).await.unwrap().unwrap();

    let head = cluster.connect().await;
    let (head_pid, cancel) = (head.pid(), head.cancel_token());
    let waiter = head.spawn_acquire(&k, &owner(T, "head"), Some("30s"), Some("20s"));
    wait_for_waiters(&observer, &k, 1).await;
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        let sent = std::process::Command::new("kill").args(["-IO", &head_pid.to_string()]).status().unwrap();
        assert!(sent.success(), "kill -IO {head_pid}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "stray SIGIOs did not end the wait");
    assert_eq!(observer.waiters(&k).await.unwrap(), 1, "the head still waits");
    let released_at = Instant::now();
    assert!(holder.release(&k, &o).await.unwrap());
    granted_promptly(waiter, held, released_at, "head after the stray SIGIOs").await;

    // A genuine cancel of the same kind of wait is not taken for a poke.
    let k2 = key(T, "k2");
    holder.acquire(&k2, &o, None, Some("0")).await.unwrap().unwrap();
    let head = cluster.connect().await;
    let cancel2 = head.cancel_token();
    let waiter = head.spawn_acquire(&k2, &owner(T, "head"), Some("30s"), Some("20s"));
    wait_for_waiters(&observer, &k2, 1).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    cancel2.cancel_query(NoTls).await.unwrap();
    let attempt = finish(waiter, LIMIT, "cancelled head").await;
    expect_sqlstate(attempt.result, &SqlState::QUERY_CANCELED, "cancelled head");
    attempt.session.query_one("SELECT 1", &[]).await.expect("the cancelled session is usable");
    assert_eq!(observer.waiters(&k2).await.unwrap(), 0);
    drop(cancel);
}

async fn handoff_on_force_release_of_a_ttl_lease(cluster: &Cluster) {
    const T: &str = "handoff_on_force_release_of_a_ttl_lease";
    let q = hold_and_queue(cluster, T, Some("30s")).await;
    let forced_at = Instant::now();
    assert!(q.admin.force_release(&q.key).await.unwrap());
    granted_promptly(q.waiter, q.held, forced_at, "waiter after force release (ttl)").await;
    assert!(!q.holder.release(&q.key, &owner(T, "holder")).await.unwrap(), "the old holder lost it");
}

async fn handoff_on_termination_of_a_session_bound_holder(cluster: &Cluster) {
    const T: &str = "handoff_on_termination_of_a_session_bound_holder";
    let q = hold_and_queue(cluster, T, None).await;
    let terminated_at = Instant::now();
    let terminated: bool =
        q.admin.query_one("SELECT pg_terminate_backend($1)", &[&q.holder.pid()]).await.unwrap().get(0);
    assert!(terminated);
    granted_promptly(q.waiter, q.held, terminated_at, "waiter after pg_terminate_backend").await;
}

/// A queued head is granted when a 300 ms lease expires: after its `expires_at`, and within
/// 100 ms of it (server clock).
async fn handoff_on_expiry_comes_right_after_the_old_expires_at(cluster: &Cluster) {
    const T: &str = "handoff_on_expiry_comes_right_after_the_old_expires_at";
    let (holder, observer, waiting) =
        (cluster.connect().await, cluster.connect().await, cluster.connect().await);
    let (k, o, ow) = (key(T, "k"), owner(T, "holder"), owner(T, "waiter"));
    // Prepare the waiter's statement first, so that it queues right after the grant below.
    let warm_up = key(T, "warm-up");
    assert!(waiting.try_acquire(&warm_up, &ow, "10s").await.unwrap().is_some());
    assert!(waiting.release(&warm_up, &ow).await.unwrap());
    let waiter_pid = waiting.pid();

    let held = holder.try_acquire(&k, &o, "300ms").await.unwrap().unwrap();
    let waiter = waiting.spawn_acquire(&k, &ow, Some("30s"), Some("10s"));
    let old = observer.lease(&k).await.unwrap().expect("the 300 ms lease");
    let expires_at = old.expires_at.unwrap();
    eventually(Duration::from_secs(5), "the waiter queued before the lease expired", || async {
        queue_locks(&observer, &[waiter_pid]).await == vec![(waiter_pid, true)]
    })
    .await;

    let attempt = finish(waiter, LIMIT, "waiter on an expiring lease").await;
    let granted = attempt.result.unwrap().expect("granted at the expiry");
    assert!(granted > held);
    let row = observer.lease(&k).await.unwrap().expect("the waiter's lease");
    assert_eq!(row.fence, granted);
    let after = row.acquired_at - expires_at;
    assert!(
        after >= 0.0,
        "granted at {} (server clock), {:.1} ms before the expiry",
        row.acquired_at,
        -after * 1e3
    );
    assert!(after < 0.1, "granted {:.1} ms after the old lease expired", after * 1e3);
}

/// A holder that shortens its lease while someone waits hands the key over at the new expiry,
/// not the old one: the head, which sleeps until the old expiry, is woken by the renew.
async fn a_shortened_renew_wakes_the_head(cluster: &Cluster) {
    const T: &str = "a_shortened_renew_wakes_the_head";
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let waiting = cluster.connect().await;
    let head_pid = waiting.pid();
    let waiter = waiting.spawn_acquire(&k, &owner(T, "waiter"), Some("30s"), Some("20s"));
    wait_for_waiters(&observer, &k, 1).await;
    wait_until_sleeping(&observer, head_pid).await;

    let renewed_at = Instant::now();
    let new_expiry = holder.renew(&k, &o, Some("200ms")).await.unwrap().expect("the holder renews");
    let attempt = finish(waiter, LIMIT, "waiter after the shortening renew").await;
    let granted = attempt.result.unwrap().expect("granted at the shortened expiry");
    assert!(granted > held);
    let lag = attempt.finished_at.duration_since(renewed_at);
    assert!(lag < Duration::from_secs(1), "granted {lag:?} after renewing to 200 ms");
    let row = observer.lease(&k).await.unwrap().unwrap();
    assert!(
        row.acquired_at >= new_expiry,
        "granted at {} before the new expiry {new_expiry}",
        row.acquired_at
    );
}

/// `dlock_locks.waiters` counts exactly the sessions in line: 7 queued; 5 after the head and
/// another are cancelled; 4 once the release grants the new head (#2, next in line).
async fn waiters_count_is_exact(cluster: &Cluster) {
    const T: &str = "waiters_count_is_exact";
    const N: usize = 7;
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();

    let (mut cancels, mut pids, mut waiters) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..N {
        let session = cluster.connect().await;
        cancels.push(session.cancel_token());
        pids.push(session.pid());
        waiters.push(Some(session.spawn_acquire(
            &k,
            &owner(T, &format!("w{}", i + 1)),
            Some("30s"),
            Some("30s"),
        )));
        wait_for_waiters(&observer, &k, i as i32 + 1).await;
    }
    assert_eq!(observer.waiters(&k).await.unwrap(), 7);

    // Cancel the head (#1) and #5.
    for i in [0, 4] {
        cancels[i].cancel_query(NoTls).await.unwrap();
        let attempt =
            finish(waiters[i].take().unwrap(), LIMIT, &format!("cancelled waiter #{}", i + 1)).await;
        expect_sqlstate(attempt.result, &SqlState::QUERY_CANCELED, &format!("cancelled waiter #{}", i + 1));
        attempt.session.query_one("SELECT 1", &[]).await.expect("the cancelled session is usable");
    }
    assert_eq!(observer.waiters(&k).await.unwrap(), 5, "after two cancelled");

    assert!(holder.release(&k, &o).await.unwrap());
    let attempt = finish(waiters[1].take().unwrap(), LIMIT, "waiter #2").await;
    let granted = attempt.result.unwrap().expect("waiter #2 (next in line) is granted");
    assert!(granted > held);
    let row = observer.lease(&k).await.unwrap().unwrap();
    assert_eq!((row.fence, row.holder_pid), (granted, Some(pids[1])));
    assert_eq!(row.waiters, 4, "after the head was granted");
    assert!(waiters.iter().flatten().all(|w| !w.is_finished()), "the other four still wait");
}

/// A head granted inside a transaction block keeps its queue lock until the block ends, but it
/// holds the key and waits no more: `dlock_locks.waiters`, as the head sees it in its block (its
/// own lease not yet committed), counts only the session behind it; so does everyone's after.
async fn a_head_granted_in_a_transaction_block_is_no_waiter(cluster: &Cluster) {
    const T: &str = "a_head_granted_in_a_transaction_block_is_no_waiter";
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let head = cluster.connect().await;
    let head_pid = head.pid();
    head.batch_execute("BEGIN").await.unwrap();
    let head = head.spawn_acquire(&k, &owner(T, "head"), Some("30s"), Some("30s"));
    wait_for_waiters(&observer, &k, 1).await;
    let behind = cluster.connect().await.spawn_acquire(&k, &owner(T, "behind"), Some("30s"), Some("30s"));
    wait_for_waiters(&observer, &k, 2).await;

    assert!(holder.release(&k, &o).await.unwrap());
    let attempt = finish(head, LIMIT, "the head, in its transaction block").await;
    let granted = attempt.result.unwrap().expect("the head is granted");
    assert!(granted > held);
    assert!(observer.lease(&k).await.unwrap().is_none(), "the head's grant is not committed yet");
    let row = attempt.session.lease(&k).await.unwrap().expect("the head sees its own lease");
    assert_eq!((row.fence, row.holder_pid), (granted, Some(head_pid)));
    assert_eq!(row.waiters, 1, "the session behind, not the head in its block");
    attempt.session.batch_execute("COMMIT").await.unwrap();
    let row = observer.lease(&k).await.unwrap().expect("held by the head");
    assert_eq!((row.fence, row.holder_pid), (granted, Some(head_pid)));
    assert_eq!(row.waiters, 1, "the session behind");
    assert!(!behind.is_finished(), "the session behind still waits");
    behind.abort();
}

/// A session can hold a TTL lease under one owner and wait for the same key under another (a
/// pooled server connection does, serving two clients): `dlock_locks.waiters` counts that wait.
async fn a_session_waiting_for_a_key_it_took_under_another_owner_is_a_waiter(cluster: &Cluster) {
    const T: &str = "a_session_waiting_for_a_key_it_took_under_another_owner_is_a_waiter";
    let (s, observer) = (cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    let fence = s.try_acquire(&k, &owner(T, "a"), "30s").await.unwrap().expect("free");
    let wait = s.spawn_acquire(&k, &owner(T, "b"), Some("30s"), Some("2s"));
    wait_for_waiters(&observer, &k, 1).await;
    let row = observer.lease(&k).await.unwrap().expect("held");
    assert_eq!((row.fence, row.waiters), (fence, 1));
    let attempt = finish(wait, LIMIT, "the wait under the second owner").await;
    assert_eq!(attempt.result.unwrap(), None, "a's lease outlives the wait");
    assert_eq!(observer.lease(&k).await.unwrap().expect("still held").waiters, 0);
}

/// On a hot key, every hand-off (and every shared lease) leaves a dead owner row and index
/// entry that the waiters' snapshots keep until they move on. A newcomer that finds others in
/// line reads only its own entries (to see whether it reenters), never the key's dead ones; a
/// look at the whole key reads them all. Preloaded, a release that hands the key to the head
/// reads only the two owners' entries. Counted by the index's returned tuples in the caller's
/// transaction. (Uncontended exclusive cycles leave no entries: they update the key row.)
async fn a_newcomer_behind_a_queue_reads_only_its_own_index_entries(cluster: &Cluster) {
    const T: &str = "a_newcomer_behind_a_queue_reads_only_its_own_index_entries";
    const DEAD: i64 = 40;
    let (s, observer, pin) = (cluster.connect().await, cluster.connect().await, cluster.connect().await);
    let k = key(T, "k");
    // An old snapshot keeps every row the cycles below delete.
    pin.batch_execute("BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT 1").await.unwrap();
    for i in 0..DEAD {
        let o = owner(T, &format!("cycle{i}"));
        let fence: Option<i64> =
            s.query_one("SELECT dlock_acquire_shared($1, $2, '30s', '0')", &[&k, &o]).await.unwrap().get(0);
        assert!(fence.is_some(), "free");
        assert!(s.release(&k, &o).await.unwrap());
    }
    let o = owner(T, "holder");
    s.try_acquire(&k, &o, "30s").await.unwrap().expect("free");
    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(T, "waiter"), Some("30s"), Some("30s"));
    wait_for_waiters(&observer, &k, 1).await;

    let newcomer = cluster.connect().await;
    let returned = |sql: &'static str| {
        let (newcomer, k) = (&newcomer, k.clone());
        async move { pkey_entries_read(newcomer, sql, &[&k, &owner(T, "newcomer")]).await.1 }
    };
    let whole_key = returned("SELECT dlock_wait_free($1, '0') OR $2 = ''").await;
    assert!(whole_key > DEAD, "a look at the whole key reads its {DEAD} dead entries too: {whole_key}");
    let behind = returned("SELECT dlock_acquire($1, $2, '30 seconds', '0')").await;
    assert!(behind <= 1, "a newcomer behind the queue read {behind} index entries");
    assert!(!waiter.is_finished(), "the waiter still waits");
    if preloaded(&s).await {
        // The release hands the key to the head in its own transaction: it reads the holder's
        // entries and the head's, not the key's dead ones.
        let (rows, read) = pkey_entries_read(&s, "SELECT dlock_release($1, $2)", &[&k, &o]).await;
        assert!(rows[0].get::<_, bool>(0));
        assert!(read <= 2, "a release with its hand-off read {read} index entries");
    } else {
        assert!(s.release(&k, &o).await.unwrap());
    }
    let granted = finish(waiter, LIMIT, "the waiter").await.result.unwrap().expect("granted");
    assert_eq!(observer.lease(&k).await.unwrap().expect("held").fence, granted);
    pin.batch_execute("COMMIT").await.unwrap();
}

/// Runs `sql` in a transaction of its own: its rows, and the lease table's primary-key entries
/// its scans returned (the counts not yet sent to the statistics, before and after it; none are
/// sent within a transaction).
async fn pkey_entries_read(
    session: &Session,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> (Vec<tokio_postgres::Row>, i64) {
    const COUNT: &str = "SELECT pg_stat_get_xact_tuples_returned('dlock_internal.lease_pkey'::regclass)";
    session.batch_execute("BEGIN").await.unwrap();
    let before: i64 = session.query_one(COUNT, &[]).await.unwrap().get(0);
    let rows = session.query(sql, params).await.unwrap();
    let after: i64 = session.query_one(COUNT, &[]).await.unwrap().get(0);
    session.batch_execute("COMMIT").await.unwrap();
    (rows, after - before)
}

/// A waiter asking for a session-bound lease is never handed one by the releaser (the binding
/// must be its own session's): it grants itself when woken, and the lease ends with its session.
async fn a_session_bound_waiter_gets_a_lease_bound_to_its_own_session(cluster: &Cluster) {
    const T: &str = "a_session_bound_waiter_gets_a_lease_bound_to_its_own_session";
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o, ow) = (key(T, "k"), owner(T, "holder"), owner(T, "waiter"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let waiting = cluster.connect().await;
    let waiter_pid = waiting.pid();
    let waiter = waiting.spawn_acquire(&k, &ow, None, Some("20s"));
    wait_for_waiters(&observer, &k, 1).await;
    assert!(holder.release(&k, &o).await.unwrap());
    let attempt = finish(waiter, LIMIT, "session-bound waiter").await;
    let granted = attempt.result.unwrap().expect("granted");
    assert!(granted > held);
    let row = observer.lease(&k).await.unwrap().expect("held by the waiter");
    assert_eq!((row.fence, row.holder_pid, row.expires_at), (granted, Some(waiter_pid), Some(f64::INFINITY)));
    // Its session ends: so does the lease.
    drop(attempt.session);
    eventually(Duration::from_secs(5), "the lease ends with the waiter's session", || async {
        observer.lease(&k).await.unwrap().is_none()
    })
    .await;
}

/// Preloaded, the releaser writes the head's grant in its own transaction. A transaction that
/// handed a key over cannot be PREPAREd (the grant would wait undecided for a COMMIT PREPARED
/// while the head waits); refused, it hands nothing over, and the next release does.
async fn a_prepared_hand_off_is_refused_and_the_key_still_passes_on(cluster: &Cluster) {
    const T: &str = "a_prepared_hand_off_is_refused_and_the_key_still_passes_on";
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o, ow) = (key(T, "k"), owner(T, "holder"), owner(T, "waiter"));
    let held = holder.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let waiter = cluster.connect().await.spawn_acquire(&k, &ow, Some("30s"), Some("20s"));
    wait_for_waiters(&observer, &k, 1).await;
    if preloaded(&observer).await {
        holder.batch_execute("BEGIN").await.unwrap();
        assert!(holder.release(&k, &o).await.unwrap());
        expect_sqlstate(
            holder.batch_execute("PREPARE TRANSACTION 'dlock_handoff'").await,
            &SqlState::FEATURE_NOT_SUPPORTED,
            "PREPARE of a hand-off",
        );
        holder.batch_execute("ROLLBACK").await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "a refused PREPARE hands nothing over");
        let row = observer.lease(&k).await.unwrap().unwrap();
        assert_eq!((row.owner.as_deref(), row.fence), (Some(o.as_str()), held), "the lease is back");
    }
    assert!(holder.release(&k, &o).await.unwrap());
    let attempt = finish(waiter, LIMIT, "the waiter").await;
    let granted = attempt.result.unwrap().expect("granted");
    assert!(granted > held);
    let row = observer.lease(&k).await.unwrap().unwrap();
    assert_eq!((row.owner.as_deref(), row.fence), (Some(ow.as_str()), granted));
    assert!(attempt.session.release(&k, &ow).await.unwrap());

    // Nor can a session-bound acquire be prepared: the lease cannot outlive its session.
    let k2 = key(T, "session-bound");
    holder.batch_execute("BEGIN").await.unwrap();
    assert!(holder.acquire(&k2, &o, None, Some("0")).await.unwrap().is_some());
    expect_sqlstate(
        holder.batch_execute("PREPARE TRANSACTION 'dlock_bound'").await,
        &SqlState::FEATURE_NOT_SUPPORTED,
        "PREPARE of a session-bound acquire",
    );
    holder.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(observer.lease(&k2).await.unwrap(), None, "the refused acquire left nothing");
}

/// A wait rolled back to a savepoint leaves the key's queue at once, whether it was cancelled
/// while at the head or had been granted: its transaction goes on, but it no longer blocks the
/// waiters behind it or newcomers (queue locks belong to the top transaction, so this takes a
/// subtransaction callback). Preloaded, it also checks the count of queued sessions that lets
/// releases skip the lock manager when nobody waits: it must never miss the waiters that remain.
async fn a_wait_undone_by_a_savepoint_leaves_its_queue(cluster: &Cluster) {
    const T: &str = "a_wait_undone_by_a_savepoint_leaves_its_queue";
    let (holder, observer, undone) =
        (cluster.connect().await, cluster.connect().await, cluster.connect().await);
    let (k, o, u) = (key(T, "k"), owner(T, "holder"), owner(T, "undone"));
    let mut held = holder.try_acquire(&k, &o, "60s").await.unwrap().unwrap();

    // Cancelled at the head, inside a savepoint.
    undone.batch_execute("BEGIN; SAVEPOINT s; SET LOCAL statement_timeout = '300ms'").await.unwrap();
    let cancelled = undone.acquire(&k, &u, Some("30s"), Some("20s")).await;
    expect_sqlstate(cancelled, &SqlState::QUERY_CANCELED, "a wait ended by statement_timeout");
    undone.batch_execute("ROLLBACK TO SAVEPOINT s").await.unwrap();
    assert_eq!(observer.waiters(&k).await.unwrap(), 0, "the cancelled wait left the queue");

    // Others still wait and are handed the key, with the undone wait's transaction still open.
    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(T, "waiter"), Some("60s"), Some("20s"));
    wait_for_waiters(&observer, &k, 1).await;
    let released_at = Instant::now();
    assert!(holder.release(&k, &o).await.unwrap());
    let attempt = finish(waiter, LIMIT, "the waiter behind the undone wait").await;
    let granted = attempt.result.unwrap().expect("the waiter is granted at the release");
    assert!(granted > held);
    assert!(attempt.finished_at.duration_since(released_at) < GRANT_LAG);
    assert!(attempt.session.release(&k, &owner(T, "waiter")).await.unwrap());
    held = holder.try_acquire(&k, &o, "60s").await.unwrap().unwrap();

    // Granted inside a savepoint, then rolled back: the lease and the place at the head go.
    undone.batch_execute("SAVEPOINT s2").await.unwrap();
    let wait = undone.spawn_acquire(&k, &u, Some("60s"), Some("20s"));
    wait_for_waiters(&observer, &k, 1).await;
    assert!(holder.release(&k, &o).await.unwrap());
    let attempt = finish(wait, LIMIT, "the wait inside the savepoint").await;
    let granted = attempt.result.unwrap().expect("granted at the release");
    assert!(granted > held);
    let undone = attempt.session;
    undone.batch_execute("ROLLBACK TO SAVEPOINT s2").await.unwrap();
    assert_eq!(observer.waiters(&k).await.unwrap(), 0, "the undone grant left the queue");
    let newcomer = cluster.connect().await;
    let taken = newcomer.try_acquire(&k, &owner(T, "newcomer"), "60s").await.unwrap();
    assert!(taken.is_some_and(|f| f > granted), "a try right after the rollback is granted: {taken:?}");
    undone.batch_execute("COMMIT").await.unwrap();

    // After the transaction ended, waits still count and are woken.
    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(T, "last"), Some("60s"), Some("20s"));
    wait_for_waiters(&observer, &k, 1).await;
    let released_at = Instant::now();
    assert!(newcomer.release(&k, &owner(T, "newcomer")).await.unwrap());
    let attempt = finish(waiter, LIMIT, "the last waiter").await;
    assert!(attempt.result.unwrap().is_some(), "the last waiter is granted at the release");
    assert!(attempt.finished_at.duration_since(released_at) < GRANT_LAG);
}

/// A release rolled back to a savepoint hands nothing to the head of the queue, even though
/// (preloaded) the release wrote the head's grant in the savepoint: the holder keeps the lease,
/// the head keeps waiting after the transaction commits, and is granted at the next release.
async fn a_hand_off_undone_by_a_savepoint_grants_nothing(cluster: &Cluster) {
    const T: &str = "a_hand_off_undone_by_a_savepoint_grants_nothing";
    let (holder, observer) = (cluster.connect().await, cluster.connect().await);
    let (k, o) = (key(T, "k"), owner(T, "holder"));
    let held = holder.try_acquire(&k, &o, "60s").await.unwrap().unwrap();
    let waiter = cluster.connect().await.spawn_acquire(&k, &owner(T, "waiter"), Some("60s"), Some("20s"));
    wait_for_waiters(&observer, &k, 1).await;

    holder.batch_execute("BEGIN; SAVEPOINT s").await.unwrap();
    assert!(holder.release(&k, &o).await.unwrap());
    holder.batch_execute("ROLLBACK TO SAVEPOINT s; COMMIT").await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    if waiter.is_finished() {
        let attempt = waiter.await.unwrap();
        panic!("the head was granted a key whose release was rolled back (it answered {:?})", attempt.result);
    }
    let row = observer.lease(&k).await.unwrap().unwrap();
    assert_eq!((row.owner.as_deref(), row.fence, row.waiters), (Some(o.as_str()), held, 1), "lease kept");

    let released_at = Instant::now();
    assert!(holder.release(&k, &o).await.unwrap());
    let attempt = finish(waiter, LIMIT, "the head").await;
    let granted = attempt.result.unwrap().expect("granted at the release that committed");
    assert!(granted > held);
    assert!(attempt.finished_at.duration_since(released_at) < GRANT_LAG);
    let row = observer.lease(&k).await.unwrap().unwrap();
    assert_eq!((row.owner.as_deref(), row.fence), (Some(owner(T, "waiter").as_str()), granted));
}
