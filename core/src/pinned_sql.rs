//! The rule every SQL statement dlock runs must follow, checked on its text: nothing in it may
//! be resolved through a `search_path`. An unqualified operator, function or type is looked up
//! along the session's path, where a role may have put its own `=` or `*` ahead of
//! `pg_catalog`'s (or beside it, for argument types `pg_catalog` has no exact operator for),
//! and dlock runs its statements as the lease table's owner. So operators are written
//! `OPERATOR(pg_catalog.=)`, functions `pg_catalog.now()`, casts `::pg_catalog.int8`, and
//! typed literals as casts (`'infinity'::pg_catalog.timestamptz`). Relations are named with
//! their schema too, but that is the statement's business (a relation of the wrong schema
//! fails loudly), so it is not checked here.
//!
//! The extension checks each statement when it first plans it, so a statement that breaks
//! the rule never runs; the SQL-only edition checks its files with the same function.

/// Characters that form PostgreSQL operators.
const OPERATOR_CHARS: &str = "+-*/<>=~!@#%^&|`?";

/// Words that may stand right before a string literal or a `(` without being a type or a
/// function: SQL's own keywords, which no `search_path` can shadow.
const KEYWORDS: &[&str] = &[
    "ALL",
    "AND",
    "ANY",
    "ARRAY",
    "AS",
    "BY",
    "CASE",
    "CONFLICT",
    "DISTINCT",
    "DO",
    "ELSE",
    "END",
    "OPERATOR",
    "EXISTS",
    "FILTER",
    "FROM",
    "INTO",
    "IS",
    "LIMIT",
    "NOT",
    "NULL",
    "ON",
    "OR",
    "OVER",
    "RETURNING",
    "ROW",
    "SELECT",
    "SET",
    "THEN",
    "USING",
    "VALUES",
    "WHEN",
    "WHERE",
    "WITH",
];

/// Constructs that compare with an operator they look up by name along the `search_path`
/// (`=` for `IN` and `IS DISTINCT FROM`, `<=` and `>=` for `BETWEEN`, `~~` for `LIKE`), with
/// no way to name `pg_catalog`'s: dlock's statements write the comparison out instead.
const IMPLICIT_OPERATORS: &[&str] =
    &[" IN (", " NOT IN (", " BETWEEN ", " LIKE ", " ILIKE ", " SIMILAR ", " DISTINCT FROM ", "NULLIF("];

/// What a statement's text resolves through the `search_path`, one line per finding; empty
/// when nothing does.
pub fn unpinned(sql: &str) -> Vec<String> {
    let code = blank_out_literals(sql);
    let mut findings = Vec::new();
    operators(&code, &mut findings);
    casts(&code, &mut findings);
    calls_and_typed_literals(&code, &mut findings);
    implicit_operators(&code, &mut findings);
    findings
}

fn implicit_operators(code: &str, findings: &mut Vec<String>) {
    let upper = code.to_ascii_uppercase().split_whitespace().collect::<Vec<_>>().join(" ");
    for construct in IMPLICIT_OPERATORS {
        if upper.contains(construct) {
            findings.push(format!("{} compares with an operator found by the search_path", construct.trim()));
        }
    }
    // A simple CASE (`CASE x WHEN`) compares with `=`; a searched one (`CASE WHEN`) does not.
    let mut rest = upper.as_str();
    while let Some(at) = rest.find("CASE ") {
        rest = &rest[at + 5..];
        if !rest.starts_with("WHEN ") {
            findings.push("CASE x WHEN compares with an operator found by the search_path".to_string());
        }
    }
}

