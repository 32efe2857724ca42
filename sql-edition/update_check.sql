-- The one-file update's first step (build.sh puts it before the code): what is installed, and
-- who updates it. Runs under the updater's search_path, so everything is schema-qualified.
-- Refused, before anything changes:
--   * no edition in this database (55000): install it first;
--   * a release this one does not update from, a newer one among them (55000);
--   * an updater other than the role that installed it (42501: update_installer.sql, the
--     code's own first step, in every update path);
--   * the public functions elsewhere than the first schema of the search_path (55000): the
--     update would create a second set there.
-- The settings table's lock serializes two updates; the edition's functions only read that
-- table, so callers go on meanwhile.
DO $update_check$
DECLARE
    accepted pg_catalog.text[] := ARRAY[@FROM@'sql @VERSION@'];
    installed pg_catalog.text;
    home pg_catalog.text;
BEGIN
    IF pg_catalog.to_regprocedure('dlock_internal.edition()') IS NULL THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = 'dlock''s SQL edition is not installed in this database',
            HINT = 'Install it with dlock-sql--@VERSION@.sql.';
    END IF;
    LOCK TABLE dlock_internal.settings IN EXCLUSIVE MODE;
    installed := dlock_internal.edition();
    IF installed OPERATOR(pg_catalog.<>) ALL (accepted) THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = pg_catalog.format('this update brings dlock''s SQL edition to %s from %s, not from %s',
                'sql @VERSION@', pg_catalog.array_to_string(accepted, ' or '), installed),
            HINT = 'Update release by release, with each release''s own update file; a newer release is never taken back.';
    END IF;
    SELECT n.nspname INTO home FROM pg_catalog.pg_proc AS p JOIN pg_catalog.pg_namespace AS n ON n.oid OPERATOR(pg_catalog.=) p.pronamespace
     WHERE p.proname OPERATOR(pg_catalog.=) 'dlock_release'::pg_catalog.name
       AND p.proowner OPERATOR(pg_catalog.=) (SELECT i.nspowner FROM pg_catalog.pg_namespace AS i
                                               WHERE i.nspname OPERATOR(pg_catalog.=) 'dlock_internal'::pg_catalog.name)
     ORDER BY n.nspname LIMIT 1;
    IF home IS NULL OR pg_catalog.current_schema() IS NULL
       OR home OPERATOR(pg_catalog.<>) pg_catalog.current_schema()::pg_catalog.text THEN
        RAISE EXCEPTION USING ERRCODE = '55000',
            MESSAGE = pg_catalog.format('dlock''s public functions are in schema %s, not in %s, the first schema of the search_path',
                COALESCE(pg_catalog.quote_ident(home), '(none)'), COALESCE(pg_catalog.quote_ident(pg_catalog.current_schema()), '(none)')),
            HINT = pg_catalog.format('SET search_path = %s, then run the update.', COALESCE(pg_catalog.quote_ident(home), '<their schema>'));
    END IF;
END
$update_check$;
