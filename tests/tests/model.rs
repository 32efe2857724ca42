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

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use dlock_core::key::key_hash;
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

/// How a live lease ends on its own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expiry {
    /// 60 s: not during the case.
    Long,
    /// With the session of its actor.
    Session,
}

/// What a lease holds its key as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Exclusive,
    /// Shared, with a semaphore's permits (`None`: no limit).
    Shared(Option<i32>),
}

impl Mode {
    /// As `dlock_locks.mode` shows it.
    fn shown(self) -> &'static str {
        match self {
            Mode::Exclusive => "exclusive",
            Mode::Shared(_) => "shared",
        }
    }

    /// As `dlock_locks.max_holders` shows it.
    fn permits(self) -> Option<i32> {
        match self {
            Mode::Exclusive => None,
            Mode::Shared(permits) => permits,
        }
    }
}

/// A live lease in the model.
#[derive(Clone, Debug)]
struct Lease {
    holder: Actor,
    fence: i64,
    hold_count: i32,
    expiry: Expiry,
    mode: Mode,
}

/// The contract as a pure state machine over the keys of one case.
#[derive(Clone, Default)]
struct Model {
    /// The live leases of each key, oldest (smallest fence) first: one exclusive lease, or any
    /// number of shared ones.
    leases: [Vec<Lease>; KEYS],
    /// Every fence granted per key, in grant order.
    granted: [Vec<i64>; KEYS],
}

/// What an acquire of one key must do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Decision {
    /// A new lease with a fence above every earlier one.
    Grant,
    /// The caller's own lease (its index among the key's leases): same fence, one hold more.
    Reenter(usize),
    /// NULL: why.
    Busy(&'static str),
    /// The owner holds the key in the other mode: 0A000.
    ModeConflict,
    /// A semaphore's holders hold it with another number of permits: 22023.
    SizeMismatch,
}

/// How a caller stands to its own live lease of a key, for renew and release.
enum Standing {
    /// Its lease, by index among the key's leases.
    Holder(usize),
    /// The right owner string from another role (not `dlock_admin`): 42501.
    ForeignRole,
    /// No live lease of this owner.
    Stranger,
}

impl Model {
    fn resolve(&self, who: Who, key: usize) -> Actor {
        match who {
            Who::Actor(a) => a,
            Who::HolderElse(a) => self.leases[key].first().map_or(a, |l| l.holder),
        }
    }

    /// The owner's lease of the key (one at most: the owner string is the holder's identity).
    fn own(&self, by: Actor, key: usize) -> Option<usize> {
        self.leases[key].iter().position(|l| l.holder.owner == by.owner)
    }

    fn standing(&self, by: Actor, key: usize) -> Standing {
        match self.own(by, key) {
            Some(i) if self.leases[key][i].holder.role == by.role || by.role == ADMIN => Standing::Holder(i),
            Some(_) => Standing::ForeignRole,
            None => Standing::Stranger,
        }
    }

    /// The acquire rules: reentry (same owner, role and mode, and permits), then the modes and
    /// the semaphore's permits. Nobody waits in the model, so no queue holds a newcomer back.
    fn decide(&self, by: Actor, key: usize, mode: Mode) -> Decision {
        let leases = &self.leases[key];
        if let Some(i) = self.own(by, key) {
            let own = &leases[i];
            if own.holder.role != by.role {
                return Decision::Busy("same owner, other role");
            }
            return match (own.mode, mode) {
                (held, wanted) if held == wanted => Decision::Reenter(i),
                (Mode::Shared(_), Mode::Shared(_)) => Decision::SizeMismatch,
                _ => Decision::ModeConflict,
            };
        }
        match mode {
            Mode::Exclusive if leases.is_empty() => Decision::Grant,
            Mode::Exclusive => Decision::Busy("held"),
            Mode::Shared(_) if leases.iter().any(|l| l.mode == Mode::Exclusive) => {
                Decision::Busy("held exclusively")
            }
            Mode::Shared(_) if leases.first().is_some_and(|l| l.mode != mode) => Decision::SizeMismatch,
            Mode::Shared(Some(n)) if leases.len() >= n as usize => Decision::Busy("semaphore full"),
            Mode::Shared(_) => Decision::Grant,
        }
    }

