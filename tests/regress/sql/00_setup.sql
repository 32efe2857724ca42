-- The SQL surface of dlock: what CREATE EXTENSION installs and how it is protected.
CREATE EXTENSION dlock;
SELECT extname, extrelocatable FROM pg_extension WHERE extname = 'dlock';

-- The functions of the extension (a build with the pg_test feature adds its #[pg_test]s in
-- schema tests: not part of the surface). Callable unqualified by any role.
CREATE TEMP VIEW dlock_functions AS
SELECT p.oid, n.nspname AS schema, p.proname AS function
  FROM pg_proc p
  JOIN pg_namespace n ON n.oid = p.pronamespace
  JOIN pg_depend d ON d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
  JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'dlock'
 WHERE n.nspname <> 'tests';
SELECT schema, function, pg_get_function_arguments(oid) AS arguments,
       pg_get_function_result(oid) AS result
  FROM dlock_functions ORDER BY schema, function, pg_get_function_arguments(oid);
-- None is SECURITY DEFINER: each runs as its caller, so that dlock sees the role PostgreSQL
-- says is running (after SET ROLE, inside a SECURITY DEFINER caller, or for a table's owner
-- during ANALYZE or REFRESH), and runs only its own statements on dlock_internal as the
-- extension's owner. All are volatile, not strict (a NULL argument is an error, not a silent
-- NULL). Only the event trigger's function pins a search_path: the others are C functions that
-- resolve no name but in their statements, and every statement pins its own (pg/spi.rs), where
-- a SET clause would cost every call and not reach commit-time work anyway.
SELECT f.schema, f.function, p.prosecdef AS security_definer, p.proconfig AS config,
       p.provolatile AS volatility, p.proisstrict AS strict
  FROM dlock_functions f JOIN pg_proc p ON p.oid = f.oid
 ORDER BY f.schema, f.function, pg_get_function_arguments(f.oid);
-- Every function PostgreSQL would run as SQL text pins its search_path (there is none today).
SELECT f.function AS unpinned_sql_function
  FROM dlock_functions f JOIN pg_proc p ON p.oid = f.oid JOIN pg_language l ON l.oid = p.prolang
 WHERE l.lanname <> 'c'
   AND (p.proconfig IS NULL
        OR NOT EXISTS (SELECT 1 FROM unnest(p.proconfig) AS c WHERE c LIKE 'search\_path=%'));
-- No function carries privileges of its own to abuse.
SELECT f.function AS security_definer_function
  FROM dlock_functions f JOIN pg_proc p ON p.oid = f.oid
 WHERE p.prosecdef;
SELECT f.function AS fast_function_with_settings
  FROM dlock_functions f JOIN pg_proc p ON p.oid = f.oid
 WHERE f.function LIKE 'dlock\_fast\_%' AND (p.prosecdef OR p.proconfig IS NOT NULL);
-- PUBLIC may execute every function; dlock_force_release checks its caller itself.
SELECT schema, function, has_function_privilege('public', oid, 'EXECUTE') AS public_execute
  FROM dlock_functions ORDER BY schema, function, pg_get_function_arguments(oid);

-- The view and its columns.
SELECT column_name, data_type
  FROM information_schema.columns
 WHERE table_name = 'dlock_locks'
 ORDER BY ordinal_position;

-- The lease state: a schema PUBLIC cannot use, tables PUBLIC cannot touch. The database's
-- owner may read and set the fence position (pg_dump and its restore), nothing else.
SELECT has_schema_privilege('public', 'dlock_internal', 'USAGE') AS public_usage,
       has_schema_privilege('public', 'dlock_internal', 'CREATE') AS public_create;
SELECT a.privilege_type, c.relname
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace,
       aclexplode(c.relacl) a
 WHERE n.nspname = 'dlock_internal' AND a.grantee = 'pg_database_owner'::regrole
 ORDER BY 1, 2;
SELECT count(*) > 0 AS has_lease_table,
       bool_or(has_table_privilege('public', c.oid, 'SELECT, INSERT, UPDATE, DELETE, TRUNCATE'))
         AS public_has_any_privilege
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'dlock_internal';
SELECT to_regclass('dlock_internal.lease') IS NOT NULL AS lease_table_exists;

-- The admin role for force_release and seeing every owner, and the role trusted to check (and
-- so pin) other roles' fences.
SELECT rolname, rolcanlogin, rolsuper FROM pg_roles WHERE rolname IN ('dlock_admin', 'dlock_fencer')
 ORDER BY rolname;

-- The GUC: default one day, only a superuser may change it.
SELECT name, setting, unit, context, vartype FROM pg_settings WHERE name = 'dlock.max_ttl';
SHOW dlock.max_ttl;

-- pg_dump keeps the fence sequence's position (a restore must not reuse fences), not the leases.
SELECT c.relname AS dumped_with_the_database
  FROM pg_extension e, unnest(e.extconfig) AS cfg(oid) JOIN pg_class c ON c.oid = cfg.oid
 WHERE e.extname = 'dlock';

