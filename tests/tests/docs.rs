//! The documentation cannot rot: every ```` ```sql ```` example of `README.md` and of the book
//! (`docs/src/**/*.md`) runs against a fresh database, no relative link of `README.md` or
//! `docs/**/*.md` points at a file or heading that is not there, and the settings page lists
//! every setting `extension/src/settings.rs` defines, with its default and context, and no other.
//!
//! # Running the examples
//! Each page gets a database of its own on one cluster that preloads dlock (so fast mode's
//! examples run, with the default ttls of the docs), with `CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock;` done first
//! unless the page creates the extension itself. Its ```` ```sql ```` blocks run in order on
//! one session as the superuser `postgres`, one statement at a time through the simple query
//! protocol (text results). The roles the docs name (`DOC_ROLES`) exist, without privileges.
//!
//! # What an example shows
//! A statement may end with a comment on its last line, right after its `;`:
//! - `--> 1`: the first column of the first row is `1` (`--> NULL` for a null, `--> true` and
//!   `--> false` for booleans, which PostgreSQL sends as `t`/`f`); `--> a | b | c` checks the
//!   first three columns;
//! - `--> 3 rows`: the statement returned or changed 3 rows (`--> 0 rows`, `--> 1 row`);
//! - `--> ERROR 42501`: the statement fails with that SQLSTATE.
//!
//! A statement without one must succeed. Other comments are free. Shown values are real: in a
//! fresh database the first durable grant gets fence 1. Values that vary (fast-mode fences,
//! timestamps) are shown through expressions: `... > now(); --> true`. No psql meta-commands,
//! no `$1` placeholders (use a ```` ```text ```` block for pseudo-SQL).
//!
//! `DOCS_PAGE=guide/waiting.md cargo test -p dlock-tests --test docs` runs only the pages whose
//! path contains that text.
//!
//! # Against the SQL-only edition
//! With `DLOCK_SQL_EDITION` naming its one-file install (`make sql-edition`), the examples run
//! against that edition on a cluster with no dlock library: `CREATE EXTENSION dlock [SCHEMA s]`
//! runs the file into `s` (default `dlock`), and `DROP EXTENSION dlock` runs
//! `sql-edition/uninstall.sql`. A page or statement that shows what only the native edition
//! does is declared in `sql-edition/differences/docs.txt`, with its reason (a statement by a text
//! it contains, and if need be ` --> ` what it is shown to return): a declared page is
//! skipped, a declared statement must fail (and the page goes on). A declaration that no longer
//! differs fails the run, as does any undeclared difference.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use dlock_tests::{Cluster, workspace_root};
use tokio_postgres::SimpleQueryMessage;

/// Roles that the examples grant to or act as (cluster-wide, created once).
const DOC_ROLES: &[&str] = &["app", "ops", "checker"];
/// Fast mode needs preloading. The docs' fast leases last 10 s, so that is the longest fast ttl,
/// and the lock-delay after the server's start.
const CONF: &[&str] = &["shared_preload_libraries = 'dlock'", "dlock.fast_max_ttl = 10"];
/// The lock-delay of the cluster (`dlock.fast_max_ttl`): pages that use fast mode run last,
/// once it is over.
const LOCK_DELAY: Duration = Duration::from_secs(10);

