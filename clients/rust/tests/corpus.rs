//! A corpus of bad input through the Rust client: bad keys, owners, ttls and waits through the
//! builder, `Client::with_owner`, `with_lock` and `force_release`, busy keys, other roles, and
//! guards whose lease was force-released. Each call must come back as its typed `Error` variant
//! (or its contracted `None`/`false`), never panic, and change nothing: the `dlock_locks` view
//! and every session's watch locks, read by a superuser, are compared before and after it (after
//! the client's background unwatch has run). Hostile-looking but valid keys and owners
//! (look-alikes, SQL-injection strings) must work as ordinary, distinct ones.
//!
//! The tests compare whole-state snapshots, so they run one at a time. Each prints
//! `client corpus: N bad inputs tried (...)`. The last three tests pin bugs this corpus found
//! and that were fixed: panics on `Duration::MAX`, and a bad argument waiting behind the
//! client's own line for the key instead of being refused.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use dlock_client::Client;
use dlock_tests::{eventually, key, owner, within};

mod common;
// Beside this file, not `tests/harness.rs`, which cargo would build as a test target of its own.
#[path = "corpus/harness.rs"]
mod harness;
use common::free_for_others;
use harness::{Corpus, PLAIN, SERIAL, Want, client_as, state};

const SECOND: Duration = Duration::from_secs(1);
const DAY: Duration = Duration::from_secs(86_400);
/// Long enough for a frugal wait on a bad key to reach the server, short for a busy one.
const SHORT_WAIT: Duration = Duration::from_millis(50);

/// Every way the client takes a key, each with `key`: none may get past a bad one.
async fn every_way_to_lock(corpus: &mut Corpus, client: &Client, what: &str, key: &str, want: Want) {
    let ran = Arc::new(AtomicBool::new(false));
    let c = client;
    corpus.bad(&format!("{what}: try_acquire"), want, c.lock(key).try_acquire()).await;
    corpus.bad(&format!("{what}: acquire"), want, c.lock(key).acquire()).await;
    corpus.bad(&format!("{what}: acquire, wait"), want, c.lock(key).wait(SECOND).acquire()).await;
    corpus.bad(&format!("{what}: acquire, wait forever"), want, c.lock(key).wait_forever().acquire()).await;
    let server_queue = c.lock(key).server_queue().wait(SECOND).acquire();
    corpus.bad(&format!("{what}: acquire, wait in the server's queue"), want, server_queue).await;
    corpus.bad(&format!("{what}: session-bound"), want, c.lock(key).session_bound().acquire()).await;
    let work = |_| {
        let ran = ran.clone();
        async move { ran.store(true, Ordering::SeqCst) }
    };
    corpus.bad(&format!("{what}: with_lock"), want, c.with_lock(key, work)).await;
    assert!(!ran.load(Ordering::SeqCst), "{what}: with_lock ran its work");
}

#[tokio::test]
async fn bad_keys_and_owners_come_back_as_invalid_argument_and_change_nothing() {
    let _serial = SERIAL.lock().await;
    let mut corpus = Corpus::new("keys_and_owners").await;
    let client = client_as("postgres");
    let megabyte = "k".repeat(1 << 20);
    let keys: [(&str, String); 5] = [
        ("empty key", String::new()),
        ("1025-byte key", "k".repeat(1025)),
        ("1 MB key", megabyte.clone()),
        ("513 × 'é' key (1026 bytes)", "é".repeat(513)),
        ("257 × U+1F600 key", "😀".repeat(257)),
    ];
    for (what, k) in &keys {
        every_way_to_lock(&mut corpus, &client, what, k, Want::Invalid("22023")).await;
        corpus.bad(&format!("{what}: force_release"), Want::Invalid("22023"), client.force_release(k)).await;
    }
    // A NUL byte: PostgreSQL text cannot hold one, and the server refuses the parameter itself
    // (22021, invalid byte sequence) before dlock sees it; the client reports a server error.
    let nul = key("corpus_keys", "a\0b");
    every_way_to_lock(&mut corpus, &client, "NUL in the key", &nul, Want::Database("22021")).await;
    corpus.bad("NUL in the key: force_release", Want::Database("22021"), client.force_release(&nul)).await;

    let owners: [(&str, String); 5] = [
        ("empty owner", String::new()),
        ("257-byte owner", "o".repeat(257)),
        ("1 MB owner", megabyte),
        ("129 × 'é' owner (258 bytes)", "é".repeat(129)),
        ("65 × U+1F600 owner", "😀".repeat(65)),
    ];
    let k = key("corpus_owners", "k");
    for (what, o) in &owners {
        every_way_to_lock(&mut corpus, &client.with_owner(o.as_str()), what, &k, Want::Invalid("22023"))
            .await;
    }
    let nul_owner = client.with_owner("owner\0");
    every_way_to_lock(&mut corpus, &nul_owner, "NUL in the owner", &k, Want::Database("22021")).await;

    // The limits are where the contract puts them: 1024-byte keys and 256-byte owners work.
    let (longest_key, longest_owner) = ("k".repeat(1024), "o".repeat(256));
    let guard = client.with_owner(longest_owner.as_str()).lock(&longest_key).acquire().await.unwrap();
    let row = corpus.admin.lease(&longest_key).await.unwrap().expect("the longest key is held");
    assert_eq!(row.owner.as_deref(), Some(longest_owner.as_str()));
    assert!(guard.release().await.unwrap());
    corpus.finish();
}

