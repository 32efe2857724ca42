//! Text the server refuses before dlock sees it: invalid UTF-8 and NUL bytes.

use tokio_postgres::error::SqlState;

use crate::callers::Caller;
use crate::entries::{Entry, entry, err, lit};
use crate::targets::Target;

/// Invalid UTF-8 and NUL bytes: the server refuses them before dlock sees a value (22021,
/// 54000, 42601). The two `SQL_ASCII` ones are the usual ways around the encoding check.
pub fn invalid_text(target: &Target) -> Vec<Entry> {
    use SqlState as S;
    let (k, o) = (lit(&target.key), lit(&target.owner));
    let mut entries = Vec::new();
    for (value, what, code) in [
        (
            "convert_from('\\xc3'::bytea, 'UTF8')",
            "a truncated 2-byte sequence",
            S::CHARACTER_NOT_IN_REPERTOIRE,
        ),
        ("convert_from('\\xc0af'::bytea, 'UTF8')", "an overlong '/'", S::CHARACTER_NOT_IN_REPERTOIRE),
        (
            "convert_from('\\xeda080'::bytea, 'UTF8')",
            "an encoded surrogate U+D800",
            S::CHARACTER_NOT_IN_REPERTOIRE,
        ),
        (
            "convert_from('\\xf4908080'::bytea, 'UTF8')",
            "a code point above U+10FFFF",
            S::CHARACTER_NOT_IN_REPERTOIRE,
        ),
        ("convert_from('\\xff'::bytea, 'UTF8')", "the byte 0xff", S::CHARACTER_NOT_IN_REPERTOIRE),
        (
            "convert_from('\\xc328'::bytea, 'SQL_ASCII')",
            "0xc3 0x28 declared SQL_ASCII",
            S::CHARACTER_NOT_IN_REPERTOIRE,
        ),
        (
            "convert('\\xff'::bytea, 'SQL_ASCII', 'UTF8')::text",
            "0xff converted from SQL_ASCII",
            S::CHARACTER_NOT_IN_REPERTOIRE,
        ),
        ("E'\\xc3\\x28'", "an escape-string literal 0xc3 0x28", S::CHARACTER_NOT_IN_REPERTOIRE),
        ("E'k\\x00'", "an escape-string literal with NUL", S::CHARACTER_NOT_IN_REPERTOIRE),
        ("chr(0)", "chr(0)", S::PROGRAM_LIMIT_EXCEEDED),
        ("U&'\\D800'", "a lone surrogate in a Unicode literal", S::SYNTAX_ERROR),
        ("E'\\uD800'", "a lone surrogate in an escape-string literal", S::SYNTAX_ERROR),
    ] {
        entries.push(entry(
            format!("acquire, key {what}"),
            Caller::User,
            format!("SELECT dlock_acquire({value}, {o}, '1 hour')::text"),
            err(code.clone()),
        ));
        entries.push(entry(
            format!("acquire, owner {what}"),
            Caller::User,
            format!("SELECT dlock_acquire({k}, {value}, '1 hour')::text"),
            err(code.clone()),
        ));
        entries.push(entry(
            format!("release_all, owner {what}"),
            Caller::User,
            format!("SELECT dlock_release_all({value})::text"),
            err(code.clone()),
        ));
        entries.push(entry(
            format!("try_acquire, key {what}"),
            Caller::User,
            format!("SELECT dlock_try_acquire({value}, {o}, '1 hour', '0')::text"),
            err(code.clone()),
        ));
        entries.push(entry(
            format!("try_acquire, owner {what}"),
            Caller::User,
            format!("SELECT dlock_try_acquire({k}, {value}, '1 hour', '0')::text"),
            err(code.clone()),
        ));
        entries.push(entry(
            format!("watch, key {what}"),
            Caller::User,
            format!("SELECT dlock_watch({value})::text"),
            err(code),
        ));
    }
    entries
}
