//! The checker: from the lease history (what workers were acknowledged) and the resource's own
//! records, finds violations of mutual exclusion, fence order, fencing and durability.
//! Every comparison uses the server's clock only; client clocks never enter.

use std::collections::{BTreeMap, HashMap};

use crate::history::Grant;
use crate::resource::{Accepted, Refused};

/// Slack for comparing a known expiry with a server time taken by another statement (the
/// client's `expires_at` is read just after the grant, a few microseconds late).
pub const MARGIN: f64 = 0.05;

/// How long after a kill -9 of the holder of a session-bound lease its key may go to nobody
/// while a probe waits for it. Nothing has to expire: the kernel closes the dead worker's socket,
/// the proxy closes its side to the server, the idle backend reads end-of-file and exits, and
/// dlock ends the lease with the session and lets the waiter in; that takes milliseconds. The
/// bound is three orders of magnitude above that, for a 2-core machine busy with three servers
/// and the workers (a judgement in seconds is not a timing test).
pub const BOUND_HANDOVER: f64 = 5.0;

/// A kill -9 of a worker holding a session-bound lease: the server must end the lease with the
/// session, and the key pass on at once. A probe waits for the key from the kill on.
#[derive(Debug, Clone)]
pub struct BoundKill {
    pub worker: String,
    pub key: String,
    pub fence: i64,
    /// Server time just before the kill, and the same moment on this machine's clock (the
    /// workers' `releasing` records use it).
    pub at: f64,
    pub local: f64,
    /// The probe's answer: `Some(true)` granted, `Some(false)` not within its wait, `None`
    /// interrupted (a crash or failover meanwhile): the kill is then not judged.
    pub probe: Option<bool>,
}

/// The longest a probe waits for the key of a killed session-bound holder (past the bound
/// the checker judges, so that the probe's own answer never decides near the bound).
pub const PROBE_WAIT: f64 = 8.0;

/// The leases visible right after a crash restart, and when they were read.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Server time just before the crash.
    pub crash_at: f64,
    /// Server time just after `dlock_locks` was read.
    pub read_at: f64,
    /// The same moment on this machine's clock (the workers' `releasing` records use it).
    pub read_local: f64,
    /// (key, owner, fence) of every live lease.
    pub leases: Vec<(String, String, i64)>,
}

/// Runs every check.
pub fn check(
    grants: &[Grant],
    accepted: &[Accepted],
    refused: &[Refused],
    snapshots: &[Snapshot],
    paused: &[(String, i64)],
) -> Outcome {
    let mut out = Outcome {
        grants: grants.len(),
        accepted_writes: accepted.len(),
        refused_writes: refused.len(),
        bound_grants: grants.iter().filter(|g| g.bound).count(),
        ..Outcome::default()
    };
    for grant in grants {
        *out.per_primitive.entry(grant.primitive()).or_default() += 1;
    }
    fences_unique(grants, &mut out);
    fences_in_grant_order(grants, &mut out);
    holders::exclusive_and_counted(grants, &mut out);
    // Fast-mode leases live in memory: a crash loses them by design, and what keeps exclusion
    // across it is the lock-delay, which `holders` and the fence checks judge.
    let crashes: Vec<f64> = snapshots.iter().map(|s| s.crash_at).collect();
    no_premature_loss(grants, refused, &crashes, &mut out);
    resource_fencing(grants, accepted, refused, &mut out);
    grants_survive_crashes(grants, snapshots, &mut out);
    paused_holders(grants, accepted, refused, paused, &mut out);
    out
}

/// What became of the writes of holders paused past their ttl.
fn paused_holders(
    grants: &[Grant],
    accepted: &[Accepted],
    refused: &[Refused],
    paused: &[(String, i64)],
    out: &mut Outcome,
) {
    for (key, fence) in paused {
        // A session-bound lease outlives the pause (its session does): nothing late about it.
        let Some(grant) = grants.iter().find(|g| g.key == *key && g.fence == *fence && !g.bound) else {
            continue;
        };
        let late = |k: &str, f: i64, at: f64| k == key && f == *fence && at > grant.live_until;
        if refused.iter().any(|w| late(&w.key, w.fence, w.at)) {
            out.paused_refused += 1;
        } else if accepted.iter().any(|w| late(&w.key, w.fence, w.at)) {
            out.paused_accepted += 1;
        } else {
            out.paused_no_late_write += 1;
        }
    }
}