#[tokio::test]
async fn bad_ttls_come_back_as_invalid_argument_and_change_nothing() {
    let _serial = SERIAL.lock().await;
    let mut corpus = Corpus::new("ttls").await;
    let client = client_as("postgres");
    let k = key("corpus_ttls", "k");
    let ttls = [
        ("zero ttl", Duration::ZERO),
        // Rounded to whole microseconds on the server: 0.
        ("1 ns ttl", Duration::from_nanos(1)),
        ("ttl of 2 days (over dlock.max_ttl)", 2 * DAY),
        ("ttl of 1 day + 1 ms", DAY + Duration::from_millis(1)),
        ("ttl of 2^40 s", Duration::from_secs(1 << 40)),
    ];
    for (what, ttl) in ttls {
        let invalid = Want::Invalid("22023");
        corpus.bad(&format!("{what}: try_acquire"), invalid, client.lock(&k).ttl(ttl).try_acquire()).await;
        let waiting = client.lock(&k).ttl(ttl).wait(SECOND).acquire();
        corpus.bad(&format!("{what}: acquire, wait"), invalid, waiting).await;
        let queued = client.lock(&k).ttl(ttl).server_queue().wait(SECOND).acquire();
        corpus.bad(&format!("{what}: acquire, wait in the server's queue"), invalid, queued).await;
        let with_lock = client.with_lock(client.lock(&k).ttl(ttl), |_| async {});
        corpus.bad(&format!("{what}: with_lock"), invalid, with_lock).await;
    }
    // dlock.max_ttl itself (1 day) is allowed.
    let guard = client.lock(&k).ttl(DAY).watchdog(false).acquire().await.unwrap();
    assert!(guard.release().await.unwrap());
    corpus.finish();
}