    /// Records a new grant of `key` answered with `fence`: above every earlier fence of the key.
    /// A lease with the short ttl is dead at once.
    fn grant(&mut self, by: Actor, key: usize, fence: i64, ttl: Ttl, mode: Mode) -> Result<(), String> {
        let highest = self.granted[key].iter().copied().max().unwrap_or(0);
        ensure!(fence > highest, "a new grant's fence {fence} must exceed every earlier one ({highest})");
        self.granted[key].push(fence);
        let expiry = match ttl {
            Ttl::Long => Expiry::Long,
            Ttl::Session => Expiry::Session,
            Ttl::Short => return Ok(()),
        };
        self.leases[key].push(Lease { holder: by, fence, hold_count: 1, expiry, mode });
        Ok(())
    }

    /// Records a reentry of lease `i` of `key` answered with `fence`: its own fence.
    fn reenter(&mut self, key: usize, i: usize, fence: Option<i64>, ttl: Ttl) -> Result<(), String> {
        let lease = &mut self.leases[key][i];
        ensure!(
            fence == Some(lease.fence),
            "reentry must return the same fence {}, got {fence:?}",
            lease.fence
        );
        lease.hold_count += 1;
        // expires_at = greatest(old, now + ttl): only ttl NULL changes how it ends.
        if ttl == Ttl::Session {
            lease.expiry = Expiry::Session;
        }
        Ok(())
    }
}

