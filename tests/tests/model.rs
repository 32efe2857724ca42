//! Random sequences of calls from several owners and roles, checked answer by answer against a
//! pure model of the contract, with the `dlock_locks` view compared to the model after every call.
//!
//! Three keys, three owners and three roles (two plain, one `dlock_admin` member) make
//! collisions common: reentry, busy keys, other owners, other roles (42501), refused force
//! releases. Expiry is made deterministic: a lease given a 1 ms ttl (by acquire or renew) is
//! dead once the test has slept a few milliseconds after the call, and a session-bound lease
//! ends when its session is closed and its backend is gone. Every other lease lives 60 s, far
//! longer than a case. Acquires and releases inside `BEGIN … ROLLBACK` must answer as in
//! autocommit and then leave no trace. Each case uses keys and owners of its own, and proptest
//! shrinks a failing sequence to a minimal one (`PROPTEST_CASES=n` runs a longer search).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dlock_tests::{Cluster, Session, key, owner};
use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestCaseError, TestRunner};
use tokio_postgres::error::SqlState;

const T: &str = "model";
const KEYS: usize = 3;
const OWNERS: usize = 3;
/// Login roles of the model; the last one is a member of `dlock_admin`.
const ROLES: [&str; 3] = ["model_r1", "model_r2", "model_admin"];
const ADMIN: usize = 2;
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
/// given actor if nobody does), so that holders come back to their leases often.
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
    /// Closes the actor's session (its session-bound leases end) and opens a new one.
    /// An acquire (`ttl` given) or a release (`ttl` None) inside `BEGIN … ROLLBACK`: answered
    /// as in autocommit, then undone (a rolled-back grant's fence still counts as returned).
    RolledBack {
        by: Who,
        key: usize,
        ttl: Option<Ttl>,
    },
    Reconnect {
        by: Actor,
    },
}

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
    let ttl = prop_oneof![3 => Just(Ttl::Long), 1 => Just(Ttl::Short), 2 => Just(Ttl::Session)];
    let fence = prop_oneof![4 => (0..3usize).prop_map(FencePick::Granted), 1 => Just(FencePick::Never)];
    prop_oneof![
        6 => (who(), 0..KEYS, ttl, any::<bool>())
            .prop_map(|(by, key, ttl, explicit_wait)| Op::Acquire { by, key, ttl, explicit_wait }),
        3 => (who(), 0..KEYS, prop::bool::weighted(0.3))
            .prop_map(|(by, key, short)| Op::Renew { by, key, short }),
        4 => (who(), 0..KEYS).prop_map(|(by, key)| Op::Release { by, key }),
        1 => actor().prop_map(|by| Op::ReleaseAll { by }),
        2 => (actor(), 0..KEYS, fence).prop_map(|(by, key, fence)| Op::Holds { by, key, fence }),
        1 => (0..ROLES.len(), 0..KEYS).prop_map(|(role, key)| Op::ForceRelease { role, key }),
        1 => actor().prop_map(|by| Op::Reconnect { by }),
        1 => (who(), 0..KEYS, prop::option::of(prop_oneof![Just(Ttl::Long), Just(Ttl::Session)]))
            .prop_map(|(by, key, ttl)| Op::RolledBack { by, key, ttl }),
    ]
}

/// How a live lease ends on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expiry {
    /// 60 s: not during the case.
    Long,
    /// With the session of its actor.
    Session,
}

/// A live lease in the model.
#[derive(Clone, Debug)]
struct Lease {
    holder: Actor,
    fence: i64,
    hold_count: i32,
    expiry: Expiry,
}

/// The contract as a pure state machine over the keys of one case.
#[derive(Clone, Default)]
struct Model {
    leases: [Option<Lease>; KEYS],
    /// Every fence granted per key, in grant order.
    granted: [Vec<i64>; KEYS],
}

/// How a caller stands to the live lease of a key, for renew and release.
enum Standing {
    Holder,
    /// The right owner string from another role (not `dlock_admin`): 42501.
    ForeignRole,
    /// No live lease, or another owner's.
    Stranger,
}

