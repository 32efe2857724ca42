//! The lease history: what each worker was acknowledged, as JSON lines (one file per worker,
//! one `write(2)` per line so a `kill -9` loses at most the line being written), and its
//! reading back into one `Grant` per lease (a multi-key grant is one `Grant` per key besides its
//! `MultiGrant`). Times are the server's clock (epoch seconds), except `Releasing::local`, which
//! only orders a release against a crash of the runner's making.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One line of a worker's history file. `worker.py` writes the same shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "ev", rename_all = "snake_case")]
pub enum Event {
    /// An acquire answered with a fence.
    Grant {
        owner: String,
        key: String,
        fence: i64,
        /// Server time before the acquire was sent (a lower bound of the grant).
        requested_at: Option<f64>,
        /// Server time right after the grant (an upper bound of it).
        granted_by: f64,
        /// Until when the lease is surely live unless released (server clock). For a
        /// session-bound lease: the last moment its session was seen holding it.
        live_until: f64,
        /// A session-bound lease (`ttl NULL`): it never expires and ends with its session.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        bound: bool,
        /// The lease's mode (exclusive when absent: the hot-key workers write none).
        #[serde(default, skip_serializing_if = "Mode::is_exclusive")]
        mode: Mode,
        /// A semaphore's size: a shared lease taken with `max_holders`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_holders: Option<i32>,
        /// A fast-mode lease (shared memory: a crash forgets it by design).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        fast: bool,
    },
    /// A `dlock_acquire_all` answered with fences (in the order of `keys`; a NULL element or a
    /// missing one would be a partial grant). Times as for `Grant`.
    GrantAll {
        owner: String,
        keys: Vec<String>,
        fences: Vec<Option<i64>>,
        requested_at: Option<f64>,
        granted_by: f64,
        live_until: f64,
    },
    /// A `dlock_acquire_all` answered NULL, and which of its keys the owner held right after
    /// (none, or the request left a partial grant behind).
    NotGranted { owner: String, keys: Vec<String>, left_held: Vec<String>, at: f64 },
    /// Whether the owner's leases on `keys` (with `fences`) were live (`dlock_holds`, or a
    /// renewal answering NULL) when the server judged them, by `at` at the latest.
    Check { owner: String, keys: Vec<String>, fences: Vec<i64>, held: Vec<bool>, at: f64 },
    /// What `dlock_leader` showed: asked at `lb`, answered by `ub`.
    Leader {
        election: String,
        term: Option<i64>,
        info: Option<String>,
        expires_at: Option<f64>,
        lb: f64,
        ub: f64,
    },
    /// What `dlock_wait_free` answered for `key`: asked at `lb`, answered by `ub`.
    WaitFree { key: String, free: bool, lb: f64, ub: f64 },
    /// The lease's exact expiry, read from `dlock_locks` right after the grant (replaces the
    /// grant's lower bound).
    Expiry { owner: String, key: String, fence: i64, live_until: f64 },
    /// The lease's expiry as extended by acknowledged renewals (for a session-bound lease: a
    /// later moment its session was seen holding it).
    Renewed { owner: String, key: String, fence: i64, live_until: f64 },
    /// A write to the resource and its verdict.
    Write { owner: String, key: String, fence: i64, phase: String, accepted: bool, at: f64 },
    /// About to send a release; `local` is this machine's clock (shared by the runner and
    /// every worker; never skewed, never sent to dlock), to order it against a crash; `lb`, where
    /// known, the last server time the worker saw before sending it.
    Releasing {
        owner: String,
        key: String,
        fence: i64,
        local: f64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lb: Option<f64>,
    },
    /// A release: its answer (`None`: no answer, e.g. the connection broke) and server times
    /// before (`lb`) and after (`ub`) the call where known.
    Release { owner: String, key: String, fence: i64, ok: Option<bool>, lb: Option<f64>, ub: Option<f64> },
}