#[tokio::test]
async fn every_sql_example_runs_and_shows_what_it_returns() {
    let filter = std::env::var("DOCS_PAGE").unwrap_or_default();
    let edition = SqlEdition::from_env();
    let mut pages: Vec<(PathBuf, Vec<Block>)> = doc_pages()
        .into_iter()
        .filter(|p| relative(p).contains(filter.as_str()))
        .map(|p| {
            let blocks = sql_blocks(&p);
            (p, blocks)
        })
        .collect();
    assert!(!pages.is_empty(), "no page matches DOCS_PAGE={filter:?}");
    let uses_fast_mode =
        |blocks: &[Block]| blocks.iter().flat_map(|b| &b.statements).any(|s| s.sql.contains("dlock_fast_"));
    pages.sort_by_key(|(_, blocks)| uses_fast_mode(blocks));
    let cluster = match &edition {
        Some(_) => Cluster::shared_named("docs_sql_edition", &[]),
        None => Cluster::shared_named("docs", CONF),
    };
    let admin = cluster.connect().await;
    for role in DOC_ROLES {
        admin.batch_execute(&format!("CREATE ROLE {role} LOGIN")).await.unwrap();
    }

    let (mut failures, mut blocks, mut statements, mut fast_ready) = (Vec::new(), 0, 0, false);
    for (n, (page, examples)) in pages.iter().enumerate() {
        if examples.is_empty() {
            continue;
        }
        if let Some(edition) = &edition
            && let Some(reason) = edition.skipped_page(page)
        {
            eprintln!("docs: {} skipped in the SQL edition: {reason}", relative(page));
            continue;
        }
        if !fast_ready && edition.is_none() && uses_fast_mode(examples) {
            past_lock_delay(&admin).await;
            fast_ready = true;
        }
        let db = format!("docs_{n}");
        admin.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
        let session = cluster.connect_db("postgres", &db).await;
        let creates_extension = examples
            .iter()
            .flat_map(|b| &b.statements)
            .any(|s| s.sql.to_ascii_uppercase().contains("CREATE EXTENSION DLOCK"));
        if !creates_extension {
            let install = "CREATE SCHEMA dlock; CREATE EXTENSION dlock SCHEMA dlock;";
            match &edition {
                Some(edition) => session.batch_execute(&edition.translate(install)).await.unwrap(),
                None => session.batch_execute(install).await.unwrap(),
            }
        }
        'page: for (b, block) in examples.iter().enumerate() {
            blocks += 1;
            for (s, statement) in block.statements.iter().enumerate() {
                statements += 1;
                let outcome = match &edition {
                    Some(edition) => edition.run(&session, page, statement).await,
                    None => run(&session, statement).await,
                };
                if let Err(problem) = outcome {
                    failures.push(format!(
                        "{}, sql block {} (line {}), statement {} (line {}):\n    {}\n  {problem}",
                        relative(page),
                        b + 1,
                        block.line,
                        s + 1,
                        statement.line,
                        statement.sql.replace('\n', "\n    ")
                    ));
                    break 'page;
                }
            }
        }
    }
    eprintln!("docs: {} pages, {blocks} sql blocks, {statements} statements run", pages.len());
    if let Some(edition) = &edition {
        failures.extend(edition.unused());
    }
    assert!(
        failures.is_empty(),
        "{} page(s) with a failing example:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn every_relative_link_points_at_something_that_exists() {
    let mut broken = Vec::new();
    for page in markdown_files() {
        let text = fs::read_to_string(&page).unwrap();
        for (line, target) in links(&text) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target.as_str(), ""));
            let path = if file.is_empty() { page.clone() } else { page.parent().unwrap().join(file) };
            if !path.exists() {
                broken.push(format!("{}:{line}: {target} (no such file)", relative(&page)));
            } else if !anchor.is_empty()
                && path.extension().is_some_and(|e| e == "md")
                && !heading_ids(&fs::read_to_string(&path).unwrap()).contains(anchor)
            {
                broken.push(format!("{}:{line}: {target} (no such heading)", relative(&page)));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_settings_page_lists_every_setting_with_its_default_and_context() {
    let defined = defined_settings();
    assert!(defined.len() >= 9, "found only {} settings in extension/src/settings.rs", defined.len());
    let page_path = workspace_root().join("docs/src/operating/settings.md");
    let page = fs::read_to_string(&page_path).unwrap();
    let rows = settings_rows(&page);
    let mut problems = Vec::new();
    for setting in &defined {
        match rows.iter().find(|row| row.name == setting.name) {
            None => problems.push(format!("{} is not in the page's table", setting.name)),
            Some(row) => {
                if !setting.default_matches(&row.default) {
                    problems.push(format!(
                        "{}: the page says default {}, settings.rs has {:?}",
                        setting.name, row.default, setting.default
                    ));
                }
                if row.changed_by != setting.changed_by() {
                    problems.push(format!(
                        "{}: the page says \"{}\", settings.rs has context {} (\"{}\")",
                        setting.name,
                        row.changed_by,
                        setting.context,
                        setting.changed_by()
                    ));
                }
            }
        }
    }
    // Every `dlock.x` the page names, in the table or its prose, exists (`dlock.dlock_*` are
    // functions in schema dlock).
    for name in named_settings(&page) {
        if !defined.iter().any(|s| s.name == name) {
            problems.push(format!("the page names {name}, which settings.rs does not define"));
        }
    }
    assert!(
        problems.is_empty(),
        "{} and settings.rs disagree:\n{}",
        relative(&page_path),
        problems.join("\n")
    );
}

/// One statement of an example, with what it is shown to return.
struct Statement {
    sql: String,
    line: usize,
    expect: Expect,
}

impl Statement {
    /// Whether this is the statement `what` names: a text it contains, and optionally
    /// ` --> ` and what it is shown to return (`SET x = 1 --> ERROR 42501`).
    fn is(&self, what: &str) -> bool {
        let (text, shown) = match what.split_once(" --> ") {
            Some((text, shown)) => (text, Some(shown)),
            None => (what, None),
        };
        let shows = match &self.expect {
            Expect::Succeeds => String::new(),
            Expect::Values(values) => values.join(" | "),
            Expect::Rows(n) => format!("{n} rows"),
            Expect::Error(code) => format!("ERROR {code}"),
        };
        self.sql.contains(text) && shown.is_none_or(|shown| shown == shows)
    }
}

/// What a statement's trailing `-->` comment says (see the module documentation).
#[derive(Clone, Debug, PartialEq)]
enum Expect {
    Succeeds,
    Values(Vec<String>),
    Rows(u64),
    Error(String),
}

/// One ```` ```sql ```` block: where it starts and its statements in order.
struct Block {
    line: usize,
    statements: Vec<Statement>,
}

/// Runs one statement and checks it against what the docs show.
async fn run(session: &tokio_postgres::Client, statement: &Statement) -> Result<(), String> {
    let messages = match session.simple_query(&statement.sql).await {
        Ok(messages) => messages,
        Err(e) => {
            let code = e.code().map_or("none", |c| c.code());
            let message = e.as_db_error().map_or(e.to_string(), |d| d.message().to_string());
            return match &statement.expect {
                Expect::Error(expected) if expected == code => Ok(()),
                expected => Err(format!("expected {expected:?}, got ERROR {code}: {message}")),
            };
        }
    };
    let first_row = messages.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(row) => Some(row),
        _ => None,
    });
    let count = messages.iter().find_map(|m| match m {
        SimpleQueryMessage::CommandComplete(n) => Some(*n),
        _ => None,
    });
    match &statement.expect {
        Expect::Succeeds => Ok(()),
        Expect::Error(code) => Err(format!("expected ERROR {code}, but it succeeded")),
        Expect::Rows(n) if count == Some(*n) => Ok(()),
        Expect::Rows(n) => Err(format!("expected {n} rows, got {count:?}")),
        Expect::Values(expected) => {
            let row = first_row.ok_or("expected a row, got none")?;
            let got: Vec<String> = (0..row.len().min(expected.len()))
                .map(|i| match row.get(i) {
                    None => "NULL".to_string(),
                    Some("t") if expected[i] == "true" => "true".to_string(),
                    Some("f") if expected[i] == "false" => "false".to_string(),
                    Some(value) => value.to_string(),
                })
                .collect();
            if &got == expected {
                Ok(())
            } else {
                Err(format!("expected {}, got {}", expected.join(" | "), got.join(" | ")))
            }
        }
    }
}

