//! Latency histograms, the results of a run, and their Markdown tables.

use std::fmt::Write as _;
use std::time::Instant;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::cpu::Window;

use bench_common::latency::histogram;
use bench_common::markdown::Table;

fn nanos(from: Instant, to: Instant) -> Option<u64> {
    to.checked_duration_since(from).map(|d| d.as_nanos().min(u128::from(u64::MAX)) as u64)
}

/// Hand-off latencies, measured from two moments of the release call: its return (the
/// definition the targets use) and its start.
pub struct Latencies {
    after_return: Histogram<u64>,
    after_call: Histogram<u64>,
    /// Hand-offs whose grant came back before the release did: the server wakes the waiter
    /// before it answers the releaser, and the two answers race on two sockets. Counted as 0.
    early: u64,
}

impl Latencies {
    /// Empty histograms.
    pub fn new() -> Latencies {
        Latencies { after_return: histogram(), after_call: histogram(), early: 0 }
    }

    /// Records one hand-off: the release call started at `called` and returned at `returned`;
    /// the waiter's acquire call returned at `granted`.
    pub fn record(&mut self, called: Instant, returned: Instant, granted: Instant) {
        let after_return = nanos(returned, granted).unwrap_or_else(|| {
            self.early += 1;
            0
        });
        self.after_return.saturating_record(after_return);
        self.after_call.saturating_record(nanos(called, granted).unwrap_or(0));
    }

    /// The figures of the tables (µs).
    pub fn summary(&self) -> Summary {
        let us = |ns: u64| ns as f64 / 1000.0;
        let figures = |h: &Histogram<u64>| Figures {
            p50_us: us(h.value_at_quantile(0.50)),
            p99_us: us(h.value_at_quantile(0.99)),
            max_us: us(h.max()),
            mean_us: h.mean() / 1000.0,
        };
        Summary {
            samples: self.after_return.len(),
            after_return: figures(&self.after_return),
            after_call: figures(&self.after_call),
            early: self.early,
        }
    }
}

/// Percentiles of one latency histogram (µs).
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
    pub mean_us: f64,
}

/// The hand-off latencies of a contender, summed up.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub samples: u64,
    /// From the release call's return to the grant's return.
    pub after_return: Figures,
    /// From the release call's start to the grant's return.
    pub after_call: Figures,
    /// Grants that came back before the release call did.
    pub early: u64,
}

/// One row of a latency table.
#[derive(Clone, Debug, Serialize)]
pub struct LatencyRow {
    pub contender: String,
    /// `on demand` (no preload) or `preloaded`; empty for Redis.
    pub cluster: String,
    #[serde(flatten)]
    pub summary: Summary,
    /// Chains only: whether every chain granted in arrival order.
    pub fifo: Option<bool>,
    /// Whether the dlock targets apply to this row.
    pub targeted: bool,
}

/// One row of the CPU table.
#[derive(Clone, Debug, Serialize)]
pub struct CpuRow {
    pub contender: String,
    pub cluster: String,
    pub waiters: usize,
    pub keys: usize,
    #[serde(flatten)]
    pub window: Window,
    pub targeted: bool,
}

/// The targets of the brief.
#[derive(Clone, Debug, Serialize)]
pub struct Targets {
    pub p50_us: f64,
    pub p99_us: f64,
    pub cpu_percent: f64,
}

/// Everything a run measured, as written to results.json.
#[derive(Clone, Debug, Serialize)]
pub struct Results {
    pub stamp: String,
    pub environment: Vec<(String, String)>,
    pub targets: Targets,
    pub handoff: Vec<LatencyRow>,
    pub chain: Vec<LatencyRow>,
    pub cpu: Vec<CpuRow>,
    pub ratios: Vec<Ratio>,
    /// How the peers work, and anything a reader of the figures should know.
    pub notes: Vec<String>,
}

/// dlock's latency divided by a peer's (`None` where the peer's figure rounds to 0 µs).
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    pub measurement: String,
    /// The dlock cluster: on demand or preloaded.
    pub cluster: String,
    /// `release returned` or `release called`: where the latency is measured from.
    pub from: String,
    pub against: String,
    pub p50: Option<f64>,
    pub p99: Option<f64>,
}

fn divide(a: f64, b: f64) -> Option<f64> {
    (b >= 1.0).then(|| a / b)
}

