//! `dlock metrics` against throwaway clusters (counters moved by the right amounts, a
//! consistent histogram, 404, 503 while the database is down and recovery after, exit 64 for
//! an unusable --listen). The client library's own `metrics` feature is tested beside it
//! (clients/rust/tests/metrics_feature.rs).

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_tests::{Cluster, Session, eventually, finish, wait_for_waiters, within};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::Child;

/// What `dlock metrics` wrote on stderr after its first line, line by line.
type Stderr = Arc<Mutex<Vec<String>>>;

/// `dlock metrics --listen 127.0.0.1:0` on `url`, the address it serves on (the system chose
/// the port; the command says which on stderr) and the rest of its stderr as it comes.
async fn serve(url: &str) -> (Child, String, Stderr) {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .env_remove("DATABASE_URL")
        .env_remove("PGSSLMODE")
        .args(["metrics", "--listen", "127.0.0.1:0", "--database-url", url])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("dlock metrics starts");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    let line = within(Duration::from_secs(20), "dlock metrics says where it serves", stderr.next_line())
        .await
        .expect("stderr readable")
        .expect("a first line on stderr");
    let address = line
        .strip_prefix("dlock: serving metrics on http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    // Keep draining stderr so that the command never blocks on a full pipe.
    let lines = Stderr::default();
    let kept = lines.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = stderr.next_line().await {
            kept.lock().unwrap().push(line);
        }
    });
    (child, address, lines)
}

/// An HTTP answer: status and body.
struct Answer {
    status: u16,
    body: String,
}

/// `METHOD path` on `address` over HTTP/1.1 (one request, connection closed after).
async fn request(address: &str, method: &str, path: &str) -> Answer {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address).await.expect("connect to dlock metrics");
        let head = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
        stream.write_all(head.as_bytes()).await.expect("send the request");
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.expect("read the answer");
        String::from_utf8(raw).expect("a UTF-8 answer")
    };
    let raw = within(Duration::from_secs(20), "an HTTP answer", exchange).await;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or_else(|| panic!("no end of headers in {raw:?}"));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).expect("a status code");
    if status == 200 {
        assert!(
            head.to_ascii_lowercase().contains("content-type: text/plain; version=0.0.4"),
            "not the Prometheus text format: {head}"
        );
    }
    Answer { status, body: body.to_owned() }
}

/// `GET /metrics`, which must answer 200; its samples by name with labels.
async fn scrape(address: &str) -> Samples {
    let answer = request(address, "GET", "/metrics").await;
    assert_eq!(answer.status, 200, "scrape failed: {}", answer.body);
    Samples::parse(&answer.body)
}

/// The samples of a scrape: `name{labels}` (as written) to value.
struct Samples(BTreeMap<String, f64>);

impl Samples {
    fn parse(text: &str) -> Samples {
        let mut samples = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
            let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("not a sample: {line}"));
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("not a value: {line}")),
            };
            assert!(samples.insert(series.to_owned(), value).is_none(), "{series} twice");
        }
        Samples(samples)
    }

    fn get(&self, series: &str) -> f64 {
        *self.0.get(series).unwrap_or_else(|| panic!("{series} not in the scrape: {:?}", self.0.keys()))
    }

    /// A per-database counter of `database`.
    fn counter(&self, name: &str, database: &str) -> f64 {
        self.get(&format!("dlock_{name}{{database=\"{database}\"}}"))
    }

    /// Like [`counter`](Self::counter), 0 when the database has no samples yet.
    fn counter_or_zero(&self, name: &str, database: &str) -> f64 {
        self.0.get(&format!("dlock_{name}{{database=\"{database}\"}}")).copied().unwrap_or(0.0)
    }

    /// The wait histogram's buckets of `database`, in order of their bounds.
    fn buckets(&self, database: &str) -> Vec<(f64, f64)> {
        let prefix = format!("dlock_wait_seconds_bucket{{database=\"{database}\",le=\"");
        let mut buckets: Vec<(f64, f64)> = self
            .0
            .iter()
            .filter_map(|(series, value)| {
                let le = series.strip_prefix(&prefix)?.strip_suffix("\"}")?;
                Some((if le == "+Inf" { f64::INFINITY } else { le.parse().expect("a bound") }, *value))
            })
            .collect();
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        buckets
    }
}

/// The preloaded cluster the counting tests share (counters need shared_preload_libraries).
fn preloaded() -> &'static Cluster {
    Cluster::shared_named("metrics-preloaded", &["shared_preload_libraries = 'dlock'"])
}

/// A database of its own on the preloaded cluster, with dlock: its counters move only by
/// what the test does there.
async fn own_database(name: &str) -> (String, Session) {
    let cluster = preloaded();
    let admin = cluster.connect().await;
    admin.batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)")).await.expect("drop");
    admin.batch_execute(&format!("CREATE DATABASE {name}")).await.expect("create database");
    let session = cluster.connect_db("postgres", name).await;
    session.batch_execute("CREATE EXTENSION dlock SCHEMA public").await.expect("create extension");
    (format!("postgresql://postgres@127.0.0.1:{}/{name}", cluster.port()), session)
}

