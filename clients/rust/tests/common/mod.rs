//! Helpers shared by the client's integration tests.

use dlock_client::Client;
use dlock_tests::{Cluster, Session};

/// A superuser session of the shared cluster, for looking at `dlock_locks` and force-releasing.
pub async fn admin() -> Session {
    Cluster::shared().connect().await
}

/// Whether some other owner could take `key` right now (and gives it straight back).
pub async fn free_for_others(key: &str) -> bool {
    let url = format!("postgresql://postgres@127.0.0.1:{}/postgres", Cluster::shared().port());
    let probe = Client::connect_lazy(&url).expect("probe client");
    match probe.lock(key).try_acquire().await.expect("probe try_acquire") {
        Some(guard) => {
            assert!(guard.release().await.unwrap());
            true
        }
        None => false,
    }
}