/// A lease's mode, as the worker asked for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    #[default]
    Exclusive,
    Shared,
    /// The lead of an election (`dlock_campaign`): exclusive, its fence is the term.
    Leader,
}

impl Mode {
    fn is_exclusive(&self) -> bool {
        *self == Mode::Exclusive
    }
}

/// Which primitive a grant exercised (the report counts grants per primitive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Primitive {
    Exclusive,
    Shared,
    Semaphore,
    MultiKey,
    Election,
}

impl Primitive {
    pub const ALL: [Primitive; 5] = [
        Primitive::Exclusive,
        Primitive::Shared,
        Primitive::Semaphore,
        Primitive::MultiKey,
        Primitive::Election,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Primitive::Exclusive => "exclusive",
            Primitive::Shared => "shared",
            Primitive::Semaphore => "semaphore",
            Primitive::MultiKey => "multi-key",
            Primitive::Election => "election",
        }
    }
}

/// Appends events to a worker's history file.
pub struct Log(File);

impl Log {
    pub fn create(path: &Path) -> std::io::Result<Log> {
        Ok(Log(OpenOptions::new().create(true).append(true).open(path)?))
    }

    /// Writes one line with a single `write(2)` (no buffering: a killed worker loses nothing acked).
    pub fn record(&mut self, event: &Event) {
        let mut line = serde_json::to_vec(event).expect("events serialise");
        line.push(b'\n');
        self.0.write_all(&line).expect("write the history file");
    }
}

/// One lease as the worker saw it: its grant and what happened under it.
#[derive(Debug, Clone, Default)]
pub struct Grant {
    pub worker: String,
    pub owner: String,
    pub key: String,
    pub fence: i64,
    pub requested_at: Option<f64>,
    pub granted_by: f64,
    pub live_until: f64,
    /// Session-bound (`ttl NULL`): `live_until` is the last moment it was seen held.
    pub bound: bool,
    pub mode: Mode,
    /// A semaphore's size, for a shared lease taken with one.
    pub max_holders: Option<i32>,
    /// One key of a multi-key grant.
    pub multi: bool,
    /// A fast-mode lease: a crash forgets it by design.
    pub fast: bool,
    /// Checks of this lease alone: (server time it was judged by, whether it was live).
    pub checks: Vec<(f64, bool)>,
    /// The last server time the worker saw before it set out to release it.
    pub releasing_lb: Option<f64>,
    /// Server times of this worker's writes under the lease, and whether each was refused.
    pub writes: Vec<(f64, bool)>,
    /// When (this machine's clock) the worker first set out to release it.
    pub releasing_local: Option<f64>,
    /// Release calls under the lease.
    pub releases: Vec<Release>,
}

/// One release call: its answer (`None`: none came) and server times before and after it.
#[derive(Debug, Clone, Copy)]
pub struct Release {
    pub ok: Option<bool>,
    pub lb: Option<f64>,
    pub ub: Option<f64>,
}

impl Grant {
    /// Which primitive granted it.
    pub fn primitive(&self) -> Primitive {
        match (self.mode, self.multi, self.max_holders) {
            (Mode::Leader, _, _) => Primitive::Election,
            (Mode::Shared, _, Some(_)) => Primitive::Semaphore,
            (Mode::Shared, _, None) => Primitive::Shared,
            (Mode::Exclusive, true, _) => Primitive::MultiKey,
            (Mode::Exclusive, false, _) => Primitive::Exclusive,
        }
    }

    /// The first server time the worker may have set out to release it (infinity: never).
    pub fn let_go_by(&self) -> f64 {
        let released = self.releasing_lb.into_iter().chain(self.releases.iter().filter_map(|r| r.lb));
        released.fold(f64::INFINITY, f64::min)
    }

