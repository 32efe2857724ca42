-- The lease-table floor (lease_floor.sql) on a new key every time.
\set k random(1, 10000000)
INSERT INTO floor_lease (key, owner, expires_at) VALUES ('f' || :client_id || ':' || :k, 'o' || :client_id, now() + interval '30 seconds');
DELETE FROM floor_lease WHERE key = 'f' || :client_id || ':' || :k AND owner = 'o' || :client_id AND set_config('synchronous_commit', 'off', true) IS NOT NULL;
