//! Who holds a key at once, by mode: an exclusive holder (an exclusive lease, a key of a
//! multi-key grant, an election's leader) alone; shared holders side by side, at most a
//! semaphore's size of them. Each lease counts over its surely-held interval only (`held`), so
//! every overlap found is one the server really allowed.

use super::{Outcome, Rule, held, per_key};
use crate::history::{Grant, Mode};

/// A surely-held interval of one lease.
type Span<'a> = (f64, f64, &'a Grant);

/// Per key: no exclusive holder beside any other holder, never more shared holders at once than
/// the smallest semaphore size among them.
pub fn exclusive_and_counted(grants: &[Grant], out: &mut Outcome) {
    for (key, list) in per_key(grants) {
        let mut spans: Vec<Span> = list.iter().filter_map(|g| held(g).map(|(a, b)| (a, b, *g))).collect();
        out.intervals += spans.len();
        spans.sort_by(|a, b| a.0.total_cmp(&b.0));
        // The spans still running at the current start: every one of them contains that instant.
        let mut running: Vec<Span> = Vec::new();
        for span in spans {
            running.retain(|r| r.1 > span.0);
            for other in running.iter().filter(|r| !same_lease(r.2, span.2)) {
                if let Some(rule) = conflict(other.2, span.2) {
                    out.violation(rule, describe(key, rule, other, &span));
                }
            }
            running.push(span);
            if span.2.mode == Mode::Shared {
                let at_once = running.iter().filter(|r| r.2.mode == Mode::Shared).count();
                let most = out.most_shared.entry(key.to_string()).or_default();
                *most = (*most).max(at_once);
                semaphore_cap(key, &running, out);
            }
        }
    }
}

fn same_lease(a: &Grant, b: &Grant) -> bool {
    a.owner == b.owner && a.fence == b.fence
}

/// Which rule two overlapping holders of one key break, if any (shared beside shared is fine).
fn conflict(a: &Grant, b: &Grant) -> Option<Rule> {
    match (a.mode, b.mode) {
        (Mode::Shared, Mode::Shared) => None,
        (Mode::Leader, Mode::Leader) => Some(Rule::TwoLeaders),
        (Mode::Shared, _) | (_, Mode::Shared) => Some(Rule::ExclusiveBesideShared),
        _ => Some(Rule::TwoExclusive),
    }
}

fn describe(key: &str, rule: Rule, a: &Span, b: &Span) -> String {
    let what = match rule {
        Rule::TwoLeaders => "two leaders at once",
        Rule::ExclusiveBesideShared => "an exclusive holder beside a shared one",
        _ => "two holders at once",
    };
    format!(
        "key {key}: {what}: fence {} ({}, {:?}, worker {}) held [{:.6}, {:.6}] and fence {} ({}, {:?}, \
         worker {}) held [{:.6}, {:.6}]",
        a.2.fence,
        a.2.owner,
        a.2.primitive(),
        a.2.worker,
        a.0,
        a.1,
        b.2.fence,
        b.2.owner,
        b.2.primitive(),
        b.2.worker,
        b.0,
        b.1
    )
}

/// At the start of the newest span in `running` (an instant all of them contain): no more
/// shared holders than the smallest semaphore size among them.
fn semaphore_cap(key: &str, running: &[Span], out: &mut Outcome) {
    let shared: Vec<&Span> = running.iter().filter(|r| r.2.mode == Mode::Shared).collect();
    let Some(cap) = shared.iter().filter_map(|r| r.2.max_holders).min() else { return };
    if shared.len() <= cap.max(0) as usize {
        return;
    }
    let at = running.last().map_or(0.0, |r| r.0);
    let holders: Vec<String> = shared
        .iter()
        .map(|r| {
            format!("fence {} ({}, worker {}) [{:.6}, {:.6}]", r.2.fence, r.2.owner, r.2.worker, r.0, r.1)
        })
        .collect();
    out.violation(
        Rule::SemaphoreOverfull,
        format!(
            "key {key}: {} shared holders at {at:.6} of a semaphore of {cap}: {}",
            shared.len(),
            holders.join(", ")
        ),
    );
}