#[tokio::test]
async fn busy_keys_and_other_roles_get_not_acquired_timeout_or_permission_denied() {
    let _serial = SERIAL.lock().await;
    let mut corpus = Corpus::new("busy_and_roles").await;
    const T: &str = "corpus_busy";
    // Victims held through SQL by a plain role: a TTL lease and a session-bound one.
    let holder = dlock_tests::Cluster::shared().connect_as(PLAIN).await;
    let (ttl_key, bound_key, free_key) = (key(T, "ttl"), key(T, "bound"), key(T, "free"));
    let victim = owner(T, "victim");
    holder.try_acquire(&ttl_key, &victim, "1 hour").await.unwrap().expect("TTL victim");
    holder.acquire(&bound_key, &victim, None, Some("0")).await.unwrap().expect("session-bound victim");
    let (client, plain) = (client_as("postgres"), client_as(PLAIN));
    // The state shows a waiting client's watch, so that "no watch was left" can fail.
    let base = state(&corpus.admin).await;
    let waiting = tokio::spawn(client.lock(&ttl_key).wait_forever().acquire());
    dlock_tests::wait_for_watchers(&corpus.admin, &ttl_key, 1).await;
    assert!(state(&corpus.admin).await.iter().any(|s| s.starts_with("watch ")), "the watch is seen");
    waiting.abort();
    dlock_tests::wait_for_watchers(&corpus.admin, &ttl_key, 0).await;
    assert_eq!(state(&corpus.admin).await, base, "the ended wait's watch is gone");
    for k in [&ttl_key, &bound_key] {
        let on = |what: &str| format!("{what} on {k:?}");
        corpus.bad(&on("try_acquire"), Want::Answer("None"), client.lock(k).try_acquire()).await;
        corpus.bad(&on("acquire"), Want::NotAcquired, client.lock(k).acquire()).await;
        let zero = client.lock(k).wait(Duration::ZERO).acquire();
        corpus.bad(&on("acquire, zero wait"), Want::NotAcquired, zero).await;
        corpus.bad(&on("acquire, wait"), Want::Timeout, client.lock(k).wait(SHORT_WAIT).acquire()).await;
        let queued = client.lock(k).server_queue().wait(SHORT_WAIT).acquire();
        corpus.bad(&on("acquire, wait in the server's queue"), Want::Timeout, queued).await;
        let session_bound = client.lock(k).session_bound().wait(SHORT_WAIT).acquire();
        corpus.bad(&on("session-bound acquire, wait"), Want::Timeout, session_bound).await;
        corpus.bad(&on("with_lock"), Want::NotAcquired, client.with_lock(k, |_| async {})).await;
        // The holder's owner string from another role is another owner.
        let same_owner = client.with_owner(victim.as_str()).lock(k).try_acquire();
        corpus
            .bad(&on("try_acquire as the holder's owner, another role"), Want::Answer("None"), same_owner)
            .await;
        corpus.bad(&on("force_release by a plain role"), Want::Denied, plain.force_release(k)).await;
    }
    // Whereas the same owner string from the same role is the holder: a reentrant grant.
    let reentry = plain.with_owner(victim.as_str()).lock(&ttl_key).watchdog(false).acquire().await.unwrap();
    assert!(reentry.release().await.unwrap());
    corpus
        .bad("force_release of a free key by a plain role", Want::Denied, plain.force_release(&free_key))
        .await;
    let empty = plain.force_release("");
    corpus.bad("force_release of '' by a plain role", Want::InvalidOrDenied, empty).await;
    corpus.bad("force_release of a free key", Want::Answer("false"), client.force_release(&free_key)).await;
    for (what, url) in [
        ("an unparsable URL", "postgresql://[broken"),
        ("a port out of range", "host=127.0.0.1 port=99999 user=postgres"),
    ] {
        corpus.bad(what, Want::Config, async { Client::connect_lazy(url).map(|_| ()) }).await;
    }
    assert!(holder.release(&ttl_key, &victim).await.unwrap());
    assert!(holder.release(&bound_key, &victim).await.unwrap());
    corpus.finish();
}

#[tokio::test]
async fn a_guard_whose_lease_was_force_released_gets_lock_lost_and_changes_nothing() {
    let _serial = SERIAL.lock().await;
    let mut corpus = Corpus::new("force_released_guards").await;
    let (client, other) = (client_as("postgres"), client_as("postgres"));
    let k = key("corpus_stale", "k");
    for session_bound in [false, true] {
        let what = if session_bound { "session-bound guard" } else { "TTL guard" };
        let builder = client.lock(&k).ttl(Duration::from_secs(3600)).watchdog(false);
        let guard = if session_bound { builder.session_bound() } else { builder }.acquire().await.unwrap();
        assert!(client.force_release(&k).await.unwrap(), "{what}: force-released");
        corpus.bad(&format!("{what}: holds"), Want::Answer("false"), guard.holds()).await;
        corpus.bad(&format!("{what}: renew"), Want::LockLost, guard.renew()).await;
        assert!(guard.lost().is_cancelled(), "{what}: the refused renew fired lost");
        assert!(!guard.is_held(), "{what}: not held");
        // Someone else takes the key: the stale guard must not touch their lease.
        let theirs = other.lock(&k).ttl(Duration::from_secs(3600)).watchdog(false).acquire().await.unwrap();
        assert!(theirs.fence() > guard.fence());
        corpus.bad(&format!("{what}: renew, the key retaken"), Want::LockLost, guard.renew()).await;
        corpus.bad(&format!("{what}: holds, the key retaken"), Want::Answer("false"), guard.holds()).await;
        corpus
            .bad(&format!("{what}: release, the key retaken"), Want::Answer("false"), guard.release())
            .await;
        assert!(theirs.holds().await.unwrap(), "{what}: the new holder's lease is intact");
        assert!(theirs.release().await.unwrap());
    }
    corpus.finish();
}

