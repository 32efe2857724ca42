//! Random sequences of calls from several owners and roles, checked answer by answer against a
//! pure model of the contract, with the `dlock_locks` view compared to the model after every call.
//!
//! Three keys, three owners and three roles (two plain, one `dlock_admin` member) make
//! collisions common: reentry, busy keys, other owners, other roles (42501), refused force
//! releases. A key has any number of holders: one exclusive lease, or shared leases (read-write
//! locks, and semaphores of 1 or 2 permits, so that full semaphores and participants that
//! disagree on the number of permits (22023) are common), and an owner asking for its key in the
//! other mode is refused (0A000). `dlock_acquire_all` takes a random subset of the keys, in a
//! random order, all or none. Expiry is made deterministic: a lease given a 1 ms ttl (by acquire
//! or renew) is dead once the test has slept a few milliseconds after the call, and a
//! session-bound lease ends when its session is closed and its backend is gone. Every other
//! lease lives 60 s, far longer than a case. Acquires and releases inside `BEGIN … ROLLBACK`
//! must answer as in autocommit and then leave no trace. Each case uses keys and owners of its
//! own, and proptest shrinks a failing sequence to a minimal one (`PROPTEST_CASES=n` runs a
//! longer search).

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dlock_tests::{Cluster, Session, key, owner};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};

const T: &str = "model";
const KEYS: usize = 3;
const OWNERS: usize = 3;
/// Login roles of the model; the last one is a member of `dlock_admin`.
const ROLES: [&str; 3] = ["model_r1", "model_r2", "model_admin"];
const ADMIN: usize = 2;
/// The permits shared requests usually pass per key: a read-write lock and two semaphores.
const KEY_PERMITS: [Option<i32>; KEYS] = [None, Some(2), Some(1)];
const CASES: u32 = 48;
const MAX_OPS: usize = 40;
/// Outlives every case by far: such a lease never expires during a case.
const LONG_TTL: &str = "60 seconds";
/// Dead by the time the next call runs: the test sleeps `SHORT_TTL_PASSED` after the call.
const SHORT_TTL: &str = "1 millisecond";
const SHORT_TTL_PASSED: Duration = Duration::from_millis(3);
/// Upper bound for one call (nothing here waits on the server): a hang fails the case.
const CALL_LIMIT: Duration = Duration::from_secs(10);

/// Tells apart the keys and owners of successive cases (shrinking reruns cases).
static CASE: AtomicUsize = AtomicUsize::new(0);

/// The ttl of an acquire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ttl {
    Long,
    Short,
    /// `ttl NULL`: bound to the session.
    Session,
}

impl Ttl {
    fn sql(self) -> Option<&'static str> {
        match self {
            Ttl::Long => Some(LONG_TTL),
            Ttl::Short => Some(SHORT_TTL),
            Ttl::Session => None,
        }
    }
}

/// Who calls: a role and an owner string. Each pair has a session of its own, so the
/// session-bound leases of a pair are bound to that pair's session.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Actor {
    role: usize,
    owner: usize,
}

impl fmt::Debug for Actor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/o{}", ROLES[self.role], self.owner)
    }
}

impl Actor {
    fn session(self) -> usize {
        self.role * OWNERS + self.owner
    }
}

/// Who makes a call on a key: a given actor, or whoever holds the key when the call runs (the
/// given actor if nobody does; the oldest holder of a shared key), so that holders come back
/// to their leases often.
#[derive(Clone, Copy)]
enum Who {
    Actor(Actor),
    HolderElse(Actor),
}

impl fmt::Debug for Who {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Who::Actor(a) => write!(f, "{a:?}"),
            Who::HolderElse(a) => write!(f, "holder else {a:?}"),
        }
    }
}

/// Which fence `dlock_holds` asks about.
#[derive(Clone, Copy, Debug)]
enum FencePick {
    /// The n-th latest fence ever granted for the key (0: the latest).
    Granted(usize),
    /// A fence never granted for any key.
    Never,
}

