-- PUBLIC may call the public functions and read the view; nothing in dlock_internal. The
-- internal functions run only inside the public ones (as their owner).
DO $$
DECLARE
    f pg_catalog.regprocedure;
BEGIN
    FOR f IN SELECT p.oid FROM pg_catalog.pg_proc AS p
              WHERE p.pronamespace OPERATOR(pg_catalog.=) 'dlock_internal'::pg_catalog.regnamespace LOOP
        EXECUTE pg_catalog.format('REVOKE ALL ON FUNCTION %s FROM PUBLIC', f);
    END LOOP;
END
$$;
-- A view calls its functions with its reader's privileges: lock_rows (which masks other
-- roles' owners itself) is the one internal function PUBLIC may execute, through dlock_locks
-- (the schema stays closed, so only by the view).
GRANT EXECUTE ON FUNCTION dlock_internal.lock_rows() TO PUBLIC;
