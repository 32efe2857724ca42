//! One scenario being run (README, "A scenario"): its steps in the foreground or as background
//! tasks, each checked against its `expect`, its bindings, and what it holds until it ends. The
//! runner's own actions are in [`own_actions`], the client actions in `actions`.

mod outcome;
mod own_actions;

pub use outcome::{Failure, Performed, StepError};

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;

use crate::child::Child;
use crate::handles::{ClientHandle, Handle, LeaseHandle};
use crate::url::Url;
use crate::values::Values;

/// How long one step may take before the scenario fails (never a measurement).
const STEP_LIMIT: Duration = Duration::from_secs(60);

/// The future of a client action.
pub type ActionFuture<'a> = Pin<Box<dyn Future<Output = Result<Performed, StepError>> + Send + 'a>>;

/// Performs a client action (`actions::perform`, handed in by `main`: the engine runs the
/// client's actions without depending on them, and they depend on the engine).
pub type ClientActions = for<'a> fn(&'a Arc<Scenario>, &'a str, &'a Value) -> ActionFuture<'a>;

/// What every scenario of a run shares.
pub struct Environment {
    pub dsn: Url,
    pub pgbouncer: Option<Url>,
    pub run_id: String,
    pub client_actions: ClientActions,
}

/// What one step did, or how it failed, and how long it took.
struct Outcome {
    performed: Result<Performed, StepError>,
    elapsed_ms: f64,
}

/// Background steps under one task name.
struct Task {
    step: Value,
    runs: Vec<JoinHandle<Result<Outcome, Failure>>>,
}

/// One scenario being run.
pub struct Scenario {
    env: Arc<Environment>,
    values: Mutex<Values>,
    handles: Mutex<HashMap<String, Handle>>,
    clients: Mutex<Vec<Arc<ClientHandle>>>,
    sessions: tokio::sync::Mutex<HashMap<String, Arc<tokio_postgres::Client>>>,
    children: Mutex<HashMap<String, Arc<Child>>>,
    tasks: Mutex<HashMap<String, Task>>,
    notes: Mutex<Vec<String>>,
    apps: AtomicUsize,
}

