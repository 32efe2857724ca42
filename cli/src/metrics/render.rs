//! A snapshot in Prometheus' text exposition format (version 0.0.4): every family with its
//! `# HELP` and `# TYPE` lines, then its samples; counts per database carry a `database` label.

use std::fmt::Write;

use super::query::{COUNTERS, DatabaseStats, Snapshot};

/// The Content-Type of what [`render`] writes.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The text of `snapshot`.
pub fn render(snapshot: &Snapshot) -> String {
    let mut out = Exposition::default();
    let dbs = &snapshot.databases;
    for (i, counter) in COUNTERS.iter().enumerate() {
        let samples: Vec<_> =
            dbs.iter().filter_map(|db| db.counters.get(i).copied().flatten().map(|v| (db, v))).collect();
        if samples.is_empty() {
            continue;
        }
        out.family(counter.metric, "counter", counter.help);
        for (db, value) in samples {
            out.sample(counter.metric, &[database(db)], &value.to_string());
        }
    }
    if !dbs.is_empty() {
        out.family("wait_seconds", "histogram", "Time waits took, in seconds");
        dbs.iter().for_each(|db| wait_histogram(&mut out, db));
    }
    let fast: Vec<_> = dbs.iter().filter_map(|db| db.fast_table.map(|fill| (db, fill))).collect();
    if !fast.is_empty() {
        out.family("fast_table_entries", "gauge", "Fast-mode table entries held by this database");
        for (db, (entries, _)) in &fast {
            out.sample("fast_table_entries", &[database(db)], &entries.to_string());
        }
        out.family("fast_table_capacity", "gauge", "Fast-mode table size (dlock.fast_max_leases)");
        for (db, (_, capacity)) in &fast {
            out.sample("fast_table_capacity", &[database(db)], &capacity.to_string());
        }
    }
    let leases = &snapshot.leases;
    out.family("leases_live", "gauge", "Live leases (one per holder)");
    out.sample("leases_live", &[], &leases.live.to_string());
    out.family("leases_waiters", "gauge", "Sessions waiting, summed over the holders' rows");
    out.sample("leases_waiters", &[], &leases.waiters.to_string());
    out.family("leases_oldest_age_seconds", "gauge", "Age of the oldest live lease");
    out.sample("leases_oldest_age_seconds", &[], &float(leases.oldest_age_seconds));
    out.text
}

/// `dlock_wait_seconds_bucket` (cumulative, `le` in seconds, ending with `+Inf`), `_sum` and
/// `_count` of one database.
fn wait_histogram(out: &mut Exposition, db: &DatabaseStats) {
    let waits = &db.waits;
    let mut has_inf = false;
    for (le_ms, count) in waits.le_ms.iter().zip(&waits.cumulative) {
        has_inf |= le_ms.is_infinite();
        out.sample("wait_seconds_bucket", &[database(db), ("le", float(le_ms / 1000.0))], &count.to_string());
    }
    if !has_inf {
        out.sample("wait_seconds_bucket", &[database(db), ("le", "+Inf".into())], &waits.count.to_string());
    }
    out.sample("wait_seconds_sum", &[database(db)], &float(waits.sum_ms / 1000.0));
    out.sample("wait_seconds_count", &[database(db)], &waits.count.to_string());
}

/// The `database` label of a row ("" for the counts shared by databases beyond the first 128).
fn database(db: &DatabaseStats) -> (&'static str, String) {
    ("database", db.database.clone().unwrap_or_default())
}

/// A sample value or `le` as Prometheus writes them: `+Inf`, `-Inf`, `NaN`, else decimal.
fn float(value: f64) -> String {
    if value.is_nan() {
        "NaN".into()
    } else if value.is_infinite() {
        if value > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        value.to_string()
    }
}

/// A label value with `\`, `"` and newlines escaped, as the format asks.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// The text being written; every name gets the `dlock_` prefix.
#[derive(Default)]
struct Exposition {
    text: String,
}

impl Exposition {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        // Writing to a String cannot fail.
        let _ = writeln!(self.text, "# HELP dlock_{name} {help}\n# TYPE dlock_{name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, String)], value: &str) {
        let _ = write!(self.text, "dlock_{name}");
        if !labels.is_empty() {
            let labels: Vec<_> =
                labels.iter().map(|(label, value)| format!("{label}=\"{}\"", escape(value))).collect();
            let _ = write!(self.text, "{{{}}}", labels.join(","));
        }
        let _ = writeln!(self.text, " {value}");
    }
}

#[cfg(test)]
mod tests {
    use super::super::query::{LeaseGauges, WaitHistogram};
    use super::*;

    fn db(name: Option<&str>, grants: i64) -> DatabaseStats {
        let mut counters = vec![Some(0); COUNTERS.len()];
        counters[0] = Some(grants);
        DatabaseStats {
            database: name.map(str::to_owned),
            counters,
            waits: WaitHistogram {
                le_ms: vec![1.0, 2.5, 1000.0, f64::INFINITY],
                cumulative: vec![1, 2, 4, 5],
                count: 5,
                sum_ms: 2500.0,
            },
            fast_table: Some((3, 1024)),
        }
    }