/// dlock's rows (each cluster) over each peer's, for each measurement and both origins.
pub fn ratios(handoff: &[LatencyRow], chain: &[LatencyRow], peers: &[&str]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for (measurement, rows) in [("hand-off, 1 waiter", handoff), ("chain of waiters", chain)] {
        for dlock in rows.iter().filter(|r| r.targeted) {
            for (from, figures) in [
                ("release returned", (|s: &Summary| s.after_return.clone()) as fn(&Summary) -> Figures),
                ("release called", |s: &Summary| s.after_call.clone()),
            ] {
                for peer in peers {
                    if let Some(p) = rows.iter().find(|r| r.contender == *peer) {
                        let (d, p) = (figures(&dlock.summary), figures(&p.summary));
                        out.push(Ratio {
                            measurement: measurement.to_string(),
                            cluster: dlock.cluster.to_string(),
                            from: from.to_string(),
                            against: peer.to_string(),
                            p50: divide(d.p50_us, p.p50_us),
                            p99: divide(d.p99_us, p.p99_us),
                        });
                    }
                }
            }
        }
    }
    out
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

fn latency_table(out: &mut String, rows: &[LatencyRow], targets: &Targets, fifo: bool) {
    let _ = writeln!(
        out,
        "| contender | cluster | samples | p50 | p99 | max | grant first |{} from call: p50 | p99 | max | target p50 < {:.0} µs, p99 < {:.0} µs |",
        if fifo { " arrival order |" } else { "" },
        targets.p50_us,
        targets.p99_us
    );
    let _ = writeln!(
        out,
        "|---|---|---:|---:|---:|---:|---:|{}---:|---:|---:|---|",
        if fifo { "---|" } else { "" }
    );
    for r in rows {
        let (s, a, c) = (&r.summary, &r.summary.after_return, &r.summary.after_call);
        let target = if r.targeted {
            format!("p50 {}, p99 {}", verdict(a.p50_us < targets.p50_us), verdict(a.p99_us < targets.p99_us))
        } else {
            String::new()
        };
        let order = match (fifo, r.fifo) {
            (false, _) => String::new(),
            (true, Some(true)) => " yes |".to_string(),
            (true, Some(false)) => " no |".to_string(),
            (true, None) => " n/a |".to_string(),
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {:.0} | {:.0} | {:.0} | {} |{order} {:.0} | {:.0} | {:.0} | {target} |",
            r.contender,
            r.cluster,
            s.samples,
            a.p50_us,
            a.p99_us,
            a.max_us,
            s.early,
            c.p50_us,
            c.p99_us,
            c.max_us
        );
    }
}

fn ratio_cell(r: Option<f64>) -> String {
    r.map_or("n/a (peer 0 µs)".to_string(), |r| format!("{r:.2}"))
}

/// The Markdown report of a run.
pub fn markdown(results: &Results) -> String {
    let mut out = String::new();
    let t = &results.targets;
    let _ = writeln!(out, "# bench-wait {}\n", results.stamp);
    for (name, value) in &results.environment {
        let _ = writeln!(out, "- {name}: {value}");
    }
    let _ = writeln!(
        out,
        "\n## Hand-off latency, one waiter\n\nµs from the holder's release call returning to the parked \
         waiter's acquire call returning (client side; the targets' definition), the two roles \
         alternating. *grant first*: hand-offs whose grant came back before the release call \
         did (the server wakes the waiter before answering the releaser), counted as 0 µs. \
         *from call*: the same, measured from the moment the release call was issued.\n"
    );
    latency_table(&mut out, &results.handoff, t, false);
    let _ = writeln!(
        out,
        "\n## Hand-off latency along a line of waiters\n\nEach hop: a release returning → the next \
         grant returning (µs, columns as above); every granted waiter releases at once, and \
         each waiter parks before the next arrives. *arrival order*: whether every chain was \
         granted in the order the waiters arrived.\n"
    );
    latency_table(&mut out, &results.chain, t, true);
    let _ = writeln!(out, "\n## dlock over its peers\n");
    let mut table = Table::new(&["measurement", "dlock cluster", "latency from", "dlock /", ">p50", ">p99"]);
    for r in &results.ratios {
        table.row(&[
            r.measurement.to_string(),
            r.cluster.to_string(),
            r.from.to_string(),
            r.against.to_string(),
            ratio_cell(r.p50),
            ratio_cell(r.p99),
        ]);
    }
    out.push_str(table.render());
    let _ = writeln!(
        out,
        "\n## CPU of parked waiters\n\nAll processes of the cluster (postmaster and children), \
         over the window, as % of one core: from `utime + stime` of /proc/<pid>/stat (whole clock \
         ticks per process, which can miss runs much shorter than a tick) and from \
         /proc/<pid>/schedstat (run time in ns, exact). The target counts as met when both are \
         under it.\n"
    );
    let _ = writeln!(
        out,
        "| waiting with | cluster | waiters | keys | window (s) | CPU % (utime+stime) | CPU % (schedstat) | wake-ups/s | processes | target < {} % |",
        t.cpu_percent
    );
    let _ = writeln!(out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for r in &results.cpu {
        let w = &r.window;
        let met = w.cpu_percent.max(w.cpu_percent_schedstat) < t.cpu_percent;
        let target = if r.targeted { verdict(met) } else { "" };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.0} | {} | {target} |",
            r.contender,
            r.cluster,
            r.waiters,
            r.keys,
            w.seconds,
            w.cpu_percent,
            w.cpu_percent_schedstat,
            w.wakeups_per_second,
            w.processes
        );
    }
    if !results.notes.is_empty() {
        let _ = writeln!(out);
        for note in &results.notes {
            let _ = writeln!(out, "- {note}");
        }
    }
    out
}
