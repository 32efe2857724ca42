//! A corpus of hostile and bad input through SQL. Every entry must get its SQLSTATE (the
//! contract's, or the server's own where the server rejects the value before dlock sees it) or
//! its contracted NULL/false answer, and must change nothing: the `dlock_locks` view and the
//! rows of the internal lease table, read by a superuser, are compared before and after each
//! entry. Inputs that look hostile but are valid (look-alike keys, SQL-injection strings) must
//! work as ordinary, distinct keys and owners.
//!
//! `bad_input.rs` pins the contract's table once per function with typed parameters; this file
//! goes wide instead: every bad value in every argument of every function (as SQL literals, on
//! a key held by a TTL lease, on one held by a session-bound lease and on a free key), values
//! the server itself refuses, several bad arguments at once, non-owners, other roles, the
//! `dlock.max_ttl` setting, read-only transactions and waits that end in 57014.
//!
//! The tests of this file compare whole-table snapshots, so they run one at a time. Each
//! prints `corpus: N bad inputs tried (...)`.

use std::fmt;

use dlock_tests::{Cluster, Session, expect_sqlstate, finish, key, owner, wait_for_waiters};
use tokio_postgres::error::SqlState;
use tokio_postgres::{NoTls, SimpleQueryMessage};

/// Whole-table snapshots are only meaningful while no other test of this file runs.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const KEY_MAX_BYTES: usize = 1024;
const OWNER_MAX_BYTES: usize = 256;
const MEGABYTE: usize = 1 << 20;

/// The role that holds the victim leases and makes most bad calls.
const USER: &str = "corpus_user";
/// Another plain role.
const OTHER: &str = "corpus_other";
/// A member of `dlock_admin`.
const ADMIN: &str = "corpus_admin";

/// What the lease state looks like to a superuser: the view and the internal table, row by row.
#[derive(Debug, PartialEq)]
struct Snapshot {
    view: Vec<String>,
    table: Vec<String>,
}

async fn snapshot(superuser: &Session) -> Snapshot {
    let view = superuser
        .query(
            "SELECT format('%s|%s|%s|%s|%s|%s|%s|%s|%s', key, owner, fence, hold_count, acquired_at, \
                           expires_at, holder_pid, holder_role, waiters) \
               FROM dlock_locks ORDER BY key",
            &[],
        )
        .await
        .expect("read dlock_locks");
    let table = superuser
        .query("SELECT l::text FROM dlock_internal.lease AS l ORDER BY 1", &[])
        .await
        .expect("read dlock_internal.lease");
    Snapshot {
        view: view.iter().map(|r| r.get(0)).collect(),
        table: table.iter().map(|r| r.get(0)).collect(),
    }
}

/// An SQL string literal (standard_conforming_strings is on: only quotes need doubling).
fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// What an entry must answer.
#[derive(Clone, Debug)]
enum Expect {
    /// ERROR with this SQLSTATE.
    Error(SqlState),
    /// ERROR with any of these (several arguments are bad at once; the contract orders none).
    AnyError(Vec<SqlState>),
    /// The first column of the first row, as text (`None`: SQL NULL).
    Answer(Option<String>),
}

fn err(code: SqlState) -> Expect {
    Expect::Error(code)
}

fn answer(text: Option<&str>) -> Expect {
    Expect::Answer(text.map(str::to_string))
}

/// Who runs an entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Caller {
    User,
    Other,
    Admin,
    Superuser,
}

/// One bad input: SQL run through the simple query protocol by `caller`.
#[derive(Clone)]
struct Entry {
    what: String,
    caller: Caller,
    sql: String,
    /// Run inside `BEGIN READ ONLY` (rolled back after).
    read_only: bool,
    expect: Expect,
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // 1 MB literals make unreadable failure messages.
        let sql: String = self.sql.chars().take(160).collect();
        write!(
            f,
            "{} [{:?}: {sql}{}]",
            self.what,
            self.caller,
            if sql.len() < self.sql.len() { "…" } else { "" }
        )
    }
}

fn entry(what: impl Into<String>, caller: Caller, sql: impl Into<String>, expect: Expect) -> Entry {
    Entry { what: what.into(), caller, sql: sql.into(), read_only: false, expect }
}

/// The sessions of one test and the roles they run as.
struct Callers {
    superuser: Session,
    user: Session,
    other: Session,
    admin: Session,
}

impl Callers {
    async fn connect(cluster: &Cluster) -> Callers {
        let superuser = cluster.connect().await;
        superuser
            .batch_execute(&format!(
                "DO $$ BEGIN \
                   IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{USER}') THEN \
                     CREATE ROLE {USER} LOGIN; CREATE ROLE {OTHER} LOGIN; CREATE ROLE {ADMIN} LOGIN; \
                     GRANT dlock_admin TO {ADMIN}; \
                   END IF; \
                 END $$"
            ))
            .await
            .expect("create the roles of the corpus");
        let callers = Callers {
            superuser,
            user: cluster.connect_as(USER).await,
            other: cluster.connect_as(OTHER).await,
            admin: cluster.connect_as(ADMIN).await,
        };
        // Load dlock's library in every session, so that `dlock.max_ttl` is a real setting
        // there (not a placeholder any role may set).
        for s in [&callers.superuser, &callers.user, &callers.other, &callers.admin] {
            s.holds("corpus/load", 1).await.expect("load dlock");
        }
        callers
    }

    fn session(&self, caller: Caller) -> &Session {
        match caller {
            Caller::User => &self.user,
            Caller::Other => &self.other,
            Caller::Admin => &self.admin,
            Caller::Superuser => &self.superuser,
        }
    }