impl Model {
    fn resolve(&self, who: Who, key: usize) -> Actor {
        match who {
            Who::Actor(a) => a,
            Who::HolderElse(a) => self.leases[key].as_ref().map_or(a, |l| l.holder),
        }
    }

    fn standing(&self, by: Actor, key: usize) -> Standing {
        match &self.leases[key] {
            Some(l) if l.holder.owner == by.owner => {
                if l.holder.role == by.role || by.role == ADMIN {
                    Standing::Holder
                } else {
                    Standing::ForeignRole
                }
            }
            _ => Standing::Stranger,
        }
    }
}

/// Fails the case with a message unless `cond` holds.
macro_rules! ensure {
    ($cond:expr, $($fmt:tt)+) => {
        if !$cond {
            return Err(format!($($fmt)+));
        }
    };
}

/// What happened, counted over the whole run (printed, so a run shows what it exercised).
type Seen = BTreeMap<&'static str, usize>;

/// Everything one case runs on.
struct World<'a> {
    cluster: &'a Cluster,
    superuser: Session,
    /// One session per actor, indexed by `Actor::session`.
    sessions: Vec<Session>,
    keys: Vec<String>,
    owners: Vec<String>,
    model: Model,
}

/// A call's result, or a failure message naming it.
async fn call<V>(
    what: &str,
    future: impl std::future::Future<Output = Result<V, tokio_postgres::Error>>,
) -> Result<Result<V, tokio_postgres::Error>, String> {
    tokio::time::timeout(CALL_LIMIT, future)
        .await
        .map_err(|_| format!("{what}: no answer within {CALL_LIMIT:?}"))
}

/// The call's value, or a failure message if it raised an error.
fn ok<V>(what: &str, result: Result<V, tokio_postgres::Error>) -> Result<V, String> {
    result.map_err(|e| format!("{what}: unexpected ERROR {:?} ({e})", e.code().map(SqlState::code)))
}

/// Checks that the call failed with 42501.
fn forbidden<V: fmt::Debug>(what: &str, result: Result<V, tokio_postgres::Error>) -> Result<(), String> {
    match result {
        Ok(v) => Err(format!("{what}: expected ERROR 42501, got Ok({v:?})")),
        Err(e) if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) => Ok(()),
        Err(e) => Err(format!("{what}: expected ERROR 42501, got {:?} ({e})", e.code().map(SqlState::code))),
    }
}

