//! The client's own metrics (feature `metrics`), recorded through the `metrics` facade into a
//! debugging recorder. Its tracing spans: tracing.rs.
#![cfg(feature = "metrics")]

use std::collections::HashMap;
use std::time::Duration;

use dlock_client::Client;
use dlock_tests::{Cluster, key, within};

/// The client's own metrics (feature `metrics`): acquire latency by outcome, and a lease lost
/// to a force release counted.
#[test]
fn the_client_records_acquire_latency_and_lost_leases() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    // A recorder of this thread only; the runtime runs every task of the test on it.
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let url = format!("postgresql://postgres@127.0.0.1:{}/postgres", Cluster::shared().port());
            let client = Client::connect(&url).await.unwrap();
            let k = key("metrics_feature", "k");
            let guard = client
                .lock(&k)
                .ttl(Duration::from_secs(3))
                .renew_every(Duration::from_millis(200))
                .acquire()
                .await
                .unwrap();
            assert!(Client::connect(&url).await.unwrap().lock(&k).try_acquire().await.unwrap().is_none());
            let admin = Cluster::shared().connect().await;
            assert!(admin.force_release(&k).await.unwrap());
            within(
                Duration::from_secs(10),
                "the watchdog notices the lost lease",
                guard.lost().cancelled_owned(),
            )
            .await;
            drop(guard);
        });
    });

    let mut latencies: HashMap<String, usize> = HashMap::new();
    let mut lost = None;
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        match (key.name(), value) {
            ("dlock_client_acquire_seconds", DebugValue::Histogram(values)) => {
                let outcome =
                    key.labels().find(|l| l.key() == "outcome").expect("an outcome label").value().to_owned();
                assert!(values.iter().all(|v| v.into_inner() >= 0.0), "{values:?}");
                *latencies.entry(outcome).or_default() += values.len();
            }
            ("dlock_client_leases_lost_total", DebugValue::Counter(n)) => lost = Some(n),
            _ => {}
        }
    }
    assert_eq!(latencies.get("granted"), Some(&1), "{latencies:?}");
    assert_eq!(latencies.get("busy"), Some(&1), "{latencies:?}");
    assert_eq!(lost, Some(1));
}
