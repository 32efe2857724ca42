-- Settings of the SQL edition. The native edition's dlock.max_ttl is a superuser-only GUC; a
-- SQL-only install cannot define one (a placeholder GUC can be set by any role), so the
-- installer (owner of this table) sets the limits here:
--     UPDATE dlock_internal.settings SET max_ttl = '2 days';
-- A superuser session's own SET dlock.max_ttl is honoured too (as in the native edition).
CREATE TABLE dlock_internal.settings (
    one         pg_catalog.bool PRIMARY KEY DEFAULT true CHECK (one),
    -- As written (messages quote it so): any interval syntax, positive.
    max_ttl     pg_catalog.text NOT NULL DEFAULT '1 day'::pg_catalog.text
                CHECK (max_ttl::pg_catalog.interval OPERATOR(pg_catalog.>) '0'::pg_catalog.interval),
    sweep_after pg_catalog.interval NOT NULL DEFAULT '5 seconds'::pg_catalog.interval,
    -- The longest sleep of the head of a key's wait queue between two looks at the key.
    poll_max    pg_catalog.interval NOT NULL DEFAULT '10 milliseconds'::pg_catalog.interval
);
INSERT INTO dlock_internal.settings DEFAULT VALUES;
REVOKE ALL ON dlock_internal.settings FROM PUBLIC;
