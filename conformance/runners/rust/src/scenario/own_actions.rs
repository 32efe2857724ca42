//! The runner's own actions (README, "Actions of the runner itself"): sessions, SQL, polling
//! the server, and the child process. `join` is the scenario's.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Performed, Scenario, StepError, lock};
use crate::child::Child;
use crate::kinds::Kind;
use crate::sql::{self, QueryError};

/// How often `wait_until` asks again.
const POLL: Duration = Duration::from_millis(50);

impl Scenario {
    /// Runs the runner's action `action` of `step`.
    pub(super) async fn perform_own(&self, action: &str, step: &Value) -> Result<Performed, StepError> {
        match action {
            "session" => self.open_session(step).await,
            "sql" => self.sql(step).await,
            "wait_until" => self.wait_until(step).await,
            "child_start" => self.child_start(step).await,
            "child_lock" => {
                let key = self.key_arg(step, "key")?;
                let ttl = step.get("ttl_ms").and_then(Value::as_u64).ok_or("child_lock needs ttl_ms")?;
                let fence: i64 = self
                    .child(step)?
                    .ask(&format!("lock {key} {ttl}"))
                    .await?
                    .parse()
                    .map_err(|_| StepError::Runner("the child's fence is not a number".into()))?;
                Ok(Performed::fields(json!({"fence": fence, "fences": [fence], "term": fence})))
            }
            "child_signal" => {
                let signal = step.get("signal").and_then(Value::as_str).unwrap_or_default();
                self.child(step)?.signal(signal)?;
                Ok(Performed::default())
            }
            "child_wait_lost" => {
                let timeout = step
                    .get("timeout_ms")
                    .and_then(Value::as_u64)
                    .ok_or("child_wait_lost needs timeout_ms")?;
                Ok(Performed::value(self.child(step)?.ask(&format!("wait_lost {timeout}")).await? == "true"))
            }
            "child_release" => Ok(Performed::value(self.child(step)?.ask("release").await? == "true")),
            "child_quit" => {
                let name = step.get("child").and_then(Value::as_str).unwrap_or_default();
                let child = lock(&self.children).remove(name).ok_or_else(|| format!("no child {name:?}"))?;
                child.quit().await?;
                Ok(Performed::default())
            }
            other => Err(StepError::Runner(format!("unknown action {other:?}"))),
        }
    }

    /// The session named `name` (`None`: the admin session, opened on first use).
    async fn session(&self, name: Option<&str>) -> Result<Arc<tokio_postgres::Client>, StepError> {
        let name = name.unwrap_or("admin");
        let mut sessions = self.sessions.lock().await;
        if let Some(session) = sessions.get(name) {
            return Ok(session.clone());
        }
        if name != "admin" {
            return Err(StepError::Runner(format!("no session {name:?}")));
        }
        let url = self.env.dsn.clone().with_param("application_name", &self.app_name("admin"));
        let session = Arc::new(sql::connect(&url.to_string()).await.map_err(QueryError::Server)?);
        sessions.insert(name.to_owned(), session.clone());
        Ok(session)
    }

    async fn open_session(&self, step: &Value) -> Result<Performed, StepError> {
        let name = step.get("as").and_then(Value::as_str).ok_or("a session needs as")?;
        let role = step.get("role").and_then(Value::as_str).ok_or("a session needs role")?;
        let url = self.env.dsn.clone().with_user(role).with_param("application_name", &self.app_name(name));
        let session = sql::connect(&url.to_string()).await.map_err(QueryError::Server)?;
        self.sessions.lock().await.insert(name.to_owned(), Arc::new(session));
        Ok(Performed::default())
    }

    /// The rows of a `sql` or `wait_until` step's query.
    async fn query(&self, step: &Value) -> Result<Vec<Vec<Value>>, StepError> {
        let session = self.session(step.get("session").and_then(Value::as_str)).await?;
        let query = step.get("query").and_then(Value::as_str).ok_or("the step has no query")?;
        let params = match step.get("params") {
            Some(params) => self.resolve(params)?,
            None => json!([]),
        };
        let params = params.as_array().ok_or("params is not a list")?;
        Ok(sql::query(&session, query, params).await?)
    }

    async fn sql(&self, step: &Value) -> Result<Performed, StepError> {
        let rows = self.query(step).await?;
        let value = rows.first().and_then(|row| row.first()).cloned().unwrap_or(Value::Null);
        Ok(Performed::fields(json!({"value": value, "rows": rows})))
    }

    async fn wait_until(&self, step: &Value) -> Result<Performed, StepError> {
        let timeout_ms = step.get("timeout_ms").and_then(Value::as_u64).unwrap_or(10_000);
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let want = step.get("value").unwrap_or(&Value::Null);
        loop {
            let rows = self.query(step).await?;
            let value = rows.first().and_then(|row| row.first()).cloned().unwrap_or(Value::Null);
            if lock(&self.values).mismatch(want, &value, "value")?.is_none() {
                return Ok(Performed::value(value));
            }
            if Instant::now() >= deadline {
                let message =
                    format!("the query never answered {want} within {timeout_ms} ms (last {value})");
                return Err(StepError::Kind(Kind::new("Timeout", None, message)));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn child(&self, step: &Value) -> Result<Arc<Child>, StepError> {
        let name = step.get("child").and_then(Value::as_str).unwrap_or_default();
        lock(&self.children).get(name).cloned().ok_or_else(|| StepError::Runner(format!("no child {name:?}")))
    }

    async fn child_start(&self, step: &Value) -> Result<Performed, StepError> {
        let name = step.get("as").and_then(Value::as_str).ok_or("a child needs as")?;
        let (url, _) = self.url_for(step, name)?;
        let pooler = step.get("via").and_then(Value::as_str) == Some("pgbouncer");
        let child = Arc::new(Child::start(&url, pooler).await?);
        let pid = child.pid();
        lock(&self.children).insert(name.to_owned(), child);
        Ok(Performed::fields(json!({"pid": pid})))
    }
}
