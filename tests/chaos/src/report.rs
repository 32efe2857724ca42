//! The report printed at the end of a run.

use std::fmt::Write;
use std::time::Duration;

use crate::check::{Outcome, Rule, Snapshot};
use crate::faults::Counts;
use crate::history::Primitive;
use crate::run_args::RunArgs;

/// How many violations are printed in full (all are counted).
const SHOWN: usize = 20;

/// The report as text.
pub fn render(
    args: &RunArgs,
    counts: &Counts,
    outcome: &Outcome,
    snapshots: &[Snapshot],
    took: Duration,
) -> String {
    let down = snapshots.iter().map(|s| s.read_at - s.crash_at).fold(0.0, f64::max);
    let mut r = String::new();
    let _ = writeln!(
        r,
        "dlock chaos: {} s of work ({:.0} s in all), {} Rust + {} SQL workers, {} hot keys, ttl {}–{} s, seed {}{}{}",
        args.seconds,
        took.as_secs_f64(),
        args.rust_workers,
        args.sql_workers,
        args.keys,
        args.ttl_min,
        args.ttl_max,
        args.seed,
        if args.fast {
            ", fast mode (leases in shared memory; a crash restart holds keys back for the longest ttl)"
        } else if args.preload {
            ", dlock preloaded"
        } else {
            ""
        },
        if args.failover {
            ", failover to a synchronous standby (resource on a cluster of its own)"
        } else {
            ""
        }
    );
    let _ = writeln!(
        r,
        "checked: {} grants ({} session-bound; {} surely-held intervals compared), {} accepted and {} refused \
         resource writes",
        outcome.grants,
        outcome.bound_grants,
        outcome.intervals,
        outcome.accepted_writes,
        outcome.refused_writes
    );
    let per: Vec<String> = Primitive::ALL
        .iter()
        .map(|p| format!("{} {}", p.label(), outcome.per_primitive.get(p).copied().unwrap_or(0)))
        .collect();
    let _ = writeln!(
        r,
        "grants per primitive: {} (multi-key: {} grants of all their keys, counted per key; {} refused \
         requests checked for keys left held; {} dlock_leader answers compared; {} dlock_wait_free \
         answers of free judged, of {})",
        per.join(", "),
        outcome.multi_grants,
        outcome.multi_not_granted,
        outcome.leader_observations,
        outcome.free_answers.0,
        outcome.free_answers.1
    );
    // Keys where readers ever met (a key's lone shared holders say nothing about the cap).
    let met: Vec<String> =
        outcome.most_shared.iter().filter(|(_, n)| **n > 1).map(|(k, n)| format!("{k} {n}")).collect();
    if !met.is_empty() {
        let _ = writeln!(
            r,
            "shared holders surely at once, most per key where they met: {} (semaphores of {})",
            met.join(", "),
            args.max_holders
        );
    }
    let _ = writeln!(
        r,
        "fencing: {} writes of holders past their lease refused; {} taken because no newer fence had \
         reached the resource yet ({} of them after a newer grant: fencing at a resource cannot refuse a \
         fence it has not seen)",
        outcome.late_writes_refused,
        outcome.late_writes_accepted,
        outcome.late_writes_accepted_after_newer_grant
    );
    let _ = writeln!(r, "faults injected:");
    let _ = writeln!(
        r,
        "  kill -9 of a worker          {} ({} mid-hold)",
        counts.kill9_holding + counts.kill9_idle,
        counts.kill9_holding
    );
    let _ = writeln!(
        r,
        "  SIGSTOP past ttl, SIGCONT    {} ({} holders: late write refused {}, taken unfenced {}, none {})",
        counts.stop_cont,
        counts.paused_leases.len(),
        outcome.paused_refused,
        outcome.paused_accepted,
        outcome.paused_no_late_write
    );
    let _ = writeln!(
        r,
        "  pg_terminate_backend         {} backends in {} rounds",
        counts.terminated_backends, counts.terminate_rounds
    );
    let _ = writeln!(r, "  crash (stop -m immediate)    {}", counts.crashes);
    if args.failover {
        let fences: Vec<String> =
            counts.fences_across_failover.iter().map(|(k, a, b)| format!("{k} {a}→{b}")).collect();
        let _ = writeln!(
            r,
            "  failover                     {} (primary stopped -m immediate, sync standby promoted, proxy \
             switched: no primary for {:.1} s); {} grants after it; fences before→after: {}",
            counts.failovers,
            counts.failover_down,
            counts.grants_after_failover,
            fences.join(", ")
        );
    }
    if args.fast {
        let _ = writeln!(
            r,
            "    verified across them: {} sentinel leases and {} worker grants still live (durable); fast \
             worker leases end with a crash by design, and exclusion across it is the lock-delay's (down up \
             to {down:.1} s)",
            counts.sentinels_checked, outcome.grants_across_crashes
        );
    } else {
        let _ = writeln!(
            r,
            "    verified across them: {} sentinel leases, {} worker grants still live (down up to {down:.1} s)",
            counts.sentinels_checked, outcome.grants_across_crashes
        );
    }
    let mut delays = outcome.bound_kill_delays.clone();
    delays.sort_by(f64::total_cmp);
    let _ = writeln!(
        r,
        "  kill -9 of a session-bound holder  {} (key passed on after {}; {} had begun their release, {} \
         had lost the lease before the kill to pg_terminate_backend or a crash, {} unexplained, {} probes cut short by a \
         crash or failover; bound {} s)",
        counts.bound_kills.len(),
        if delays.is_empty() {
            "-".to_string()
        } else {
            delays.iter().map(|d| format!("{:.1} ms", d * 1000.0)).collect::<Vec<_>>().join(", ")
        },
        outcome.bound_kills_released,
        outcome.bound_lost_terminated,
        outcome.bound_lost_unexplained.len(),
        outcome.bound_kills_unjudged,
        crate::check::BOUND_HANDOVER
    );
    for lost in &outcome.bound_lost_unexplained {
        let _ = writeln!(r, "    passed on before the kill, no terminate seen: {lost}");
    }
    let _ = writeln!(
        r,
        "  connections cut mid-call     {} (of {} proxied connections)",
        counts.proxy_cuts, counts.proxy_connections
    );
    let _ = writeln!(
        r,
        "  clock-skewed workers         {} (up to {:.0} s off; dlock never reads client clocks)",
        counts.skewed_workers, counts.max_skew
    );
    if args.sabotage {
        let _ = writeln!(
            r,
            "  SABOTAGE: force releases     {} (self-test: violations expected): {}",
            counts.sabotage_force_releases,
            counts.sabotaged_keys.join(", ")
        );
    }
    if !counts.unexpected_exits.is_empty() {
        let _ = writeln!(
            r,
            "workers that exited on their own (see their .stderr): {}",
            counts.unexpected_exits.join(", ")
        );
    }
    let _ = writeln!(r, "violations: {}", outcome.violations.len());
    let kinds: Vec<String> = Rule::ALL
        .iter()
        .map(|rule| format!("{} {}", rule.label(), outcome.by_rule.get(rule).copied().unwrap_or(0)))
        .collect();
    let _ = writeln!(r, "  per rule: {}", kinds.join("; "));
    for v in outcome.violations.iter().take(SHOWN) {
        let _ = writeln!(r, "  {v}");
    }
    if outcome.violations.len() > SHOWN {
        let _ = writeln!(r, "  … and {} more", outcome.violations.len() - SHOWN);
    }
    r
}
