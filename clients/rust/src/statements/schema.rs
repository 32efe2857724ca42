//! Finding the schema the extension lives in (`CREATE EXTENSION dlock SCHEMA dlock`, or
//! `public`, or wherever it was put), once per client.

use tokio_postgres::Row;

use crate::error::Error;

/// The database's name, and the schema of its `dlock` extension, or else of the SQL-only
/// edition installed from its one file (no extension: the schema of the `dlock_acquire` owned
/// by the owner of `dlock_internal`, which no other role can fake); NULL if neither.
/// Every name and operator is `pg_catalog`'s, so that nothing on the `search_path` takes part.
pub(crate) const FIND: &str = "\
SELECT pg_catalog.current_database()::pg_catalog.text, \
       COALESCE((SELECT n.nspname::pg_catalog.text \
          FROM pg_catalog.pg_extension e \
          JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) e.extnamespace \
         WHERE e.extname OPERATOR(pg_catalog.=) 'dlock'::pg_catalog.name), \
       (SELECT n.nspname::pg_catalog.text \
       FROM pg_catalog.pg_proc p \
       JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace \
       JOIN pg_catalog.pg_namespace i ON i.nspowner OPERATOR(pg_catalog.=) p.proowner \
       WHERE i.nspname OPERATOR(pg_catalog.=) 'dlock_internal'::pg_catalog.name \
       AND p.proname OPERATOR(pg_catalog.=) 'dlock_acquire'::pg_catalog.name \
       AND n.nspname OPERATOR(pg_catalog.<>) 'dlock_internal'::pg_catalog.name \
       ORDER BY n.nspname LIMIT 1))";

/// The schema named by the answer to [`FIND`], or [`Error::NotInstalled`].
pub(crate) fn from_row(row: &Row) -> Result<String, Error> {
    let database: String = row.try_get(0)?;
    row.try_get::<_, Option<String>>(1)?.ok_or(Error::NotInstalled { database })
}

/// `name` as an SQL identifier: always double-quoted, inner double quotes doubled, so that any
/// schema name (upper case, spaces, quotes) means itself and nothing more.
pub(crate) fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_and_inner_quotes_doubled() {
        assert_eq!(quote_identifier("dlock"), "\"dlock\"");
        assert_eq!(quote_identifier("My Schema"), "\"My Schema\"");
        assert_eq!(quote_identifier("a\"; DROP TABLE x; --"), "\"a\"\"; DROP TABLE x; --\"");
    }

    proptest::proptest! {
        // Whatever the name, the quoted form is one identifier: it opens and closes with the
        // only undoubled quotes, and unquoting it gives the name back.
        #[test]
        fn a_quoted_identifier_unquotes_to_the_name(name in "\\PC{0,40}") {
            let quoted = quote_identifier(&name);
            let inner = &quoted[1..quoted.len() - 1];
            proptest::prop_assert!(quoted.starts_with('"') && quoted.ends_with('"'));
            proptest::prop_assert!(!inner.replace("\"\"", "").contains('"'));
            proptest::prop_assert_eq!(inner.replace("\"\"", "\""), name);
        }
    }
}
