//! What a step does: its result ([`Performed`]), how it fails ([`StepError`]), and a scenario
//! that fails ([`Failure`]).

use serde_json::{Map, Value, json};

use crate::child::Asked;
use crate::handles::Handle;
use crate::kinds::{self, Kind};
use crate::sql::QueryError;

/// A step did not do what the scenario says, or the runner could not run it.
#[derive(Debug)]
pub struct Failure(pub String);

/// How a step failed.
pub enum StepError {
    /// With an error of the scenarios' kinds, to check against its `expect`.
    Kind(Kind),
    /// With an argument the Rust client's types rule out (a negative duration, a null key),
    /// which no call can be written with: a step that expects it refused counts as passed.
    Unexpressible(String),
    /// The runner could not run it: the scenario fails.
    Runner(String),
}

impl From<dlock_client::Error> for StepError {
    fn from(e: dlock_client::Error) -> Self {
        StepError::Kind(kinds::of_client(&e))
    }
}

impl From<QueryError> for StepError {
    fn from(e: QueryError) -> Self {
        match e {
            QueryError::Server(e) => StepError::Kind(kinds::of_sql(&e)),
            QueryError::Runner(why) => StepError::Runner(why),
        }
    }
}

impl From<Asked> for StepError {
    fn from(asked: Asked) -> Self {
        match asked {
            Asked::Error(kind) => StepError::Kind(kind),
            Asked::Broken(why) => StepError::Runner(why),
        }
    }
}

impl From<String> for StepError {
    fn from(why: String) -> Self {
        StepError::Runner(why)
    }
}

impl From<&str> for StepError {
    fn from(why: &str) -> Self {
        StepError::Runner(why.to_owned())
    }
}

/// What a step did: its result's fields, and what it holds besides.
#[derive(Default)]
pub struct Performed {
    pub result: Map<String, Value>,
    pub handle: Option<Handle>,
    /// Something a reader of the run should know about how the step was run.
    pub note: Option<String>,
}

impl Performed {
    /// A result `{"value": value}`.
    pub fn value(value: impl Into<Value>) -> Performed {
        Performed::fields(json!({"value": value.into()}))
    }

    /// A result with the fields of `object`.
    pub fn fields(object: Value) -> Performed {
        match object {
            Value::Object(result) => Performed { result, ..Performed::default() },
            other => Performed::value(other),
        }
    }

    pub fn with_handle(mut self, handle: Handle) -> Performed {
        self.handle = Some(handle);
        self
    }
}