/// One call of the sequence.
#[derive(Clone, Debug)]
enum Op {
    /// `dlock_acquire`, with `wait => 0` or with the default wait (three-argument form).
    Acquire {
        by: Who,
        key: usize,
        ttl: Ttl,
        explicit_wait: bool,
    },
    /// `dlock_renew` to 60 s, or to 1 ms (the lease then expires).
    Renew {
        by: Who,
        key: usize,
        short: bool,
    },
    Release {
        by: Who,
        key: usize,
    },
    ReleaseAll {
        by: Actor,
    },
    Holds {
        by: Actor,
        key: usize,
        fence: FencePick,
    },
    /// `dlock_force_release` from a session of `role` (42501 unless the admin role).
    ForceRelease {
        role: usize,
        key: usize,
    },
    /// An acquire (`ttl` given) or a release (`ttl` None) inside `BEGIN … ROLLBACK`: answered
    /// as in autocommit, then undone (a rolled-back grant's fence still counts as returned).
    RolledBack {
        by: Who,
        key: usize,
        ttl: Option<Ttl>,
    },
    /// Closes the actor's session (its session-bound leases end) and opens a new one.
    Reconnect {
        by: Actor,
    },
    /// `dlock_acquire_shared` with `wait => 0`, as a read-write lock or a semaphore: with the
    /// key's usual permits (`KEY_PERMITS`), or with `odd_permits` when given.
    AcquireShared {
        by: Who,
        key: usize,
        ttl: Ttl,
        odd_permits: Option<Option<i32>>,
    },
    /// `dlock_acquire_all` with `wait => 0` on distinct keys, in this order (a holder of the
    /// first key when `by` says so).
    AcquireAll {
        by: Who,
        keys: Vec<usize>,
        ttl: Ttl,
    },
}

/// Fails the case with a message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

// The model's rules, the calls checked against them, and the view's checks, beside this file.
#[path = "model/rules.rs"]
mod rules;
#[path = "model/view.rs"]
mod view;
#[path = "model/world.rs"]
mod world;

use rules::Model;
use world::{Seen, World};

/// The first role calls most, so the same actor comes back to its own leases often (reentry,
/// renew, release); the others still collide with it.
fn actor() -> impl Strategy<Value = Actor> {
    let role = prop_oneof![3 => Just(0usize), 1 => Just(1usize), 1 => Just(ADMIN)];
    (role, 0..OWNERS).prop_map(|(role, owner)| Actor { role, owner })
}

fn who() -> impl Strategy<Value = Who> {
    prop_oneof![actor().prop_map(Who::Actor), actor().prop_map(Who::HolderElse)]
}

fn op() -> impl Strategy<Value = Op> {
    let ttl = || prop_oneof![3 => Just(Ttl::Long), 1 => Just(Ttl::Short), 2 => Just(Ttl::Session)];
    let fence = prop_oneof![4 => (0..3usize).prop_map(FencePick::Granted), 1 => Just(FencePick::Never)];
    // Participants mostly agree on a key's size, and sometimes do not.
    let odd_permits = prop_oneof![
        4 => Just(None),
        1 => prop_oneof![Just(None), Just(Some(1)), Just(Some(2)), Just(Some(3))].prop_map(Some),
    ];
    let keys = prop::sample::subsequence((0..KEYS).collect::<Vec<_>>(), 1..=KEYS).prop_shuffle();
    prop_oneof![
        4 => (who(), 0..KEYS, ttl(), any::<bool>())
            .prop_map(|(by, key, ttl, explicit_wait)| Op::Acquire { by, key, ttl, explicit_wait }),
        // Mostly newcomers, so that holders pile up beside each other.
        7 => (prop_oneof![3 => actor().prop_map(Who::Actor), 1 => who()], 0..KEYS, ttl(), odd_permits)
            .prop_map(|(by, key, ttl, odd_permits)| Op::AcquireShared { by, key, ttl, odd_permits }),
        2 => (who(), keys, ttl()).prop_map(|(by, keys, ttl)| Op::AcquireAll { by, keys, ttl }),
        3 => (who(), 0..KEYS, prop::bool::weighted(0.3))
            .prop_map(|(by, key, short)| Op::Renew { by, key, short }),
        5 => (who(), 0..KEYS).prop_map(|(by, key)| Op::Release { by, key }),
        1 => actor().prop_map(|by| Op::ReleaseAll { by }),
        2 => (actor(), 0..KEYS, fence).prop_map(|(by, key, fence)| Op::Holds { by, key, fence }),
        1 => (0..ROLES.len(), 0..KEYS).prop_map(|(role, key)| Op::ForceRelease { role, key }),
        1 => actor().prop_map(|by| Op::Reconnect { by }),
        1 => (who(), 0..KEYS, prop::option::of(prop_oneof![Just(Ttl::Long), Just(Ttl::Session)]))
            .prop_map(|(by, key, ttl)| Op::RolledBack { by, key, ttl }),
    ]
}

