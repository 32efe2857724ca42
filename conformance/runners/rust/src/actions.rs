//! The README's "Actions on clients", mapped onto dlock-client's API: `client` is
//! `Client::builder(url)` (or `Client::from_pool_with_pooler` with a deadpool pool the runner
//! builds),
//! `lock` a `LockBuilder` (`semaphore`, `shared`, `session_bound`, `wait_forever`, ...),
//! `with_lock` `Client::with_lock`, `observe` the `LeaderChanges` stream, and so on.

use std::str::FromStr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use dlock_client::deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use dlock_client::{Client, Leader, LockBuilder, PoolerMode};
use futures_util::StreamExt;
use serde_json::{Value, json};

use crate::handles::{ClientHandle, Handle, LeaseHandle, Released};
use crate::kinds::Kind;
use crate::scenario::{Failure, Performed, Scenario, StepError};

/// Runs the client action `action` of `step`.
pub async fn perform(scenario: &Arc<Scenario>, action: &str, step: &Value) -> Result<Performed, StepError> {
    match action {
        "client" => client(scenario, step).await,
        "close" => {
            scenario.client(step)?.close().await;
            Ok(Performed::default())
        }
        "lock" => {
            let client = scenario.client(step)?;
            let guard = describe(scenario, &client, step)?.acquire().await?;
            Ok(leased(client.adopt(LeaseHandle::one(guard))))
        }
        "lock_all" => {
            let client = scenario.client(step)?;
            let keys = scenario.keys_arg(step)?;
            let ttl = millis(step, "ttl_ms")?.unwrap_or(Some(DEFAULT_TTL)).ok_or_else(|| {
                StepError::Unexpressible("ttl_ms null: a multi-key lock cannot be session-bound".into())
            })?;
            let builder = client.client().lock_all(keys).ttl(ttl);
            let builder = match millis(step, "wait_ms")?.unwrap_or(Some(Duration::ZERO)) {
                Some(wait) => builder.wait(wait),
                None => builder.wait_forever(),
            };
            Ok(leased(client.adopt(LeaseHandle::all(builder.acquire().await?))))
        }
        "with_lock" => with_lock(scenario, step).await,
        "release" | "resign" => match scenario.lease(step)?.release().await? {
            Released::Answered(ours) => Ok(Performed::value(ours)),
            Released::Already => Ok(Performed {
                note: Some(format!(
                    "{action} of a lease released before: release() takes the guard by value, so a \
                     second release does not compile in Rust; answered false (nothing left to give back)"
                )),
                ..Performed::value(false)
            }),
            Released::NotOurs => Err(StepError::Runner("with_lock releases the lease it holds".into())),
        },
        "renew" => match scenario.lease(step)?.renew().await {
            Some(renewed) => renewed.map(|()| Performed::default()).map_err(StepError::from),
            None => Err(StepError::Runner("no guard to renew: released, or held by with_lock".into())),
        },
        "holds" => Ok(Performed::value(scenario.lease(step)?.holds().await?)),
        "is_held" => Ok(Performed::value(scenario.lease(step)?.is_held().await)),
        "wait_lost" => {
            let timeout = millis(step, "timeout_ms")?.flatten().ok_or("wait_lost needs timeout_ms")?;
            Ok(Performed::value(scenario.lease(step)?.wait_lost(timeout).await))
        }
        "campaign" => {
            let client = scenario.client(step)?;
            let name = scenario.key_arg(step, "election")?;
            let ttl = millis(step, "ttl_ms")?
                .unwrap_or(Some(DEFAULT_TTL))
                .ok_or_else(|| StepError::Unexpressible("ttl_ms null: a leadership has a ttl".into()))?;
            let mut election = client.client().election(name).ttl(ttl);
            // Absent or null: without limit, the election's default.
            if let Some(Some(wait)) = millis(step, "wait_ms")? {
                election = election.wait(wait);
            }
            let lead = match scenario.resolve(step.get("info").unwrap_or(&Value::Null))? {
                Value::Null => election.campaign_without_info().await?,
                Value::String(info) => election.campaign(info).await?,
                other => return Err(StepError::Unexpressible(format!("info {other}: not a string"))),
            };
            Ok(leased(client.adopt(LeaseHandle::lead(lead))))
        }
        "leader" => {
            let name = scenario.key_arg(step, "election")?;
            let leader = scenario.client(step)?.client().election(name).leader().await?;
            Ok(Performed::value(leader.as_ref().map_or(Value::Null, shown)))
        }
        "observe" => {
            let name = scenario.key_arg(step, "election")?;
            let changes = scenario.client(step)?.client().election(name).observe().await?;
            let observer = Arc::new(tokio::sync::Mutex::new(Some(changes)));
            Ok(Performed::default().with_handle(Handle::Observer(observer)))
        }
        "observe_until" => observe_until(scenario, step).await,
        "stop_observing" => match scenario.handle(step, "observer")? {
            Handle::Observer(observer) => {
                drop(observer.lock().await.take());
                Ok(Performed::default())
            }
            _ => Err(StepError::Runner("not an observer".into())),
        },
        "wait_free" => {
            let key = scenario.key_arg(step, "key")?;
            // Null: without limit, which a Duration says as the longest one.
            let timeout = millis(step, "timeout_ms")?.flatten().unwrap_or(Duration::MAX);
            Ok(Performed::value(scenario.client(step)?.client().wait_free(&key, timeout).await?))
        }
        "force_release" => {
            let key = scenario.key_arg(step, "key")?;
            Ok(Performed::value(scenario.client(step)?.client().force_release(&key).await?))
        }
        other => Err(StepError::Runner(format!("unknown action {other:?}"))),
    }
}

