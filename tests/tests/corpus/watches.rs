//! The newer functions: one-shot tries (`dlock_try_acquire`) and watches (`dlock_watch`,
//! `dlock_unwatch`). Their single bad arguments are in `arguments`' matrix and their invalid
//! text in `encoding`; here are several bad arguments at once, calls the server cannot
//! resolve, tries by non-owners, and watches a failed or rolled-back statement must not leave.

use dlock_tests::Cluster;
use tokio_postgres::error::SqlState;

use crate::callers::{Caller, Callers};
use crate::entries::{Entry, Expect, answer, entry, err, lit};
use crate::snapshot::{listening, snapshot};
use crate::targets::Target;

/// Checks that snapshots and `listening` see a watch, so that entries that must leave none can
/// fail: `key` watched by the user shows up in both, and unwatched is gone from both.
pub async fn assert_snapshots_see_watches(callers: &Callers, key: &str) {
    let s = &callers.user;
    let (before, listening_before) = (snapshot(&callers.superuser).await, listening(s).await);
    let channel: String = s.query_one("SELECT dlock_watch($1)", &[&key]).await.unwrap().get(0);
    let watched = snapshot(&callers.superuser).await;
    assert_eq!(watched.watches(), before.watches() + 1, "a snapshot shows the watch lock of {key:?}");
    assert!(listening(s).await.contains(&channel), "the watcher LISTENs on {channel}");
    let unwatched: bool = s.query_one("SELECT dlock_unwatch($1)", &[&key]).await.unwrap().get(0);
    assert!(unwatched, "unwatch finds the watch");
    assert_eq!(snapshot(&callers.superuser).await, before, "unwatched: the watch lock is gone");
    assert_eq!(listening(s).await, listening_before, "unwatched: no more LISTEN");
}

/// What a try answers, as one word: the SQL of `dlock_try_acquire(key, owner, ttl, settle)`
/// (all SQL expressions) naming its outcome.
fn try_outcome(key: &str, owner: &str, ttl: &str, settle: &str) -> String {
    format!(
        "SELECT CASE WHEN fence IS NOT NULL THEN 'granted' \
                     WHEN retry_after IS NULL THEN 'busy until freed' \
                     WHEN retry_after > interval '50 minutes' AND retry_after <= interval '1 hour' \
                       THEN 'busy for about an hour' \
                     ELSE 'busy, retry after ' || retry_after END \
           FROM dlock_try_acquire({key}, {owner}, {ttl}, {settle})"
    )
}

/// The answer of a try by a non-owner on `target`: busy until its TTL lease runs out (about an
/// hour), or until its session-bound lease is freed (no retry_after).
fn busy(target: &Target) -> Expect {
    answer(Some(if target.session_bound { "busy until freed" } else { "busy for about an hour" }))
}