pub(crate) fn per_key(grants: &[Grant]) -> BTreeMap<&str, Vec<&Grant>> {
    let mut keys: BTreeMap<&str, Vec<&Grant>> = BTreeMap::new();
    for grant in grants {
        keys.entry(&grant.key).or_default().push(grant);
    }
    keys
}

/// No fence of a key is granted to two owners.
fn fences_unique(grants: &[Grant], out: &mut Outcome) {
    let mut seen: HashMap<(&str, i64), &str> = HashMap::new();
    for grant in grants {
        if let Some(other) = seen.insert((&grant.key, grant.fence), &grant.owner)
            && other != grant.owner
        {
            out.violation(
                Rule::FenceUnique,
                format!(
                    "fence {} of key {} granted to two owners: {other} and {}",
                    grant.fence, grant.key, grant.owner
                ),
            );
        }
    }
}

/// Fences strictly increase per key: a grant completed before another was even requested
/// carries the smaller fence.
fn fences_in_grant_order(grants: &[Grant], out: &mut Outcome) {
    for (key, mut list) in per_key(grants) {
        list.sort_by_key(|g| g.fence);
        // The latest request among strictly smaller fences.
        let mut latest_request: Option<(f64, &Grant)> = None;
        let mut group_start = 0;
        for i in 0..list.len() {
            if i > 0 && list[i].fence != list[i - 1].fence {
                for g in &list[group_start..i] {
                    if let Some(at) = g.requested_at
                        && latest_request.is_none_or(|(t, _)| at > t)
                    {
                        latest_request = Some((at, g));
                    }
                }
                group_start = i;
            }
            if let Some((requested, earlier)) = latest_request
                && list[i].granted_by < requested
            {
                out.violation(
                    Rule::FenceOrder,
                    format!(
                        "key {key}: fence {} (owner {}) was granted by {:.6}, before fence {} (owner {}) \
                     was requested at {requested:.6}: fences out of grant order",
                        list[i].fence, list[i].owner, list[i].granted_by, earlier.fence, earlier.owner
                    ),
                );
            }
        }
    }
}

/// The interval during which a grant was surely held: from its grant to its expiry or the
/// first moment it may have been let go (server clock).
pub(crate) fn held(grant: &Grant) -> Option<(f64, f64)> {
    let (from, to) = (grant.granted_by, grant.held_until() - MARGIN);
    (to > from).then_some((from, to))
}

/// A lease is never taken away while surely live: no refused write and no refused release
/// before its expiry (and before it was let go).
/// `lost_at`: crashes, which end every fast-mode lease alive at them.
fn no_premature_loss(grants: &[Grant], refused: &[Refused], lost_at: &[f64], out: &mut Outcome) {
    let lost_to_crash =
        |g: &Grant, by: f64| g.fast && lost_at.iter().any(|&c| c < by && c > g.granted_by - MARGIN);
    let by_lease: HashMap<(&str, &str, i64), &Grant> =
        grants.iter().map(|g| ((g.owner.as_str(), g.key.as_str(), g.fence), g)).collect();
    for write in refused {
        let Some(grant) = by_lease.get(&(write.owner.as_str(), write.key.as_str(), write.fence)) else {
            out.violation(Rule::ResourceFencing, format!("refused write of an unknown lease: {write:?}"));
            continue;
        };
        if write.at > grant.live_until {
            out.late_writes_refused += 1;
        }
        // Let go before the write was judged? Then a refusal is no loss.
        let released_before = grant.releases.iter().any(|r| r.lb.is_some_and(|lb| lb < write.at));
        if write.at < grant.live_until - MARGIN && !released_before && !lost_to_crash(grant, write.at) {
            out.violation(
                Rule::PrematureLoss,
                format!(
                    "key {}: the write of fence {} ({}) was refused at {:.6} (newest fence {:?}) while \
                 its lease was live until {:.6}",
                    write.key, write.fence, write.owner, write.at, write.newest, grant.live_until
                ),
            );
        }
    }
    for grant in grants {
        for release in &grant.releases {
            if release.ok == Some(false)
                && let Some(ub) = release.ub
                && ub < grant.live_until - MARGIN
                && !lost_to_crash(grant, ub)
            {
                out.violation(
                    Rule::PrematureLoss,
                    format!(
                        "key {}: the release of fence {} ({}) answered false by {ub:.6}, but the lease was \
                     live until {:.6}: an acknowledged grant was lost",
                        grant.key, grant.fence, grant.owner, grant.live_until
                    ),
                );
            }
        }
        // A check (dlock_holds, or a renewal answering NULL) that found it gone.
        let let_go_by = grant.let_go_by();
        for &(at, held) in &grant.checks {
            if !held && at < grant.live_until - MARGIN && at < let_go_by && !lost_to_crash(grant, at) {
                out.violation(
                    Rule::PrematureLoss,
                    format!(
                        "key {}: fence {} ({}, {:?}) was found not held by {at:.6}, but the lease was live \
                         until {:.6}: an acknowledged grant was lost",
                        grant.key,
                        grant.fence,
                        grant.owner,
                        grant.primitive(),
                        grant.live_until
                    ),
                );
            }
        }
    }
}

