//! Every bad value of every argument of every function, the other arguments valid.

use dlock_tests::Cluster;
use tokio_postgres::error::SqlState;

use crate::callers::{Caller, Callers, USER};
use crate::entries::{Entry, Expect, entry, err, lit};
use crate::targets::{Target, release_victims, victims};
use crate::{combinations, encoding, modes, watches};

const KEY_MAX_BYTES: usize = 1024;
const OWNER_MAX_BYTES: usize = 256;
const INFO_MAX_BYTES: usize = 1024;
const MAX_KEYS: usize = 64;
const MEGABYTE: usize = 1 << 20;

/// The kinds of argument of the API.
#[derive(Clone, Copy, Debug)]
enum Arg {
    Key,
    Owner,
    AcquireTtl,
    RenewTtl,
    Wait,
    /// `dlock_try_acquire`'s `settle`: checked as a wait is (NULL is valid: no limit).
    Settle,
    Fence,
    /// `dlock_acquire_shared`'s `max_holders` (NULL is valid: no limit).
    MaxHolders,
    /// `dlock_acquire_all`'s `keys`.
    Keys,
    /// `dlock_campaign`'s `info` (NULL is valid).
    Info,
    /// A lock-delay: required, `0 ≤ lock_delay ≤ dlock.max_ttl`.
    LockDelay,
}

/// Every function of the API with the kinds of its arguments (`dlock_acquire` and
/// `dlock_try_acquire` in both forms), and who calls it (force release as an admin, so that its
/// argument checks are reached).
const FUNCTIONS: [(&str, &[Arg], Caller); 20] = [
    ("dlock_acquire", &[Arg::Key, Arg::Owner, Arg::AcquireTtl, Arg::Wait], Caller::User),
    ("dlock_acquire", &[Arg::Key, Arg::Owner, Arg::AcquireTtl], Caller::User),
    ("dlock_renew", &[Arg::Key, Arg::Owner, Arg::RenewTtl], Caller::User),
    ("dlock_release", &[Arg::Key, Arg::Owner], Caller::User),
    ("dlock_release_all", &[Arg::Owner], Caller::User),
    ("dlock_holds", &[Arg::Key, Arg::Fence], Caller::User),
    ("dlock_force_release", &[Arg::Key], Caller::Admin),
    ("dlock_try_acquire", &[Arg::Key, Arg::Owner, Arg::AcquireTtl, Arg::Settle], Caller::User),
    ("dlock_try_acquire", &[Arg::Key, Arg::Owner, Arg::AcquireTtl], Caller::User),
    ("dlock_watch", &[Arg::Key], Caller::User),
    ("dlock_unwatch", &[Arg::Key], Caller::User),
    // Contract version 2 (an election's name and candidate are checked as a key and an owner).
    ("dlock_acquire", &[Arg::Key, Arg::Owner, Arg::AcquireTtl, Arg::Wait, Arg::LockDelay], Caller::User),
    (
        "dlock_acquire_shared",
        &[Arg::Key, Arg::Owner, Arg::AcquireTtl, Arg::Wait, Arg::MaxHolders, Arg::LockDelay],
        Caller::User,
    ),
    ("dlock_acquire_shared", &[Arg::Key, Arg::Owner, Arg::AcquireTtl], Caller::User),
    ("dlock_acquire_all", &[Arg::Keys, Arg::Owner, Arg::AcquireTtl, Arg::Wait, Arg::LockDelay], Caller::User),
    ("dlock_acquire_all", &[Arg::Keys, Arg::Owner, Arg::AcquireTtl], Caller::User),
    (
        "dlock_campaign",
        &[Arg::Key, Arg::Owner, Arg::AcquireTtl, Arg::Info, Arg::Settle, Arg::LockDelay],
        Caller::User,
    ),
    ("dlock_campaign", &[Arg::Key, Arg::Owner, Arg::AcquireTtl], Caller::User),
    ("dlock_leader", &[Arg::Key], Caller::User),
    ("dlock_wait_free", &[Arg::Key, Arg::Settle], Caller::User),
];