/// A lease's ttl unless the step says otherwise (the README's default).
const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// A duration argument in milliseconds: `None` when absent, `Some(None)` when null; a negative
/// one cannot be a `Duration`.
fn millis(step: &Value, field: &str) -> Result<Option<Option<Duration>>, StepError> {
    match step.get(field) {
        None => Ok(None),
        Some(Value::Null) => Ok(Some(None)),
        Some(value) => match value.as_f64() {
            Some(ms) if ms >= 0.0 => Ok(Some(Some(Duration::from_secs_f64(ms / 1000.0)))),
            Some(_) => Err(StepError::Unexpressible(format!(
                "{field} {value}: a std::time::Duration is never negative"
            ))),
            None => Err(StepError::Unexpressible(format!("{field} {value}: not a number of milliseconds"))),
        },
    }
}

/// A lease's result, with the lease to refer to.
fn leased(lease: Arc<LeaseHandle>) -> Performed {
    Performed::fields(lease.result()).with_handle(Handle::Lease(lease))
}

/// A leader as the scenarios compare it.
fn shown(leader: &Leader) -> Value {
    json!({"info": leader.info, "term": leader.term})
}

async fn client(scenario: &Arc<Scenario>, step: &Value) -> Result<Performed, StepError> {
    let name = step.get("as").and_then(Value::as_str).ok_or("a client needs as")?;
    let (url, app) = scenario.url_for(step, name)?;
    let pooler = match step.get("via").and_then(Value::as_str) {
        Some("pgbouncer") => PoolerMode::Transaction,
        _ => PoolerMode::Session,
    };
    let size = step.get("pool_size").and_then(Value::as_u64).unwrap_or(4);
    let size = usize::try_from(size).map_err(|e| e.to_string())?;
    let client = match step.get("pool").and_then(Value::as_str) {
        Some("driver") => Client::from_pool_with_pooler(driver_pool(&url, size)?, pooler),
        _ => Client::builder(&url).pooler(pooler).pool_size(size).build()?,
    };
    let client = match step.get("owner") {
        Some(owner) => match scenario.resolve(owner)? {
            Value::String(owner) => client.with_owner(owner),
            other => return Err(StepError::Unexpressible(format!("owner {other}: not a string"))),
        },
        None => client,
    };
    let handle = ClientHandle::new(client);
    scenario.keep(handle.clone());
    // A client checks its owner when first used: a step that expects it refused makes that
    // first use (a lock of the key `probe`, no wait) part of the step.
    if step.get("expect").and_then(|e| e.get("error")).is_some() {
        let probe = scenario.key_arg(&json!({"key": "probe"}), "key")?;
        let guard = handle.client().lock(probe).acquire().await?;
        drop(guard.release().await);
    }
    let owner = handle.client().owner().to_owned();
    Ok(Performed::fields(json!({"app": app, "owner": owner})).with_handle(Handle::Client(handle)))
}

/// A deadpool pool of `size` made from `url` by the runner, as an application would.
fn driver_pool(url: &str, size: usize) -> Result<Pool, StepError> {
    let config =
        dlock_client::deadpool_postgres::tokio_postgres::Config::from_str(url).map_err(|e| e.to_string())?;
    let manager = Manager::from_config(
        config,
        tokio_postgres::NoTls,
        ManagerConfig { recycling_method: RecyclingMethod::Fast },
    );
    Ok(Pool::builder(manager).max_size(size).build().map_err(|e| e.to_string())?)
}

