//! `dlock_wait_free(key, wait)`: waiting until no lease holds a key, without taking it (the
//! cache-rebuild pattern). Every scenario runs on a server without and with
//! `shared_preload_libraries = 'dlock'` (which counts waiters in shared memory).

use std::time::Duration;

use dlock_tests::{Cluster, NoTls, Session, SqlState, eventually, expect_sqlstate, key, owner, sql_edition};
use tokio::task::JoinHandle;

/// dlock's lock space of free-waiters (`locks/tags.rs`: `Space::FreeWait`), as pg_locks shows it.
const FREE_WAIT_SPACE: i32 = 0x6b06;

fn clusters() -> [&'static Cluster; 2] {
    [Cluster::shared(), Cluster::shared_named("preloaded", &["shared_preload_libraries = 'dlock'"])]
}

/// Sessions waiting in `dlock_wait_free` for `key`: holders of its free-wait lock (in the SQL
/// edition, the advisory lock on `hashtextextended(key, 7636)`: `dlock_internal.free_wait_lock`).
async fn free_waiters(s: &Session, key: &str) -> i64 {
    if sql_edition() {
        return s
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted \
                   AND (classid::int8 << 32 | objid::int8) = hashtextextended($1 COLLATE \"C\", 7636) \
                   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
                &[&key],
            )
            .await
            .unwrap()
            .get(0);
    }
    let hash = dlock_core::key::key_hash(key);
    let (high, low) = (i64::from((hash >> 32) as u32), i64::from(hash as u32));
    s.query_one(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid::int4 = $1 AND granted \
           AND classid::int8 = $2 AND objid::int8 = $3 \
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        &[&FREE_WAIT_SPACE, &high, &low],
    )
    .await
    .unwrap()
    .get(0)
}

async fn wait_for_free_waiters(s: &Session, key: &str, n: i64) {
    eventually(Duration::from_secs(20), &format!("{n} sessions in dlock_wait_free({key})"), || async {
        free_waiters(s, key).await >= n
    })
    .await;
}

/// A `dlock_wait_free` answer with the server time it came at, and the session back.
type Answered = (Result<(bool, f64), dlock_tests::Error>, Session);

/// `dlock_wait_free(key, wait)` in a task of its own: its answer and when the server gave it
/// (epoch seconds, server clock), and the session back.
fn spawn_wait_free(s: Session, key: &str, wait: Option<&str>) -> JoinHandle<Answered> {
    let (key, wait) = (key.to_string(), wait.map(str::to_string));
    tokio::spawn(async move {
        let result = s
            .query_one(
                "SELECT dlock_wait_free($1, $2::text::interval), extract(epoch FROM clock_timestamp())::float8",
                &[&key, &wait],
            )
            .await
            .map(|row| (row.get(0), row.get(1)));
        (result, s)
    })
}

async fn wait_free(s: &Session, key: &str, wait: Option<&str>) -> Result<bool, dlock_tests::Error> {
    s.query_one("SELECT dlock_wait_free($1, $2::text::interval)", &[&key, &wait]).await.map(|r| r.get(0))
}

#[tokio::test]
async fn one_release_wakes_every_waiter_and_none_takes_the_key() {
    const T: &str = "one_release_wakes_every_waiter";
    for cluster in clusters() {
        let holder = cluster.connect().await;
        let k = key(T, "cache");
        let fence = holder.try_acquire(&k, &owner(T, "builder"), "1 hour").await.unwrap().expect("granted");
        let mut waiters = Vec::new();
        for _ in 0..40 {
            waiters.push(spawn_wait_free(cluster.connect().await, &k, Some("60 seconds")));
        }
        wait_for_free_waiters(&holder, &k, 40).await;
        // Nobody queues for the key: the waiters wait beside one another, not in its line.
        assert_eq!(holder.waiters(&k).await.unwrap(), 0, "free-waiters are not in the key's queue");
        let released_at = holder.server_now().await.unwrap();
        assert!(holder.release(&k, &owner(T, "builder")).await.unwrap());
        for waiter in waiters {
            let (result, _session) =
                tokio::time::timeout(Duration::from_secs(30), waiter).await.unwrap().unwrap();
            let (free, at) = result.expect("dlock_wait_free answers");
            assert!(free, "the key is free once its builder released it");
            assert!(at >= released_at, "answered after the release ({at} < {released_at})");
        }
        assert_eq!(free_waiters(&holder, &k).await, 0, "no free-wait lock is left behind");
        // None of them took the key: the next grant is a fresh one, above the builder's fence.
        let next = holder.try_acquire(&k, &owner(T, "next"), "1 hour").await.unwrap().expect("free");
        assert!(next > fence);
        assert!(holder.release(&k, &owner(T, "next")).await.unwrap());
    }
}

