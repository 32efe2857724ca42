//! The conformance runner of the Rust client (conformance/README.md): every scenario of
//! `conformance/scenarios/*.json` against dlock-client.
//!
//! ```text
//! DLOCK_CONFORMANCE_DSN=postgresql://postgres@127.0.0.1:5432/postgres \
//!     dlock-conformance [--strict] [--only a,b] [scenarios dir]
//! ```
//!
//! `DLOCK_CONFORMANCE_SUITE` names the suite's folder (default: this repository's
//! `conformance/`); `dlock-conformance child` is the child process of the SIGSTOP scenarios.

mod actions;
mod child;
mod child_main;
mod handles;
mod kinds;
mod scenario;
mod sql;
mod url;
mod values;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use crate::scenario::{ActionFuture, Environment, Failure, Scenario};
use crate::url::Url;

/// Which edition the server runs: `native` when `dlock_acquire` is a C function.
const EDITION: &str = "SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_proc p \
     JOIN pg_catalog.pg_language l ON l.oid = p.prolang \
     WHERE p.proname = 'dlock_acquire' AND l.lanname = 'c') THEN 'native' ELSE 'sql' END";

/// What the command line asks for.
struct Args {
    strict: bool,
    only: BTreeSet<String>,
    scenarios: PathBuf,
    suite: PathBuf,
}

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(4).enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("dlock-conformance: cannot start the runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let mut argv = std::env::args().skip(1).peekable();
    if argv.peek().map(String::as_str) == Some("child") {
        return match runtime.block_on(child_main::run()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("dlock-conformance child: {e}");
                ExitCode::from(2)
            }
        };
    }
    let outcome = parse_args(argv).and_then(|args| runtime.block_on(run(args)));
    // Background releases of the last scenario need not finish: its keys are its own.
    runtime.shutdown_background();
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("dlock-conformance: {e}");
            ExitCode::from(2)
        }
    }
}

fn parse_args(mut argv: impl Iterator<Item = String>) -> Result<Args, String> {
    let suite = std::env::var_os("DLOCK_CONFORMANCE_SUITE")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."), PathBuf::from);
    let mut args = Args { strict: false, only: BTreeSet::new(), scenarios: suite.join("scenarios"), suite };
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "--strict" => args.strict = true,
            "--only" => {
                let names = argv.next().ok_or("--only needs a list of scenarios")?;
                args.only.extend(names.split(',').filter(|n| !n.is_empty()).map(str::to_owned));
            }
            flag if flag.starts_with("--") => return Err(format!("unknown option {flag}")),
            folder => args.scenarios = PathBuf::from(folder),
        }
    }
    Ok(args)
}

/// Runs the scenarios; whether none failed.
async fn run(args: Args) -> Result<bool, String> {
    let dsn = std::env::var("DLOCK_CONFORMANCE_DSN").map_err(|_| "DLOCK_CONFORMANCE_DSN is not set")?;
    let pgbouncer = std::env::var("DLOCK_CONFORMANCE_PGBOUNCER_DSN").ok().filter(|d| !d.is_empty());
    let (have, edition) = capabilities(&dsn, pgbouncer.is_some()).await?;
    let skipped_by_edition = differences(&args.suite, &edition)?;
    let env = Arc::new(Environment {
        dsn: Url::parse(&dsn)?,
        pgbouncer: pgbouncer.as_deref().map(Url::parse).transpose()?,
        run_id: format!("{:08x}", fastrand::u32(..)),
        client_actions,
    });
    println!("conformance: rust, edition {edition}, run {}, has {have:?}", env.run_id);

    let mut files: Vec<PathBuf> = std::fs::read_dir(&args.scenarios)
        .map_err(|e| format!("cannot read {}: {e}", args.scenarios.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for path in files {
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        if !args.only.is_empty() && !args.only.contains(&name) {
            continue;
        }
        let text =
            std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let spec: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if let Some(why) = skipped_by_edition.get(&name) {
            println!("skip {name}: a declared difference of the {edition} edition: {why}");
            skipped += 1;
            continue;
        }
        let needs = spec.get("needs").and_then(Value::as_array).cloned().unwrap_or_default();
        let missing: Vec<&str> =
            needs.iter().filter_map(Value::as_str).filter(|n| !have.contains(*n)).collect();
        if !missing.is_empty() {
            if args.strict {
                println!("FAIL {name}: needs {missing:?}, which this run has not (--strict)");
                failed += 1;
            } else {
                println!("skip {name}: needs {missing:?}");
                skipped += 1;
            }
            continue;
        }
        let started = Instant::now();
        match Scenario::new(&name, env.clone()).run(&spec).await {
            Ok(notes) => {
                println!("ok   {name} ({:.1} s)", started.elapsed().as_secs_f64());
                for note in notes {
                    println!("     note: {note}");
                }
                passed += 1;
            }
            Err(Failure(why)) => {
                println!("FAIL {name}: {why}");
                failed += 1;
            }
        }
    }
    println!("conformance: {passed} passed, {failed} failed, {skipped} skipped");
    Ok(failed == 0)
}

/// What this run can do, and the server's edition (`DLOCK_EDITION` if set).
async fn capabilities(dsn: &str, pgbouncer: bool) -> Result<(BTreeSet<String>, String), String> {
    let admin =
        sql::connect(dsn).await.map_err(|e| format!("cannot connect to DLOCK_CONFORMANCE_DSN: {e}"))?;
    let first = async |query: &str| -> Result<Value, String> {
        let rows = sql::query(&admin, query, &[]).await.map_err(|e| format!("{query}: {e:?}"))?;
        Ok(rows.into_iter().next().and_then(|row| row.into_iter().next()).unwrap_or(Value::Null))
    };
    let mut have = BTreeSet::new();
    if first("SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user").await?
        == Value::Bool(true)
    {
        have.insert("admin".to_owned());
    }
    let preload = first("SELECT current_setting('shared_preload_libraries')::text").await?;
    if preload.as_str().unwrap_or_default().split(',').any(|library| library.trim() == "dlock") {
        have.insert("preload".to_owned());
    }
    if pgbouncer {
        have.insert("pgbouncer".to_owned());
    }
    if cfg!(unix) {
        have.insert("sigstop".to_owned());
    }
    let edition = match std::env::var("DLOCK_EDITION").ok().filter(|e| !e.is_empty()) {
        Some(edition) => edition,
        None => first(EDITION).await?.as_str().unwrap_or("sql").to_owned(),
    };
    Ok((have, edition))
}

/// The scenarios the edition's declared differences skip, with why.
fn differences(suite: &Path, edition: &str) -> Result<BTreeMap<String, String>, String> {
    let path = suite.join("editions").join(format!("{edition}.json"));
    let Ok(text) = std::fs::read_to_string(&path) else { return Ok(BTreeMap::new()) };
    let declared: Value = serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    let differences = declared.get("differences").and_then(Value::as_array).cloned().unwrap_or_default();
    Ok(differences
        .iter()
        .filter_map(|d| {
            let scenario = d.get("scenario")?.as_str()?.to_owned();
            let why = d.get("why").and_then(Value::as_str).unwrap_or("declared").to_owned();
            Some((scenario, why))
        })
        .collect())
}

/// The client's actions, as the scenario engine calls them.
fn client_actions<'a>(
    scenario: &'a Arc<Scenario>,
    action: &'a str,
    step: &'a serde_json::Value,
) -> ActionFuture<'a> {
    Box::pin(actions::perform(scenario, action, step))
}
