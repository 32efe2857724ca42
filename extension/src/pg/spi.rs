//! A small SPI layer: parameterised statements, planned once per backend, run against the
//! *latest* committed state. The latest snapshot matters: a caller inside a REPEATABLE READ
//! transaction must still see the lease a concurrent session committed a moment ago, exactly
//! as PostgreSQL's own foreign-key checks do (`SPI_execute_snapshot`). Statements only ever
//! receive values as parameters (`$1`), never by string formatting.
//!
//! Every statement is planned and run under dlock's own `search_path` ([`PINNED_SEARCH_PATH`]),
//! whatever the session's, the role's or the database's is, and wherever it runs: in a SQL
//! function, at commit, in a background worker. A kept plan is analysed again whenever the
//! `search_path` differs from the one it was made under, so without the pin a statement run at
//! commit, after the caller's `SET LOCAL search_path`, would resolve its operators and
//! functions through schemas the caller controls while running as the lease table's owner.
//! The statements also name every operator `OPERATOR(pg_catalog.…)` and every type and
//! function by its schema (`store/statements.rs`, checked by a test there), so neither defence
//! depends on the other. Fast mode's functions run no SQL at all: [`forbid_sql`].

use pgrx::pg_sys::{self, Datum, Oid};
use pgrx::{FromDatum, IntoDatum};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::{CStr, CString};

/// The `search_path` dlock's statements are planned and run under. `pg_temp` explicitly last, so
/// that no temporary object is ever found before `pg_catalog`'s (PostgreSQL never looks up
/// functions or operators in `pg_temp` at all).
pub const PINNED_SEARCH_PATH: &CStr = c"pg_catalog, dlock_internal, pg_temp";

/// Marks every statement dlock runs, so that its text says whose it is in `pg_stat_activity`,
/// in error contexts and in the hostile-schema test net (which tells dlock's statements from
/// a test's own by it).
pub const MARK: &str = "/* dlock */ ";

/// One SQL statement and the types of its parameters.
pub struct Statement {
    pub sql: &'static str,
    pub args: &'static [Oid],
}

thread_local! {
    /// Plans kept for the backend's life, keyed by the statement's address.
    static PLANS: RefCell<HashMap<usize, pg_sys::SPIPlanPtr>> = RefCell::new(HashMap::new());
}

/// Raises a broken invariant of dlock's own statements (XX000, "please report it"): none of
/// these depends on the caller or on the table's contents.
fn internal(what: String) -> ! {
    crate::pg::report::raise(dlock_core::DlockError::Internal { what }, "dlock")
}

fn plan(stmt: &'static Statement) -> pg_sys::SPIPlanPtr {
    let id = stmt as *const Statement as usize;
    if let Some(plan) = PLANS.with(|p| p.borrow().get(&id).copied()) {
        return plan;
    }
    // A statement that could resolve anything through a search_path never runs (checked once
    // per backend, when it is first planned).
    let unpinned = dlock_core::pinned_sql::unpinned(stmt.sql);
    if !unpinned.is_empty() {
        internal(format!("statement not pinned to pg_catalog ({}): {}", unpinned.join("; "), stmt.sql));
    }
    let sql = CString::new(format!("{MARK}{}", stmt.sql)).expect("statement text has no NUL");
    // A generic plan, made once: every statement here is a lookup whose best plan does not
    // depend on its parameters, and a custom plan would be planned again on every call.
    // SAFETY: called inside an SPI connection; argtypes outlives the call.
    let plan = unsafe {
        let plan = pg_sys::SPI_prepare_cursor(
            sql.as_ptr(),
            stmt.args.len() as i32,
            stmt.args.as_ptr() as *mut Oid,
            pg_sys::CURSOR_OPT_GENERIC_PLAN as i32,
        );
        if plan.is_null() {
            internal(format!("could not prepare internal statement: {}", stmt.sql));
        }
        pg_sys::SPI_keepplan(plan);
        plan
    };
    PLANS.with(|p| p.borrow_mut().insert(id, plan));
    plan
}

/// An SPI connection, opened on the first statement; see [`connect`].
pub struct Spi {
    connected: std::cell::Cell<bool>,
}

/// One result row, valid inside the `query` callback.
pub struct Row {
    tuple: pg_sys::HeapTuple,
    desc: pg_sys::TupleDesc,
}

impl Row {
    /// Column `n` (1-based) as `T`; `None` for SQL NULL.
    pub fn get<T: FromDatum>(&self, n: i32) -> Option<T> {
        // SAFETY: tuple and desc come from SPI_tuptable of the statement just run.
        unsafe {
            let mut is_null = false;
            let datum = pg_sys::SPI_getbinval(self.tuple, self.desc, n, &mut is_null);
            T::from_datum(datum, is_null)
        }
    }
}

/// A statement parameter.
pub fn arg<T: IntoDatum>(value: T) -> Option<Datum> {
    value.into_datum()
}