/// `sql` with the insides of string literals, quoted identifiers and comments blanked
/// (replaced by spaces, quotes kept), so that nothing inside them is mistaken for code.
fn blank_out_literals(sql: &str) -> String {
    let chars: Vec<char> = sql.chars().collect();
    let mut out = String::with_capacity(sql.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '\'' || c == '"' {
            out.push(c);
            i += 1;
            while i < chars.len() {
                if chars[i] == c {
                    // A doubled quote is an escaped one.
                    if chars.get(i + 1) == Some(&c) {
                        out.push_str("  ");
                        i += 2;
                        continue;
                    }
                    break;
                }
                out.push(' ');
                i += 1;
            }
            if i < chars.len() {
                out.push(c);
                i += 1;
            }
        } else if c == '-' && next == Some('-') {
            while i < chars.len() && chars[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            while i < chars.len() && !(chars[i] == '*' && chars.get(i + 1) == Some(&'/')) {
                out.push(' ');
                i += 1;
            }
            out.push_str("  ");
            i += 2;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Byte ranges of the assignment lists of `UPDATE ... SET` (up to `WHERE`, `RETURNING`,
/// `FROM` or the end, at the same depth of parentheses), where `=` assigns rather than
/// compares.
fn set_lists(code: &str) -> Vec<(usize, usize)> {
    let upper = code.to_ascii_uppercase();
    let bytes = upper.as_bytes();
    let mut lists = Vec::new();
    let mut from = 0;
    while let Some(found) = upper[from..].find(" SET ") {
        let start = from + found + 5;
        let mut depth = 0i32;
        let mut end = code.len();
        let mut j = start;
        while j < bytes.len() {
            match bytes[j] {
                b'(' => depth += 1,
                b')' if depth == 0 => {
                    end = j;
                    break;
                }
                b')' => depth -= 1,
                _ => {}
            }
            if depth == 0 && [" WHERE ", " RETURNING ", " FROM "].iter().any(|w| upper[j..].starts_with(w)) {
                end = j;
                break;
            }
            j += 1;
        }
        lists.push((start, end));
        from = start;
    }
    lists
}

fn operators(code: &str, findings: &mut Vec<String>) {
    let assignments = set_lists(code);
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !OPERATOR_CHARS.contains(bytes[i] as char) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && OPERATOR_CHARS.contains(bytes[i] as char) {
            i += 1;
        }
        let op = &code[start..i];
        let before = code[..start].trim_end();
        let after = code[i..].trim_start();
        let qualified = code[..start].ends_with("OPERATOR(pg_catalog.") && after.starts_with(')');
        // count(*) and SELECT * are no operators; `=>` names an argument.
        let star = op == "*" && (before.ends_with('(') && after.starts_with(')'));
        let named_argument = op == "=>";
        let assignment = op == "=" && assignments.iter().any(|&(from, to)| start >= from && start < to);
        if !(qualified || star || named_argument || assignment) {
            findings
                .push(format!("operator {op} is not written OPERATOR(pg_catalog.{op}) (at byte {start})"));
        }
    }
}

fn casts(code: &str, findings: &mut Vec<String>) {
    let mut from = 0;
    while let Some(found) = code[from..].find("::") {
        let at = from + found;
        let after = &code[at + 2..];
        if !after.starts_with("pg_catalog.") {
            let word: String =
                after.chars().take_while(|c| !c.is_whitespace() && *c != ',' && *c != ')').collect();
            findings.push(format!("cast to {word} is not to a pg_catalog type (at byte {at})"));
        }
        from = at + 2;
    }
}

/// Unqualified function calls (`name(`) and typed literals (`name 'text'`).
fn calls_and_typed_literals(code: &str, findings: &mut Vec<String>) {
    let bytes = code.as_bytes();
    let is_word = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'$';
    let mut i = 0;
    while i < bytes.len() {
        if !(bytes[i].is_ascii_alphabetic() || bytes[i] == b'_')
            || (i > 0 && (is_word(bytes[i - 1]) || bytes[i - 1] == b'"'))
        {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && is_word(bytes[i]) {
            i += 1;
        }
        let word = &code[start..i];
        let qualified = start > 0 && bytes[start - 1] == b'.';
        let keyword = KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(word));
        if qualified || keyword {
            continue;
        }
        // A word right before a dot is a schema or a table: what follows it is checked on its own.
        if bytes.get(i) == Some(&b'.') {
            continue;
        }
        if bytes.get(i) == Some(&b'(') {
            findings.push(format!("function {word}() is not schema-qualified (at byte {start})"));
        } else if code[i..].trim_start().starts_with('\'')
            && !code[..start].trim_end().ends_with("OPERATOR(pg_catalog.")
        {
            findings.push(format!(
                "typed literal {word} '...' names its type without a schema (at byte {start})"
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::unpinned;

    #[test]
    fn qualified_statements_pass() {
        for sql in [
            "SELECT owner FROM dlock_internal.lease WHERE key OPERATOR(pg_catalog.=) $1 ORDER BY fence",
            "UPDATE dlock_internal.lease SET hold_count = hold_count OPERATOR(pg_catalog.+) 1, expires_at = $3 \
             WHERE key OPERATOR(pg_catalog.=) $1",
            "SELECT pg_catalog.count(*)::pg_catalog.int4 FROM pg_catalog.pg_locks",
            "SELECT 'a = b; now() text ''x'''::pg_catalog.text /* x = y */ -- z * w\n",
            "INSERT INTO dlock_internal.lease AS l (key) VALUES ($1) ON CONFLICT (key) DO UPDATE SET key = excluded.key RETURNING l.fence",
            "SELECT pg_catalog.make_interval(secs => $1)",
            "SELECT (pg_catalog.extract('epoch'::pg_catalog.text, x) OPERATOR(pg_catalog.*) 1::pg_catalog.numeric)::pg_catalog.int8",
            "SELECT x FROM t WHERE EXISTS (SELECT FROM t2 WHERE a IS NULL OR NOT EXISTS (SELECT FROM t3))",
            "SELECT CASE WHEN a OPERATOR(pg_catalog.=) 1 THEN 2 END",
        ] {
            assert_eq!(unpinned(sql), Vec::<String>::new(), "{sql}");
        }
    }

    #[test]
    fn every_way_of_reaching_the_search_path_is_found() {
        for (sql, what) in [
            ("SELECT 1 FROM t WHERE key = $1", "operator ="),
            ("SELECT a * 1000000 FROM t", "operator *"),
            ("SELECT a OPERATOR(public.*) b", "operator *"),
            ("SELECT (a << 32) | b", "operator <<"),
            ("SELECT a::int8", "cast to int8"),
            ("SELECT now()", "function now()"),
            ("SELECT pg_catalog.now() OPERATOR(pg_catalog.+) interval '1 s'", "typed literal interval"),
            ("UPDATE t SET a = b WHERE c = d", "operator ="),
            ("SELECT a FROM t WHERE a IS DISTINCT FROM b OR c <> d", "operator <>"),
            ("SELECT a FROM t WHERE a IS DISTINCT FROM b", "DISTINCT FROM"),
            ("SELECT a FROM t WHERE a IN (SELECT b FROM u)", "IN ("),
            ("SELECT a FROM t WHERE a NOT IN ('x')", "IN ("),
            ("SELECT a FROM t WHERE a BETWEEN $1 AND $2", "BETWEEN"),
            ("SELECT a FROM t WHERE a LIKE $1", "LIKE"),
            ("SELECT CASE a WHEN 1 THEN 2 END", "CASE x WHEN"),
            ("SELECT NULLIF(a, b)", "NULLIF("),
        ] {
            let found = unpinned(sql);
            assert!(found.iter().any(|f| f.contains(what)), "{sql}: expected {what}, found {found:?}");
        }
    }

    #[test]
    fn assignments_are_only_the_set_list() {
        let found = unpinned("UPDATE t SET a = b, c = (d) WHERE e = f");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("operator ="));
    }
}
