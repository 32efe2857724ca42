//! A corpus of hostile and bad input through SQL. Every entry must get its SQLSTATE (the
//! contract's, or the server's own where the server rejects the value before dlock sees it) or
//! its contracted NULL/false answer, and must change nothing: the `dlock_locks` view and the
//! rows of the internal lease table, read by a superuser, are compared before and after each
//! entry. Inputs that look hostile but are valid (look-alike keys, SQL-injection strings) must
//! work as ordinary, distinct keys and owners.
//!
//! `bad_input.rs` pins the contract's table once per function with typed parameters; this
//! corpus goes wide instead: every bad value in every argument of every function (as SQL
//! literals, on a key held by a TTL lease, on one held by a session-bound lease and on a free
//! key), values the server itself refuses, several bad arguments at once, non-owners, other
//! roles, the `dlock.max_ttl` setting, read-only transactions and waits that end in 57014 —
//! for `dlock_try_acquire`, `dlock_watch` and `dlock_unwatch` too, where "nothing changes" also
//! means no session gained or lost a watch lock, and the caller LISTENs on what it did before.
//!
//! Layout: `entries` (a statement and the answer it must get), `callers` (roles, sessions, the
//! loop that runs entries between two `snapshot`s), `targets` (the keys aimed at); the entries
//! themselves in `arguments`, `combinations`, `encoding`, `owners`, `settings` and `watches`
//! (the newer functions), `modes` (one's own lease in another mode); the tests that take keys for real in `lookalike`, `injection` and
//! `waits`.
//!
//! The tests compare whole-table snapshots, so they run one at a time. Each prints
//! `corpus: N bad inputs tried (...)`.

mod arguments;
mod callers;
mod combinations;
mod encoding;
mod entries;
mod injection;
mod lookalike;
mod modes;
mod owners;
mod settings;
mod snapshot;
mod targets;
mod waits;
mod watches;

use std::future::Future;

/// Whole-table snapshots are only meaningful while no other test of this corpus runs.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Runs one test's corpus alone (`run` yields how many inputs it tried) and prints the count.
async fn serially(test: &str, run: impl Future<Output = usize>) {
    let _serial = SERIAL.lock().await;
    let tried = run.await;
    println!("corpus: {tried} bad inputs tried ({test})");
}

#[tokio::test]
async fn every_bad_argument_of_every_function_gets_its_sqlstate_and_changes_nothing() {
    const T: &str = "every_bad_argument";
    serially(T, arguments::run(T)).await;
}

#[tokio::test]
async fn non_owners_other_roles_and_look_alike_names_get_null_false_or_42501() {
    const T: &str = "non_owners";
    serially(T, owners::run(T)).await;
}

/// A plain role that sets `dlock.max_ttl` before the library is loaded in its session (when
/// PostgreSQL still takes it as a placeholder) does not raise the limit either.
#[tokio::test]
async fn placeholder_max_ttl_set_before_the_library_loads_does_not_raise_the_limit() {
    const T: &str = "placeholder_max_ttl";
    serially(T, settings::run(T)).await;
}

/// Mode conflicts with one's own lease (0A000) and semaphores whose participants disagree on
/// their permits (22023), on shared, exclusive and leader leases.
#[tokio::test]
async fn mode_conflicts_and_semaphore_mismatches_change_nothing() {
    const T: &str = "modes";
    serially(T, modes::run(T)).await;
}

/// Look-alike pairs (precomposed and decomposed, fullwidth, compatibility characters,
/// invisible characters, confusable scripts, case): keys are byte strings, so each pair is two
/// keys that two owners hold at once, and owners are byte strings too.
#[tokio::test]
async fn look_alike_keys_and_owners_stay_distinct() {
    const T: &str = "look_alike";
    serially(T, lookalike::run(T)).await;
}

/// SQL-injection strings, LIKE wildcards, escapes and control characters are ordinary keys and
/// owners: granted, listed byte for byte, and never matching anything but themselves.
#[tokio::test]
async fn injection_strings_are_ordinary_keys_and_owners() {
    const T: &str = "injection";
    serially(T, injection::run(T)).await;
}

/// Waits ended by `statement_timeout` or a cancel request fail with 57014 and leave no trace,
/// whether the key is held by a TTL lease or a session-bound one, and whether the waiter is
/// the head of the line or queued behind it.
#[tokio::test]
async fn ended_waits_fail_with_57014_and_leave_no_trace() {
    const T: &str = "ended_waits";
    serially(T, waits::run(T)).await;
}

/// A watch taken by a statement that then fails, or in a transaction that is rolled back, is
/// undone: LISTEN is, and the watch lock must be too; an unwatch rolled back keeps both.
#[tokio::test]
async fn a_watch_in_a_failed_statement_or_rolled_back_transaction_is_undone() {
    const T: &str = "undone_watches";
    serially(T, watches::run_undone_watches(T)).await;
}