/// The SQL-only edition in place of the native extension (`DLOCK_SQL_EDITION`), with the
/// differences `sql-edition/differences/docs.txt` declares.
struct SqlEdition {
    install: String,
    uninstall: String,
    /// (page, statement text or `*` for the whole page, reason, whether it was met).
    declared: Vec<(String, String, String, std::cell::Cell<bool>)>,
}

impl SqlEdition {
    fn from_env() -> Option<Self> {
        let path = std::env::var_os("DLOCK_SQL_EDITION").filter(|p| !p.is_empty())?;
        let read = |p: &Path| fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let root = workspace_root();
        let declarations = root.join("sql-edition/differences/docs.txt");
        let declared = read(&declarations)
            .lines()
            .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
            .map(|l| {
                let fields: Vec<&str> = l.splitn(3, " | ").map(str::trim).collect();
                assert!(
                    fields.len() == 3,
                    "{}: want `page | statement or * | reason`: {l}",
                    declarations.display()
                );
                (
                    fields[0].to_string(),
                    fields[1].to_string(),
                    fields[2].to_string(),
                    std::cell::Cell::new(false),
                )
            })
            .collect();
        Some(Self {
            install: read(Path::new(&path)),
            uninstall: read(&root.join("sql-edition/uninstall.sql")),
            declared,
        })
    }

