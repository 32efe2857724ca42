//! The results of a run: what `results.json` holds, and `results.md` written from it.

use std::fmt::Write as _;

use serde::Serialize;

use crate::contenders::ALL;
use crate::workloads::{self, Point};

#[derive(Serialize)]
pub(crate) struct Results {
    pub(crate) environment: Vec<String>,
    pub(crate) uncontended: Vec<Point>,
    pub(crate) ceiling: Vec<Point>,
    pub(crate) contended: Vec<Point>,
    pub(crate) renewals: Vec<Point>,
    pub(crate) scale: Vec<Point>,
    pub(crate) churn: Churn,
    pub(crate) storm: Vec<workloads::Storm>,
    pub(crate) ratios: Vec<(String, f64)>,
    pub(crate) targets: Vec<Target>,
    /// Contenders left out of a workload, and why.
    pub(crate) skipped: Vec<Skip>,
    /// Workloads that failed (the run went on without them), and their errors.
    pub(crate) failed: Vec<Skip>,
}

#[derive(Serialize)]
pub(crate) struct Churn {
    pub(crate) keys: usize,
    pub(crate) seconds: f64,
    pub(crate) table_bytes_before: i64,
    pub(crate) table_bytes_after: i64,
    pub(crate) samples: Vec<workloads::ChurnSample>,
    pub(crate) verdict: Option<Levelling>,
}

/// Whether the table's size levelled off during the churn: its growth over the first and the
/// last `window_keys` keys.
#[derive(Serialize)]
pub(crate) struct Levelling {
    pub(crate) window_keys: usize,
    pub(crate) growth_first_bytes: i64,
    pub(crate) growth_last_bytes: i64,
    pub(crate) levelled_off: bool,
}

/// Growth within noise: a few dozen 8 kB pages.
const NOISE_BYTES: i64 = 1 << 20;

impl Levelling {
    /// Compares the first and last three sampling steps (which must not overlap).
    pub(crate) fn of(samples: &[workloads::ChurnSample]) -> Option<Levelling> {
        const STEPS: usize = 3;
        let n = samples.len().checked_sub(1)?;
        if n < 2 * STEPS {
            return None;
        }
        let growth_first_bytes = samples[STEPS].table_bytes - samples[0].table_bytes;
        let growth_last_bytes = samples[n].table_bytes - samples[n - STEPS].table_bytes;
        Some(Levelling {
            window_keys: samples[STEPS].keys - samples[0].keys,
            growth_first_bytes,
            growth_last_bytes,
            levelled_off: growth_last_bytes <= (growth_first_bytes / 4).max(NOISE_BYTES),
        })
    }
}

/// A ratio the issue asks for, with its bar.
#[derive(Serialize)]
pub(crate) struct Target {
    pub(crate) what: String,
    pub(crate) ratio: Option<f64>,
    pub(crate) bar: Bar,
}

/// Which side of its bar a ratio must be.
#[derive(Serialize, Clone, Copy)]
pub(crate) enum Bar {
    AtLeast(f64),
    AtMost(f64),
}

impl Bar {
    fn met(self, ratio: f64) -> bool {
        match self {
            Bar::AtLeast(bar) => ratio >= bar,
            Bar::AtMost(bar) => ratio <= bar,
        }
    }
}

impl std::fmt::Display for Bar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Bar::AtLeast(bar) => write!(f, "≥ {bar:.1}"),
            Bar::AtMost(bar) => write!(f, "≤ {bar:.1}"),
        }
    }
}

#[derive(Serialize)]
pub(crate) struct Skip {
    pub(crate) workload: String,
    pub(crate) contender: String,
    pub(crate) why: String,
}

pub(crate) const NO_ETCD: &str = "no etcd server (bench/suite.sh starts one when etcd is installed)";

pub(crate) fn find<'a>(points: &'a [Point], contender: &str, clients: usize) -> Option<&'a Point> {
    points.iter().find(|p| p.contender == contender && p.clients == clients)
}