/// Runs `f` with an SPI connection that is opened only if `f` runs a statement: the lock
/// cycle's hot path goes straight to the table (`store/direct.rs`) and needs none.
pub fn connect<R>(f: impl FnOnce(&Spi) -> R) -> R {
    let spi = Spi { connected: std::cell::Cell::new(false) };
    let result = f(&spi);
    if spi.connected.get() {
        // SAFETY: closes the connection `ensure_connected` opened; an ERROR before this point
        // unwinds and the transaction abort cleans up.
        unsafe {
            pg_sys::SPI_finish();
        }
    }
    result
}

impl Spi {
    fn ensure_connected(&self) {
        if SQL_FORBIDDEN.with(Cell::get) {
            internal("SQL inside a function that must run none".into());
        }
        if !self.connected.replace(true) {
            // SAFETY: plain SPI protocol, closed by `connect`.
            unsafe {
                if pg_sys::SPI_connect() != pg_sys::SPI_OK_CONNECT as i32 {
                    internal("SPI_connect failed".into());
                }
            }
        }
    }

    fn run(&self, stmt: &'static Statement, args: &[Option<Datum>]) -> u64 {
        assert_eq!(args.len(), stmt.args.len(), "argument count of {}", stmt.sql);
        self.ensure_connected();
        with_pinned_search_path(|| self.run_pinned(stmt, args))
    }

    fn run_pinned(&self, stmt: &'static Statement, args: &[Option<Datum>]) -> u64 {
        let plan = plan(stmt);
        let mut values: Vec<Datum> = args.iter().map(|a| a.unwrap_or(Datum::from(0))).collect();
        let nulls: Vec<std::ffi::c_char> =
            args.iter().map(|a| if a.is_some() { b' ' } else { b'n' } as std::ffi::c_char).collect();
        // SAFETY: plan is kept; values/nulls match its parameter count.
        unsafe {
            let rc = pg_sys::SPI_execute_snapshot(
                plan,
                values.as_mut_ptr(),
                nulls.as_ptr(),
                pg_sys::GetLatestSnapshot(),
                std::ptr::null_mut(),
                false,
                false,
                0,
            );
            if rc < 0 {
                internal(format!("internal statement failed ({rc}): {}", stmt.sql));
            }
            pg_sys::SPI_processed
        }
    }

    /// Runs a statement and maps each returned row.
    pub fn query<T>(
        &self,
        stmt: &'static Statement,
        args: &[Option<Datum>],
        mut f: impl FnMut(&Row) -> T,
    ) -> Vec<T> {
        let n = self.run(stmt, args);
        // SAFETY: SPI_tuptable holds the `n` rows of the statement just run.
        unsafe {
            let table = pg_sys::SPI_tuptable;
            if table.is_null() {
                return Vec::new();
            }
            (0..n as usize)
                .map(|i| f(&Row { tuple: *(*table).vals.add(i), desc: (*table).tupdesc }))
                .collect()
        }
    }

    /// Runs a statement; returns how many rows it processed.
    pub fn execute(&self, stmt: &'static Statement, args: &[Option<Datum>]) -> u64 {
        self.run(stmt, args)
    }
}

/// Runs `f` with `search_path` set to [`PINNED_SEARCH_PATH`] (in a GUC nest level of its own,
/// as a function's SET clause does), unless it is that already. dlock's functions pin nothing
/// themselves: their hot paths run no statement, and would pay for a SET clause on every call.
fn with_pinned_search_path<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: the GUC's current value, a NUL-terminated string owned by guc.c (or NULL before
    // the GUCs are set up, which never happens in a backend running SQL).
    let current = unsafe {
        let path = pg_sys::namespace_search_path;
        (!path.is_null()).then(|| CStr::from_ptr(path))
    };
    if current == Some(PINNED_SEARCH_PATH) {
        return f();
    }
    crate::pg::guc::nested(|| {
        // SAFETY: `nested` opened the nest level this setting is saved in.
        unsafe { crate::pg::guc::set_saved(c"search_path", PINNED_SEARCH_PATH.to_str().expect("ASCII")) };
        f()
    })
}

thread_local! {
    /// Set while a function that must run no SQL runs (`forbid_sql`).
    static SQL_FORBIDDEN: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` (fast mode's functions) with every SQL statement refused: they touch only shared
/// memory, which is why they pin no `search_path` (a SET clause would cost about 15 % of their
/// throughput), and this keeps it so. An error unwinding out of `f` clears the mark too.
pub fn forbid_sql<R>(f: impl FnOnce() -> R) -> R {
    struct Allow(bool);
    impl Drop for Allow {
        fn drop(&mut self) {
            SQL_FORBIDDEN.with(|s| s.set(self.0));
        }
    }
    let _allow = Allow(SQL_FORBIDDEN.with(|s| s.replace(true)));
    f()
}