#[tokio::test]
async fn look_alike_keys_and_owners_stay_distinct_through_the_client() {
    let _serial = SERIAL.lock().await;
    let mut corpus = Corpus::new("look_alike").await;
    let pairs = [
        ("caf\u{e9}", "cafe\u{301}"),
        ("K", "\u{212a}"),
        ("key", "\u{ff4b}\u{ff45}\u{ff59}"),
        ("ab", "a\u{200b}b"),
        ("a", "\u{430}"),
        ("key", "KEY"),
        ("k", "k "),
        ("\u{1f600}", "\u{1f600}\u{fe0f}"),
    ];
    let base = client_as("postgres");
    for (i, (left, right)) in pairs.into_iter().enumerate() {
        let (lk, rk) =
            (key("corpus_alike", &format!("{i}/{left}")), key("corpus_alike", &format!("{i}/{right}")));
        let (a, b) = (base.with_owner(format!("{i}:{left}")), base.with_owner(format!("{i}:{right}")));
        let la = a.lock(&lk).watchdog(false).acquire().await.unwrap();
        let rb = b.lock(&rk).watchdog(false).acquire().await.unwrap();
        assert_ne!(la.fence(), rb.fence(), "{left:?}/{right:?}: two grants");
        for (k, guard, c) in [(&lk, &la, &a), (&rk, &rb, &b)] {
            let row = corpus.admin.lease(k).await.unwrap().expect("listed");
            assert_eq!(
                (row.key.as_bytes(), row.owner.as_deref(), row.fence),
                (k.as_bytes(), Some(c.owner()), guard.fence())
            );
        }
        // Each look-alike owner is another owner of the other's key.
        corpus
            .bad(
                &format!("{right:?} owner on the {left:?} key"),
                Want::Answer("None"),
                b.lock(&lk).try_acquire(),
            )
            .await;
        corpus
            .bad(&format!("{left:?} owner on the {right:?} key"), Want::NotAcquired, a.lock(&rk).acquire())
            .await;
        assert!(la.release().await.unwrap() && rb.release().await.unwrap());
    }
    corpus.finish();
}

#[tokio::test]
async fn injection_strings_are_ordinary_keys_and_owners_through_the_client() {
    let _serial = SERIAL.lock().await;
    let mut corpus = Corpus::new("injection").await;
    let strings = [
        "'); DROP TABLE dlock_internal.lease; --",
        "' OR '1'='1",
        "$1",
        "$$; DROP SCHEMA dlock_internal CASCADE; $$",
        "%",
        "_",
        "\\",
        "'",
        "--",
        ";",
        "NULL",
        " ",
        "\n",
        "\u{7f}",
        "%s%s%n",
        "${jndi:ldap://example.invalid/a}",
    ];
    let (base, stranger) = (client_as("postgres"), client_as("postgres"));
    let before = state(&corpus.admin).await;
    for s in strings {
        let client = base.with_owner(s);
        let guard = client.lock(s).watchdog(false).acquire().await.unwrap_or_else(|e| panic!("{s:?}: {e}"));
        let row = corpus.admin.lease(s).await.unwrap().unwrap_or_else(|| panic!("{s:?}: not listed"));
        assert_eq!((row.key.as_str(), row.owner.as_deref(), row.fence), (s, Some(s), guard.fence()), "{s:?}");
        corpus
            .bad(&format!("{s:?}: another owner tries"), Want::Answer("None"), stranger.lock(s).try_acquire())
            .await;
        corpus
            .bad(
                &format!("{s:?}: another owner waits"),
                Want::Timeout,
                stranger.lock(s).wait(SHORT_WAIT).acquire(),
            )
            .await;
        assert!(guard.renew().await.unwrap().is_some(), "{s:?}: renew");
        assert!(guard.release().await.unwrap(), "{s:?}: release");
        assert!(free_for_others(s).await, "{s:?}: free once released");
    }
    assert_eq!(state(&corpus.admin).await, before, "every string's lease is gone, nothing else touched");
    corpus.finish();
}

