//! The checker: from the lease history (what workers were acknowledged) and the resource's own
//! records, finds violations of mutual exclusion, fence order, fencing and durability.
//! Every comparison uses the server's clock only; client clocks never enter.

use std::collections::{BTreeMap, HashMap};

use crate::history::Grant;
use crate::resource::{Accepted, Refused};

/// Slack for comparing a known expiry with a server time taken by another statement (the
/// client's `expires_at` is read just after the grant, a few microseconds late).
pub const MARGIN: f64 = 0.05;

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

/// What the checker looked at and what it found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub grants: usize,
    pub intervals: usize,
    pub accepted_writes: usize,
    pub refused_writes: usize,
    /// Refused writes of a holder past its lease (the fence doing its job).
    pub late_writes_refused: usize,
    /// Writes past the writer's lease that the resource took because no newer fence had reached
    /// it yet (inherent to fencing at the resource; never while the newer holder was writing).
    pub late_writes_accepted: usize,
    /// Of those, the ones taken after a newer fence had been granted but not yet presented.
    pub late_writes_accepted_after_newer_grant: usize,
    /// Of the leases held by workers paused past their ttl: how many met the fence after
    /// waking (a write refused), wrote late unrefused (no newer fence had reached the resource),
    /// or wrote nothing late (e.g. the pause ended within the hold).
    pub paused_refused: usize,
    pub paused_accepted: usize,
    pub paused_no_late_write: usize,
    /// Grants that had to survive a crash, and did.
    pub grants_across_crashes: usize,
    pub violations: Vec<String>,
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
        ..Outcome::default()
    };
    fences_unique(grants, &mut out);
    fences_in_grant_order(grants, &mut out);
    leases_exclusive(grants, &mut out);
    no_premature_loss(grants, refused, &mut out);
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
        let Some(grant) = grants.iter().find(|g| g.key == *key && g.fence == *fence) else { continue };
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

fn per_key(grants: &[Grant]) -> BTreeMap<&str, Vec<&Grant>> {
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
            out.violations.push(format!(
                "fence {} of key {} granted to two owners: {other} and {}",
                grant.fence, grant.key, grant.owner
            ));
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
                out.violations.push(format!(
                    "key {key}: fence {} (owner {}) was granted by {:.6}, before fence {} (owner {}) \
                     was requested at {requested:.6}: fences out of grant order",
                    list[i].fence, list[i].owner, list[i].granted_by, earlier.fence, earlier.owner
                ));
            }
        }
    }
}

/// The interval during which a grant was surely held: from its grant to its expiry or the
/// first moment it may have been let go (server clock).
fn held(grant: &Grant) -> Option<(f64, f64)> {
    let (from, to) = (grant.granted_by, grant.held_until() - MARGIN);
    (to > from).then_some((from, to))
}

/// No two owners surely hold one key at the same instant.
fn leases_exclusive(grants: &[Grant], out: &mut Outcome) {
    for (key, list) in per_key(grants) {
        let mut spans: Vec<(f64, f64, &Grant)> =
            list.iter().filter_map(|g| held(g).map(|(a, b)| (a, b, *g))).collect();
        out.intervals += spans.len();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        // The span reaching furthest so far: any later-starting span before its end overlaps.
        let mut furthest: Option<(f64, f64, &Grant)> = None;
        for span in spans {
            if let Some((from, to, other)) = furthest
                && span.0 < to
                && (other.owner != span.2.owner || other.fence != span.2.fence)
            {
                out.violations.push(format!(
                    "key {key}: two holders at once: fence {} ({}, worker {}) held [{from:.6}, {to:.6}] and \
                     fence {} ({}, worker {}) held [{:.6}, {:.6}]",
                    other.fence,
                    other.owner,
                    other.worker,
                    span.2.fence,
                    span.2.owner,
                    span.2.worker,
                    span.0,
                    span.1
                ));
            }
            if furthest.is_none_or(|f| span.1 > f.1) {
                furthest = Some(span);
            }
        }
    }
}

/// A lease is never taken away while surely live: no refused write and no refused release
/// before its expiry (and before it was let go).
fn no_premature_loss(grants: &[Grant], refused: &[Refused], out: &mut Outcome) {
    let by_lease: HashMap<(&str, &str, i64), &Grant> =
        grants.iter().map(|g| ((g.owner.as_str(), g.key.as_str(), g.fence), g)).collect();
    for write in refused {
        let Some(grant) = by_lease.get(&(write.owner.as_str(), write.key.as_str(), write.fence)) else {
            out.violations.push(format!("refused write of an unknown lease: {write:?}"));
            continue;
        };
        if write.at > grant.live_until {
            out.late_writes_refused += 1;
        }
        // Let go before the write was judged? Then a refusal is no loss.
        let released_before = grant.releases.iter().any(|r| r.lb.is_some_and(|lb| lb < write.at));
        if write.at < grant.live_until - MARGIN && !released_before {
            out.violations.push(format!(
                "key {}: the write of fence {} ({}) was refused at {:.6} (newest fence {:?}) while \
                 its lease was live until {:.6}",
                write.key, write.fence, write.owner, write.at, write.newest, grant.live_until
            ));
        }
    }
    for grant in grants {
        for release in &grant.releases {
            if release.ok == Some(false)
                && let Some(ub) = release.ub
                && ub < grant.live_until - MARGIN
            {
                out.violations.push(format!(
                    "key {}: the release of fence {} ({}) answered false by {ub:.6}, but the lease was \
                     live until {:.6}: an acknowledged grant was lost",
                    grant.key, grant.fence, grant.owner, grant.live_until
                ));
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
            out.violations.push(format!(
                "resource accepted write #{} of key {} with fence {} after fence {}",
                write.id, write.key, write.fence, max
            ));
        }
        *max = (*max).max(write.fence);
        match by_lease.get(&(write.owner.as_str(), write.key.as_str(), write.fence)) {
            None => out.violations.push(format!("resource accepted a write of an unknown lease: {write:?}")),
            Some(grant) if write.at > grant.live_until => {
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
            out.violations.push(format!("resource refused a write carrying the newest fence: {write:?}"));
        }
    }
    let mut previous: Option<(WriterOf<'_>, Span)> = None;
    for (lease, span) in spans {
        if let Some((before, before_span)) = previous
            && before.0 == lease.0
            && before_span.1 >= span.0
        {
            out.violations.push(format!(
                "resource: key {}: writes of fence {} ({}) until {:.6} overlap fence {} ({}) from {:.6}",
                lease.0, before.1, before.2, before_span.1, lease.1, lease.2, span.0
            ));
        }
        previous = Some((lease, span));
    }
}

/// A grant acknowledged before a crash, neither released nor expired when the restarted server
/// was read, is still there with its owner and fence.
fn grants_survive_crashes(grants: &[Grant], snapshots: &[Snapshot], out: &mut Outcome) {
    for snapshot in snapshots {
        for grant in grants {
            let may_be_released = grant.releasing_local.is_some_and(|t| t < snapshot.read_local)
                || grant.releases.iter().any(|r| r.lb.is_some_and(|lb| lb < snapshot.read_at));
            let must_survive = grant.granted_by < snapshot.crash_at
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
                out.violations.push(format!(
                    "key {}: fence {} ({}), granted by {:.6} and live until {:.6}, was missing after the \
                     crash at {:.6} (read at {:.6})",
                    grant.key,
                    grant.fence,
                    grant.owner,
                    grant.granted_by,
                    grant.live_until,
                    snapshot.crash_at,
                    snapshot.read_at
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests;