#[tokio::test]
async fn counters_move_by_what_was_done_and_the_histogram_is_consistent() {
    let db = "metrics_counts";
    let (url, session) = own_database(db).await;
    let (_child, address, _) = serve(&url).await;
    let before = scrape(&address).await;

    // Three pairs, one wait granted by a release, one wait that runs out.
    for i in 0..3 {
        let k = format!("pair-{i}");
        assert!(session.acquire(&k, "o", Some("30s"), Some("0")).await.unwrap().is_some());
        assert!(session.release(&k, "o").await.unwrap());
    }
    let holder = preloaded().connect_db("postgres", db).await;
    assert!(holder.acquire("handed", "holder", Some("30s"), Some("0")).await.unwrap().is_some());
    let waiter = preloaded().connect_db("postgres", db).await.spawn_acquire(
        "handed",
        "waiter",
        Some("30s"),
        Some("20s"),
    );
    wait_for_waiters(&holder, "handed", 1).await;
    let during = scrape(&address).await;
    assert_eq!(during.get("dlock_leases_live"), 1.0);
    assert_eq!(during.get("dlock_leases_waiters"), 1.0);
    assert!(during.get("dlock_leases_oldest_age_seconds") >= 0.0);
    assert!(holder.release("handed", "holder").await.unwrap());
    let granted = finish(waiter, Duration::from_secs(20), "the waiter is granted").await;
    assert!(granted.result.expect("waiter's acquire").is_some());
    assert!(granted.session.release("handed", "waiter").await.unwrap());
    assert!(holder.acquire("kept", "holder", Some("30s"), Some("0")).await.unwrap().is_some());
    assert_eq!(session.acquire("kept", "other", Some("30s"), Some("50ms")).await.unwrap(), None);
    assert!(holder.release("kept", "holder").await.unwrap());

    let after = scrape(&address).await;
    // A database nothing happened in yet has no dlock_stats row: its counts start at 0.
    let moved = |name: &str| after.counter(name, db) - before.counter_or_zero(name, db);
    assert_eq!(moved("grants_total"), 6.0, "3 pairs, 2 holders, 1 waiter");
    assert_eq!(moved("releases_total"), 6.0);
    assert_eq!(moved("waits_started_total"), 2.0);
    assert_eq!(moved("waits_granted_total"), 1.0);
    assert_eq!(moved("wait_timeouts_total"), 1.0);
    assert_eq!(moved("waits_cancelled_total"), 0.0);
    assert_eq!(moved("handoffs_direct_total") + moved("handoffs_self_total"), 1.0);
    assert_eq!(moved("force_releases_total"), 0.0);
    assert_eq!(after.get(&format!("dlock_wait_seconds_count{{database=\"{db}\"}}")), 2.0);
    assert!(after.get(&format!("dlock_wait_seconds_sum{{database=\"{db}\"}}")) > 0.0);
    assert_eq!(after.get("dlock_leases_live"), 0.0);

    // Cumulative: never decreasing, ending with +Inf, which is the count.
    let buckets = after.buckets(db);
    assert!(buckets.len() >= 2, "{buckets:?}");
    assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1), "{buckets:?}");
    let (le, inf) = *buckets.last().unwrap();
    assert!(le.is_infinite());
    assert_eq!(inf, after.get(&format!("dlock_wait_seconds_count{{database=\"{db}\"}}")));
}

#[tokio::test]
async fn only_metrics_is_served() {
    let url = format!("postgresql://postgres@127.0.0.1:{}/postgres", Cluster::shared().port());
    let (_child, address, _) = serve(&url).await;
    let other = request(&address, "GET", "/other").await;
    assert_eq!(other.status, 404, "{}", other.body);
    assert_eq!(request(&address, "GET", "/").await.status, 404);
    assert_eq!(request(&address, "POST", "/metrics").await.status, 405);
    // Not preloaded: no counters, but the lease gauges.
    let samples = scrape(&address).await;
    assert!(samples.0.contains_key("dlock_leases_live"));
    assert!(!samples.0.keys().any(|series| series.starts_with("dlock_grants_total")));
}

#[tokio::test]
async fn a_stopped_database_gets_503_with_the_reason_and_the_endpoint_recovers() {
    let cluster = Cluster::start_new("metrics-restart", &[]);
    let url = format!("postgresql://postgres@127.0.0.1:{}/postgres", cluster.port());
    let (mut child, address, stderr) = serve(&url).await;
    scrape(&address).await;

    cluster.stop("fast");
    let down = request(&address, "GET", "/metrics").await;
    assert_eq!(down.status, 503, "{}", down.body);
    assert!(down.body.contains("connection"), "no reason given: {:?}", down.body);
    assert!(child.try_wait().expect("child status").is_none(), "dlock metrics ended");

    assert_eq!(request(&address, "GET", "/metrics").await.status, 503);

    cluster.start();
    eventually(Duration::from_secs(30), "scrapes succeed again", || async {
        request(&address, "GET", "/metrics").await.status == 200
    })
    .await;
    assert!(child.try_wait().expect("child status").is_none(), "dlock metrics ended");
    // The log says when scrapes start failing (once for the outage, not every scrape) and when
    // they work again.
    let said = |line: &str| stderr.lock().unwrap().iter().filter(|l| l.starts_with(line)).count();
    eventually(Duration::from_secs(5), "stderr tells of the recovery", || async {
        said("dlock: scrapes answer again") == 1
    })
    .await;
    assert_eq!(said("dlock: scrapes answer 503: "), 1, "{:?}", stderr.lock().unwrap());
}

/// `dlock metrics --listen <listen>` ends at once: its exit code and stderr.
async fn refused(listen: &str) -> (Option<i32>, String) {
    let url = format!("postgresql://postgres@127.0.0.1:{}/postgres", Cluster::shared().port());
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["metrics", "--listen", listen, "--database-url", &url])
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = within(Duration::from_secs(20), "dlock metrics exits", output).await.expect("dlock runs");
    (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[tokio::test]
async fn an_unusable_listen_address_exits_64_with_a_message() {
    let (code, stderr) = refused("nonsense").await;
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains("\"nonsense\" is not an address"), "{stderr}");

    let taken = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let (code, stderr) = refused(&address).await;
    assert_eq!(code, Some(64), "{stderr}");
    assert!(stderr.contains(&format!("cannot listen on {address}")), "{stderr}");
}