/// Calls of the newer functions with several bad arguments at once, and calls the server
/// cannot even resolve (42883).
pub fn combinations(target: &Target) -> Vec<Entry> {
    use SqlState as S;
    let (k, o) = (lit(&target.key), lit(&target.owner));
    let both = || Expect::AnyError(vec![S::NULL_VALUE_NOT_ALLOWED, S::INVALID_PARAMETER_VALUE]);
    let on = |what: &str| format!("{what} on the {} key", target.name);
    let user = |what: &str, sql: String, expect: Expect| entry(on(what), Caller::User, sql, expect);
    vec![
        user(
            "try, all NULL",
            "SELECT dlock_try_acquire(NULL, NULL, NULL, NULL)::text".into(),
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        user(
            "try/3, all NULL",
            "SELECT dlock_try_acquire(NULL, NULL, NULL)::text".into(),
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        user(
            "try in FROM, all NULL",
            "SELECT fence::text FROM dlock_try_acquire(NULL, NULL, NULL, NULL)".into(),
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        user(
            "try, typed NULLs",
            "SELECT dlock_try_acquire(NULL::text, NULL::text, NULL::interval, NULL::interval)::text".into(),
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        user(
            "try, empty key and NULL owner",
            "SELECT dlock_try_acquire('', NULL, '1 hour', '0')::text".into(),
            both(),
        ),
        user(
            "try, NULL key and empty owner",
            "SELECT dlock_try_acquire(NULL, '', '1 hour', '0')::text".into(),
            both(),
        ),
        user(
            "try, empty key, owner, ttl 0, settle < 0",
            "SELECT dlock_try_acquire('', '', '0', '-1 second')::text".into(),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        user(
            "try, ttl 0 and settle < 0",
            format!("SELECT dlock_try_acquire({k}, {o}, '0', '-1 second')::text"),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        user(
            "try, ttl over max and settle < 0",
            format!("SELECT dlock_try_acquire({k}, {o}, '2 days', '-1 day')::text"),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        user(
            "try in FROM, ttl over max",
            format!("SELECT fence::text FROM dlock_try_acquire({k}, {o}, '1 day 1 second', '0')"),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        user(
            "try, named arguments, settle < 0",
            format!(
                "SELECT dlock_try_acquire(key => {k}, owner => {o}, ttl => '1 hour', settle => '-1 second')::text"
            ),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        user(
            "try, named arguments in another order, ttl < 0",
            format!(
                "SELECT dlock_try_acquire(settle => '0', ttl => '-1 hour', owner => {o}, key => {k})::text"
            ),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        user(
            "try, `wait` where `settle` is meant",
            format!("SELECT dlock_try_acquire(key => {k}, owner => {o}, ttl => '1 hour', wait => '0')::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        user(
            "try, two arguments",
            format!("SELECT dlock_try_acquire({k}, {o})::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        user(
            "try, five arguments",
            format!("SELECT dlock_try_acquire({k}, {o}, '1 hour', '0', '0')::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        user(
            "try, an integer ttl",
            format!("SELECT dlock_try_acquire({k}, {o}, 3600, '0')::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        user(
            "try, an integer owner",
            format!("SELECT dlock_try_acquire({k}, 42, '1 hour', '0')::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        user("watch, no argument", "SELECT dlock_watch()::text".into(), err(S::UNDEFINED_FUNCTION)),
        user(
            "watch, two arguments",
            format!("SELECT dlock_watch({k}, {k})::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        user("watch, an integer key", "SELECT dlock_watch(42)::text".into(), err(S::UNDEFINED_FUNCTION)),
        user(
            "watch, named NULL key",
            "SELECT dlock_watch(key => NULL)::text".into(),
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        user(
            "watch, typed NULL key",
            "SELECT dlock_watch(NULL::text)::text".into(),
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        user(
            "watch, a NULL key then a valid one in one statement",
            format!("SELECT dlock_watch(NULL), dlock_watch({k})"),
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        user(
            "unwatch of an unwatched key, then watch of an empty key, in one statement",
            format!("SELECT dlock_unwatch({k}), dlock_watch('')"),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        user("unwatch, no argument", "SELECT dlock_unwatch()::text".into(), err(S::UNDEFINED_FUNCTION)),
        user("unwatch, an integer key", "SELECT dlock_unwatch(42)::text".into(), err(S::UNDEFINED_FUNCTION)),
        user(
            "unwatch, typed NULL key",
            "SELECT dlock_unwatch(NULL::text)::text".into(),
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
    ]
}

/// Tries on a held `target` that must find it busy and change nothing: by owners that are not
/// its owner (`wrong_owners`), by another role with the right owner string, with a
/// session-bound ttl, with no settle limit (nothing is changing the key); the holder's own try
/// in a read-only transaction (a reentry writes: 25006); unwatches of a key nobody watches.
pub fn non_owner_entries(target: &Target, wrong_owners: &[String]) -> Vec<Entry> {
    let (k, o) = (lit(&target.key), lit(&target.owner));
    let on = |what: &str| format!("{what} on the {} key", target.name);
    let mut entries: Vec<Entry> = wrong_owners
        .iter()
        .map(|wrong| {
            entry(
                on(&format!("try as {wrong:?}")),
                Caller::User,
                try_outcome(&k, &lit(wrong), "'1 hour'", "'0'"),
                busy(target),
            )
        })
        .collect();
    let stranger = lit(&wrong_owners[0]);
    entries.extend([
        entry(on("try by another role"), Caller::Other, try_outcome(&k, &o, "'1 hour'", "'0'"), busy(target)),
        entry(on("try session-bound"), Caller::User, try_outcome(&k, &stranger, "NULL", "'0'"), busy(target)),
        entry(
            on("try with no settle limit"),
            Caller::User,
            try_outcome(&k, &stranger, "'1 hour'", "NULL"),
            busy(target),
        ),
        entry(
            on("unwatch, never watched"),
            Caller::User,
            format!("SELECT dlock_unwatch({k})::text"),
            answer(Some("false")),
        ),
        entry(
            on("unwatch by another role, never watched"),
            Caller::Other,
            format!("SELECT dlock_unwatch({k})::text"),
            answer(Some("false")),
        ),
    ]);
    let mut read_only = entry(
        on("the holder's try in a read-only transaction"),
        Caller::User,
        try_outcome(&k, &o, "'1 hour'", "'0'"),
        err(SqlState::READ_ONLY_SQL_TRANSACTION),
    );
    read_only.read_only = true;
    entries.push(read_only);
    entries
}

/// On a free key: a try in a read-only transaction would grant, and is refused (25006);
/// unwatching it finds no watch.
pub fn free_key_entries(free: &Target) -> Vec<Entry> {
    let k = lit(&free.key);
    let mut read_only = entry(
        "try of a free key in a read-only transaction",
        Caller::User,
        try_outcome(&k, &lit(&free.owner), "'1 hour'", "'0'"),
        err(SqlState::READ_ONLY_SQL_TRANSACTION),
    );
    read_only.read_only = true;
    vec![
        read_only,
        entry(
            "unwatch of a free key",
            Caller::User,
            format!("SELECT dlock_unwatch({k})::text"),
            answer(Some("false")),
        ),
        entry(
            "unwatch of a free key by an admin",
            Caller::Admin,
            format!("SELECT dlock_unwatch({k})::text"),
            answer(Some("false")),
        ),
    ]
}

/// Watches that a statement which failed, or a transaction that was rolled back, must not
/// leave behind (LISTEN is undone with them; the watch lock must be too), and an unwatch that
/// was rolled back must not take away. Returns how many.
pub async fn run_undone_watches(test: &str) -> usize {
    use SqlState as S;
    let callers = Callers::connect(Cluster::shared()).await;
    // A key of its own per entry: a watch lock left by one must not hide another's.
    let k = |n: u32| lit(&dlock_tests::key(test, &format!("k{n}")));
    let mut rolled_back = entry(
        "a watch in a transaction that is rolled back",
        Caller::User,
        format!("SELECT dlock_watch({}) LIKE 'dlock\\_%'", k(1)),
        answer(Some("t")),
    );
    rolled_back.read_only = true;
    // The reverse: an unwatch rolled back must leave the watch lock (and the LISTEN) in place.
    let watched = dlock_tests::key(test, "k5");
    callers.user.query_one("SELECT dlock_watch($1)", &[&watched]).await.expect("watch k5");
    let mut unwatch_rolled_back = entry(
        "an unwatch in a transaction that is rolled back",
        Caller::User,
        format!("SELECT dlock_unwatch({})", lit(&watched)),
        answer(Some("t")),
    );
    unwatch_rolled_back.read_only = true;
    let entries = [
        entry(
            "watch, a valid key then a NULL one in one statement",
            Caller::User,
            format!("SELECT dlock_watch({}), dlock_watch(NULL)", k(2)),
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            "watch, a valid key then an empty one in one statement",
            Caller::User,
            format!("SELECT dlock_watch({}), dlock_watch('')", k(3)),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        entry(
            "watch, then a division by zero in the same statement",
            Caller::User,
            // random() keeps the planner from folding the division (and failing before the watch).
            format!("SELECT dlock_watch({}), 1 / (random() < 0)::int", k(4)),
            err(S::DIVISION_BY_ZERO),
        ),
        rolled_back,
        unwatch_rolled_back,
    ];
    callers.try_all(&entries).await
}
