//! The client's tracing spans: acquire, wait, renew and release, with key, fence and outcome.
//! A test binary of its own: tracing caches per call site whether anyone listens, and a test
//! running beside it without a subscriber could have that answer cached as "nobody" first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use dlock_client::Client;
use dlock_tests::{Cluster, key};

/// Spans seen by [`SpanLog`]: name and fields (as recorded, Debug-formatted).
type Spans = Arc<Mutex<Vec<(String, HashMap<String, String>)>>>;

/// A tracing layer that keeps every span with its fields, including those recorded later.
struct SpanLog(Spans);

struct Fields<'a>(&'a mut HashMap<String, String>);

impl tracing::field::Visit for Fields<'_> {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S> tracing_subscriber::Layer<S> for SpanLog
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut fields = HashMap::new();
        attrs.record(&mut Fields(&mut fields));
        fields.insert("#id".into(), id.into_u64().to_string());
        self.0.lock().unwrap().push((attrs.metadata().name().to_owned(), fields));
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        _: tracing_subscriber::layer::Context<'_, S>,
    ) {
        let mut spans = self.0.lock().unwrap();
        let id = id.into_u64().to_string();
        if let Some((_, fields)) = spans.iter_mut().rev().find(|(_, f)| f.get("#id") == Some(&id)) {
            values.record(&mut Fields(fields));
        }
    }
}

/// The fields of the spans named `name` whose key is `key`.
fn spans_of(spans: &Spans, name: &str, key: &str) -> Vec<HashMap<String, String>> {
    let spans = spans.lock().unwrap();
    spans
        .iter()
        .filter(|(n, f)| n == name && f.get("key").map(String::as_str) == Some(key))
        .map(|(_, f)| f.clone())
        .collect()
}

#[tokio::test]
async fn acquire_renew_release_and_waits_are_traced_with_key_fence_and_outcome() {
    use tracing_subscriber::layer::SubscriberExt;
    let spans: Spans = Arc::default();
    let subscriber = tracing_subscriber::registry().with(SpanLog(spans.clone()));
    // This test's thread only (the runtime is current-thread: every task of the test runs here).
    let _default = tracing::subscriber::set_default(subscriber);

    let url = format!("postgresql://postgres@127.0.0.1:{}/postgres", Cluster::shared().port());
    let client = Client::connect(&url).await.unwrap();
    let other = Client::connect(&url).await.unwrap();
    let k = key("metrics_traced", "k");
    let guard = client.lock(&k).acquire().await.unwrap();
    let fence = guard.fence().to_string();
    guard.renew().await.unwrap();
    assert!(other.lock(&k).try_acquire().await.unwrap().is_none());
    assert!(other.lock(&k).wait(Duration::from_millis(100)).try_acquire().await.unwrap().is_none());
    assert!(guard.release().await.unwrap());

    let acquires = spans_of(&spans, "dlock.acquire", &k);
    let outcomes: Vec<_> = acquires.iter().map(|f| f.get("outcome").cloned().unwrap_or_default()).collect();
    assert_eq!(outcomes, ["granted", "busy", "timeout"], "{acquires:?}");
    assert_eq!(acquires[0].get("fence"), Some(&fence));
    assert!(!acquires[1].contains_key("fence"), "a busy try has no fence: {acquires:?}");
    let waits = spans_of(&spans, "dlock.wait", &k);
    assert_eq!(waits.len(), 1, "{waits:?}");
    assert_eq!(waits[0].get("outcome").map(String::as_str), Some("timeout"));
    let renewals = spans_of(&spans, "dlock.renew", &k);
    assert!(
        renewals.iter().any(|f| f.get("fence") == Some(&fence) && f["outcome"] == "renewed"),
        "{renewals:?}"
    );
    let releases = spans_of(&spans, "dlock.release", &k);
    assert_eq!(releases.len(), 1, "{releases:?}");
    assert_eq!(
        (releases[0]["fence"].as_str(), releases[0]["outcome"].as_str()),
        (fence.as_str(), "released")
    );

    // A multi-key grant: its keys and fences as lists.
    let keys = [key("metrics_traced", "a"), key("metrics_traced", "b")];
    let multi = client.lock_all(keys.clone()).acquire().await.unwrap();
    let fences = format!("{:?}", multi.fences());
    assert!(multi.release().await.unwrap());
    let multi_spans = spans_of(&spans, "dlock.acquire", &format!("{keys:?}"));
    assert_eq!(multi_spans.len(), 1, "{multi_spans:?}");
    assert_eq!(
        (multi_spans[0]["fence"].as_str(), multi_spans[0]["outcome"].as_str()),
        (fences.as_str(), "granted")
    );
}
