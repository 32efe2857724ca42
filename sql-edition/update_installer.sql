-- The first step of every update of the edition (the one-file update, pg_tle's and
-- database.dev's update paths: build.sh puts it before the code): only the role that installed
-- dlock (the owner of dlock_internal) may update it, a superuser neither (42501). CREATE OR
-- REPLACE keeps a function's owner, but a function new in a release belongs to whoever runs the
-- update, and every SECURITY DEFINER function of dlock must run as the installer: a superuser's
-- would lend its standing to every caller. Runs under the updater's search_path (or the
-- extension's): everything is schema-qualified.
DO $update_installer$
DECLARE
    installer pg_catalog.oid;
BEGIN
    SELECT n.nspowner INTO installer FROM pg_catalog.pg_namespace AS n
     WHERE n.nspname OPERATOR(pg_catalog.=) 'dlock_internal'::pg_catalog.name;
    IF installer OPERATOR(pg_catalog.<>) (SELECT r.oid FROM pg_catalog.pg_roles AS r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = pg_catalog.format('only %s, the role that installed dlock, may update it', installer::pg_catalog.regrole),
            HINT = pg_catalog.format('Run the update as %s (SET ROLE %s).', installer::pg_catalog.regrole, installer::pg_catalog.regrole);
    END IF;
END
$update_installer$;
