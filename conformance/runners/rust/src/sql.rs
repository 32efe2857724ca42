//! The runner's own driver sessions (the admin session, and those of `session` steps), and the
//! queries of `sql` and `wait_until` steps: JSON parameters in, as the types the server infers
//! for them; rows out, as JSON.

use std::str::FromStr;

use serde_json::Value;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::{Client, NoTls, Row};

/// Why a query could not run: the server's error, or a value the runner cannot convert.
#[derive(Debug)]
pub enum QueryError {
    Server(tokio_postgres::Error),
    Runner(String),
}

impl From<tokio_postgres::Error> for QueryError {
    fn from(e: tokio_postgres::Error) -> Self {
        QueryError::Server(e)
    }
}

/// A plain autocommit session of `url` (test clusters: no TLS), its connection driven in the
/// background until the client is dropped.
pub async fn connect(url: &str) -> Result<Client, tokio_postgres::Error> {
    let config = tokio_postgres::Config::from_str(url)?;
    let (client, connection) = config.connect(NoTls).await?;
    tokio::spawn(async move {
        // Its end (an error included) is the session's end, which the steps will see.
        drop(connection.await);
    });
    Ok(client)
}

/// Runs `sql` with `params` (`$1`-style): every row, each as a list of JSON values.
pub async fn query(client: &Client, sql: &str, params: &[Value]) -> Result<Vec<Vec<Value>>, QueryError> {
    let statement = client.prepare(sql).await?;
    if statement.params().len() != params.len() {
        return Err(QueryError::Runner(format!(
            "the query takes {} parameters, the step gives {}",
            statement.params().len(),
            params.len()
        )));
    }
    let values: Vec<Box<dyn ToSql + Sync + Send>> = statement
        .params()
        .iter()
        .zip(params)
        .map(|(ty, value)| parameter(ty, value))
        .collect::<Result<_, _>>()?;
    let refs: Vec<&(dyn ToSql + Sync)> = values.iter().map(|v| &**v as &(dyn ToSql + Sync)).collect();
    let rows = client.query(&statement, &refs).await?;
    rows.iter().map(row).collect()
}

/// A JSON value as a parameter of type `ty`.
fn parameter(ty: &Type, value: &Value) -> Result<Box<dyn ToSql + Sync + Send>, QueryError> {
    let wrong = || QueryError::Runner(format!("{value} cannot be a parameter of type {ty}"));
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    Ok(match *ty {
        Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::UNKNOWN => match value {
            Value::Null => Box::new(None::<String>),
            v => Box::new(text(v).ok_or_else(wrong)?),
        },
        Type::INT8 => Box::new(value.as_i64().ok_or_else(wrong)?),
        Type::INT4 => Box::new(value.as_i64().and_then(|n| i32::try_from(n).ok()).ok_or_else(wrong)?),
        Type::INT2 => Box::new(value.as_i64().and_then(|n| i16::try_from(n).ok()).ok_or_else(wrong)?),
        Type::FLOAT8 => Box::new(value.as_f64().ok_or_else(wrong)?),
        Type::BOOL => Box::new(value.as_bool().ok_or_else(wrong)?),
        Type::TEXT_ARRAY | Type::VARCHAR_ARRAY => {
            let items = value.as_array().ok_or_else(wrong)?;
            Box::new(items.iter().map(|v| text(v).ok_or_else(wrong)).collect::<Result<Vec<_>, _>>()?)
        }
        Type::INT8_ARRAY => {
            let items = value.as_array().ok_or_else(wrong)?;
            Box::new(items.iter().map(|v| v.as_i64().ok_or_else(wrong)).collect::<Result<Vec<_>, _>>()?)
        }
        _ => return Err(wrong()),
    })
}

/// A row as JSON values.
fn row(row: &Row) -> Result<Vec<Value>, QueryError> {
    (0..row.len()).map(|i| column(row, i)).collect()
}

fn column(row: &Row, i: usize) -> Result<Value, QueryError> {
    let ty = row.columns()[i].type_().clone();
    let json = |v: Option<Value>| v.unwrap_or(Value::Null);
    Ok(match ty {
        Type::BOOL => json(row.try_get::<_, Option<bool>>(i)?.map(Value::from)),
        Type::INT2 => json(row.try_get::<_, Option<i16>>(i)?.map(Value::from)),
        Type::INT4 => json(row.try_get::<_, Option<i32>>(i)?.map(Value::from)),
        Type::INT8 => json(row.try_get::<_, Option<i64>>(i)?.map(Value::from)),
        Type::FLOAT4 => json(row.try_get::<_, Option<f32>>(i)?.map(Value::from)),
        Type::FLOAT8 => json(row.try_get::<_, Option<f64>>(i)?.map(Value::from)),
        Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => {
            json(row.try_get::<_, Option<String>>(i)?.map(Value::from))
        }
        Type::TEXT_ARRAY => json(row.try_get::<_, Option<Vec<String>>>(i)?.map(Value::from)),
        Type::INT8_ARRAY => json(row.try_get::<_, Option<Vec<i64>>>(i)?.map(Value::from)),
        other => return Err(QueryError::Runner(format!("the runner reads no column of type {other}"))),
    })
}