    /// Runs every entry, each between two snapshots; returns how many ran. Collects every
    /// failure before failing, so one run shows the whole picture.
    async fn try_all(&self, entries: &[Entry]) -> usize {
        let mut failures = Vec::new();
        for e in entries {
            let before = snapshot(&self.superuser).await;
            let s = self.session(e.caller);
            if e.read_only {
                s.batch_execute("BEGIN READ ONLY").await.expect("BEGIN READ ONLY");
            }
            let result = s.simple_query(&e.sql).await;
            if e.read_only {
                s.batch_execute("ROLLBACK").await.expect("ROLLBACK");
            }
            if let Some(problem) = judge(&e.expect, result) {
                failures.push(format!("{e:?}: {problem}"));
            }
            let after = snapshot(&self.superuser).await;
            if after != before {
                failures.push(format!("{e:?}: the state changed\n  before: {before:?}\n  after:  {after:?}"));
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {} entries failed:\n{}",
            failures.len(),
            entries.len(),
            failures.join("\n")
        );
        entries.len()
    }
}

/// What is wrong with `result`, if anything.
fn judge(expect: &Expect, result: Result<Vec<SimpleQueryMessage>, tokio_postgres::Error>) -> Option<String> {
    let state = |e: &tokio_postgres::Error| e.code().map_or("none".to_string(), |c| c.code().to_string());
    match (expect, result) {
        (Expect::Error(code), Err(e)) if e.code() == Some(code) => None,
        (Expect::AnyError(codes), Err(e)) if e.code().is_some_and(|c| codes.contains(c)) => None,
        (Expect::Answer(_), Err(e)) => Some(format!("expected an answer, got ERROR {} ({e})", state(&e))),
        (Expect::Answer(expected), Ok(messages)) => {
            let got = messages.iter().find_map(|m| match m {
                SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_string)),
                _ => None,
            });
            match got {
                Some(got) if got == *expected => None,
                got => Some(format!("expected {expected:?}, got {got:?}")),
            }
        }
        (expected, Err(e)) => Some(format!("expected {expected:?}, got ERROR {} ({e})", state(&e))),
        (expected, Ok(messages)) => {
            let rows: Vec<_> = messages
                .iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_string)),
                    _ => None,
                })
                .collect();
            Some(format!("expected {expected:?}, got rows {rows:?}"))
        }
    }
}

fn report(test: &str, tried: usize) {
    println!("corpus: {tried} bad inputs tried ({test})");
}

/// A key and owner a bad call aims at: held by a TTL lease, by a session-bound lease, or free.
struct Target {
    name: &'static str,
    /// Held by a session-bound lease.
    session_bound: bool,
    key: String,
    owner: String,
    /// The fence of its lease (any fence for a free key).
    fence: i64,
}

/// The kinds of argument of the API.
#[derive(Clone, Copy, Debug)]
enum Arg {
    Key,
    Owner,
    AcquireTtl,
    RenewTtl,
    Wait,
    Fence,
}

/// Every function of the API with the kinds of its arguments (`dlock_acquire` in both forms),
/// and who calls it (force release as an admin, so that its argument checks are reached).
const FUNCTIONS: [(&str, &[Arg], Caller); 7] = [
    ("dlock_acquire", &[Arg::Key, Arg::Owner, Arg::AcquireTtl, Arg::Wait], Caller::User),
    ("dlock_acquire", &[Arg::Key, Arg::Owner, Arg::AcquireTtl], Caller::User),
    ("dlock_renew", &[Arg::Key, Arg::Owner, Arg::RenewTtl], Caller::User),
    ("dlock_release", &[Arg::Key, Arg::Owner], Caller::User),
    ("dlock_release_all", &[Arg::Owner], Caller::User),
    ("dlock_holds", &[Arg::Key, Arg::Fence], Caller::User),
    ("dlock_force_release", &[Arg::Key], Caller::Admin),
];

/// A valid value of `arg` for `target`, as SQL.
fn valid(arg: Arg, target: &Target) -> String {
    match arg {
        Arg::Key => lit(&target.key),
        Arg::Owner => lit(&target.owner),
        Arg::AcquireTtl | Arg::RenewTtl => lit("1 hour"),
        Arg::Wait => lit("0"),
        Arg::Fence => target.fence.to_string(),
    }
}

/// Bad values of `arg`: (SQL, description, answer).
fn bad_values(arg: Arg) -> Vec<(String, String, Expect)> {
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
    // (PostgreSQL 15 has no infinite intervals: 22007; overflow: 22008 or 22015).
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
            interval("infinity", S::INVALID_DATETIME_FORMAT),
            interval("-infinity", S::INVALID_DATETIME_FORMAT),
            interval("soon", S::INVALID_DATETIME_FORMAT),
        ]
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
        Arg::Wait => vec![
            interval("-1 second", S::INVALID_PARAMETER_VALUE),
            interval("-1 microsecond", S::INVALID_PARAMETER_VALUE),
            interval("-1 mon 29 days", S::INVALID_PARAMETER_VALUE),
            interval("-2147483648 mons -2147483648 days -2562047788 hours", S::INVALID_PARAMETER_VALUE),
            interval("-300000000 years", S::DATETIME_FIELD_OVERFLOW),
            interval("-infinity", S::INVALID_DATETIME_FORMAT),
            interval("infinity", S::INVALID_DATETIME_FORMAT),
        ],
        Arg::Fence => vec![
            // The contract names key and owner; a NULL fence is refused the same way.
            ("NULL".into(), "NULL".into(), err(S::NULL_VALUE_NOT_ALLOWED)),
            (lit("abc"), "'abc'".into(), err(S::INVALID_TEXT_REPRESENTATION)),
            (lit("1.5"), "'1.5'".into(), err(S::INVALID_TEXT_REPRESENTATION)),
            // A numeric constant: no dlock_holds(text, numeric).
            ("9223372036854775808".into(), "2^63".into(), err(S::UNDEFINED_FUNCTION)),
        ],
    }
}