/// The order in which `dlock_acquire_all` visits keys (the global lock order: key hash, then
/// text): the first key it cannot grant decides what the call answers.
fn lock_order(keys: &[usize], texts: &[String]) -> Vec<usize> {
    let mut order = keys.to_vec();
    order.sort_by(|a, b| (key_hash(&texts[*a]), &texts[*a]).cmp(&(key_hash(&texts[*b]), &texts[*b])));
    order
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

/// Checks that the call failed with `code`.
fn refused<V: fmt::Debug>(
    what: &str,
    result: Result<V, tokio_postgres::Error>,
    code: &SqlState,
) -> Result<(), String> {
    match result {
        Ok(v) => Err(format!("{what}: expected ERROR {}, got Ok({v:?})", code.code())),
        Err(e) if e.code() == Some(code) => Ok(()),
        Err(e) => Err(format!(
            "{what}: expected ERROR {}, got {:?} ({e})",
            code.code(),
            e.code().map(SqlState::code)
        )),
    }
}

/// Checks that the call failed with 42501.
fn forbidden<V: fmt::Debug>(what: &str, result: Result<V, tokio_postgres::Error>) -> Result<(), String> {
    refused(what, result, &SqlState::INSUFFICIENT_PRIVILEGE)
}

/// What `dlock_locks` shows of one lease: key, owner, fence, holds, session-bound, holder pid,
/// role, mode, max_holders.
type ViewRow = (usize, Option<String>, i64, i32, bool, i32, String, String, Option<i32>);

impl World<'_> {
    /// Runs `op`, checks its answer against the model, and advances the model. Returns what
    /// kind of answer it was.
    async fn apply(&mut self, op: &Op) -> Result<&'static str, String> {
        match *op {
            Op::Acquire { by, key, ttl, explicit_wait } => {
                self.acquire(self.model.resolve(by, key), key, ttl, explicit_wait).await
            }
            Op::AcquireShared { by, key, ttl, odd_permits } => {
                let permits = odd_permits.unwrap_or(KEY_PERMITS[key]);
                self.acquire_shared(self.model.resolve(by, key), key, ttl, permits).await
            }
            Op::AcquireAll { by, ref keys, ttl } => {
                self.acquire_all(self.model.resolve(by, keys[0]), &keys.clone(), ttl).await
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

    /// Checks a one-key acquire's answer against what the model decides, advances the model,
    /// and names the kind of answer.
    fn settle(
        &mut self,
        by: Actor,
        key: usize,
        ttl: Ttl,
        mode: Mode,
        answer: Result<Option<i64>, tokio_postgres::Error>,
    ) -> Result<&'static str, String> {
        let shared = mode != Mode::Exclusive;
        match self.model.decide(by, key, mode) {
            Decision::Grant => {
                let fence = ok("acquire", answer)?.ok_or("a grantable key must be granted, got NULL")?;
                let beside = !self.model.leases[key].is_empty();
                self.model.grant(by, key, fence, ttl, mode)?;
                Ok(match (shared, ttl == Ttl::Short, beside) {
                    (false, true, _) => "acquire: granted, then expired",
                    (false, false, _) => "acquire: granted",
                    (true, true, _) => "shared: granted, then expired",
                    (true, false, false) => "shared: granted",
                    (true, false, true) => "shared: granted beside other holders",
                })
            }
            Decision::Reenter(i) => {
                self.model.reenter(key, i, ok("acquire", answer)?, ttl)?;
                Ok(if shared { "shared: reentered" } else { "acquire: reentered" })
            }
            Decision::Busy(why) => {
                let answer = ok("acquire", answer)?;
                let holders: Vec<Actor> = self.model.leases[key].iter().map(|l| l.holder).collect();
                ensure!(
                    answer.is_none(),
                    "{why}: a key held by {holders:?} must answer NULL, got {answer:?}"
                );
                Ok(match (shared, why) {
                    (_, "same owner, other role") => "acquire: NULL (same owner, other role)",
                    (false, _) => "acquire: NULL (held)",
                    (true, "semaphore full") => "shared: NULL (semaphore full)",
                    (true, _) => "shared: NULL (held exclusively)",
                })
            }
            Decision::ModeConflict => {
                refused("acquire in the other mode", answer, &SqlState::FEATURE_NOT_SUPPORTED)
                    .map(|()| "mode conflict: 0A000")
            }
            Decision::SizeMismatch => {
                refused("a semaphore of another size", answer, &SqlState::INVALID_PARAMETER_VALUE)
                    .map(|()| "shared: 22023 (permits disagree)")
            }
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
        if ttl == Ttl::Short {
            tokio::time::sleep(SHORT_TTL_PASSED).await;
        }
        self.settle(by, key, ttl, Mode::Exclusive, answer)
    }

    async fn acquire_shared(
        &mut self,
        by: Actor,
        key: usize,
        ttl: Ttl,
        permits: Option<i32>,
    ) -> Result<&'static str, String> {
        let (k, o) = (&self.keys[key], &self.owners[by.owner]);
        let answer = call(
            "acquire_shared",
            self.sessions[by.session()].query_one(
                "SELECT dlock_acquire_shared($1, $2, $3::text::interval, '0', $4)",
                &[k, o, &ttl.sql(), &permits],
            ),
        )
        .await?
        .and_then(|row| row.try_get(0));
        if ttl == Ttl::Short {
            tokio::time::sleep(SHORT_TTL_PASSED).await;
        }
        self.settle(by, key, ttl, Mode::Shared(permits), answer)
    }

    async fn acquire_all(&mut self, by: Actor, keys: &[usize], ttl: Ttl) -> Result<&'static str, String> {
        let texts: Vec<String> = keys.iter().map(|k| self.keys[*k].clone()).collect();
        let answer: Result<Option<Vec<i64>>, _> = call(
            "acquire_all",
            self.sessions[by.session()].query_one(
                "SELECT dlock_acquire_all($1, $2, $3::text::interval, '0')",
                &[&texts, &self.owners[by.owner], &ttl.sql()],
            ),
        )
        .await?
        .and_then(|row| row.try_get(0));
        if ttl == Ttl::Short {
            tokio::time::sleep(SHORT_TTL_PASSED).await;
        }
        // The first key in lock order that cannot be granted decides; then nothing changes.
        let decisions: Vec<(usize, Decision)> =
            keys.iter().map(|k| (*k, self.model.decide(by, *k, Mode::Exclusive))).collect();
        let decision_of = |k: usize| decisions.iter().find(|(key, _)| *key == k).expect("decided").1;
        let first_refusal = lock_order(keys, &self.keys)
            .into_iter()
            .map(decision_of)
            .find(|d| !matches!(d, Decision::Grant | Decision::Reenter(_)));
        match first_refusal {
            Some(Decision::ModeConflict) => {
                return refused(
                    "acquire_all over a shared lease of its own",
                    answer,
                    &SqlState::FEATURE_NOT_SUPPORTED,
                )
                .map(|()| "acquire_all: 0A000 (own key held shared)");
            }
            Some(Decision::Busy(_)) => {
                let answer = ok("acquire_all", answer)?;
                ensure!(answer.is_none(), "a set with a busy key must answer NULL, got {answer:?}");
                return Ok("acquire_all: NULL");
            }
            Some(other) => return Err(format!("an exclusive request cannot be decided {other:?}")),
            None => {}
        }
        let fences = ok("acquire_all", answer)?.ok_or("a set of grantable keys must be granted, got NULL")?;
        ensure!(fences.len() == keys.len(), "{} fences for {} keys", fences.len(), keys.len());
        let mut reentered = false;
        for ((key, decision), fence) in decisions.into_iter().zip(fences) {
            match decision {
                Decision::Grant => self.model.grant(by, key, fence, ttl, Mode::Exclusive)?,
                Decision::Reenter(i) => {
                    reentered = true;
                    self.model.reenter(key, i, Some(fence), ttl)?;
                }
                _ => unreachable!("refusals returned above"),
            }
        }
        Ok(match (reentered, ttl == Ttl::Short) {
            (true, _) => "acquire_all: granted, reentering some",
            (false, true) => "acquire_all: granted, then expired",
            (false, false) => "acquire_all: granted",
        })
    }

    async fn renew(&mut self, by: Actor, key: usize, short: bool) -> Result<&'static str, String> {
        let (k, o) = (&self.keys[key], &self.owners[by.owner]);
        let ttl = if short { SHORT_TTL } else { LONG_TTL };
        let answer = call("renew", self.sessions[by.session()].renew(k, o, Some(ttl))).await?;
        if short {
            tokio::time::sleep(SHORT_TTL_PASSED).await;
        }
        match self.model.standing(by, key) {
            Standing::Holder(i) => {
                let expires_at = ok("renew", answer)?.ok_or("the holder's renew must answer, got NULL")?;
                if self.model.leases[key][i].expiry == Expiry::Session {
                    ensure!(expires_at == f64::INFINITY, "renew of a session-bound lease: {expires_at}");
                    return Ok("renew: 'infinity'");
                }
                ensure!(
                    expires_at.is_finite(),
                    "renew of a ttl lease must answer a finite time: {expires_at}"
                );
                if short {
                    self.model.leases[key].remove(i);
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
            Standing::Holder(i) => {
                ensure!(ok("release", answer)?, "the holder's release must answer true");
                let leases = &mut self.model.leases[key];
                leases[i].hold_count -= 1;
                if leases[i].hold_count == 0 {
                    let freed = leases.remove(i);
                    return Ok(match (freed.mode, leases.is_empty()) {
                        (Mode::Exclusive, _) | (_, true) => "release: freed",
                        (Mode::Shared(_), false) => "release: one shared holder fewer",
                    });
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
        for leases in &mut self.model.leases {
            let before = leases.len();
            leases
                .retain(|l| !(l.holder.owner == by.owner && (l.holder.role == by.role || by.role == ADMIN)));
            freed += i32::from(leases.len() < before);
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
        let carrier = self.model.leases[key].iter().find(|l| l.fence == fence);
        // A true answer pins the key, which only the lease's role and trusted roles may do.
        if carrier.is_some_and(|l| l.holder.role != by.role && by.role != ADMIN) {
            return forbidden("holds on another role's lease", answer).map(|()| "holds: 42501");
        }
        let (answer, expected) = (ok("holds", answer)?, carrier.is_some());
        ensure!(answer == expected, "holds(fence {fence}) must answer {expected}, got {answer}");
        Ok(match (expected, carrier.map(|l| l.mode)) {
            (true, Some(Mode::Shared(_))) => "holds: true (shared lease)",
            (true, _) => "holds: true",
            (false, _) => "holds: false",
        })
    }

    async fn force_release(&mut self, role: usize, key: usize) -> Result<&'static str, String> {
        let session = &self.sessions[Actor { role, owner: 0 }.session()];
        let answer = call("force_release", session.force_release(&self.keys[key])).await?;
        if role != ADMIN {
            return forbidden("force_release by a plain role", answer).map(|()| "force_release: 42501");
        }
        let expected = !std::mem::take(&mut self.model.leases[key]).is_empty();
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
        for leases in &mut self.model.leases {
            let before = leases.len();
            leases.retain(|l| !(l.holder == by && l.expiry == Expiry::Session));
            ended += before - leases.len();
        }
        Ok(if ended == 0 { "reconnect: nothing ended" } else { "reconnect: session-bound leases ended" })
    }

    /// `dlock_locks` (as the superuser) shows exactly the model's live leases, one row each.
    async fn check_view(&self) -> Result<(), String> {
        let rows = ok(
            "read dlock_locks",
            self.superuser
                .query(
                    "SELECT key, owner, fence, hold_count, expires_at = 'infinity', holder_pid, \
                            holder_role::text, waiters, mode, max_holders \
                       FROM dlock_locks WHERE key = ANY($1) ORDER BY key, fence",
                    &[&self.keys],
                )
                .await,
        )?;
        let mut seen: Vec<ViewRow> = Vec::new();
        for row in &rows {
            let key: String = row.get(0);
            let key = self.keys.iter().position(|k| *k == key).expect("filtered on the case's keys");
            let waiters: i32 = row.get(7);
            ensure!(waiters == 0, "dlock_locks shows {waiters} waiters on k{key}; nobody waits");
            seen.push((
                key,
                row.get(1),
                row.get(2),
                row.get(3),
                row.get(4),
                row.get(5),
                row.get(6),
                row.get(8),
                row.get(9),
            ));
        }
        // The case's keys sort as k0 < k1 < k2, so the model's order is the view's.
        let expected: Vec<(usize, &Lease)> =
            (0..KEYS).flat_map(|key| self.model.leases[key].iter().map(move |l| (key, l))).collect();
        let describe = || {
            let model: Vec<_> =
                expected.iter().map(|(k, l)| (k, l.holder, l.fence, l.hold_count, l.mode)).collect();
            format!("dlock_locks shows {seen:?}, the model has {model:?}")
        };
        ensure!(seen.len() == expected.len(), "{}", describe());
        for (row, (m_key, lease)) in seen.iter().zip(&expected) {
            let (key, owner, fence, hold_count, infinite, pid, role, mode, max_holders) = row;
            ensure!(
                key == m_key
                    && owner.as_deref() == Some(self.owners[lease.holder.owner].as_str())
                    && *fence == lease.fence
                    && *hold_count == lease.hold_count
                    && mode == lease.mode.shown()
                    && *max_holders == lease.mode.permits(),
                "{}",
                describe()
            );
            ensure!(
                role == ROLES[lease.holder.role],
                "k{key}: holder_role {role}, expected {}",
                ROLES[lease.holder.role]
            );
            ensure!(
                *infinite == (lease.expiry == Expiry::Session),
                "k{key}: expires_at infinite = {infinite}; {}",
                describe()
            );
            if lease.expiry == Expiry::Session {
                let bound = self.sessions[lease.holder.session()].pid();
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
                        "SELECT key, owner FROM dlock_locks WHERE key = ANY($1) ORDER BY key, fence",
                        &[&self.keys],
                    )
                    .await,
            )?;
            let seen: Vec<(String, Option<String>)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
            let expected: Vec<(String, Option<String>)> = (0..KEYS)
                .flat_map(|key| self.model.leases[key].iter().map(move |l| (key, l)))
                .map(|(key, l)| {
                    let visible = l.holder.role == role || role == ADMIN;
                    (self.keys[key].clone(), visible.then(|| self.owners[l.holder.owner].clone()))
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