#[tokio::test]
async fn a_free_key_answers_true_at_once_and_a_held_one_false_when_the_wait_runs_out() {
    const T: &str = "free_or_not";
    for cluster in clusters() {
        let s = cluster.connect().await;
        let other = cluster.connect().await;
        let k = key(T, "k");
        assert!(wait_free(&s, &k, Some("0")).await.unwrap(), "a key nobody holds is free");
        assert!(wait_free(&s, &k, None).await.unwrap(), "without limit too");
        other.try_acquire(&k, &owner(T, "o"), "1 hour").await.unwrap().expect("granted");
        assert!(!wait_free(&s, &k, Some("0")).await.unwrap(), "held: no time to wait");
        let started = s.server_now().await.unwrap();
        assert!(!wait_free(&s, &k, Some("200 milliseconds")).await.unwrap(), "held until the wait ran out");
        assert!(s.server_now().await.unwrap() - started >= 0.2, "it waited the whole wait");
        assert!(other.release(&k, &owner(T, "o")).await.unwrap());
    }
}

#[tokio::test]
async fn expiry_frees_the_key_for_waiters_after_its_lock_delay() {
    const T: &str = "expiry_frees";
    for cluster in clusters() {
        let s = cluster.connect().await;
        let holder = cluster.connect().await;
        let (k, o) = (key(T, "k"), owner(T, "o"));
        let expires: f64 = holder
            .query_one(
                "SELECT dlock_acquire($1, $2, '300 milliseconds', '0', '400 milliseconds') IS NOT NULL, \
                        (SELECT extract(epoch FROM expires_at)::float8 FROM dlock_locks WHERE key = $1)",
                &[&k, &o],
            )
            .await
            .unwrap()
            .get(1);
        let waiter = spawn_wait_free(cluster.connect().await, &k, Some("30 seconds"));
        let (result, _) = waiter.await.unwrap();
        let (free, at) = result.unwrap();
        assert!(free);
        assert!(
            at >= expires + 0.4,
            "free only once the lock-delay after the expiry ran out ({at} < {expires} + 0.4)"
        );
        // A release frees at once, whatever the lock-delay.
        holder
            .query_one("SELECT dlock_acquire($1, $2, '1 hour', '0', '10 seconds')", &[&k, &o])
            .await
            .unwrap();
        let waiter = spawn_wait_free(cluster.connect().await, &k, Some("30 seconds"));
        wait_for_free_waiters(&s, &k, 1).await;
        let released_at = s.server_now().await.unwrap();
        assert!(holder.release(&k, &o).await.unwrap());
        let (result, _) = waiter.await.unwrap();
        let (free, at) = result.unwrap();
        assert!(free && at - released_at < 5.0, "a release frees without the delay");
    }
}

#[tokio::test]
async fn the_end_of_a_session_bound_holder_wakes_the_waiters() {
    const T: &str = "session_end_wakes";
    for cluster in clusters() {
        let s = cluster.connect().await;
        let holder = cluster.connect().await;
        let k = key(T, "k");
        holder.acquire(&k, &owner(T, "o"), None, Some("0")).await.unwrap().expect("granted");
        let waiter = spawn_wait_free(cluster.connect().await, &k, None);
        wait_for_free_waiters(&s, &k, 1).await;
        let ended: bool =
            s.query_one("SELECT pg_terminate_backend($1)", &[&holder.pid()]).await.unwrap().get(0);
        assert!(ended);
        let (result, _) = tokio::time::timeout(Duration::from_secs(30), waiter).await.unwrap().unwrap();
        assert!(result.unwrap().0, "free once the holder's session ended");
        // Shared holders: free only when the last one goes.
        let (a, b) = (cluster.connect().await, cluster.connect().await);
        for (session, name) in [(&a, "a"), (&b, "b")] {
            let fence: Option<i64> = session
                .query_one("SELECT dlock_acquire_shared($1, $2, '1 hour')", &[&k, &owner(T, name)])
                .await
                .unwrap()
                .get(0);
            assert!(fence.is_some());
        }
        let waiter = spawn_wait_free(cluster.connect().await, &k, Some("30 seconds"));
        wait_for_free_waiters(&s, &k, 1).await;
        assert!(a.release(&k, &owner(T, "a")).await.unwrap());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "one shared holder is left");
        assert!(b.release(&k, &owner(T, "b")).await.unwrap());
        let (result, _) = waiter.await.unwrap();
        assert!(result.unwrap().0);
    }
}

