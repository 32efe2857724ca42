-- One lock+unlock pair with PostgreSQL's session advisory locks: no lease, no table, no WAL.
-- The two-int form keys the lock by (client, k), like the text keys of the other scripts.
\set k random(1, 10000000)
SELECT pg_advisory_lock(:client_id, :k);
SELECT pg_advisory_unlock(:client_id, :k);
