//! The lease history: what each worker was acknowledged, as JSON lines (one file per worker,
//! one `write(2)` per line so a `kill -9` loses at most the line being written), and its
//! reading back into one `Grant` per lease. Times are the server's clock (epoch seconds), except
//! `Releasing::local`, which only orders a release against a crash of the runner's making.

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
    },
    /// The lease's exact expiry, read from `dlock_locks` right after the grant (replaces the
    /// grant's lower bound).
    Expiry { owner: String, key: String, fence: i64, live_until: f64 },
    /// The lease's expiry as extended by acknowledged renewals (for a session-bound lease: a
    /// later moment its session was seen holding it).
    Renewed { owner: String, key: String, fence: i64, live_until: f64 },
    /// A write to the resource and its verdict.
    Write { owner: String, key: String, fence: i64, phase: String, accepted: bool, at: f64 },
    /// About to send a release; `local` is this machine's clock (shared by the runner and
    /// every worker; never skewed, never sent to dlock), to order it against a crash.
    Releasing { owner: String, key: String, fence: i64, local: f64 },
    /// A release: its answer (`None`: no answer, e.g. the connection broke) and server times
    /// before (`lb`) and after (`ub`) the call where known.
    Release { owner: String, key: String, fence: i64, ok: Option<bool>, lb: Option<f64>, ub: Option<f64> },
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
    /// The last server time this worker surely still held the lease: the earliest of its
    /// known expiry and the first moment it may have let go (a release, or failing that its
    /// last write before the release). A killed worker never let go: its lease lives on.
    pub fn held_until(&self) -> f64 {
        let mut until = self.live_until;
        if !self.releases.is_empty() {
            let release_lb = self.releases.iter().filter_map(|r| r.lb).fold(f64::INFINITY, f64::min);
            let last_seen = self.writes.iter().map(|w| w.0).fold(self.granted_by, f64::max);
            until = until.min(if release_lb.is_finite() { release_lb } else { last_seen });
        }
        until
    }
}

/// Reads every `*.jsonl` in `dir` into grants, keyed by (owner, key, fence): a reentrant grant
/// of the same lease merges into one. Unparsable lines (a worker killed mid-line) are skipped.
pub fn read(dir: &Path) -> std::io::Result<Vec<Grant>> {
    let mut grants: BTreeMap<(String, String, i64), Grant> = BTreeMap::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries.iter().filter(|p| p.extension().is_some_and(|e| e == "jsonl")) {
        let worker = path.file_stem().unwrap_or_default().to_string_lossy().into_owned();
        for line in std::fs::read_to_string(path)?.lines() {
            let Ok(event) = serde_json::from_str::<Event>(line) else { continue };
            apply(&mut grants, &worker, event);
        }
    }
    Ok(grants.into_values().collect())
}

fn apply(grants: &mut BTreeMap<(String, String, i64), Grant>, worker: &str, event: Event) {
    match event {
        Event::Grant { owner, key, fence, requested_at, granted_by, live_until, bound } => {
            let grant = grants.entry((owner.clone(), key.clone(), fence)).or_insert_with(|| Grant {
                worker: worker.to_string(),
                owner,
                key,
                fence,
                requested_at,
                granted_by,
                live_until,
                bound,
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
        Event::Releasing { owner, key, fence, local } => {
            if let Some(grant) = grants.get_mut(&(owner, key, fence)) {
                grant.releasing_local = Some(grant.releasing_local.map_or(local, |t| t.min(local)));
            }
        }
        Event::Release { owner, key, fence, ok, lb, ub } => {
            if let Some(grant) = grants.get_mut(&(owner, key, fence)) {
                grant.releases.push(Release { ok, lb, ub });
            }
        }
    }
}