/// The future of a step (boxed: `with_lock` runs steps inside a step).
type StepFuture<'a> = Pin<Box<dyn Future<Output = Result<(), Failure>> + Send + 'a>>;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // Plain maps and lists: still usable after a panic elsewhere.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Scenario {
    pub fn new(name: &str, env: Arc<Environment>) -> Arc<Scenario> {
        Arc::new(Scenario {
            values: Mutex::new(Values::new(&env.run_id, name)),
            env,
            handles: Mutex::default(),
            clients: Mutex::default(),
            sessions: tokio::sync::Mutex::default(),
            children: Mutex::default(),
            tasks: Mutex::default(),
            notes: Mutex::default(),
            apps: AtomicUsize::new(0),
        })
    }

    /// Runs every step in order, then lets go of everything; what to tell about the run.
    pub async fn run(self: &Arc<Self>, spec: &Value) -> Result<Vec<String>, Failure> {
        let steps = spec.get("steps").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut outcome = Ok(());
        for (index, step) in steps.iter().enumerate() {
            if let Err(Failure(why)) = self.step(step).await {
                let action = step.get("do").and_then(Value::as_str).unwrap_or("?");
                outcome = Err(Failure(format!("step {} ({action}): {why}", index + 1)));
                break;
            }
        }
        self.clean_up().await;
        outcome.map(|()| std::mem::take(&mut *lock(&self.notes)))
    }

    /// Runs one step: in the background, or to its end (within [`STEP_LIMIT`]) and checked.
    pub fn step<'a>(self: &'a Arc<Self>, step: &'a Value) -> StepFuture<'a> {
        Box::pin(async move {
            if let Some(task) = step.get("background").and_then(Value::as_str) {
                let count = step.get("count").and_then(Value::as_u64).unwrap_or(1);
                let runs = (0..count).map(|_| tokio::spawn(self.clone().timed(step.clone()))).collect();
                lock(&self.tasks).insert(task.to_owned(), Task { step: step.clone(), runs });
                return Ok(());
            }
            if step.get("do").and_then(Value::as_str) == Some("join") {
                return self.join(step).await;
            }
            let outcome = tokio::time::timeout(STEP_LIMIT, self.clone().timed(step.clone()))
                .await
                .map_err(|_| Failure(format!("did not end within {} s", STEP_LIMIT.as_secs())))??;
            self.finish(step, outcome)
        })
    }

    /// Checks `outcome` against `step`'s expectations and binds its result.
    fn finish(&self, step: &Value, outcome: Outcome) -> Result<(), Failure> {
        self.check(step, &outcome)?;
        let (Some(name), Ok(performed)) = (step.get("as").and_then(Value::as_str), outcome.performed) else {
            return Ok(());
        };
        lock(&self.values).bind(name, Value::Object(performed.result));
        if let Some(handle) = performed.handle {
            lock(&self.handles).insert(name.to_owned(), handle);
        }
        Ok(())
    }

    /// Whether `outcome` is what `step` expects.
    fn check(&self, step: &Value, outcome: &Outcome) -> Result<(), Failure> {
        let empty = Map::new();
        let expect = step.get("expect").and_then(Value::as_object).unwrap_or(&empty);
        let wanted = expect.get("error").and_then(Value::as_str);
        let performed = match (&outcome.performed, wanted) {
            (Ok(performed), None) => performed,
            (Ok(performed), Some(want)) => {
                return Err(Failure(format!(
                    "expected {want}, but it succeeded with {}",
                    Value::Object(performed.result.clone())
                )));
            }
            (Err(StepError::Runner(why)), _) => return Err(Failure(why.clone())),
            (Err(StepError::Unexpressible(why)), Some(want @ ("InvalidArgument" | "WrongType"))) => {
                self.note(format!("{why}: Rust's types rule it out, so the step that expects {want} passes"));
                return Ok(());
            }
            (Err(StepError::Unexpressible(why)), _) => {
                return Err(Failure(format!("{why}: no call of the Rust client can be written with it")));
            }
            (Err(StepError::Kind(k)), None) => {
                return Err(Failure(format!(
                    "failed with {} (SQLSTATE {}): {}",
                    k.kind,
                    k.sqlstate.as_deref().unwrap_or("-"),
                    k.message
                )));
            }
            (Err(StepError::Kind(k)), Some(want)) => {
                let state = k.sqlstate.as_deref().unwrap_or("-");
                if k.kind != want {
                    return Err(Failure(format!(
                        "expected {want}, got {} (SQLSTATE {state}): {}",
                        k.kind, k.message
                    )));
                }
                if let Some(sqlstate) = expect.get("sqlstate").and_then(Value::as_str)
                    && k.sqlstate.as_deref() != Some(sqlstate)
                {
                    return Err(Failure(format!("expected SQLSTATE {sqlstate}, got {state}: {}", k.message)));
                }
                return self.check_fields(expect, &Map::new(), outcome.elapsed_ms);
            }
        };
        if let Some(note) = &performed.note {
            self.note(note.clone());
        }
        self.check_fields(expect, &performed.result, outcome.elapsed_ms)
    }

    /// The expected fields of a result (`elapsed_ms` included).
    fn check_fields(
        &self,
        expect: &Map<String, Value>,
        result: &Map<String, Value>,
        elapsed_ms: f64,
    ) -> Result<(), Failure> {
        let mut fields = result.clone();
        fields.insert("elapsed_ms".into(), json!(elapsed_ms));
        let values = lock(&self.values);
        for (name, expected) in
            expect.iter().filter(|(name, _)| !matches!(name.as_str(), "error" | "sqlstate"))
        {
            let actual = fields.get(name).unwrap_or(&Value::Null);
            if let Some(problem) = values.mismatch(expected, actual, name).map_err(Failure)? {
                return Err(Failure(problem));
            }
        }
        Ok(())
    }

    fn note(&self, note: String) {
        lock(&self.notes).push(note);
    }

    /// Waits for a background task's steps and checks each.
    async fn join(&self, step: &Value) -> Result<(), Failure> {
        let name = step.get("task").and_then(Value::as_str).unwrap_or_default();
        let task = lock(&self.tasks).remove(name).ok_or_else(|| Failure(format!("no task {name:?}")))?;
        let timeout_ms = step.get("timeout_ms").and_then(Value::as_u64).unwrap_or(30_000);
        let deadline = tokio::time::Instant::now() + Duration::from_millis(timeout_ms);
        let count = task.runs.len();
        let mut outcomes = Vec::with_capacity(count);
        for run in task.runs {
            match tokio::time::timeout_at(deadline, run).await {
                Ok(Ok(outcome)) => outcomes.push(outcome?),
                Ok(Err(e)) => return Err(Failure(format!("task {name:?} failed: {e}"))),
                Err(_) => return Err(Failure(format!("task {name:?} had not ended within {timeout_ms} ms"))),
            }
        }
        for outcome in outcomes {
            if count == 1 { self.finish(&task.step, outcome)? } else { self.check(&task.step, &outcome)? }
        }
        Ok(())
    }

    /// Performs `step`, timed.
    async fn timed(self: Arc<Self>, step: Value) -> Result<Outcome, Failure> {
        let started = Instant::now();
        let performed = self.perform(&step).await;
        Ok(Outcome { performed, elapsed_ms: started.elapsed().as_secs_f64() * 1000.0 })
    }

    async fn perform(self: &Arc<Self>, step: &Value) -> Result<Performed, StepError> {
        let action = step.get("do").and_then(Value::as_str).unwrap_or_default();
        match action {
            "session" | "sql" | "wait_until" | "child_start" | "child_lock" | "child_signal"
            | "child_wait_lost" | "child_release" | "child_quit" => self.perform_own(action, step).await,
            _ => (self.env.client_actions)(self, action, step).await,
        }
    }

    // ---- what the client actions need -----------------------------------------------------

    /// What `value` stands for.
    pub fn resolve(&self, value: &Value) -> Result<Value, StepError> {
        Ok(lock(&self.values).resolve(value)?)
    }

    /// The key argument `field` of `step` (a plain string is a key name), as text.
    pub fn key_arg(&self, step: &Value, field: &str) -> Result<String, StepError> {
        let value = step.get(field).unwrap_or(&Value::Null);
        match lock(&self.values).key_arg(value)? {
            Value::String(key) => Ok(key),
            other => Err(StepError::Unexpressible(format!("{field} {other}: a Rust key is a string"))),
        }
    }

    /// The `keys` argument of `step`, as texts.
    pub fn keys_arg(&self, step: &Value) -> Result<Vec<String>, StepError> {
        let value = step.get("keys").unwrap_or(&Value::Null);
        let keys = lock(&self.values).keys_arg(value)?;
        let keys =
            keys.as_array().ok_or_else(|| StepError::Unexpressible(format!("keys {keys}: not a list")))?;
        keys.iter()
            .map(|k| {
                k.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| StepError::Unexpressible(format!("key {k}: not a string")))
            })
            .collect()
    }

    /// Whether `actual` matches what `expected` describes.
    pub fn matches(&self, expected: &Value, actual: &Value) -> Result<bool, StepError> {
        Ok(lock(&self.values).mismatch(expected, actual, "leader")?.is_none())
    }

    /// What `step` names in `field` (a client, a lease, an observer).
    pub fn handle(&self, step: &Value, field: &str) -> Result<Handle, StepError> {
        let name = step.get(field).and_then(Value::as_str).unwrap_or_default();
        lock(&self.handles)
            .get(name)
            .cloned()
            .ok_or_else(|| StepError::Runner(format!("nothing is bound to {name:?}")))
    }

    /// The client `step` names.
    pub fn client(&self, step: &Value) -> Result<Arc<ClientHandle>, StepError> {
        match self.handle(step, "client")? {
            Handle::Client(client) => Ok(client),
            _ => Err(StepError::Runner("not a client".into())),
        }
    }

    /// The lease `step` names.
    pub fn lease(&self, step: &Value) -> Result<Arc<LeaseHandle>, StepError> {
        match self.handle(step, "lease")? {
            Handle::Lease(lease) => Ok(lease),
            _ => Err(StepError::Runner("not a lease".into())),
        }
    }

    /// Keeps `client` until the scenario ends (then closed).
    pub fn keep(&self, client: Arc<ClientHandle>) {
        lock(&self.clients).push(client);
    }

    /// Binds a lease to a name inside `with_lock`, as the step's `as` would.
    pub fn bind(&self, name: &str, performed: Performed) {
        lock(&self.values).bind(name, Value::Object(performed.result));
        if let Some(handle) = performed.handle {
            lock(&self.handles).insert(name.to_owned(), handle);
        }
    }

    /// A unique `application_name` for what is called `name` (63 bytes at most).
    fn app_name(&self, name: &str) -> String {
        let n = self.apps.fetch_add(1, Ordering::Relaxed) + 1;
        let mut app = format!("conf-{}-{n}-{name}", self.env.run_id);
        app.truncate(app.char_indices().nth(63).map_or(app.len(), |(at, _)| at));
        app
    }

    /// The URL for a client or child called `name` of `step` (`via`, `role`, `offline`), and
    /// its application name.
    pub fn url_for(&self, step: &Value, name: &str) -> Result<(String, String), StepError> {
        let base = match step.get("via").and_then(Value::as_str) {
            Some("pgbouncer") => {
                self.env.pgbouncer.clone().ok_or("no pgbouncer (DLOCK_CONFORMANCE_PGBOUNCER_DSN)")?
            }
            _ => self.env.dsn.clone(),
        };
        let app = self.app_name(name);
        let mut url = base.with_param("application_name", &app);
        if let Some(role) = step.get("role").and_then(Value::as_str) {
            url = url.with_user(role);
        }
        if step.get("offline").and_then(Value::as_bool) == Some(true) {
            url = url.offline();
        }
        Ok((url.to_string(), app))
    }

    // ---- the end --------------------------------------------------------------------------

    /// Lets go of everything the scenario holds: children, background steps, clients (their
    /// leases released), sessions.
    async fn clean_up(&self) {
        let children: Vec<Arc<Child>> = lock(&self.children).drain().map(|(_, child)| child).collect();
        for child in children {
            child.kill().await;
        }
        let tasks: Vec<Task> = lock(&self.tasks).drain().map(|(_, task)| task).collect();
        for run in tasks.into_iter().flat_map(|task| task.runs) {
            drop(tokio::time::timeout(STEP_LIMIT, run).await);
        }
        let observers: Vec<Handle> = lock(&self.handles).drain().map(|(_, handle)| handle).collect();
        drop(observers);
        let clients = std::mem::take(&mut *lock(&self.clients));
        for client in clients {
            client.close().await;
        }
        // The admin and session connections end with their clients.
        self.sessions.lock().await.clear();
    }
}