    /// The reason a page is declared native-only, if it is.
    fn skipped_page(&self, page: &Path) -> Option<&str> {
        let page = relative(page);
        self.declared.iter().find(|(p, what, _, _)| *p == page && what == "*").map(|(_, _, reason, met)| {
            met.set(true);
            reason.as_str()
        })
    }

    /// The statement with the native extension's DDL replaced by the edition's install and
    /// uninstall scripts.
    fn translate(&self, sql: &str) -> String {
        let with_search_path = |schema: &str, script: &str| {
            format!("SET search_path = {schema};\n{script}\nRESET search_path;\n")
        };
        sql.split_inclusive(';')
            .map(|part| {
                let bare = strip_leading_comments(part);
                let words: Vec<&str> = bare.trim_end_matches(';').split_whitespace().collect();
                let upper: Vec<String> = words.iter().map(|w| w.to_ascii_uppercase()).collect();
                if upper.starts_with(&["CREATE".into(), "EXTENSION".into()])
                    && upper.iter().any(|w| w == "DLOCK")
                {
                    let schema = upper.iter().position(|w| w == "SCHEMA").and_then(|i| words.get(i + 1));
                    with_search_path(schema.copied().unwrap_or("dlock"), &self.install)
                } else if upper == ["DROP", "EXTENSION", "DLOCK"] {
                    with_search_path("dlock", &self.uninstall)
                } else {
                    part.to_string()
                }
            })
            .collect()
    }

    /// Runs a statement as the edition would: a declared statement must fail.
    async fn run(
        &self,
        session: &tokio_postgres::Client,
        page: &Path,
        statement: &Statement,
    ) -> Result<(), String> {
        let page = relative(page);
        let declared = self.declared.iter().find(|(p, what, _, _)| *p == page && statement.is(what));
        let translated = Statement {
            sql: self.translate(&statement.sql),
            line: statement.line,
            expect: statement.expect.clone(),
        };
        match (run(session, &translated).await, declared) {
            (Ok(()), None) => Ok(()),
            (Err(problem), None) => {
                Err(format!("{problem} (undeclared in sql-edition/differences/docs.txt)"))
            }
            (Err(_), Some((_, _, _, met))) => {
                met.set(true);
                Ok(())
            }
            (Ok(()), Some((_, what, reason, _))) => {
                Err(format!("declared as different ({what}: {reason}), but it runs as the page shows"))
            }
        }
    }

    /// Declarations that no page met: stale.
    fn unused(&self) -> Vec<String> {
        self.declared
            .iter()
            .filter(|(_, _, _, met)| !met.get())
            .map(|(page, what, _, _)| {
                format!("sql-edition/differences/docs.txt: `{page} | {what}` met nothing")
            })
            .collect()
    }
}

/// Waits until fast mode grants again after the cluster's start (its lock-delay).
async fn past_lock_delay(admin: &tokio_postgres::Client) {
    let deadline = Instant::now() + LOCK_DELAY + Duration::from_secs(10);
    let probe = "SELECT dlock_fast_acquire('docs:probe', 'docs', '1 second') IS NOT NULL";
    while !admin.query_one(probe, &[]).await.unwrap().get::<_, bool>(0) {
        assert!(Instant::now() < deadline, "fast mode's lock-delay never ended");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    admin.batch_execute("SELECT dlock_fast_release('docs:probe', 'docs')").await.unwrap();
}

/// A `dlock.*` setting as `extension/src/settings.rs` defines it.
#[derive(Debug)]
struct Setting {
    name: String,
    /// `string`, `int` or `bool` (from the `define_*_guc` called).
    kind: &'static str,
    /// The initial value as written in the source: `1 day`, `-1`, `true`.
    default: String,
    /// `GucFlags::UNIT_S` or `UNIT_MS`: `s`, `ms`; else empty.
    unit: &'static str,
    /// The `GucContext` variant: `Suset`, `Postmaster`, `Sighup`, ...
    context: String,
}

impl Setting {
    /// The page's words for the context.
    fn changed_by(&self) -> &'static str {
        match self.context.as_str() {
            "Suset" => "a superuser, any time",
            "Userset" => "anyone, any time",
            "Sighup" => "reload",
            "Postmaster" => "server start",
            other => panic!("no words for GucContext::{other} on the settings page"),
        }
    }

    /// Whether the page's default cell (`` `'1 day'` ``, `` `60` (seconds) ``, `` `5s` ``,
    /// `` `on` ``) shows this default: the first code span, quotes off, an integer in the
    /// setting's unit with or without the unit.
    fn default_matches(&self, cell: &str) -> bool {
        let Some(shown) = cell.split('`').nth(1) else { return false };
        let shown = shown.trim_matches('\'');
        match self.kind {
            "bool" => shown == if self.default == "true" { "on" } else { "off" },
            "int" => shown.strip_suffix(self.unit).unwrap_or(shown) == self.default,
            _ => shown == self.default,
        }
    }
}

