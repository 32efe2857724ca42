//! The calls of a case against the server: each is made, its answer checked against the model,
//! and the model advanced.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use dlock_tests::{Cluster, Session};
use tokio_postgres::error::SqlState;

use super::rules::{Decision, Expiry, Mode, Model, Standing, lock_order};
use super::{
    ADMIN, Actor, CALL_LIMIT, FencePick, KEY_PERMITS, LONG_TTL, Op, ROLES, SHORT_TTL, SHORT_TTL_PASSED, Ttl,
};

/// What happened, counted over the whole run (printed, so a run shows what it exercised).
pub(crate) type Seen = BTreeMap<&'static str, usize>;

/// Everything one case runs on.
pub(crate) struct World<'a> {
    pub(crate) cluster: &'a Cluster,
    pub(crate) superuser: Session,
    /// One session per actor, indexed by `Actor::session`.
    pub(crate) sessions: Vec<Session>,
    pub(crate) keys: Vec<String>,
    pub(crate) owners: Vec<String>,
    pub(crate) model: Model,
}

/// A call's result, or a failure message naming it.
pub(crate) async fn call<V>(
    what: &str,
    future: impl std::future::Future<Output = Result<V, tokio_postgres::Error>>,
) -> Result<Result<V, tokio_postgres::Error>, String> {
    tokio::time::timeout(CALL_LIMIT, future)
        .await
        .map_err(|_| format!("{what}: no answer within {CALL_LIMIT:?}"))
}

/// The call's value, or a failure message if it raised an error.
pub(crate) fn ok<V>(what: &str, result: Result<V, tokio_postgres::Error>) -> Result<V, String> {
    result.map_err(|e| format!("{what}: unexpected ERROR {:?} ({e})", e.code().map(SqlState::code)))
}

/// Checks that the call failed with `code`.
pub(crate) fn refused<V: fmt::Debug>(
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
pub(crate) fn forbidden<V: fmt::Debug>(
    what: &str,
    result: Result<V, tokio_postgres::Error>,
) -> Result<(), String> {
    refused(what, result, &SqlState::INSUFFICIENT_PRIVILEGE)
}

impl World<'_> {
    /// Runs `op`, checks its answer against the model, and advances the model. Returns what
    /// kind of answer it was.
    pub(crate) async fn apply(&mut self, op: &Op) -> Result<&'static str, String> {
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
}