pub(crate) fn markdown(r: &Results) -> String {
    let mut md = String::from("# make bench\n\n");
    for e in &r.environment {
        let _ = writeln!(md, "- {e}");
    }
    let _ = writeln!(md, "\n## 1. Uncontended acquire+release pairs/s (p50 / p99 / p99.9 µs)\n");
    let mut clients: Vec<usize> = r.ceiling.iter().map(|p| p.clients).collect();
    clients.dedup();
    let _ = write!(md, "| contender |");
    for c in &clients {
        let _ = write!(md, " {c} clients |");
    }
    let _ = write!(md, "\n|---|");
    for _ in &clients {
        let _ = write!(md, "---:|");
    }
    md.push('\n');
    let mut rows: Vec<&str> = ALL.iter().map(|c| c.label()).collect();
    rows.extend([workloads::CEILING, workloads::TWO_STATEMENTS]);
    for name in rows {
        let _ = write!(md, "| {name} |");
        for &c in &clients {
            let p = find(&r.uncontended, name, c)
                .or_else(|| r.ceiling.iter().find(|p| p.contender == name && p.clients == c));
            match p {
                Some(p) => {
                    let l = &p.latency;
                    let _ = write!(
                        md,
                        " {:.0} ({:.0} / {:.0} / {:.0}) |",
                        p.per_second, l.p50_us, l.p99_us, l.p999_us
                    );
                }
                None => md.push_str(" — |"),
            }
        }
        md.push('\n');
    }
    let _ = writeln!(
        md,
        "\n- dlock (fast mode): `dlock_fast_acquire` / `dlock_fast_release`, leases in shared memory, no WAL \
         (Redis-like durability; a lock-delay of `dlock.fast_max_ttl` after each server start instead). \
         Its table is bounded (16384 entries by default): given-back entries are reclaimed by a sweep when it fills.\n\
         - etcd lease lock: one lease (ttl 30 s, kept alive) per session, acquire = \
         `Txn(If CreateRevision(key) == 0 Then Put(key, owner, lease))`, release = \
         `Txn(If Value(key) == owner Then Delete(key))`: two fsynced raft writes per pair; each session has \
         its own gRPC (HTTP/2) connection.\n\
         \n![throughput](throughput.png)\n![latency at 8 clients](latency-8-clients.png)\n"
    );
    let _ = writeln!(md, "## 2. Contended: every client waits for one key, takes it and gives it back\n");
    let _ = writeln!(
        md,
        "| contender | clients | grants/s | acquire p50 µs | p99 µs | p99.9 µs |\n|---|---:|---:|---:|---:|---:|"
    );
    for p in &r.contended {
        let l = &p.latency;
        let _ = writeln!(
            md,
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            p.contender, p.clients, p.per_second, l.p50_us, l.p99_us, l.p999_us
        );
    }
    let _ = writeln!(
        md,
        "\n- dlock (fast mode) waits on the server (`wait => 60 s`): woken by a release, not in FIFO order.\n\
         - etcd: no server-side queue in this recipe: each waiter watches the key's deletions and tries \
         the `Txn` again on each (every waiter wakes on every release). etcd's own `concurrency.Mutex` \
         queues waiters by revision instead.\n\n![contended](contended.png)\n"
    );
    let _ = writeln!(md, "## 3. Renewals of {} live leases, 8 clients\n", 10_000);
    let _ = writeln!(md, "| contender | renewals/s | p50 µs | p99 µs |\n|---|---:|---:|---:|");
    for p in &r.renewals {
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0} |",
            p.contender, p.per_second, p.latency.p50_us, p.latency.p99_us
        );
    }
    let _ = writeln!(
        md,
        "\n- dlock (fast mode): `dlock_fast_renew`, in shared memory.\n\
         - etcd: each key on a lease of its own, and a renewal is one `LeaseKeepAlive` round trip on the \
         session's keep-alive stream (etcd's way to extend a lease; the leader answers from memory, no raft \
         write). In the session recipe of workloads 1 and 2, one keep-alive extends all of a session's keys.\n"
    );
    let _ = writeln!(md, "## 4. Scale: one session's acquire+release with live leases in the table\n");
    let _ = writeln!(md, "| table | pairs/s | p50 µs | p99 µs | p99.9 µs |\n|---|---:|---:|---:|---:|");
    for p in &r.scale {
        let l = &p.latency;
        let _ = writeln!(
            md,
            "| {} | {:.0} | {:.0} | {:.0} | {:.0} |",
            p.contender, p.per_second, l.p50_us, l.p99_us, l.p999_us
        );
    }
    let c = &r.churn;
    let _ = writeln!(
        md,
        "\n![latency by live leases](latency-live-leases.png)\n\n\
         ### Churn: {} distinct keys came and go (durable dlock through SQL, 8 clients, {:.1} s, \
         autovacuum_naptime {})\n\n\
         | keys | seconds | table + indexes (kB) | indexes (kB) | dead rows | autovacuums |\n\
         |---:|---:|---:|---:|---:|---:|",
        c.keys,
        c.seconds,
        workloads::CHURN_NAPTIME
    );
    for s in &c.samples {
        let _ = writeln!(
            md,
            "| {} | {:.1} | {} | {} | {} | {} |",
            s.keys,
            s.seconds,
            s.table_bytes / 1024,
            s.index_bytes / 1024,
            s.dead_rows,
            s.autovacuums
        );
    }
    md.push('\n');
    match &c.verdict {
        Some(v) => {
            let _ = writeln!(
                md,
                "{}: table + indexes grew {} kB over the first {} keys and {} kB over the last {} \
                 (last / first = {:.2}; levelled off means the last growth is at most a quarter of the first, \
                 or under {} kB).\n",
                if v.levelled_off { "The size levelled off" } else { "The size did NOT level off" },
                v.growth_first_bytes / 1024,
                v.window_keys,
                v.growth_last_bytes / 1024,
                v.window_keys,
                v.growth_last_bytes as f64 / v.growth_first_bytes.max(1) as f64,
                NOISE_BYTES / 1024
            );
        }
        None => md.push_str("Too few samples to tell whether the size levelled off.\n\n"),
    }
    let _ = writeln!(md, "![table size during churn](churn.png)\n");
    if !r.storm.is_empty() {
        let _ = writeln!(
            md,
            "## 5. Expiry storm: leases expire at once 2 s in, while 8 clients acquire and release\n"
        );
    }
    for s in &r.storm {
        let _ = writeln!(md, "### {}: {} leases\n", s.contender, s.leases);
        let _ = writeln!(
            md,
            "| second | pairs | p50 µs | p99 µs | max µs | storm leases left |\n|---:|---:|---:|---:|---:|---:|"
        );
        for w in &s.windows {
            let l = &w.latency;
            let _ = writeln!(
                md,
                "| {} | {} | {:.0} | {:.0} | {:.0} | {} |",
                w.second, w.pairs, l.p50_us, l.p99_us, l.max_us, w.storm_rows_left
            );
        }
        md.push('\n');
    }
    md.push_str(
        "Storm leases left: rows still in the lease table (durable: expired rows are swept in the \
         background); for fast mode, live leases `dlock_fast_locks()` lists: expired entries stay in \
         shared memory, unlisted, until a sweep when the table fills (half of it is the storm).\n\n",
    );
    if !r.skipped.is_empty() {
        let _ = writeln!(md, "## Not run\n\n| workload | contender | why |\n|---|---|---|");
        for s in &r.skipped {
            let _ = writeln!(md, "| {} | {} | {} |", s.workload, s.contender, s.why);
        }
        md.push('\n');
    }
    if !r.failed.is_empty() {
        let _ = writeln!(md, "## Failed\n\n| workload | contender | error |\n|---|---|---|");
        for s in &r.failed {
            let _ = writeln!(md, "| {} | {} | {} |", s.workload, s.contender, s.why.replace('|', "/"));
        }
        md.push('\n');
    }
    let _ = writeln!(md, "## Targets\n\n| | ratio | target | met |\n|---|---:|---:|---|");
    for t in &r.targets {
        match t.ratio {
            Some(x) => {
                let met = if t.bar.met(x) { "yes" } else { "no" };
                let _ = writeln!(md, "| {} | {x:.2} | {} | {met} |", t.what, t.bar);
            }
            None => {
                let _ = writeln!(md, "| {} | — | {} | not measured |", t.what, t.bar);
            }
        }
    }
    let _ = writeln!(md, "\n## Ratios\n\n| | ratio |\n|---|---:|");
    for (what, ratio) in &r.ratios {
        let _ = writeln!(md, "| {what} | {ratio:.2} |");
    }
    md
}