/// A valid value of `arg` for `target`, as SQL.
fn valid(arg: Arg, target: &Target) -> String {
    match arg {
        Arg::Key => lit(&target.key),
        Arg::Owner => lit(&target.owner),
        Arg::AcquireTtl | Arg::RenewTtl => lit("1 hour"),
        Arg::Wait | Arg::Settle => lit("0"),
        Arg::Fence => target.fence.to_string(),
        Arg::MaxHolders | Arg::Info => "NULL".into(),
        Arg::Keys => format!("ARRAY[{}]", lit(&target.key)),
        Arg::LockDelay => lit("0"),
    }
}

/// Bad values of `arg`: (SQL, description, answer).
fn bad_values(arg: Arg, server_major: u32) -> Vec<(String, String, Expect)> {
    use SqlState as S;
    let text = |max: usize| {
        vec![
            ("NULL".to_string(), "NULL".to_string(), err(S::NULL_VALUE_NOT_ALLOWED)),
            (lit(""), "empty".into(), err(S::INVALID_PARAMETER_VALUE)),
            (lit(&"x".repeat(max + 1)), format!("{} bytes", max + 1), err(S::INVALID_PARAMETER_VALUE)),
            (lit(&"x".repeat(MEGABYTE)), "1 MB".into(), err(S::INVALID_PARAMETER_VALUE)),
            // Over the limit in bytes, not in characters: 2-, 3- and 4-byte UTF-8.
            (
                lit(&"é".repeat(max / 2 + 1)),
                format!("{} × 'é'", max / 2 + 1),
                err(S::INVALID_PARAMETER_VALUE),
            ),
            (
                lit(&format!("{}é", "€".repeat((max - 1) / 3))),
                format!("{} × '€' + 'é' ({} bytes)", (max - 1) / 3, (max - 1) / 3 * 3 + 2),
                err(S::INVALID_PARAMETER_VALUE),
            ),
            (
                lit(&"😀".repeat(max / 4 + 1)),
                format!("{} × U+1F600", max / 4 + 1),
                err(S::INVALID_PARAMETER_VALUE),
            ),
            (
                format!("repeat({}, {})", lit("k"), max + 1),
                format!("repeat('k', {})", max + 1),
                err(S::INVALID_PARAMETER_VALUE),
            ),
        ]
    };
    let interval = |v: &str, code: SqlState| (lit(v), v.to_string(), err(code));
    // Intervals dlock refuses (22023), and those the server refuses before dlock sees them
    // (overflow: 22008 or 22015; PostgreSQL 15 and 16 have no infinite intervals: 22007).
    // From 17 on, an infinite ttl is above dlock.max_ttl and a -infinite one is not positive
    // (22023); `wait => 'infinity'` is no bad argument there: it waits without limit.
    let infinite = server_major >= 17;
    let infinity = |sign: &str| {
        let code = if infinite { S::INVALID_PARAMETER_VALUE } else { S::INVALID_DATETIME_FORMAT };
        interval(&format!("{sign}infinity"), code)
    };
    let ttl = || {
        vec![
            interval("0", S::INVALID_PARAMETER_VALUE),
            interval("-1 second", S::INVALID_PARAMETER_VALUE),
            interval("-1 microsecond", S::INVALID_PARAMETER_VALUE),
            interval("0.4 microseconds", S::INVALID_PARAMETER_VALUE),
            interval("P-1D", S::INVALID_PARAMETER_VALUE),
            interval("1 day 1 microsecond", S::INVALID_PARAMETER_VALUE),
            interval("1 mon", S::INVALID_PARAMETER_VALUE),
            interval("-1 mon 31 days 1 microsecond", S::INVALID_PARAMETER_VALUE),
            interval("2147483647 mons 2147483647 days 2562047788 hours", S::INVALID_PARAMETER_VALUE),
            interval("-2147483648 mons -2147483648 days -2562047788 hours", S::INVALID_PARAMETER_VALUE),
            interval("178000000 years", S::INVALID_PARAMETER_VALUE),
            interval("300000000 years", S::DATETIME_FIELD_OVERFLOW),
            interval("10000000000 years", S::INTERVAL_FIELD_OVERFLOW),
            infinity(""),
            infinity("-"),
            interval("soon", S::INVALID_DATETIME_FORMAT),
        ]
    };
    let array = |what: &str, sql: String, code: SqlState| (sql, what.to_string(), err(code));
    let keys = |n: usize| {
        format!("ARRAY[{}]", (0..n).map(|i| lit(&format!("corpus-key-{i}"))).collect::<Vec<_>>().join(", "))
    };
    match arg {
        Arg::Key => text(KEY_MAX_BYTES),
        Arg::Owner => text(OWNER_MAX_BYTES),
        Arg::AcquireTtl => ttl(),
        Arg::RenewTtl => {
            let mut values = ttl();
            values.push(("NULL".into(), "NULL".into(), err(S::NULL_VALUE_NOT_ALLOWED)));
            values
        }
        Arg::Wait | Arg::Settle => {
            let mut values = vec![
                interval("-1 second", S::INVALID_PARAMETER_VALUE),
                interval("-1 microsecond", S::INVALID_PARAMETER_VALUE),
                interval("-1 mon 29 days", S::INVALID_PARAMETER_VALUE),
                interval("-2147483648 mons -2147483648 days -2562047788 hours", S::INVALID_PARAMETER_VALUE),
                interval("-300000000 years", S::DATETIME_FIELD_OVERFLOW),
                infinity("-"),
            ];
            if !infinite {
                values.push(infinity(""));
            }
            values
        }
        Arg::Fence => vec![
            // The contract names key and owner; a NULL fence is refused the same way.
            ("NULL".into(), "NULL".into(), err(S::NULL_VALUE_NOT_ALLOWED)),
            (lit("abc"), "'abc'".into(), err(S::INVALID_TEXT_REPRESENTATION)),
            (lit("1.5"), "'1.5'".into(), err(S::INVALID_TEXT_REPRESENTATION)),
            // A numeric constant: no dlock_holds(text, numeric).
            ("9223372036854775808".into(), "2^63".into(), err(S::UNDEFINED_FUNCTION)),
        ],
        Arg::MaxHolders => vec![
            ("0".into(), "0".into(), err(S::INVALID_PARAMETER_VALUE)),
            ("-1".into(), "-1".into(), err(S::INVALID_PARAMETER_VALUE)),
            ("(-2147483648)::int".into(), "-2^31".into(), err(S::INVALID_PARAMETER_VALUE)),
            (lit("two"), "'two'".into(), err(S::INVALID_TEXT_REPRESENTATION)),
            // Constants that are not integers: no such function.
            ("2147483648".into(), "2^31".into(), err(S::UNDEFINED_FUNCTION)),
            ("1.5".into(), "1.5".into(), err(S::UNDEFINED_FUNCTION)),
        ],
        Arg::Keys => vec![
            array("NULL", "NULL".into(), S::NULL_VALUE_NOT_ALLOWED),
            array("NULL::text[]", "NULL::text[]".into(), S::NULL_VALUE_NOT_ALLOWED),
            array("empty", "'{}'::text[]".into(), S::INVALID_PARAMETER_VALUE),
            array("a NULL element", "ARRAY['a', NULL]".into(), S::NULL_VALUE_NOT_ALLOWED),
            array("only NULL", "ARRAY[NULL]::text[]".into(), S::NULL_VALUE_NOT_ALLOWED),
            array("a duplicate", "ARRAY['a', 'b', 'a']".into(), S::INVALID_PARAMETER_VALUE),
            array("an empty key", "ARRAY['a', '']".into(), S::INVALID_PARAMETER_VALUE),
            array(
                "an over-long key",
                format!("ARRAY['a', {}]", lit(&"k".repeat(KEY_MAX_BYTES + 1))),
                S::INVALID_PARAMETER_VALUE,
            ),
            array(&format!("{} keys", MAX_KEYS + 1), keys(MAX_KEYS + 1), S::INVALID_PARAMETER_VALUE),
            array(
                "a million keys",
                "(SELECT array_agg(i::text) FROM generate_series(1, 1000000) AS i)".into(),
                S::INVALID_PARAMETER_VALUE,
            ),
            array("two dimensions", "'{{a,b},{c,d}}'::text[]".into(), S::INVALID_PARAMETER_VALUE),
            array("not an array", lit("a"), S::INVALID_TEXT_REPRESENTATION),
            array("an integer array", "ARRAY[1, 2]".into(), S::UNDEFINED_FUNCTION),
        ],
        Arg::Info => vec![
            (
                lit(&"i".repeat(INFO_MAX_BYTES + 1)),
                format!("{} bytes", INFO_MAX_BYTES + 1),
                err(S::INVALID_PARAMETER_VALUE),
            ),
            (lit(&"i".repeat(MEGABYTE)), "1 MB".into(), err(S::INVALID_PARAMETER_VALUE)),
            (
                lit(&"é".repeat(INFO_MAX_BYTES / 2 + 1)),
                format!("{} × 'é'", INFO_MAX_BYTES / 2 + 1),
                err(S::INVALID_PARAMETER_VALUE),
            ),
        ],
        Arg::LockDelay => {
            let mut values = vec![
                ("NULL".to_string(), "NULL".to_string(), err(S::NULL_VALUE_NOT_ALLOWED)),
                interval("-1 second", S::INVALID_PARAMETER_VALUE),
                interval("-1 microsecond", S::INVALID_PARAMETER_VALUE),
                interval("1 day 1 microsecond", S::INVALID_PARAMETER_VALUE),
                interval("1 mon", S::INVALID_PARAMETER_VALUE),
                interval("-2147483648 mons -2147483648 days -2562047788 hours", S::INVALID_PARAMETER_VALUE),
                interval("300000000 years", S::DATETIME_FIELD_OVERFLOW),
                interval("later", S::INVALID_DATETIME_FORMAT),
            ];
            values.extend([infinity(""), infinity("-")]);
            values
        }
    }
}

