-- The release of this edition, for upgrades and the move to the native extension.
CREATE FUNCTION dlock_internal.edition() RETURNS pg_catalog.text
    LANGUAGE sql IMMUTABLE
    AS $$ SELECT 'sql @VERSION@'::pg_catalog.text $$;
