//! Elections as `dlock_leader` showed them: terms never go back between answers one after
//! another, no answer shows a leader whose lease had expired, and an answer given while a
//! leader surely led shows that leader's term and info (the workers' info is their candidate
//! name), or nobody yet (before its grant was committed).
//! Two leaders at once and terms in grant order are judged with every other lease
//! (`holders`, `fences_in_grant_order`).

use std::collections::BTreeMap;

use super::{MARGIN, Outcome, Rule, held};
use crate::history::{Grant, Mode, Observation};

/// Checks every `dlock_leader` answer against the others and against the leaders' grants.
pub fn elections(grants: &[Grant], observations: &[Observation], out: &mut Outcome) {
    out.leader_observations = observations.len();
    let mut by_election: BTreeMap<&str, Vec<&Observation>> = BTreeMap::new();
    for seen in observations {
        by_election.entry(&seen.election).or_default().push(seen);
    }
    for (election, seen) in by_election {
        for o in seen.iter().filter(|o| o.term.is_some()) {
            if let Some(expires_at) = o.expires_at
                && expires_at < o.lb - MARGIN
            {
                out.violation(
                    Rule::TermOrder,
                    format!(
                        "election {election}: dlock_leader asked at {:.6} (worker {}) showed term {:?}, whose \
                         lease had expired at {expires_at:.6}",
                        o.lb, o.worker, o.term
                    ),
                );
            }
        }
        terms_never_go_back(election, &seen, out);
        shows_the_leader(election, grants, &seen, out);
    }
}

/// An answer that began after another had ended shows a term at least as large.
fn terms_never_go_back(election: &str, seen: &[&Observation], out: &mut Outcome) {
    let mut by_end: Vec<&Observation> = seen.iter().filter(|o| o.term.is_some()).copied().collect();
    by_end.sort_by(|a, b| a.ub.total_cmp(&b.ub));
    let mut by_start: Vec<&Observation> = by_end.clone();
    by_start.sort_by(|a, b| a.lb.total_cmp(&b.lb));
    // The largest term among the answers that ended before the current one began.
    let mut highest: Option<&Observation> = None;
    let mut ended = 0;
    for o in by_start {
        while ended < by_end.len() && by_end[ended].ub < o.lb {
            if highest.is_none_or(|h| by_end[ended].term > h.term) {
                highest = Some(by_end[ended]);
            }
            ended += 1;
        }
        if let Some(h) = highest
            && h.term > o.term
        {
            out.violation(
                Rule::TermOrder,
                format!(
                    "election {election}: term went back: {:?} shown by {:.6} (worker {}), then {:?} shown from \
                     {:.6} (worker {})",
                    h.term, h.ub, h.worker, o.term, o.lb, o.worker
                ),
            );
        }
    }
}

/// An answer given wholly within a leader's surely-held lead shows its term or nobody.
fn shows_the_leader(election: &str, grants: &[Grant], seen: &[&Observation], out: &mut Outcome) {
    let mut leads: Vec<(f64, f64, &Grant)> = grants
        .iter()
        .filter(|g| g.key == election && g.mode == Mode::Leader)
        .filter_map(|g| held(g).map(|(a, b)| (a, b, g)))
        .collect();
    leads.sort_by(|a, b| a.0.total_cmp(&b.0));
    for o in seen {
        let Some(term) = o.term else { continue };
        // The lead begun last before the answer was asked for (leads never overlap, else
        // `holders` reports two leaders).
        let begun = leads.partition_point(|l| l.0 <= o.lb);
        let Some(&(from, to, lead)) = begun.checked_sub(1).map(|i| &leads[i]) else { continue };
        if o.ub > to {
            continue;
        }
        if term != lead.fence || o.info.as_deref() != Some(lead.owner.as_str()) {
            out.violation(
                Rule::TermOrder,
                format!(
                    "election {election}: dlock_leader answered term {term} (info {:?}) within [{:.6}, {:.6}] \
                     (worker {}), while term {} ({}) surely led over [{from:.6}, {to:.6}]",
                    o.info, o.lb, o.ub, o.worker, lead.fence, lead.owner
                ),
            );
        }
    }
}