/// One entry per bad value of each argument of each function, the others valid for `target`.
fn matrix(target: &Target, server_major: u32) -> Vec<Entry> {
    let mut entries = Vec::new();
    for (function, args, caller) in FUNCTIONS {
        for (position, arg) in args.iter().enumerate() {
            for (bad, label, expect) in bad_values(*arg, server_major) {
                let values: Vec<String> = args
                    .iter()
                    .enumerate()
                    .map(|(i, a)| if i == position { bad.clone() } else { valid(*a, target) })
                    .collect();
                entries.push(entry(
                    format!("{function}/{}: {arg:?} {label} on the {} key", args.len(), target.name),
                    caller,
                    format!("SELECT {function}({})::text", values.join(", ")),
                    expect,
                ));
            }
        }
    }
    entries
}

/// Runs every bad value of every argument of every function on each target, the combinations
/// and the invalid text; returns how many entries ran. First checks that a snapshot does see
/// a watch, so that "no watch was left" means something.
pub async fn run(test: &str) -> usize {
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    let holder = cluster.connect_as(USER).await;
    let targets = victims(test, &callers.user, &holder).await;
    watches::assert_snapshots_see_watches(&callers, &targets[0].key).await;

    let server_major = callers.server_major().await;
    let mut entries = Vec::new();
    for target in &targets {
        entries.extend(matrix(target, server_major));
        entries.extend(combinations::combinations(target));
        entries.extend(modes::on_exclusive(target));
        entries.extend(watches::combinations(target));
    }
    entries.extend(encoding::invalid_text(&targets[0]));
    let tried = callers.try_all(&entries).await;

    release_victims(&callers.user, &targets).await;
    tried
}