    fn snapshot(databases: Vec<DatabaseStats>) -> Snapshot {
        Snapshot { databases, leases: LeaseGauges { live: 2, waiters: 1, oldest_age_seconds: 1.5 } }
    }

    #[test]
    fn counters_carry_the_database_label_and_one_help_and_type() {
        let text = render(&snapshot(vec![db(Some("app"), 7), db(None, 2)]));
        assert_eq!(text.matches("# HELP dlock_grants_total ").count(), 1);
        assert!(text.contains("# TYPE dlock_grants_total counter\n"));
        assert!(text.contains("dlock_grants_total{database=\"app\"} 7\n"));
        assert!(text.contains("dlock_grants_total{database=\"\"} 2\n"));
        assert!(text.contains("dlock_wait_timeouts_total{database=\"app\"} 0\n"));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn the_wait_histogram_is_in_seconds_and_ends_with_inf() {
        let text = render(&snapshot(vec![db(Some("app"), 1)]));
        assert!(text.contains("# TYPE dlock_wait_seconds histogram\n"));
        for line in [
            "dlock_wait_seconds_bucket{database=\"app\",le=\"0.001\"} 1",
            "dlock_wait_seconds_bucket{database=\"app\",le=\"0.0025\"} 2",
            "dlock_wait_seconds_bucket{database=\"app\",le=\"1\"} 4",
            "dlock_wait_seconds_bucket{database=\"app\",le=\"+Inf\"} 5",
            "dlock_wait_seconds_sum{database=\"app\"} 2.5",
            "dlock_wait_seconds_count{database=\"app\"} 5",
        ] {
            assert!(text.contains(&format!("{line}\n")), "{line} missing from\n{text}");
        }
    }

    #[test]
    fn a_histogram_without_an_infinite_bound_gets_one_from_the_count() {
        let mut stats = db(Some("app"), 1);
        stats.waits.le_ms.pop();
        stats.waits.cumulative.pop();
        let text = render(&snapshot(vec![stats]));
        assert!(text.contains("dlock_wait_seconds_bucket{database=\"app\",le=\"+Inf\"} 5\n"));
        assert_eq!(text.matches("le=\"+Inf\"").count(), 1);
    }

    #[test]
    fn without_stats_rows_only_the_lease_gauges_are_served() {
        let text = render(&snapshot(vec![]));
        assert!(!text.contains("dlock_grants_total") && !text.contains("dlock_wait_seconds"));
        assert!(text.contains("# TYPE dlock_leases_live gauge\ndlock_leases_live 2\n"));
        assert!(text.contains("dlock_leases_waiters 1\n"));
        assert!(text.contains("dlock_leases_oldest_age_seconds 1.5\n"));
    }

    #[test]
    fn label_values_are_escaped() {
        let text = render(&snapshot(vec![db(Some("a\"b\\c\nd"), 1)]));
        assert!(text.contains("dlock_grants_total{database=\"a\\\"b\\\\c\\nd\"} 1\n"), "{text}");
    }

    #[test]
    fn special_floats_are_written_as_prometheus_reads_them() {
        assert_eq!(float(f64::INFINITY), "+Inf");
        assert_eq!(float(f64::NEG_INFINITY), "-Inf");
        assert_eq!(float(f64::NAN), "NaN");
        assert_eq!(float(0.005), "0.005");
        assert_eq!(float(60.0), "60");
    }

    #[test]
    fn every_line_is_a_comment_or_a_sample_of_a_declared_family() {
        let text = render(&snapshot(vec![db(Some("app"), 1)]));
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                declared.push(rest.split(' ').next().unwrap().to_owned());
            } else if !line.starts_with("# HELP ") {
                let name = line.split(['{', ' ']).next().unwrap();
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| name.strip_suffix(suffix).filter(|f| declared.iter().any(|d| d == f)))
                    .unwrap_or(name);
                assert!(declared.iter().any(|d| d == family), "{line}: no # TYPE before it");
            }
        }
    }

    #[test]
    fn the_metrics_are_the_ones_of_the_exporter_queries() {
        // docs/deploy/prometheus/dlock-queries.yaml names the same metrics, so that dashboards
        // and alert rules work with either source.
        let queries = include_str!("../../../docs/deploy/prometheus/dlock-queries.yaml");
        let text = render(&snapshot(vec![db(Some("app"), 1)]));
        let served = |metric: &str| text.lines().any(|l| l.starts_with(&format!("# TYPE dlock_{metric} ")));
        let mut checked = 0;
        for line in queries.lines() {
            let Some((name, spec)) = line.trim().strip_prefix("- ").and_then(|e| e.split_once(':')) else {
                continue;
            };
            if spec.contains("LABEL") {
                continue;
            }
            // The exporter prefixes the lease query's columns with its name, dlock_leases.
            let metric = match name {
                "live" | "waiters" | "oldest_age_seconds" => format!("leases_{name}"),
                _ => name.to_owned(),
            };
            assert!(served(&metric), "dlock_{metric} of dlock-queries.yaml is not served");
            checked += 1;
        }
        assert!(checked >= 20, "only {checked} metrics found in dlock-queries.yaml");
    }
}