impl World<'_> {
    /// Runs `op`, checks its answer against the model, and advances the model. Returns what
    /// kind of answer it was.
    async fn apply(&mut self, op: &Op) -> Result<&'static str, String> {
        match *op {
            Op::Acquire { by, key, ttl, explicit_wait } => {
                self.acquire(self.model.resolve(by, key), key, ttl, explicit_wait).await
            }
            Op::Renew { by, key, short } => self.renew(self.model.resolve(by, key), key, short).await,
            Op::Release { by, key } => self.release(self.model.resolve(by, key), key).await,
            Op::ReleaseAll { by } => self.release_all(by).await,
            Op::Holds { by, key, fence } => self.holds(by, key, fence).await,
            Op::ForceRelease { role, key } => self.force_release(role, key).await,
            Op::Reconnect { by } => self.reconnect(by).await,
            Op::RolledBack { by, key, ttl } => self.rolled_back(self.model.resolve(by, key), key, ttl).await,
        }
    }

    async fn acquire(
        &mut self,
        by: Actor,
        key: usize,
        ttl: Ttl,
        explicit_wait: bool,
    ) -> Result<&'static str, String> {
        let (k, o) = (&self.keys[key], &self.owners[by.owner]);
        let s = &self.sessions[by.session()];
        let answer = if explicit_wait {
            call("acquire", s.acquire(k, o, ttl.sql(), Some("0"))).await?
        } else {
            call("acquire", s.acquire_default_wait(k, o, ttl.sql())).await?
        };
        let answer = ok("acquire", answer)?;
        if ttl == Ttl::Short {
            tokio::time::sleep(SHORT_TTL_PASSED).await;
        }
        let m = &mut self.model;
        match &mut m.leases[key] {
            None => {
                let fence = answer.ok_or("a free key must be granted, got NULL")?;
                let highest = m.granted[key].iter().copied().max().unwrap_or(0);
                ensure!(
                    fence > highest,
                    "a new grant's fence {fence} must exceed every earlier one ({highest})"
                );
                m.granted[key].push(fence);
                m.leases[key] = match ttl {
                    Ttl::Long => Some(Lease { holder: by, fence, hold_count: 1, expiry: Expiry::Long }),
                    Ttl::Session => Some(Lease { holder: by, fence, hold_count: 1, expiry: Expiry::Session }),
                    Ttl::Short => None,
                };
                Ok(if ttl == Ttl::Short { "acquire: granted, then expired" } else { "acquire: granted" })
            }
            Some(lease) if lease.holder == by => {
                ensure!(
                    answer == Some(lease.fence),
                    "reentry must return the same fence {}, got {answer:?}",
                    lease.fence
                );
                lease.hold_count += 1;
                // expires_at = greatest(old, now + ttl): only ttl NULL changes how it ends.
                if ttl == Ttl::Session {
                    lease.expiry = Expiry::Session;
                }
                Ok("acquire: reentered")
            }
            Some(lease) => {
                ensure!(
                    answer.is_none(),
                    "a key held by {:?} must answer NULL, got {answer:?}",
                    lease.holder
                );
                Ok(if lease.holder.owner == by.owner {
                    "acquire: NULL (same owner, other role)"
                } else {
                    "acquire: NULL (held)"
                })
            }
        }
    }

    async fn renew(&mut self, by: Actor, key: usize, short: bool) -> Result<&'static str, String> {
        let (k, o) = (&self.keys[key], &self.owners[by.owner]);
        let ttl = if short { SHORT_TTL } else { LONG_TTL };
        let answer = call("renew", self.sessions[by.session()].renew(k, o, Some(ttl))).await?;
        if short {
            tokio::time::sleep(SHORT_TTL_PASSED).await;
        }
        match self.model.standing(by, key) {
            Standing::Holder => {
                let expires_at = ok("renew", answer)?.ok_or("the holder's renew must answer, got NULL")?;
                let lease = self.model.leases[key].as_ref().expect("a holder has a lease");
                if lease.expiry == Expiry::Session {
                    ensure!(expires_at == f64::INFINITY, "renew of a session-bound lease: {expires_at}");
                    return Ok("renew: 'infinity'");
                }
                ensure!(
                    expires_at.is_finite(),
                    "renew of a ttl lease must answer a finite time: {expires_at}"
                );
                if short {
                    self.model.leases[key] = None;
                    return Ok("renew: shortened, then expired");
                }
                Ok("renew: extended")
            }
            Standing::ForeignRole => forbidden("renew from another role", answer).map(|()| "renew: 42501"),
            Standing::Stranger => {
                let answer = ok("renew", answer)?;
                ensure!(answer.is_none(), "renew by a non-holder must answer NULL, got {answer:?}");
                Ok("renew: NULL")
            }
        }
    }

    async fn release(&mut self, by: Actor, key: usize) -> Result<&'static str, String> {
        let (k, o) = (&self.keys[key], &self.owners[by.owner]);
        let answer = call("release", self.sessions[by.session()].release(k, o)).await?;
        match self.model.standing(by, key) {
            Standing::Holder => {
                ensure!(ok("release", answer)?, "the holder's release must answer true");
                let lease = self.model.leases[key].as_mut().expect("a holder has a lease");
                lease.hold_count -= 1;
                if lease.hold_count == 0 {
                    self.model.leases[key] = None;
                    return Ok("release: freed");
                }
                Ok("release: one hold fewer")
            }
            Standing::ForeignRole => {
                forbidden("release from another role", answer).map(|()| "release: 42501")
            }
            Standing::Stranger => {
                ensure!(!ok("release", answer)?, "release by a non-holder must answer false");
                Ok("release: false")
            }
        }
    }

    async fn release_all(&mut self, by: Actor) -> Result<&'static str, String> {
        let o = &self.owners[by.owner];
        let answer =
            ok("release_all", call("release_all", self.sessions[by.session()].release_all(o)).await?)?;
        let mut freed = 0;
        for lease in &mut self.model.leases {
            if lease
                .as_ref()
                .is_some_and(|l| l.holder.owner == by.owner && (l.holder.role == by.role || by.role == ADMIN))
            {
                *lease = None;
                freed += 1;
            }
        }
        ensure!(answer == freed, "release_all must free {freed} keys, answered {answer}");
        Ok(if freed == 0 { "release_all: 0" } else { "release_all: freed some" })
    }

    async fn holds(&mut self, by: Actor, key: usize, pick: FencePick) -> Result<&'static str, String> {
        let granted = &self.model.granted[key];
        let fence = match pick {
            FencePick::Granted(back) if !granted.is_empty() => {
                granted[granted.len() - 1 - back.min(granted.len() - 1)]
            }
            // Fences are positive and never reach this value.
            _ => i64::MAX,
        };
        let answer = call("holds", self.sessions[by.session()].holds(&self.keys[key], fence)).await?;
        let carrier = self.model.leases[key].as_ref().filter(|l| l.fence == fence);
        // A true answer pins the key, which only the lease's role and trusted roles may do.
        if carrier.is_some_and(|l| l.holder.role != by.role && by.role != ADMIN) {
            return forbidden("holds on another role's lease", answer).map(|()| "holds: 42501");
        }
        let (answer, expected) = (ok("holds", answer)?, carrier.is_some());
        ensure!(answer == expected, "holds(fence {fence}) must answer {expected}, got {answer}");
        Ok(if expected { "holds: true" } else { "holds: false" })
    }

    async fn force_release(&mut self, role: usize, key: usize) -> Result<&'static str, String> {
        let session = &self.sessions[Actor { role, owner: 0 }.session()];
        let answer = call("force_release", session.force_release(&self.keys[key])).await?;
        if role != ADMIN {
            return forbidden("force_release by a plain role", answer).map(|()| "force_release: 42501");
        }
        let expected = self.model.leases[key].take().is_some();
        let answer = ok("force_release", answer)?;
        ensure!(answer == expected, "force_release must answer {expected}, got {answer}");
        Ok(if expected { "force_release: freed" } else { "force_release: false" })
    }

    async fn rolled_back(&mut self, by: Actor, key: usize, ttl: Option<Ttl>) -> Result<&'static str, String> {
        let before = self.model.clone();
        let session = by.session();
        ok("BEGIN", self.sessions[session].batch_execute("BEGIN").await)?;
        let outcome = match ttl {
            Some(ttl) => self.acquire(by, key, ttl, true).await,
            None => self.release(by, key).await,
        };
        ok("ROLLBACK", self.sessions[session].batch_execute("ROLLBACK").await)?;
        outcome?;
        // Nothing happened, except that a fence handed out stays handed out.
        self.model.leases = before.leases;
        Ok(if ttl.is_some() { "rolled back: acquire" } else { "rolled back: release" })
    }

    async fn reconnect(&mut self, by: Actor) -> Result<&'static str, String> {
        let fresh = self.cluster.connect_as(ROLES[by.role]).await;
        let old = std::mem::replace(&mut self.sessions[by.session()], fresh);
        let pid = old.pid();
        drop(old);
        // The session is over once its backend has left pg_stat_activity and holds no locks.
        let start = Instant::now();
        loop {
            let gone: bool = ok(
                "backend gone",
                self.superuser
                    .query_one(
                        "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1) \
                            AND NOT EXISTS (SELECT FROM pg_locks WHERE pid = $1)",
                        &[&pid],
                    )
                    .await,
            )?
            .get(0);
            if gone {
                break;
            }
            ensure!(
                start.elapsed() < CALL_LIMIT,
                "backend {pid} still there {CALL_LIMIT:?} after disconnect"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let mut ended = 0;
        for lease in &mut self.model.leases {
            if lease.as_ref().is_some_and(|l| l.holder == by && l.expiry == Expiry::Session) {
                *lease = None;
                ended += 1;
            }
        }
        Ok(if ended == 0 { "reconnect: nothing ended" } else { "reconnect: session-bound leases ended" })
    }

    /// `dlock_locks` (as the superuser) shows exactly the model's live leases.
    async fn check_view(&self) -> Result<(), String> {
        let rows = ok(
            "read dlock_locks",
            self.superuser
                .query(
                    "SELECT key, owner, fence, hold_count, expires_at = 'infinity', holder_pid, \
                            holder_role::text, waiters \
                       FROM dlock_locks WHERE key = ANY($1) ORDER BY key",
                    &[&self.keys],
                )
                .await,
        )?;
        let mut seen = Vec::new();
        for row in &rows {
            let key: String = row.get(0);
            let key = self.keys.iter().position(|k| *k == key).expect("filtered on the case's keys");
            let owner: Option<String> = row.get(1);
            let waiters: i32 = row.get(7);
            ensure!(waiters == 0, "dlock_locks shows {waiters} waiters on k{key}; nobody waits");
            let infinite: bool = row.get(4);
            let pid: i32 = row.get(5);
            seen.push((
                key,
                owner,
                row.get::<_, i64>(2),
                row.get::<_, i32>(3),
                infinite,
                row.get::<_, String>(6),
                pid,
            ));
        }
        let expected: Vec<_> = (0..KEYS)
            .filter_map(|key| {
                let l = self.model.leases[key].as_ref()?;
                Some((
                    key,
                    Some(self.owners[l.holder.owner].clone()),
                    l.fence,
                    l.hold_count,
                    l.expiry,
                    l.holder,
                ))
            })
            .collect();
        let describe = || format!("dlock_locks shows {seen:?}, the model has {expected:?}");
        ensure!(seen.len() == expected.len(), "{}", describe());
        for (row, model) in seen.iter().zip(&expected) {
            let (key, owner, fence, hold_count, infinite, role, pid) = row;
            let (m_key, m_owner, m_fence, m_holds, m_expiry, m_holder) = model;
            ensure!(
                key == m_key && owner == m_owner && fence == m_fence && hold_count == m_holds,
                "{}",
                describe()
            );
            ensure!(
                role == ROLES[m_holder.role],
                "k{key}: holder_role {role}, expected {}",
                ROLES[m_holder.role]
            );
            ensure!(
                *infinite == (*m_expiry == Expiry::Session),
                "k{key}: expires_at infinite = {infinite}; {}",
                describe()
            );
            if *m_expiry == Expiry::Session {
                let bound = self.sessions[m_holder.session()].pid();
                ensure!(
                    *pid == bound,
                    "k{key}: a session-bound lease shows holder_pid {pid}, its session is {bound}"
                );
            }
        }
        Ok(())
    }

    /// Each role sees every live lease, but the owner only of its own role's (all for the admin).
    async fn check_owner_masking(&self) -> Result<(), String> {
        for (role, name) in ROLES.iter().enumerate() {
            let viewer = &self.sessions[Actor { role, owner: 0 }.session()];
            let rows = ok(
                "read dlock_locks",
                viewer
                    .query(
                        "SELECT key, owner FROM dlock_locks WHERE key = ANY($1) ORDER BY key",
                        &[&self.keys],
                    )
                    .await,
            )?;
            let seen: Vec<(String, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            let expected: Vec<(String, Option<String>)> = (0..KEYS)
                .filter_map(|key| {
                    let l = self.model.leases[key].as_ref()?;
                    let visible = l.holder.role == role || role == ADMIN;
                    Some((self.keys[key].clone(), visible.then(|| self.owners[l.holder.owner].clone())))
                })
                .collect();
            ensure!(seen == expected, "{name} sees {seen:?} in dlock_locks, expected {expected:?}");
        }
        Ok(())
    }
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
                result = Err(format!("step {step} ({op:?}): {e}"));
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
    let cluster = Cluster::shared();
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
    for outcome in ["acquire: granted", "acquire: reentered", "acquire: NULL (held)", "release: freed"] {
        assert!(seen.contains_key(outcome), "no call answered {outcome:?} in the whole run");
    }
}