/// The lock a `lock` or `with_lock` step describes.
fn describe(scenario: &Scenario, client: &ClientHandle, step: &Value) -> Result<LockBuilder, StepError> {
    let key = scenario.key_arg(step, "key")?;
    let client = client.client();
    let builder = match step.get("permits") {
        None | Some(Value::Null) => client.lock(key),
        Some(permits) => {
            let permits = permits.as_u64().and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
                StepError::Unexpressible(format!("permits {permits}: a semaphore's size is a u32"))
            })?;
            client.semaphore(key, permits)
        }
    };
    let builder = match millis(step, "ttl_ms")?.unwrap_or(Some(DEFAULT_TTL)) {
        Some(ttl) => builder.ttl(ttl),
        None => builder.session_bound(),
    };
    let builder = match millis(step, "wait_ms")?.unwrap_or(Some(Duration::ZERO)) {
        Some(wait) => builder.wait(wait),
        None => builder.wait_forever(),
    };
    let builder = builder.watchdog(step.get("watchdog").and_then(Value::as_bool).unwrap_or(true));
    let builder = match millis(step, "lock_delay_ms")?.flatten() {
        Some(delay) => builder.lock_delay(delay),
        None => builder,
    };
    Ok(match step.get("mode").and_then(Value::as_str) {
        Some("shared") => builder.shared(),
        _ => builder,
    })
}

/// `with_lock`: the inner steps run as the work of `Client::with_lock`, the lease bound to the
/// step's `as` while they run.
async fn with_lock(scenario: &Arc<Scenario>, step: &Value) -> Result<Performed, StepError> {
    let client = scenario.client(step)?;
    let builder = describe(scenario, &client, step)?;
    let name = step.get("as").and_then(Value::as_str).unwrap_or_default().to_owned();
    let steps = step.get("steps").and_then(Value::as_array).cloned().unwrap_or_default();
    // An inner step's failure fails the scenario whatever with_lock answers (a lost lease would
    // hide it behind LockLost).
    let failed: Mutex<Option<String>> = Mutex::new(None);
    let (failed_in_work, name, steps) = (&failed, &name, &steps);
    let outcome = client
        .client()
        .with_lock(builder, |lease| async move {
            scenario.bind(name, leased(LeaseHandle::view(lease)));
            for (index, inner) in steps.iter().enumerate() {
                if let Err(Failure(why)) = scenario.step(inner).await {
                    let why = format!("inner step {}: {why}", index + 1);
                    *failed_in_work.lock().unwrap_or_else(PoisonError::into_inner) = Some(why);
                    return;
                }
            }
        })
        .await;
    if let Some(why) = failed.into_inner().unwrap_or_else(PoisonError::into_inner) {
        return Err(StepError::Runner(why));
    }
    outcome?;
    Ok(Performed::default())
}

/// Reads changes of leader until one matches the step's `leader`.
async fn observe_until(scenario: &Arc<Scenario>, step: &Value) -> Result<Performed, StepError> {
    let Handle::Observer(observer) = scenario.handle(step, "observer")? else {
        return Err(StepError::Runner("not an observer".into()));
    };
    let mut observer = observer.lock().await;
    let changes = observer.as_mut().ok_or("the observation was stopped")?;
    let timeout_ms = step.get("timeout_ms").and_then(Value::as_u64).unwrap_or(10_000);
    let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
    let want = step.get("leader").unwrap_or(&Value::Null);
    let mut seen = Vec::new();
    loop {
        let change = match tokio::time::timeout_at(deadline, StreamExt::next(changes)).await {
            Ok(Some(change)) => change?,
            Ok(None) => return Err(StepError::Runner("the observation ended".into())),
            Err(_) => {
                let message =
                    format!("no leader like {want} within {timeout_ms} ms; saw {}", Value::Array(seen));
                return Err(StepError::Kind(Kind::new("Timeout", None, message)));
            }
        };
        let leader = change.as_ref().map_or(Value::Null, shown);
        let matched = match (want, &leader) {
            (Value::Null, Value::Null) => true,
            (Value::Null, _) | (_, Value::Null) => false,
            (want, leader) => scenario.matches(want, leader)?,
        };
        if matched {
            return Ok(Performed::value(leader));
        }
        seen.push(leader);
    }
}