/// Whose writes: (key, fence, owner).
type WriterOf<'a> = (&'a str, i64, &'a str);
/// First and last server time of a writer's accepted writes.
type Span = (f64, f64);

/// The resource took only writes carrying the newest fence it had seen, refused only older
/// ones, and its accepted holding intervals, ordered by fence, never overlap.
fn resource_fencing(grants: &[Grant], accepted: &[Accepted], refused: &[Refused], out: &mut Outcome) {
    let by_lease: HashMap<(&str, &str, i64), &Grant> =
        grants.iter().map(|g| ((g.owner.as_str(), g.key.as_str(), g.fence), g)).collect();
    let mut newest: HashMap<&str, i64> = HashMap::new();
    // (key, fence, owner) → [first, last] accepted write.
    let mut spans: BTreeMap<WriterOf<'_>, Span> = BTreeMap::new();
    for write in accepted {
        let max = newest.entry(&write.key).or_insert(write.fence);
        if write.fence < *max {
            out.violation(
                Rule::ResourceFencing,
                format!(
                    "resource accepted write #{} of key {} with fence {} after fence {}",
                    write.id, write.key, write.fence, max
                ),
            );
        }
        *max = (*max).max(write.fence);
        match by_lease.get(&(write.owner.as_str(), write.key.as_str(), write.fence)) {
            None => out.violation(
                Rule::ResourceFencing,
                format!("resource accepted a write of an unknown lease: {write:?}"),
            ),
            // A session-bound lease has no expiry to be late after.
            Some(grant) if write.at > grant.live_until && !grant.bound => {
                out.late_writes_accepted += 1;
                let newer_granted = grants
                    .iter()
                    .any(|g| g.key == write.key && g.fence > write.fence && g.granted_by < write.at);
                if newer_granted {
                    out.late_writes_accepted_after_newer_grant += 1;
                }
            }
            Some(_) => {}
        }
        let span = spans.entry((&write.key, write.fence, &write.owner)).or_insert((write.at, write.at));
        span.0 = span.0.min(write.at);
        span.1 = span.1.max(write.at);
    }
    for write in refused {
        if write.newest.is_none_or(|n| n <= write.fence) {
            out.violation(
                Rule::ResourceFencing,
                format!("resource refused a write carrying the newest fence: {write:?}"),
            );
        }
    }
    let mut previous: Option<(WriterOf<'_>, Span)> = None;
    for (lease, span) in spans {
        if let Some((before, before_span)) = previous
            && before.0 == lease.0
            && before_span.1 >= span.0
        {
            out.violation(
                Rule::ResourceFencing,
                format!(
                    "resource: key {}: writes of fence {} ({}) until {:.6} overlap fence {} ({}) from {:.6}",
                    lease.0, before.1, before.2, before_span.1, lease.1, lease.2, span.0
                ),
            );
        }
        previous = Some((lease, span));
    }
}

/// A grant acknowledged before a crash, neither released nor expired when the restarted server
/// was read, is still there with its owner and fence (fast-mode leases: gone by design).
fn grants_survive_crashes(grants: &[Grant], snapshots: &[Snapshot], out: &mut Outcome) {
    for snapshot in snapshots {
        for grant in grants.iter().filter(|g| !g.fast) {
            let may_be_released = grant.releasing_local.is_some_and(|t| t < snapshot.read_local)
                || grant.releases.iter().any(|r| r.lb.is_some_and(|lb| lb < snapshot.read_at));
            // A session-bound lease ends with its session, which the crash ends.
            let must_survive = !grant.bound
                && grant.granted_by < snapshot.crash_at
                && grant.live_until - MARGIN > snapshot.read_at
                && !may_be_released;
            if !must_survive {
                continue;
            }
            let there = snapshot
                .leases
                .iter()
                .any(|(k, o, f)| *k == grant.key && *o == grant.owner && *f == grant.fence);
            if there {
                out.grants_across_crashes += 1;
            } else {
                out.violation(
                    Rule::Durability,
                    format!(
                        "key {}: fence {} ({}), granted by {:.6} and live until {:.6}, was missing after the \
                     crash at {:.6} (read at {:.6})",
                        grant.key,
                        grant.fence,
                        grant.owner,
                        grant.granted_by,
                        grant.live_until,
                        snapshot.crash_at,
                        snapshot.read_at
                    ),
                );
            }
        }
    }
}

/// After each kill -9 of the holder of a session-bound lease, the key passes on at once: its
/// next grant (to a worker or the probe that waits for it) comes within `BOUND_HANDOVER`.
/// `terminated`: (server time after the round, application names) of pg_terminate_backend
/// rounds; `crashes`: server times of crashes and failovers (they end every session).
pub fn bound_kills(
    grants: &[Grant],
    kills: &[BoundKill],
    terminated: &[(f64, Vec<String>)],
    crashes: &[f64],
    out: &mut Outcome,
) {
    for kill in kills {
        let lease = grants.iter().find(|g| g.key == kill.key && g.fence == kill.fence && g.bound);
        if lease.is_none_or(|g| g.releasing_local.is_some_and(|t| t < kill.local)) {
            out.bound_kills_released += 1;
            continue;
        }
        let Some(probe) = kill.probe else {
            out.bound_kills_unjudged += 1;
            continue;
        };
        let next = grants
            .iter()
            .filter(|g| g.key == kill.key && g.fence > kill.fence)
            .map(|g| g.granted_by)
            .fold(f64::INFINITY, f64::min);
        if next < kill.at
            && let Some(lease) = lease
        {
            // Passed on before the kill: the session had ended already. Was its backend
            // terminated, or the server crashed?
            let app = format!("chaos-{}", kill.worker);
            let ended = terminated
                .iter()
                .any(|(at, apps)| *at > lease.granted_by - 1.0 && *at < next + 1.0 && apps.contains(&app))
                || crashes.iter().any(|at| *at > lease.granted_by && *at < next);
            if ended {
                out.bound_lost_terminated += 1;
            } else {
                out.bound_lost_unexplained.push(format!(
                    "{} fence {} of {} (granted by {:.6}): next grant by {next:.6}, kill at {:.6}",
                    kill.key, kill.fence, kill.worker, lease.granted_by, kill.at
                ));
            }
            continue;
        }
        if next.is_finite() {
            let delay = next - kill.at;
            out.bound_kill_delays.push(delay);
            if delay > BOUND_HANDOVER {
                out.violation(Rule::BoundHandover, format!(
                    "key {}: its session-bound holder {} (fence {}) was killed at {:.6}, but the next grant \
                     came only {delay:.3} s later (bound {BOUND_HANDOVER} s)",
                    kill.key, kill.worker, kill.fence, kill.at
                ));
            }
        } else {
            out.violation(Rule::BoundHandover, format!(
                "key {}: its session-bound holder {} (fence {}) was killed at {:.6}, and nobody got the key \
                 after it (the probe waited {} s: {})",
                kill.key,
                kill.worker,
                kill.fence,
                kill.at,
                PROBE_WAIT,
                if probe { "granted, but its grant is not in probe.jsonl" } else { "not granted" }
            ));
        }
    }
}

mod free;
mod holders;
mod leaders;
mod multi;
mod outcome;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_primitives;

pub use free::free_answers;
pub use leaders::elections;
pub use multi::multi_key;
pub use outcome::{Outcome, Rule};