/// A wait of `Duration::MAX` is a wait without practical limit and a ttl of `Duration::MAX` is
/// above `dlock.max_ttl`: neither may panic, and the ttl is an invalid argument.
#[tokio::test]
async fn huge_durations_neither_panic_nor_come_back_as_database_errors() {
    let _serial = SERIAL.lock().await;
    let mut corpus = Corpus::new("huge_durations").await;
    let client = client_as("postgres");
    let k = key("corpus_huge", "k");
    // Each call in a task of its own, so that a panic is reported as one failure among others.
    let ttl = tokio::spawn(client.lock(&k).ttl(Duration::MAX).try_acquire());
    match ttl.await {
        Ok(outcome) => corpus.bad("ttl(Duration::MAX)", Want::Invalid("22023"), async { outcome }).await,
        Err(e) => {
            corpus.failures.push(format!("ttl(Duration::MAX): {e}"));
            corpus.tried += 1;
        }
    }
    for (what, builder) in [
        ("server_queue().wait(Duration::MAX)", client.lock(&k).server_queue().wait(Duration::MAX)),
        ("wait(Duration::MAX)", client.lock(&k).wait(Duration::MAX)),
    ] {
        match tokio::spawn(builder.acquire()).await {
            Ok(Ok(guard)) => assert!(guard.release().await.unwrap()),
            Ok(Err(e)) => corpus.failures.push(format!("{what} on a free key: {e:?}")),
            Err(e) => corpus.failures.push(format!("{what} on a free key: {e}")),
        }
        corpus.tried += 1;
    }
    corpus.finish();
}

/// A bad ttl is refused by the server whatever else the client is doing: even when another
/// wait of the same client is lined up for the key, the call must not sit behind it and end in
/// `Timeout`.
#[tokio::test]
async fn a_bad_ttl_behind_a_waiter_of_the_same_client_is_an_invalid_argument() {
    let _serial = SERIAL.lock().await;
    let mut corpus = Corpus::new("bad_ttl_behind_a_line").await;
    let (client, holder) = (client_as("postgres"), client_as("postgres"));
    let k = key("corpus_line", "k");
    let held = holder.lock(&k).ttl(Duration::from_secs(3600)).watchdog(false).acquire().await.unwrap();
    let waiter = tokio::spawn(client.lock(&k).wait_forever().acquire());
    dlock_tests::wait_for_watchers(&corpus.admin, &k, 1).await;
    let zero = client.lock(&k).ttl(Duration::ZERO).wait(SECOND).acquire();
    corpus.bad("zero ttl behind a waiter", Want::Invalid("22023"), zero).await;
    let empty_owner = client.with_owner("").lock(&k).wait(SECOND).acquire();
    corpus.bad("empty owner behind a waiter", Want::Invalid("22023"), empty_owner).await;
    waiter.abort();
    assert!(held.release().await.unwrap());
    corpus.finish();
}

/// A renewal period too long to schedule means "never renew": the lease runs out at its ttl and
/// `lost` fires, as with the watchdog off.
#[tokio::test]
async fn renew_every_duration_max_still_fires_lost_when_the_ttl_runs_out() {
    let _serial = SERIAL.lock().await;
    let k = key("corpus_renew_every", "k");
    let guard =
        client_as("postgres").lock(&k).ttl(SECOND).renew_every(Duration::MAX).acquire().await.unwrap();
    within(Duration::from_secs(3), "lost fires when the unrenewed lease runs out", guard.lost().cancelled())
        .await;
    // `lost` fires on the client's clock, a little before the server's expiry (never after it);
    // once the server agrees, the release finds nothing to give back.
    let what = "the server sees the lease run out";
    eventually(Duration::from_secs(2), what, || async { !guard.holds().await.unwrap() }).await;
    assert!(!guard.release().await.unwrap(), "the lease ran out");
}