/// Every setting `extension/src/settings.rs` defines, read from the source: each
/// `GucRegistry::define_*_guc` call's name, `&STATIC` (whose initial value is the default),
/// `GucContext` and unit flag.
fn defined_settings() -> Vec<Setting> {
    let source = fs::read_to_string(workspace_root().join("extension/src/settings.rs")).unwrap();
    let after = |text: &str, start: &str| -> String {
        let at = text.find(start).unwrap_or_else(|| panic!("settings.rs: no {start:?}")) + start.len();
        text[at..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '.').collect()
    };
    source
        .split("GucRegistry::define_")
        .skip(1)
        .map(|call| {
            let kind = match after(call, "").as_str() {
                k if k.starts_with("string") => "string",
                k if k.starts_with("int") => "int",
                k if k.starts_with("bool") => "bool",
                k => panic!("settings.rs: define_{k} is not read by this test"),
            };
            let flags = &call[call.find("GucFlags::").expect("settings.rs: a call without GucFlags")..];
            let unit = match after(flags, "GucFlags::").as_str() {
                "UNIT_S" => "s",
                "UNIT_MS" => "ms",
                _ => "",
            };
            let variable = after(call, "&");
            let definition = &source[source.find(&format!("static {variable}: ")).unwrap()..];
            let value = definition[definition.find("::new(").unwrap() + "::new(".len()..]
                .split(");")
                .next()
                .unwrap()
                .trim()
                .to_string();
            // A string's default is `Some(CONST)`, the const a C string literal.
            let default = match value.strip_prefix("Some(").and_then(|v| v.strip_suffix(')')) {
                Some(constant) => {
                    let literal = format!("const {constant}: &CStr = c\"");
                    let at = source.find(&literal).expect("settings.rs: the default's const") + literal.len();
                    source[at..].split('"').next().unwrap().to_string()
                }
                None => value,
            };
            Setting { name: after(call, "c\""), kind, default, unit, context: after(call, "GucContext::") }
        })
        .collect()
}

/// One row of the settings page's table of dlock's own settings.
struct SettingsRow {
    name: String,
    default: String,
    changed_by: String,
}

/// The rows of the page's table whose first cell is a `` `dlock.x` `` setting.
fn settings_rows(page: &str) -> Vec<SettingsRow> {
    page.lines()
        .filter_map(|line| {
            let cells: Vec<&str> = line.strip_prefix('|')?.split('|').map(str::trim).collect();
            let name = cells.first()?.strip_prefix("`dlock.")?.strip_suffix('`')?;
            Some(SettingsRow {
                name: format!("dlock.{name}"),
                default: cells.get(1)?.to_string(),
                changed_by: cells.get(2)?.to_string(),
            })
        })
        .collect()
}

/// Every `dlock.x` setting name a text mentions (not `dlock.dlock_*`, dlock's functions).
fn named_settings(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for (at, _) in text.match_indices("dlock.") {
        if at > 0 && text[..at].chars().next_back().is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let name: String =
            text[at + "dlock.".len()..].chars().take_while(|c| c.is_ascii_lowercase() || *c == '_').collect();
        if !name.is_empty() && !name.starts_with("dlock_") {
            names.insert(format!("dlock.{name}"));
        }
    }
    names
}