/// One entry per bad value of each argument of each function, the others valid for `target`.
fn matrix(target: &Target) -> Vec<Entry> {
    let mut entries = Vec::new();
    for (function, args, caller) in FUNCTIONS {
        for (position, arg) in args.iter().enumerate() {
            for (bad, label, expect) in bad_values(*arg) {
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

/// Calls with several bad arguments at once, and calls the server cannot even resolve.
fn combinations(target: &Target) -> Vec<Entry> {
    use SqlState as S;
    let (k, o) = (lit(&target.key), lit(&target.owner));
    let both = || Expect::AnyError(vec![S::NULL_VALUE_NOT_ALLOWED, S::INVALID_PARAMETER_VALUE]);
    let on = |what: &str| format!("{what} on the {} key", target.name);
    vec![
        entry(
            on("acquire, all NULL"),
            Caller::User,
            "SELECT dlock_acquire(NULL, NULL, NULL, NULL)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("acquire/3, all NULL"),
            Caller::User,
            "SELECT dlock_acquire(NULL, NULL, NULL)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("renew, all NULL"),
            Caller::User,
            "SELECT dlock_renew(NULL, NULL, NULL)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("release, all NULL"),
            Caller::User,
            "SELECT dlock_release(NULL, NULL)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("holds, all NULL"),
            Caller::User,
            "SELECT dlock_holds(NULL, NULL)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("acquire, typed NULLs"),
            Caller::User,
            "SELECT dlock_acquire(NULL::text, NULL::text, NULL::interval, NULL::interval)::text",
            err(S::NULL_VALUE_NOT_ALLOWED),
        ),
        entry(
            on("acquire, empty key and NULL owner"),
            Caller::User,
            "SELECT dlock_acquire('', NULL, '1 hour')::text",
            both(),
        ),
        entry(
            on("acquire, NULL key and empty owner"),
            Caller::User,
            "SELECT dlock_acquire(NULL, '', '1 hour')::text",
            both(),
        ),
        entry(
            on("acquire, empty key, owner, ttl 0, wait < 0"),
            Caller::User,
            "SELECT dlock_acquire('', '', '0', '-1 second')::text",
            err(S::INVALID_PARAMETER_VALUE),
        ),
        entry(
            on("acquire, ttl 0 and wait < 0"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {o}, '0', '-1 second')::text"),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        entry(
            on("acquire, ttl over max and wait < 0"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {o}, '2 days', '-1 day')::text"),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        entry(
            on("renew, empty key and ttl NULL"),
            Caller::User,
            format!("SELECT dlock_renew('', {o}, NULL)::text"),
            both(),
        ),
        entry(
            on("renew, NULL owner and ttl 0"),
            Caller::User,
            format!("SELECT dlock_renew({k}, NULL, '0')::text"),
            both(),
        ),
        entry(
            on("holds, empty key and NULL fence"),
            Caller::User,
            "SELECT dlock_holds('', NULL)::text",
            both(),
        ),
        entry(
            on("acquire, named arguments, wait < 0"),
            Caller::User,
            format!(
                "SELECT dlock_acquire(key => {k}, owner => {o}, ttl => '1 hour', wait => '-1 second')::text"
            ),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        entry(
            on("acquire, named arguments in another order, ttl < 0"),
            Caller::User,
            format!("SELECT dlock_acquire(wait => '0', ttl => '-1 hour', owner => {o}, key => {k})::text"),
            err(S::INVALID_PARAMETER_VALUE),
        ),
        entry(
            on("acquire, an unknown named argument"),
            Caller::User,
            format!(
                "SELECT dlock_acquire(key => {k}, owner => {o}, ttl => '1 hour', timeout => '1 second')::text"
            ),
            err(S::UNDEFINED_FUNCTION),
        ),
        entry(
            on("acquire, two arguments"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {o})::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        entry(
            on("acquire, five arguments"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {o}, '1 hour', '0', '0')::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        entry(
            on("acquire, an integer owner"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, 42, '1 hour')::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        entry(
            on("acquire, an integer ttl"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {o}, 3600)::text"),
            err(S::UNDEFINED_FUNCTION),
        ),
        entry(
            on("release_all, no argument"),
            Caller::User,
            "SELECT dlock_release_all()::text",
            err(S::UNDEFINED_FUNCTION),
        ),
    ]
}

/// Invalid UTF-8 and NUL bytes: the server refuses them before dlock sees a value (22021,
/// 54000, 42601). The two `SQL_ASCII` ones are the usual ways around the encoding check.
fn invalid_text(target: &Target) -> Vec<Entry> {
    use SqlState as S;
    let (k, o) = (lit(&target.key), lit(&target.owner));
    let mut entries = Vec::new();
    for (value, what, code) in [
        (
            "convert_from('\\xc3'::bytea, 'UTF8')",
            "a truncated 2-byte sequence",
            S::CHARACTER_NOT_IN_REPERTOIRE,
        ),
        ("convert_from('\\xc0af'::bytea, 'UTF8')", "an overlong '/'", S::CHARACTER_NOT_IN_REPERTOIRE),
        (
            "convert_from('\\xeda080'::bytea, 'UTF8')",
            "an encoded surrogate U+D800",
            S::CHARACTER_NOT_IN_REPERTOIRE,
        ),
        (
            "convert_from('\\xf4908080'::bytea, 'UTF8')",
            "a code point above U+10FFFF",
            S::CHARACTER_NOT_IN_REPERTOIRE,
        ),
        ("convert_from('\\xff'::bytea, 'UTF8')", "the byte 0xff", S::CHARACTER_NOT_IN_REPERTOIRE),
        (
            "convert_from('\\xc328'::bytea, 'SQL_ASCII')",
            "0xc3 0x28 declared SQL_ASCII",
            S::CHARACTER_NOT_IN_REPERTOIRE,
        ),
        (
            "convert('\\xff'::bytea, 'SQL_ASCII', 'UTF8')::text",
            "0xff converted from SQL_ASCII",
            S::CHARACTER_NOT_IN_REPERTOIRE,
        ),
        ("E'\\xc3\\x28'", "an escape-string literal 0xc3 0x28", S::CHARACTER_NOT_IN_REPERTOIRE),
        ("E'k\\x00'", "an escape-string literal with NUL", S::CHARACTER_NOT_IN_REPERTOIRE),
        ("chr(0)", "chr(0)", S::PROGRAM_LIMIT_EXCEEDED),
        ("U&'\\D800'", "a lone surrogate in a Unicode literal", S::SYNTAX_ERROR),
        ("E'\\uD800'", "a lone surrogate in an escape-string literal", S::SYNTAX_ERROR),
    ] {
        entries.push(entry(
            format!("acquire, key {what}"),
            Caller::User,
            format!("SELECT dlock_acquire({value}, {o}, '1 hour')::text"),
            err(code.clone()),
        ));
        entries.push(entry(
            format!("acquire, owner {what}"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {value}, '1 hour')::text"),
            err(code.clone()),
        ));
        entries.push(entry(
            format!("release_all, owner {what}"),
            Caller::User,
            format!("SELECT dlock_release_all({value})::text"),
            err(code),
        ));
    }
    entries
}

/// Takes the victims: a TTL lease and a session-bound one (on `holder`'s session), both of
/// role `USER`; returns them and a free key.
async fn victims(test: &str, user: &Session, holder: &Session) -> [Target; 3] {
    let ttl_owner = owner(test, "ttl-holder");
    let bound_owner = owner(test, "bound-holder");
    let ttl_key = key(test, "held-by-ttl");
    let bound_key = key(test, "held-session-bound");
    let ttl_fence = user.try_acquire(&ttl_key, &ttl_owner, "1 hour").await.unwrap().expect("victim granted");
    let bound_fence =
        holder.acquire(&bound_key, &bound_owner, None, Some("0")).await.unwrap().expect("granted");
    [
        Target { name: "TTL-held", session_bound: false, key: ttl_key, owner: ttl_owner, fence: ttl_fence },
        Target {
            name: "session-bound",
            session_bound: true,
            key: bound_key,
            owner: bound_owner,
            fence: bound_fence,
        },
        Target {
            name: "free",
            session_bound: false,
            key: key(test, "free"),
            owner: owner(test, "nobody"),
            fence: ttl_fence,
        },
    ]
}

async fn release_victims(user: &Session, targets: &[Target]) {
    for t in &targets[..2] {
        assert!(user.release(&t.key, &t.owner).await.unwrap(), "release victim {}", t.key);
    }
}

#[tokio::test]
async fn every_bad_argument_of_every_function_gets_its_sqlstate_and_changes_nothing() {
    const T: &str = "every_bad_argument";
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    let holder = cluster.connect_as(USER).await;
    let targets = victims(T, &callers.user, &holder).await;

    let mut entries = Vec::new();
    for target in &targets {
        entries.extend(matrix(target));
        entries.extend(combinations(target));
    }
    entries.extend(invalid_text(&targets[0]));
    let tried = callers.try_all(&entries).await;

    release_victims(&callers.user, &targets).await;
    report(T, tried);
}

#[tokio::test]
async fn non_owners_other_roles_and_look_alike_names_get_null_false_or_42501() {
    const T: &str = "non_owners";
    use SqlState as S;
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    let holder = cluster.connect_as(USER).await;
    let targets = victims(T, &callers.user, &holder).await;
    let null = || answer(None);
    let f = || answer(Some("false"));
    let zero = || answer(Some("0"));

    let mut entries = Vec::new();
    for t in &targets[..2] {
        let (k, o) = (t.key.as_str(), t.owner.as_str());
        let on = |what: &str| format!("{what} on the {} key", t.name);
        // Owner strings that are not the owner: other, case, spaces, prefixes, LIKE patterns.
        let wrong_owners = [
            owner(T, "stranger"),
            o.to_uppercase(),
            format!("{o} "),
            format!(" {o}"),
            o[..o.len() - 1].to_string(),
            format!("{o}x"),
            "%".to_string(),
            "_".repeat(o.len()),
            format!("{}%", &o[..3]),
            o.replace('-', "_"),
            format!("{o}\u{200B}"),
        ];
        for wrong in &wrong_owners {
            let w = lit(wrong);
            entries.push(entry(
                on(&format!("renew as {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_renew({}, {w}, '2 hours')::text", lit(k)),
                null(),
            ));
            entries.push(entry(
                on(&format!("release as {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_release({}, {w})::text", lit(k)),
                f(),
            ));
            entries.push(entry(
                on(&format!("release_all of {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_release_all({w})::text"),
                zero(),
            ));
            entries.push(entry(
                on(&format!("acquire as {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_acquire({}, {w}, '1 hour')::text", lit(k)),
                null(),
            ));
        }
        // Keys that are not the key, with the right owner.
        let wrong_keys = [
            k.to_uppercase(),
            format!("{k} "),
            k[..k.len() - 1].to_string(),
            "%".to_string(),
            "_".repeat(k.len()),
            format!("{}%", &k[..5]),
        ];
        for wrong in &wrong_keys {
            let w = lit(wrong);
            entries.push(entry(
                on(&format!("renew key {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_renew({w}, {}, '2 hours')::text", lit(o)),
                null(),
            ));
            entries.push(entry(
                on(&format!("release key {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_release({w}, {})::text", lit(o)),
                f(),
            ));
            entries.push(entry(
                on(&format!("holds key {wrong:?}")),
                Caller::User,
                format!("SELECT dlock_holds({w}, {})::text", t.fence),
                f(),
            ));
        }
        // Fences that are not the lease's.
        for fence in [t.fence - 1, t.fence + 1, 0, -1, -t.fence, i64::MIN, i64::MAX] {
            entries.push(entry(
                on(&format!("holds fence {fence}")),
                Caller::User,
                format!("SELECT dlock_holds({}, {})::text", lit(k), lit(&fence.to_string())),
                f(),
            ));
        }
        // The right owner from another role: 42501 for renew and release (and nothing for
        // release_all, which only covers the caller's role); acquire is busy.
        entries.push(entry(
            on("renew by another role"),
            Caller::Other,
            format!("SELECT dlock_renew({}, {}, '2 hours')::text", lit(k), lit(o)),
            err(S::INSUFFICIENT_PRIVILEGE),
        ));
        entries.push(entry(
            on("release by another role"),
            Caller::Other,
            format!("SELECT dlock_release({}, {})::text", lit(k), lit(o)),
            err(S::INSUFFICIENT_PRIVILEGE),
        ));
        entries.push(entry(
            on("release_all by another role"),
            Caller::Other,
            format!("SELECT dlock_release_all({})::text", lit(o)),
            zero(),
        ));
        entries.push(entry(
            on("acquire by another role"),
            Caller::Other,
            format!("SELECT dlock_acquire({}, {}, NULL)::text", lit(k), lit(o)),
            null(),
        ));
        // Force release by plain roles, even the lease's own.
        for caller in [Caller::User, Caller::Other] {
            entries.push(entry(
                on(&format!("force_release by {caller:?}")),
                caller,
                format!("SELECT dlock_force_release({})::text", lit(k)),
                err(S::INSUFFICIENT_PRIVILEGE),
            ));
        }
        entries.push(entry(
            on("force_release of '' by a plain role"),
            Caller::Other,
            "SELECT dlock_force_release('')::text",
            Expect::AnyError(vec![S::INVALID_PARAMETER_VALUE, S::INSUFFICIENT_PRIVILEGE]),
        ));
        entries.push(entry(
            on("force_release of NULL by a plain role"),
            Caller::Other,
            "SELECT dlock_force_release(NULL)::text",
            Expect::AnyError(vec![S::NULL_VALUE_NOT_ALLOWED, S::INSUFFICIENT_PRIVILEGE]),
        ));
        // Valid calls of the holder inside a read-only transaction: refused by the server.
        for (what, sql) in [
            ("acquire", format!("SELECT dlock_acquire({}, {}, '1 hour')::text", lit(k), lit(o))),
            ("renew", format!("SELECT dlock_renew({}, {}, '2 hours')::text", lit(k), lit(o))),
            ("release", format!("SELECT dlock_release({}, {})::text", lit(k), lit(o))),
            ("release_all", format!("SELECT dlock_release_all({})::text", lit(o))),
        ] {
            // Renewing a session-bound lease writes nothing: it answers 'infinity' even there.
            let expect = if what == "renew" && t.session_bound {
                answer(Some("infinity"))
            } else {
                err(S::READ_ONLY_SQL_TRANSACTION)
            };
            let mut e = entry(on(&format!("{what} in a read-only transaction")), Caller::User, sql, expect);
            e.read_only = true;
            entries.push(e);
        }
        let mut e = entry(
            on("force_release in a read-only transaction"),
            Caller::Admin,
            format!("SELECT dlock_force_release({})::text", lit(k)),
            err(S::READ_ONLY_SQL_TRANSACTION),
        );
        e.read_only = true;
        entries.push(e);
    }
    // The free key: nothing to renew, release, hold or force-release.
    let free = &targets[2];
    let (k, o) = (lit(&free.key), lit(&targets[0].owner));
    entries.push(entry(
        "renew of a free key",
        Caller::User,
        format!("SELECT dlock_renew({k}, {o}, '1 hour')::text"),
        null(),
    ));
    entries.push(entry(
        "release of a free key",
        Caller::User,
        format!("SELECT dlock_release({k}, {o})::text"),
        f(),
    ));
    entries.push(entry(
        "holds on a free key",
        Caller::User,
        format!("SELECT dlock_holds({k}, {})::text", free.fence),
        f(),
    ));
    entries.push(entry(
        "force_release of a free key",
        Caller::Admin,
        format!("SELECT dlock_force_release({k})::text"),
        f(),
    ));
    entries.push(entry(
        "release_all of an unknown owner",
        Caller::Admin,
        format!("SELECT dlock_release_all({})::text", lit(&owner(T, "unknown"))),
        zero(),
    ));
    entries.push(entry(
        "release_all of '%' by an admin",
        Caller::Admin,
        "SELECT dlock_release_all('%')::text",
        zero(),
    ));
    // dlock.max_ttl: plain roles cannot raise it, and nobody can set it to a non-positive value.
    for (caller, value, code) in [
        (Caller::User, "10 days", S::INSUFFICIENT_PRIVILEGE),
        (Caller::User, "1 hour", S::INSUFFICIENT_PRIVILEGE),
        (Caller::Admin, "10 days", S::INSUFFICIENT_PRIVILEGE),
        (Caller::Superuser, "garbage", S::INVALID_PARAMETER_VALUE),
        (Caller::Superuser, "0", S::INVALID_PARAMETER_VALUE),
        (Caller::Superuser, "-1 day", S::INVALID_PARAMETER_VALUE),
        (Caller::Superuser, "infinity", S::INVALID_PARAMETER_VALUE),
    ] {
        entries.push(entry(
            format!("SET dlock.max_ttl = {value:?} by {caller:?}"),
            caller,
            format!("SET dlock.max_ttl = {}", lit(value)),
            err(code.clone()),
        ));
        entries.push(entry(
            format!("set_config('dlock.max_ttl', {value:?}) by {caller:?}"),
            caller,
            format!("SELECT set_config('dlock.max_ttl', {}, false)", lit(value)),
            err(code),
        ));
    }
    let tried = callers.try_all(&entries).await;

    // The refused settings left dlock.max_ttl at its default for every caller.
    for caller in [Caller::User, Caller::Admin, Caller::Superuser] {
        let s = callers.session(caller);
        let row =
            s.query_one("SELECT current_setting('dlock.max_ttl')::interval = '1 day'", &[]).await.unwrap();
        assert!(row.get::<_, bool>(0), "{caller:?}: dlock.max_ttl changed");
    }
    for t in &targets[..2] {
        assert!(callers.user.holds(&t.key, t.fence).await.unwrap(), "{} is still held", t.key);
    }
    release_victims(&callers.user, &targets).await;
    report(T, tried);
}

/// A plain role that sets `dlock.max_ttl` before the library is loaded in its session (when
/// PostgreSQL still takes it as a placeholder) does not raise the limit either.
#[tokio::test]
async fn placeholder_max_ttl_set_before_the_library_loads_does_not_raise_the_limit() {
    const T: &str = "placeholder_max_ttl";
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    // A fresh session: dlock's library is not loaded in it yet.
    let fresh = cluster.connect_as(USER).await;
    let loaded: bool = fresh
        .query_one("SELECT EXISTS (SELECT FROM pg_settings WHERE name = 'dlock.max_ttl')", &[])
        .await
        .unwrap()
        .get(0);
    let before = snapshot(&callers.superuser).await;
    // Whether PostgreSQL accepts the SET (placeholder) or refuses it (library loaded), the
    // limit must stay.
    let set = fresh.batch_execute("SET dlock.max_ttl = '10 days'").await;
    if loaded {
        expect_sqlstate(set, &SqlState::INSUFFICIENT_PRIVILEGE, "SET after load");
    }
    let (k, o) = (key(T, "k"), owner(T, "o"));
    expect_sqlstate(
        fresh.try_acquire(&k, &o, "2 days").await,
        &SqlState::INVALID_PARAMETER_VALUE,
        "ttl of 2 days after a plain role's SET dlock.max_ttl = '10 days'",
    );
    assert_eq!(snapshot(&callers.superuser).await, before, "nothing changed");
    report(T, 1);
}

/// Look-alike pairs (precomposed and decomposed, fullwidth, compatibility characters,
/// invisible characters, confusable scripts, case): keys are byte strings, so each pair is two
/// keys that two owners hold at once, and owners are byte strings too.
#[tokio::test]
async fn look_alike_keys_and_owners_stay_distinct() {
    const T: &str = "look_alike";
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    let s = &callers.user;
    let pairs: [(&str, &str, &str); 18] = [
        ("\u{e9}", "e\u{301}", "é precomposed U+00E9 / e + combining acute U+0301"),
        ("caf\u{e9}", "cafe\u{301}", "café NFC / NFD"),
        ("\u{c5}", "\u{212b}", "Å U+00C5 / ANGSTROM SIGN U+212B"),
        ("K", "\u{212a}", "K / KELVIN SIGN U+212A"),
        ("A", "\u{ff21}", "A / FULLWIDTH A U+FF21"),
        ("key", "\u{ff4b}\u{ff45}\u{ff59}", "key / fullwidth ｋｅｙ"),
        ("ab", "a\u{200d}b", "ab / a ZERO WIDTH JOINER b"),
        ("ab", "a\u{200b}b", "ab / a ZERO WIDTH SPACE b"),
        ("ab", "\u{feff}ab", "ab / BOM ab"),
        ("a", "\u{430}", "Latin a / Cyrillic а U+0430"),
        ("fi", "\u{fb01}", "fi / LIGATURE FI U+FB01"),
        ("ss", "\u{df}", "ss / ß"),
        ("key", "KEY", "case"),
        ("k", "k ", "trailing space"),
        ("1", "\u{661}", "1 / ARABIC-INDIC DIGIT ONE"),
        ("-", "\u{2010}", "hyphen-minus / HYPHEN U+2010"),
        ("\u{1f600}", "\u{1f600}\u{fe0f}", "emoji / emoji + VARIATION SELECTOR-16"),
        ("\u{e9}", "\u{202e}\u{e9}", "é / RIGHT-TO-LEFT OVERRIDE é"),
    ];
    let mut tried = 0;
    for (i, (left, right, what)) in pairs.iter().enumerate() {
        let (lk, rk) = (key(T, &format!("{i}/{left}")), key(T, &format!("{i}/{right}")));
        assert_ne!(lk.as_bytes(), rk.as_bytes(), "{what}: the pair must differ in bytes");
        let (a, b) = (owner(T, "a"), owner(T, "b"));
        let before = snapshot(&callers.superuser).await;
        let fa = s.try_acquire(&lk, &a, "1 hour").await.unwrap();
        let fb = s.try_acquire(&rk, &b, "1 hour").await.unwrap();
        let (fa, fb) = (
            fa.unwrap_or_else(|| panic!("{what}: {lk:?} not granted")),
            fb.unwrap_or_else(|| panic!("{what}: {rk:?} not granted to a second owner while {lk:?} is held")),
        );
        let la = s.lease(&lk).await.unwrap().expect("left lease listed");
        let lb = s.lease(&rk).await.unwrap().expect("right lease listed");
        assert_eq!(
            (la.key.as_bytes(), la.owner.as_deref(), la.fence),
            (lk.as_bytes(), Some(a.as_str()), fa),
            "{what}: left"
        );
        assert_eq!(
            (lb.key.as_bytes(), lb.owner.as_deref(), lb.fence),
            (rk.as_bytes(), Some(b.as_str()), fb),
            "{what}: right"
        );
        assert!(!s.holds(&rk, fa).await.unwrap(), "{what}: the left fence does not hold the right key");
        assert!(!s.holds(&lk, fb).await.unwrap(), "{what}: the right fence does not hold the left key");
        assert!(!s.release(&rk, &a).await.unwrap(), "{what}: the left owner cannot release the right key");
        assert!(s.release(&lk, &a).await.unwrap(), "{what}: release left");
        assert!(s.release(&rk, &b).await.unwrap(), "{what}: release right");
        assert_eq!(snapshot(&callers.superuser).await, before, "{what}: state after both releases");
        tried += 1;

        // The same pair as owners of one key.
        let k = key(T, &format!("{i}/owners"));
        let (lo, ro) = (owner(T, left), owner(T, right));
        let fence = s.try_acquire(&k, &lo, "1 hour").await.unwrap().expect("granted");
        assert_eq!(
            s.try_acquire(&k, &ro, "1 hour").await.unwrap(),
            None,
            "{what}: a look-alike owner is another owner"
        );
        assert_eq!(s.renew(&k, &ro, Some("2 hours")).await.unwrap(), None, "{what}: look-alike owner renews");
        assert!(!s.release(&k, &ro).await.unwrap(), "{what}: look-alike owner releases");
        assert_eq!(s.release_all(&ro).await.unwrap(), 0, "{what}: release_all of the look-alike owner");
        let row = s.lease(&k).await.unwrap().expect("still held");
        assert_eq!(
            (row.owner.as_deref(), row.fence, row.hold_count),
            (Some(lo.as_str()), fence, 1),
            "{what}: owner lease"
        );
        assert!(s.release(&k, &lo).await.unwrap());
        tried += 1;
    }
    report(T, tried);
}

/// SQL-injection strings, LIKE wildcards, escapes and control characters are ordinary keys and
/// owners: granted, listed byte for byte, and never matching anything but themselves.
#[tokio::test]
async fn injection_strings_are_ordinary_keys_and_owners() {
    const T: &str = "injection";
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    let s = &callers.user;
    // A lease that a LIKE or string-built statement would hit by mistake.
    let (decoy_key, decoy_owner) = (key(T, "decoy"), owner(T, "decoy"));
    let decoy_fence =
        callers.other.try_acquire(&decoy_key, &decoy_owner, "1 hour").await.unwrap().expect("decoy");
    let strings = [
        "'); DROP TABLE dlock_internal.lease; --",
        "'; DELETE FROM dlock_internal.lease; --",
        "' OR '1'='1",
        "\" OR \"\"=\"",
        "'; SELECT pg_sleep(10); --",
        "$$; DROP SCHEMA dlock_internal CASCADE; $$",
        "%",
        "_",
        "%%",
        "%_%",
        "\\",
        "\\\\",
        "\\%",
        "'",
        "''",
        "\\'",
        "$1",
        "$2::text",
        "$tag$",
        "/*",
        "*/",
        "--",
        ";",
        "E'\\x00'",
        "%s%s%s%n",
        "{}",
        "NULL",
        "null",
        " ",
        "\t",
        "\n",
        "\r\n",
        "\u{7f}",
        "\u{202e}gnp.exe",
        "${jndi:ldap://example.invalid/a}",
        "decoy%",
        "*",
        "?",
    ];
    let mut tried = 0;
    for text in strings {
        let before = snapshot(&callers.superuser).await;
        let fence = s
            .try_acquire(text, text, "1 hour")
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{text:?}: not granted"));
        let row = s.lease(text).await.unwrap().unwrap_or_else(|| panic!("{text:?}: not listed"));
        assert_eq!(
            (row.key.as_str(), row.owner.as_deref(), row.fence),
            (text, Some(text), fence),
            "{text:?}: listed"
        );
        assert!(s.holds(text, fence).await.unwrap(), "{text:?}: holds");
        assert!(s.renew(text, text, Some("2 hours")).await.unwrap().is_some(), "{text:?}: renew");
        assert_eq!(
            s.try_acquire(text, &decoy_owner, "1 hour").await.unwrap(),
            None,
            "{text:?}: busy for others"
        );
        assert_eq!(s.try_acquire(text, text, "1 hour").await.unwrap(), Some(fence), "{text:?}: reentry");
        assert!(s.release(text, text).await.unwrap(), "{text:?}: release one hold");
        assert_eq!(s.release_all(text).await.unwrap(), 1, "{text:?}: release_all frees exactly its own key");
        assert_eq!(
            callers.admin.release_all(text).await.unwrap(),
            0,
            "{text:?}: as admin, nothing else matches"
        );
        assert!(!callers.admin.force_release(text).await.unwrap(), "{text:?}: already free");
        assert_eq!(snapshot(&callers.superuser).await, before, "{text:?}: state after the release");
        tried += 1;
    }
    let alive: bool = callers
        .superuser
        .query_one("SELECT to_regclass('dlock_internal.lease') IS NOT NULL", &[])
        .await
        .unwrap()
        .get(0);
    assert!(alive, "the lease table survived");
    assert!(callers.other.holds(&decoy_key, decoy_fence).await.unwrap(), "the decoy lease survived");
    assert!(callers.other.release(&decoy_key, &decoy_owner).await.unwrap());
    report(T, tried);
}

/// How a wait is ended.
#[derive(Clone, Copy, Debug)]
enum End {
    /// `statement_timeout` with `wait => '10 seconds'`.
    TimeoutBoundedWait,
    /// `statement_timeout` with `wait => NULL`.
    TimeoutUnboundedWait,
    /// A cancel request while it waits.
    Cancel,
    /// A cancel request to the second waiter in line (queued behind a head).
    CancelQueued,
}

/// Waits ended by `statement_timeout` or a cancel request fail with 57014 and leave no trace,
/// whether the key is held by a TTL lease or a session-bound one, and whether the waiter is
/// the head of the line or queued behind it.
#[tokio::test]
async fn ended_waits_fail_with_57014_and_leave_no_trace() {
    const T: &str = "ended_waits";
    let _serial = SERIAL.lock().await;
    let cluster = Cluster::shared();
    let callers = Callers::connect(cluster).await;
    let holder = cluster.connect_as(USER).await;
    let targets = victims(T, &callers.user, &holder).await;
    let limit = std::time::Duration::from_secs(10);
    let waiter_owner = owner(T, "waiter");
    let mut tried = 0;
    for target in &targets[..2] {
        for end in [End::TimeoutBoundedWait, End::TimeoutUnboundedWait, End::Cancel, End::CancelQueued] {
            let what = format!("{end:?} on the {} key", target.name);
            let before = snapshot(&callers.superuser).await;
            let waiter = cluster.connect_as(OTHER).await;
            // The sessions whose calls ended: the server sends the error before it aborts the
            // transaction, so a session has cleaned up once it answers its next query.
            let (result, ended) = match end {
                End::TimeoutBoundedWait | End::TimeoutUnboundedWait => {
                    waiter.batch_execute("SET statement_timeout = '200ms'").await.unwrap();
                    let wait = matches!(end, End::TimeoutBoundedWait).then_some("10 seconds");
                    (waiter.acquire(&target.key, &waiter_owner, Some("1 hour"), wait).await, vec![waiter])
                }
                End::Cancel => {
                    let cancel = waiter.cancel_token();
                    let attempt = waiter.spawn_acquire(&target.key, &waiter_owner, Some("1 hour"), None);
                    wait_for_waiters(&callers.superuser, &target.key, 1).await;
                    cancel.cancel_query(NoTls).await.unwrap();
                    let attempt = finish(attempt, limit, &what).await;
                    (attempt.result, vec![attempt.session])
                }
                End::CancelQueued => {
                    // A head waits first; the cancelled waiter queues behind it. Then the head
                    // is cancelled too.
                    let head = cluster.connect_as(OTHER).await;
                    let head_cancel = head.cancel_token();
                    let head_attempt =
                        head.spawn_acquire(&target.key, &owner(T, "head"), Some("1 hour"), None);
                    wait_for_waiters(&callers.superuser, &target.key, 1).await;
                    let cancel = waiter.cancel_token();
                    let attempt = waiter.spawn_acquire(&target.key, &waiter_owner, Some("1 hour"), None);
                    wait_for_waiters(&callers.superuser, &target.key, 2).await;
                    cancel.cancel_query(NoTls).await.unwrap();
                    let attempt = finish(attempt, limit, &what).await;
                    attempt.session.query_one("SELECT 1", &[]).await.expect("the cancelled session answers");
                    assert_eq!(
                        callers.superuser.waiters(&target.key).await.unwrap(),
                        1,
                        "{what}: only the head still waits"
                    );
                    head_cancel.cancel_query(NoTls).await.unwrap();
                    let head_attempt = finish(head_attempt, limit, &format!("{what}: the head")).await;
                    expect_sqlstate(
                        head_attempt.result,
                        &SqlState::QUERY_CANCELED,
                        &format!("{what}: the head"),
                    );
                    (attempt.result, vec![attempt.session, head_attempt.session])
                }
            };
            expect_sqlstate(result, &SqlState::QUERY_CANCELED, &what);
            for session in &ended {
                session.query_one("SELECT 1", &[]).await.expect("the session is still usable");
            }
            assert_eq!(snapshot(&callers.superuser).await, before, "{what}: the state changed");
            tried += 1;
        }
    }
    // No phantom waiter is left in any line: once the holders let go, a newcomer's try is
    // granted at once.
    release_victims(&callers.user, &targets).await;
    for target in &targets[..2] {
        let fence = callers.other.try_acquire(&target.key, &waiter_owner, "1 hour").await.unwrap();
        assert!(fence.is_some_and(|f| f > target.fence), "{}: granted after the ended waits", target.key);
        assert!(callers.other.release(&target.key, &waiter_owner).await.unwrap());
    }
    report(T, tried);
}