/// Runs one sequence on fresh sessions, keys and owners; counts what it saw into `seen`.
async fn run_case(cluster: &Cluster, ops: &[Op], seen: &Mutex<Seen>) -> Result<(), String> {
    let case = CASE.fetch_add(1, Ordering::SeqCst);
    let mut sessions = Vec::new();
    for role in ROLES {
        for _ in 0..OWNERS {
            sessions.push(cluster.connect_as(role).await);
        }
    }
    let mut world = World {
        cluster,
        superuser: cluster.connect().await,
        sessions,
        keys: (0..KEYS).map(|k| key(T, &format!("c{case}/k{k}"))).collect(),
        owners: (0..OWNERS).map(|o| owner(T, &format!("c{case}:o{o}"))).collect(),
        model: Model::default(),
    };
    let mut result = Ok(());
    for (step, op) in ops.iter().enumerate() {
        let outcome = match world.apply(op).await {
            Ok(outcome) => world.check_view().await.map(|()| outcome),
            Err(e) => Err(e),
        };
        match outcome {
            Ok(outcome) => *seen.lock().unwrap().entry(outcome).or_default() += 1,
            Err(e) => {
                // The keys' rows as they are now, to read beside the shrunk sequence.
                let mut rows = String::new();
                let sql = "SELECT pg_catalog.to_jsonb(l)::text FROM dlock_internal.lease AS l WHERE l.key = ANY($1)";
                for row in world.superuser.query(sql, &[&world.keys]).await.unwrap_or_default() {
                    rows.push_str(&format!("\n  {}", row.get::<_, String>(0)));
                }
                result = Err(format!("step {step} ({op:?}): {e}; the keys' rows:{rows}"));
                break;
            }
        }
    }
    if result.is_ok() {
        result = world.check_owner_masking().await.map_err(|e| format!("final state: {e}"));
    }
    // Leave nothing behind: the sessions end with this case, the 60 s leases are freed here.
    for k in &world.keys {
        let _ = world.superuser.force_release(k).await;
    }
    result
}

async fn create_roles(superuser: &Session) {
    for role in ROLES {
        superuser.batch_execute(&format!("CREATE ROLE {role} LOGIN")).await.unwrap();
    }
    superuser.batch_execute(&format!("GRANT dlock_admin TO {}", ROLES[ADMIN])).await.unwrap();
}

#[test]
fn random_call_sequences_answer_as_the_model_of_the_contract() {
    check_against_the_model(Cluster::shared());
}

/// The same with the library preloaded: grants then read a key row alone where its session's
/// note allows (`store/owner_rows.rs`), and waits use shared memory.
#[test]
fn random_call_sequences_answer_as_the_model_with_the_library_preloaded() {
    check_against_the_model(Cluster::shared_named("preloaded", &["shared_preload_libraries = 'dlock'"]));
}

fn check_against_the_model(cluster: &'static Cluster) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async { create_roles(&cluster.connect().await).await });

    let seen = Mutex::new(Seen::new());
    let ops_run = AtomicUsize::new(0);
    // PROPTEST_CASES=n runs a longer search.
    let cases = std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(CASES);
    let config = ProptestConfig {
        cases,
        max_shrink_iters: 200,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    let mut runner = TestRunner::new(config);
    let start = Instant::now();
    let result = runner.run(&prop::collection::vec(op(), 1..=MAX_OPS), |ops| {
        ops_run.fetch_add(ops.len(), Ordering::SeqCst);
        runtime.block_on(run_case(cluster, &ops, &seen)).map_err(TestCaseError::fail)
    });
    let seen = seen.into_inner().unwrap();
    println!(
        "model: {} sequences, {} calls in {:.1?}; answers seen:",
        CASE.load(Ordering::SeqCst),
        ops_run.load(Ordering::SeqCst),
        start.elapsed()
    );
    for (outcome, count) in &seen {
        println!("  {count:5}  {outcome}");
    }
    if let Err(e) = result {
        panic!("{e}");
    }
    // The run exercised the main paths (each is generated hundreds of times over a run).
    for outcome in [
        "acquire: granted",
        "acquire: reentered",
        "acquire: NULL (held)",
        "release: freed",
        "shared: granted beside other holders",
        "shared: reentered",
        "shared: NULL (held exclusively)",
        "shared: NULL (semaphore full)",
        "shared: 22023 (permits disagree)",
        "mode conflict: 0A000",
        "acquire_all: granted",
        "acquire_all: NULL",
    ] {
        assert!(seen.contains_key(outcome), "no call answered {outcome:?} in the whole run");
    }
}