    /// The last server time this worker surely still held the lease: the earliest of its
    /// known expiry and the first moment it may have let go (a release, or failing that its
    /// last write before the release). A killed worker never let go: its lease lives on, unless
    /// it had set out to release it (the release may have reached the server).
    pub fn held_until(&self) -> f64 {
        let mut until = self.live_until;
        if !self.releases.is_empty() || self.releasing_local.is_some() {
            let release_lb = self.releases.iter().filter_map(|r| r.lb).fold(f64::INFINITY, f64::min);
            // The last moment it was seen held before the release went out.
            let last_seen = self
                .releasing_lb
                .unwrap_or_else(|| self.writes.iter().map(|w| w.0).fold(self.granted_by, f64::max));
            until = until.min(if release_lb.is_finite() { release_lb } else { last_seen });
        }
        until
    }
}

/// A `dlock_acquire_all` grant as a whole (its keys are also `Grant`s of their own).
#[derive(Debug, Clone, Default)]
pub struct MultiGrant {
    pub worker: String,
    pub owner: String,
    pub keys: Vec<String>,
    pub fences: Vec<Option<i64>>,
    pub granted_by: f64,
    /// Checks of all its keys at once: (server time judged by, live per key).
    pub checks: Vec<(f64, Vec<bool>)>,
}

/// A `dlock_acquire_all` that answered NULL, and what its owner held right after.
#[derive(Debug, Clone)]
pub struct NotGranted {
    pub worker: String,
    pub owner: String,
    pub keys: Vec<String>,
    pub left_held: Vec<String>,
    pub at: f64,
}

/// One answer of `dlock_leader`.
#[derive(Debug, Clone)]
pub struct Observation {
    pub worker: String,
    pub election: String,
    pub term: Option<i64>,
    pub info: Option<String>,
    pub expires_at: Option<f64>,
    pub lb: f64,
    pub ub: f64,
}

/// One `dlock_wait_free` answer.
#[derive(Debug, Clone)]
pub struct FreeAnswer {
    pub worker: String,
    pub key: String,
    pub free: bool,
    pub lb: f64,
    pub ub: f64,
}

/// Everything the workers recorded.
#[derive(Debug, Default)]
pub struct History {
    pub grants: Vec<Grant>,
    pub multi: Vec<MultiGrant>,
    pub not_granted: Vec<NotGranted>,
    pub observations: Vec<Observation>,
    pub free_answers: Vec<FreeAnswer>,
}

/// What the reader builds up: grants keyed by (owner, key, fence), multi-key grants by owner.
#[derive(Default)]
struct Reading {
    grants: BTreeMap<(String, String, i64), Grant>,
    multi: BTreeMap<String, MultiGrant>,
    not_granted: Vec<NotGranted>,
    observations: Vec<Observation>,
    free_answers: Vec<FreeAnswer>,
}

/// Reads every `*.jsonl` in `dir` into grants, keyed by (owner, key, fence): a reentrant grant
/// of the same lease merges into one. Unparsable lines (a worker killed mid-line) are skipped.
pub fn read(dir: &Path) -> std::io::Result<History> {
    let mut reading = Reading::default();
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries.iter().filter(|p| p.extension().is_some_and(|e| e == "jsonl")) {
        let worker = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        for line in std::fs::read_to_string(path)?.lines() {
            let Ok(event) = serde_json::from_str::<Event>(line) else { continue };
            reading.apply(&worker, event);
        }
    }
    Ok(History {
        grants: reading.grants.into_values().collect(),
        multi: reading.multi.into_values().collect(),
        not_granted: reading.not_granted,
        observations: reading.observations,
        free_answers: reading.free_answers,
    })
}

/// Reads histories given as text, one worker's per (name, text) (the checker's tests).
#[cfg(test)]
pub fn parse(workers: &[(&str, &str)]) -> History {
    let mut reading = Reading::default();
    for (worker, text) in workers {
        for event in text.lines().filter_map(|l| serde_json::from_str::<Event>(l).ok()) {
            reading.apply(worker, event);
        }
    }
    History {
        grants: reading.grants.into_values().collect(),
        multi: reading.multi.into_values().collect(),
        not_granted: reading.not_granted,
        observations: reading.observations,
        free_answers: reading.free_answers,
    }
}