/// `README.md` and every page of the book, in path order.
fn doc_pages() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut pages = vec![root.join("README.md")];
    pages.extend(markdown_under(&root.join("docs/src")));
    pages
}

/// Every Markdown file whose links are checked: `README.md` and `docs/**` (not the built book).
fn markdown_files() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut files = vec![root.join("README.md")];
    files.extend(
        markdown_under(&root.join("docs")).into_iter().filter(|p| !p.starts_with(root.join("docs/book"))),
    );
    files
}

fn markdown_under(dir: &Path) -> Vec<PathBuf> {
    let mut found = BTreeSet::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for entry in fs::read_dir(&dir).unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.insert(path);
            }
        }
    }
    found.into_iter().collect()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(workspace_root()).unwrap_or(path).display().to_string()
}

/// The fenced blocks of a page whose info string is `sql`: (first content line, content).
fn fenced(text: &str, language: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut open: Option<(usize, usize, bool, String)> = None; // (line, indent, wanted, content)
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None if trimmed.starts_with("```") => {
                let info = trimmed[3..].split([',', ' ']).next().unwrap_or("");
                open = Some((i + 2, indent, info == language, String::new()));
            }
            None => {}
            Some((start, _, wanted, content)) if trimmed.starts_with("```") => {
                if *wanted {
                    blocks.push((*start, std::mem::take(content)));
                }
                open = None;
            }
            Some((_, indent, _, content)) => {
                let cut = line.len() - line.trim_start().len();
                content.push_str(&line[cut.min(*indent)..]);
                content.push('\n');
            }
        }
    }
    blocks
}

fn sql_blocks(page: &Path) -> Vec<Block> {
    let text = fs::read_to_string(page).unwrap();
    fenced(&text, "sql")
        .into_iter()
        .map(|(line, sql)| Block {
            line,
            statements: split(&sql, line)
                .unwrap_or_else(|e| panic!("{}: sql block at line {line}: {e}", relative(page))),
        })
        .collect()
}

/// Splits a block into statements at `;` outside quotes, comments and dollar quotes, and reads
/// each statement's trailing `-->` comment.
fn split(sql: &str, first_line: usize) -> Result<Vec<Statement>, String> {
    let chars: Vec<char> = sql.chars().collect();
    let (mut statements, mut current, mut line, mut i) = (Vec::new(), String::new(), first_line, 0);
    let mut start_line = None;
    while i < chars.len() {
        let c = chars[i];
        let rest: String = chars[i..].iter().take(64).collect();
        if c == '-' && rest.starts_with("--") {
            let end = chars[i..].iter().position(|&c| c == '\n').map_or(chars.len(), |p| i + p);
            let comment: String = chars[i..end].iter().collect();
            if comment.contains("-->") {
                return Err(format!("line {line}: `-->` must follow a statement's `;` on the same line"));
            }
            current.push_str(&comment);
            i = end;
            continue;
        }
        if c == '\\' && current.trim().is_empty() {
            return Err(format!("line {line}: psql meta-commands do not run here"));
        }
        let quoted_end = match c {
            '\'' | '"' => chars[i + 1..].iter().position(|&q| q == c).map(|p| i + 1 + p + 1),
            '$' => dollar_tag(&chars[i..]).and_then(|tag| {
                let body = &chars[i + tag.len()..];
                (0..body.len()).find(|&p| body[p..].starts_with(&tag)).map(|p| i + tag.len() + p + tag.len())
            }),
            _ => None,
        };
        if let Some(end) = quoted_end {
            let quoted: String = chars[i..end].iter().collect();
            start_line.get_or_insert(line);
            line += quoted.matches('\n').count();
            current.push_str(&quoted);
            i = end;
            continue;
        }
        if c == ';' {
            current.push(';');
            let end = chars[i + 1..].iter().position(|&c| c == '\n').map_or(chars.len(), |p| i + 1 + p);
            let trailing: String = chars[i + 1..end].iter().collect();
            let expect = match trailing.trim().strip_prefix("-->") {
                Some(shown) => parse_expect(shown.trim()),
                None => Expect::Succeeds,
            };
            statements.push(Statement {
                sql: strip_leading_comments(&current),
                line: start_line.unwrap_or(line),
                expect,
            });
            (current, start_line, i) = (String::new(), None, end);
            continue;
        }
        if c == '\n' {
            line += 1;
        } else if !c.is_whitespace() {
            start_line.get_or_insert(line);
        }
        current.push(c);
        i += 1;
    }
    if !strip_leading_comments(&current).is_empty() {
        return Err(format!("line {line}: the last statement has no `;`"));
    }
    Ok(statements)
}