#[tokio::test]
async fn a_key_this_session_holds_is_an_error_not_a_self_deadlock() {
    const T: &str = "held_here";
    for cluster in clusters() {
        let s = cluster.connect().await;
        let (ttl_key, bound_key) = (key(T, "ttl"), key(T, "bound"));
        s.try_acquire(&ttl_key, &owner(T, "o"), "1 hour").await.unwrap().expect("granted");
        s.acquire(&bound_key, &owner(T, "o"), None, Some("0")).await.unwrap().expect("granted");
        for k in [&ttl_key, &bound_key] {
            for wait in [None, Some("0"), Some("1 second")] {
                expect_sqlstate(
                    wait_free(&s, k, wait).await,
                    &SqlState::OBJECT_IN_USE,
                    &format!("{k} {wait:?}"),
                );
            }
        }
        // The same owner string's lease, taken by another session, is waited for as any other.
        let other = cluster.connect().await;
        assert!(!wait_free(&other, &ttl_key, Some("50 milliseconds")).await.unwrap());
        assert!(!wait_free(&other, &bound_key, Some("50 milliseconds")).await.unwrap());
        assert!(s.release(&ttl_key, &owner(T, "o")).await.unwrap());
        assert!(s.release(&bound_key, &owner(T, "o")).await.unwrap());
    }
}

#[tokio::test]
async fn cancelled_timed_out_and_hung_up_waits_leave_nothing_behind() {
    const T: &str = "ended_waits";
    for cluster in clusters() {
        let s = cluster.connect().await;
        let k = key(T, "k");
        s.try_acquire(&k, &owner(T, "o"), "1 hour").await.unwrap().expect("granted");

        // statement_timeout, bounded and unbounded.
        for wait in [Some("30 seconds"), None] {
            let waiter = cluster.connect().await;
            waiter.batch_execute("SET statement_timeout = '200ms'").await.unwrap();
            expect_sqlstate(wait_free(&waiter, &k, wait).await, &SqlState::QUERY_CANCELED, "timeout");
            waiter.query_one("SELECT 1", &[]).await.expect("usable after");
        }
        // A cancel request.
        let waiter = cluster.connect().await;
        let cancel = waiter.cancel_token();
        let task = spawn_wait_free(waiter, &k, None);
        wait_for_free_waiters(&s, &k, 1).await;
        cancel.cancel_query(NoTls).await.unwrap();
        let (result, waiter) = task.await.unwrap();
        expect_sqlstate(result, &SqlState::QUERY_CANCELED, "cancel");
        // Inside a transaction: the wait ends with the error, the transaction can roll back.
        waiter.batch_execute("BEGIN").await.unwrap();
        waiter.batch_execute("SET LOCAL statement_timeout = '100ms'").await.unwrap();
        expect_sqlstate(wait_free(&waiter, &k, None).await, &SqlState::QUERY_CANCELED, "in a transaction");
        waiter.batch_execute("ROLLBACK").await.unwrap();
        // A client that hangs up ends its backend's wait (in the SQL edition, by PostgreSQL's
        // own check every client_connection_check_interval, which its users set: hangup.rs).
        let (client, pid, driver) = cluster.connect_client().await;
        if sql_edition() {
            client.batch_execute("SET client_connection_check_interval = '1s'").await.unwrap();
        }
        let k2 = k.clone();
        tokio::spawn(async move {
            let _ = client.query_one("SELECT dlock_wait_free($1, NULL)", &[&k2]).await;
        });
        wait_for_free_waiters(&s, &k, 1).await;
        driver.abort(); // the client's socket closes mid-wait
        eventually(Duration::from_secs(20), "the hung-up waiter's backend ends", || async {
            let alive: bool = s
                .query_one("SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", &[&pid])
                .await
                .unwrap()
                .get(0);
            !alive
        })
        .await;
        // (a backend leaves pg_stat_activity a moment before its exit lets go of its locks)
        eventually(Duration::from_secs(5), "no free-wait lock is left behind", || async {
            free_waiters(&s, &k).await == 0
        })
        .await;
        assert!(s.release(&k, &owner(T, "o")).await.unwrap());
    }
}