impl Reading {
    fn apply(&mut self, worker: &str, event: Event) {
        let grants = &mut self.grants;
        match event {
            Event::Grant {
                owner,
                key,
                fence,
                requested_at,
                granted_by,
                live_until,
                bound,
                mode,
                max_holders,
                fast,
            } => {
                let grant = grants.entry((owner.clone(), key.clone(), fence)).or_insert_with(|| Grant {
                    worker: worker.to_string(),
                    owner,
                    key,
                    fence,
                    requested_at,
                    granted_by,
                    live_until,
                    bound,
                    mode,
                    max_holders,
                    fast,
                    ..Grant::default()
                });
                // A reentrant grant: the earliest grant and the latest known expiry stand.
                grant.granted_by = grant.granted_by.min(granted_by);
                grant.live_until = grant.live_until.max(live_until);
            }
            Event::Expiry { owner, key, fence, live_until } => {
                if let Some(grant) = grants.get_mut(&(owner, key, fence)) {
                    grant.live_until = live_until;
                }
            }
            Event::Renewed { owner, key, fence, live_until } => {
                if let Some(grant) = grants.get_mut(&(owner, key, fence)) {
                    grant.live_until = grant.live_until.max(live_until);
                }
            }
            Event::Write { owner, key, fence, accepted, at, .. } => {
                if let Some(grant) = grants.get_mut(&(owner, key, fence)) {
                    grant.writes.push((at, accepted));
                }
            }
            Event::Releasing { owner, key, fence, local, lb } => {
                if let Some(grant) = grants.get_mut(&(owner, key, fence)) {
                    grant.releasing_local = Some(grant.releasing_local.map_or(local, |t| t.min(local)));
                    if let Some(lb) = lb {
                        grant.releasing_lb = Some(grant.releasing_lb.map_or(lb, |t| t.min(lb)));
                    }
                }
            }
            Event::Release { owner, key, fence, ok, lb, ub } => {
                if let Some(grant) = grants.get_mut(&(owner, key, fence)) {
                    grant.releases.push(Release { ok, lb, ub });
                }
            }
            Event::GrantAll { owner, keys, fences, requested_at, granted_by, live_until } => {
                for (key, fence) in keys.iter().zip(&fences) {
                    let Some(fence) = *fence else { continue };
                    grants.entry((owner.clone(), key.clone(), fence)).or_insert_with(|| Grant {
                        worker: worker.to_string(),
                        owner: owner.clone(),
                        key: key.clone(),
                        fence,
                        requested_at,
                        granted_by,
                        live_until,
                        multi: true,
                        ..Grant::default()
                    });
                }
                let multi = MultiGrant {
                    worker: worker.to_string(),
                    owner: owner.clone(),
                    keys,
                    fences,
                    granted_by,
                    checks: Vec::new(),
                };
                self.multi.insert(owner, multi);
            }
            Event::NotGranted { owner, keys, left_held, at } => {
                self.not_granted.push(NotGranted { worker: worker.to_string(), owner, keys, left_held, at });
            }
            Event::Check { owner, keys, fences, held, at } => {
                if let Some(multi) = self.multi.get_mut(&owner).filter(|m| m.keys == keys) {
                    multi.checks.push((at, held));
                } else {
                    for ((key, fence), held) in keys.into_iter().zip(fences).zip(held) {
                        if let Some(grant) = grants.get_mut(&(owner.clone(), key, fence)) {
                            grant.checks.push((at, held));
                        }
                    }
                }
            }
            Event::WaitFree { key, free, lb, ub } => {
                self.free_answers.push(FreeAnswer { worker: worker.to_string(), key, free, lb, ub });
            }
            Event::Leader { election, term, info, expires_at, lb, ub } => {
                self.observations.push(Observation {
                    worker: worker.to_string(),
                    election,
                    term,
                    info,
                    expires_at,
                    lb,
                    ub,
                });
            }
        }
    }
}