/// `$tag$` at the start of `chars`, if there is one.
fn dollar_tag(chars: &[char]) -> Option<Vec<char>> {
    let end = chars[1..].iter().position(|&c| !(c.is_alphanumeric() || c == '_'))? + 1;
    (chars[end] == '$' && !chars[1].is_ascii_digit()).then(|| chars[..=end].to_vec())
}

fn strip_leading_comments(sql: &str) -> String {
    let lines: Vec<&str> =
        sql.lines().skip_while(|l| l.trim().is_empty() || l.trim_start().starts_with("--")).collect();
    lines.join("\n").trim().to_string()
}

fn parse_expect(shown: &str) -> Expect {
    if let Some(code) = shown.strip_prefix("ERROR ") {
        return Expect::Error(code.trim().to_string());
    }
    let words: Vec<&str> = shown.split_whitespace().collect();
    if let [n, "row" | "rows"] = words[..]
        && let Ok(n) = n.parse()
    {
        return Expect::Rows(n);
    }
    Expect::Values(shown.split(" | ").map(|v| v.trim().to_string()).collect())
}

/// The targets of a page's inline links and images, with their line numbers, outside code.
fn links(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut in_fence = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        // Inline code spans hold no links: drop them.
        let prose: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(close) = after.find(')') else { break };
            let target = after[..close].split_whitespace().next().unwrap_or("");
            found.push((i + 1, target.trim_matches(['<', '>']).to_string()));
            rest = &after[close..];
        }
        // Reference definitions: `[name]: target`.
        if let Some(def) = prose.trim_start().strip_prefix('[').and_then(|l| l.split_once("]: ")) {
            found.push((i + 1, def.1.split_whitespace().next().unwrap_or("").to_string()));
        }
    }
    found
}

/// The ids of a page's headings, as mdBook and GitHub derive them (ASCII headings).
fn heading_ids(text: &str) -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        }
        let Some(title) = line.strip_prefix('#').filter(|_| !in_fence).map(|t| t.trim_start_matches('#'))
        else {
            continue;
        };
        // Link text only, no markup.
        let mut plain = String::new();
        let mut chars = title.trim().chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '`' | '*' | '[' => {}
                ']' if chars.peek() == Some(&'(') => {
                    chars.by_ref().take_while(|&c| c != ')').for_each(drop);
                }
                _ => plain.push(c),
            }
        }
        let base: String = plain
            .chars()
            .filter_map(|c| match c {
                c if c.is_alphanumeric() || c == '_' || c == '-' => Some(c.to_ascii_lowercase()),
                c if c.is_whitespace() => Some('-'),
                _ => None,
            })
            .collect();
        let mut id = base.clone();
        let mut n = 0;
        while ids.contains(&id) {
            n += 1;
            id = format!("{base}-{n}");
        }
        ids.insert(id);
    }
    ids
}

#[test]
fn the_splitter_reads_statements_and_what_they_show() {
    let sql = "-- a comment; not a statement\nSELECT 'a;b', $x$ ; $x$;   --> a;b | ;\nUPDATE t\n  SET x = 1;  --> 2 rows\nSELECT 1; -- plain\nSELECT x; --> ERROR 42703\n";
    let statements = split(sql, 10).unwrap();
    let shown: Vec<(&str, usize, &Expect)> =
        statements.iter().map(|s| (s.sql.as_str(), s.line, &s.expect)).collect();
    assert_eq!(
        shown,
        vec![
            ("SELECT 'a;b', $x$ ; $x$;", 11, &Expect::Values(vec!["a;b".into(), ";".into()])),
            ("UPDATE t\n  SET x = 1;", 12, &Expect::Rows(2)),
            ("SELECT 1;", 14, &Expect::Succeeds),
            ("SELECT x;", 15, &Expect::Error("42703".into())),
        ]
    );
    assert!(split("SELECT 1\n", 1).is_err(), "a statement needs its `;`");
    assert!(split("-- --> 1\n", 1).is_err(), "`-->` only after a `;`");
}