/// Waits until `waiter` answers; asserts it said free.
async fn answered_free(waiter: JoinHandle<Answered>, what: &str) -> f64 {
    let (result, _) = tokio::time::timeout(Duration::from_secs(30), waiter).await.expect(what).unwrap();
    let (free, at) = result.expect(what);
    assert!(free, "{what}: answered free");
    at
}

/// A release answers the free-waiters only when the key is free as its transaction commits: not
/// when it hands the key to the head of its queue in the same transaction, nor when the same
/// transaction takes the key again, nor when a savepoint rolls the release back.
#[tokio::test]
async fn a_release_answers_free_waiters_only_if_the_key_is_free_at_its_commit() {
    const T: &str = "answers_at_commit";
    // (the SQL edition has no library to preload: its heads take the key themselves)
    for (cluster, preloaded) in clusters().into_iter().zip([false, !sql_edition()]) {
        let s = cluster.connect().await;
        let holder = cluster.connect().await;
        let k = key(T, "k");
        let (o, again) = (owner(T, "o"), owner(T, "again"));
        let settle = Duration::from_millis(300);

        // Released and taken again in one transaction: nobody else ever saw the key free.
        holder.try_acquire(&k, &o, "1 hour").await.unwrap().expect("granted");
        let waiter = spawn_wait_free(cluster.connect().await, &k, Some("60 seconds"));
        wait_for_free_waiters(&s, &k, 1).await;
        holder.batch_execute("BEGIN").await.unwrap();
        assert!(holder.release(&k, &o).await.unwrap());
        holder.try_acquire(&k, &again, "1 hour").await.unwrap().expect("taken again");
        holder.batch_execute("COMMIT").await.unwrap();
        tokio::time::sleep(settle).await;
        assert!(!waiter.is_finished(), "the key never was free: taken again in the releasing transaction");

        // A release that a savepoint rolls back freed nothing.
        holder.batch_execute("BEGIN; SAVEPOINT s").await.unwrap();
        assert!(holder.release(&k, &again).await.unwrap());
        holder.batch_execute("ROLLBACK TO SAVEPOINT s; COMMIT").await.unwrap();
        tokio::time::sleep(settle).await;
        assert!(!waiter.is_finished(), "a rolled-back release frees nothing");

        // Handed over: the head of the queue gets the key in the releaser's transaction when
        // preloaded (and takes it itself at once otherwise).
        let head = cluster.connect().await;
        let head_task = {
            let (k, next) = (k.clone(), owner(T, "next"));
            tokio::spawn(async move {
                let fence: Option<i64> = head
                    .query_one("SELECT dlock_acquire($1, $2, '1 hour', '60 seconds')", &[&k, &next])
                    .await
                    .unwrap()
                    .get(0);
                (fence, head)
            })
        };
        dlock_tests::wait_for_waiters(&s, &k, 1).await;
        assert!(holder.release(&k, &again).await.unwrap());
        let (fence, head) = head_task.await.unwrap();
        assert!(fence.is_some(), "the head was granted the key");
        tokio::time::sleep(settle).await;
        let waiter = if preloaded {
            assert!(!waiter.is_finished(), "handed over in the releaser's transaction: never free");
            waiter
        } else if waiter.is_finished() {
            // The head takes the key itself after the release commits: free for a moment.
            answered_free(waiter, "free before the head took it").await;
            let waiter = spawn_wait_free(cluster.connect().await, &k, Some("60 seconds"));
            wait_for_free_waiters(&s, &k, 1).await;
            waiter
        } else {
            waiter
        };

        // Finally freed: answered, after that release.
        let released_at = s.server_now().await.unwrap();
        assert!(head.release(&k, &owner(T, "next")).await.unwrap());
        let at = answered_free(waiter, "after the last release").await;
        assert!(at >= released_at);

        // A force release and a release_all answer too.
        for (how, arg) in [("SELECT dlock_force_release($1)", &k), ("SELECT dlock_release_all($1) = 1", &o)] {
            holder.try_acquire(&k, &o, "1 hour").await.unwrap().expect("granted");
            let waiter = spawn_wait_free(cluster.connect().await, &k, Some("60 seconds"));
            wait_for_free_waiters(&s, &k, 1).await;
            let freed: bool = s.query_one(how, &[arg]).await.unwrap().get(0);
            assert!(freed, "{how}");
            answered_free(waiter, how).await;
        }
    }
}
