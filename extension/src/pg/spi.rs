//! A small SPI layer: parameterised statements, planned once per backend, run against the
//! *latest* committed state. The latest snapshot matters: a caller inside a REPEATABLE READ
//! transaction must still see the lease a concurrent session committed a moment ago, exactly
//! as PostgreSQL's own foreign-key checks do (`SPI_execute_snapshot`). Statements only ever
//! receive values as parameters (`$1`), never by string formatting.

use pgrx::pg_sys::{self, Datum, Oid};
use pgrx::{FromDatum, IntoDatum};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::CString;

/// One SQL statement and the types of its parameters.
pub struct Statement {
    pub sql: &'static str,
    pub args: &'static [Oid],
}

thread_local! {
    /// Plans kept for the backend's life, keyed by the statement's address.
    static PLANS: RefCell<HashMap<usize, pg_sys::SPIPlanPtr>> = RefCell::new(HashMap::new());
}

fn plan(stmt: &'static Statement) -> pg_sys::SPIPlanPtr {
    let id = stmt as *const Statement as usize;
    if let Some(plan) = PLANS.with(|p| p.borrow().get(&id).copied()) {
        return plan;
    }
    let sql = CString::new(stmt.sql).expect("statement text has no NUL");
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
            pgrx::error!("dlock: could not prepare internal statement: {}", stmt.sql);
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
        if !self.connected.replace(true) {
            // SAFETY: plain SPI protocol, closed by `connect`.
            unsafe {
                if pg_sys::SPI_connect() != pg_sys::SPI_OK_CONNECT as i32 {
                    pgrx::error!("dlock: SPI_connect failed");
                }
            }
        }
    }

    fn run(&self, stmt: &'static Statement, args: &[Option<Datum>]) -> u64 {
        assert_eq!(args.len(), stmt.args.len(), "argument count of {}", stmt.sql);
        self.ensure_connected();
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
                pgrx::error!("dlock: internal statement failed ({rc}): {}", stmt.sql);
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
