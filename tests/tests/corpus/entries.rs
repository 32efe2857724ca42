//! Entries of the corpus: one SQL statement, who runs it, and the answer it must get.

use std::fmt;

use tokio_postgres::SimpleQueryMessage;
use tokio_postgres::error::SqlState;

use crate::callers::Caller;

/// An SQL string literal (standard_conforming_strings is on: only quotes need doubling).
pub fn lit(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// What an entry must answer.
#[derive(Clone, Debug)]
pub enum Expect {
    /// ERROR with this SQLSTATE.
    Error(SqlState),
    /// ERROR with any of these (several arguments are bad at once; the contract orders none).
    AnyError(Vec<SqlState>),
    /// The first column of the first row, as text (`None`: SQL NULL).
    Answer(Option<String>),
}

/// ERROR with SQLSTATE `code`.
pub fn err(code: SqlState) -> Expect {
    Expect::Error(code)
}

/// The answer `text` (`None`: SQL NULL).
pub fn answer(text: Option<&str>) -> Expect {
    Expect::Answer(text.map(str::to_string))
}

/// One bad input: SQL run through the simple query protocol by `caller`.
#[derive(Clone)]
pub struct Entry {
    pub what: String,
    pub caller: Caller,
    pub sql: String,
    /// Run inside `BEGIN READ ONLY` (rolled back after).
    pub read_only: bool,
    pub expect: Expect,
}

impl fmt::Debug for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // 1 MB literals make unreadable failure messages.
        let sql: String = self.sql.chars().take(160).collect();
        write!(
            f,
            "{} [{:?}: {sql}{}]",
            self.what,
            self.caller,
            if sql.len() < self.sql.len() { "…" } else { "" }
        )
    }
}

/// An entry run outside any explicit transaction.
pub fn entry(what: impl Into<String>, caller: Caller, sql: impl Into<String>, expect: Expect) -> Entry {
    Entry { what: what.into(), caller, sql: sql.into(), read_only: false, expect }
}

/// What is wrong with `result`, if anything.
pub fn judge(
    expect: &Expect,
    result: Result<Vec<SimpleQueryMessage>, tokio_postgres::Error>,
) -> Option<String> {
    let state = |e: &tokio_postgres::Error| e.code().map_or("none".to_string(), |c| c.code().to_string());
    match (expect, result) {
        (Expect::Error(code), Err(e)) if e.code() == Some(code) => None,
        (Expect::AnyError(codes), Err(e)) if e.code().is_some_and(|c| codes.contains(c)) => None,
        (Expect::Answer(_), Err(e)) => Some(format!("expected an answer, got ERROR {} ({e})", state(&e))),
        (Expect::Answer(expected), Ok(messages)) => {
            let got = messages.iter().find_map(|m| match m {
                SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_string)),
                _ => None,
            });
            match got {
                Some(got) if got == *expected => None,
                got => Some(format!("expected {expected:?}, got {got:?}")),
            }
        }
        (expected, Err(e)) => Some(format!("expected {expected:?}, got ERROR {} ({e})", state(&e))),
        (expected, Ok(messages)) => {
            let rows: Vec<_> = messages
                .iter()
                .filter_map(|m| match m {
                    SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_string)),
                    _ => None,
                })
                .collect();
            Some(format!("expected {expected:?}, got rows {rows:?}"))
        }
    }
}
