-- A lock table as a team writes it by hand, a new key every time: two plain prepared statements.
\set k random(1, 10000000)
INSERT INTO hand_lock AS l (key, owner, expires_at) VALUES ('h' || :client_id || ':' || :k, 'o' || :client_id, now() + interval '30 seconds')
  ON CONFLICT (key) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at WHERE l.expires_at < now();
DELETE FROM hand_lock WHERE key = 'h' || :client_id || ':' || :k AND owner = 'o' || :client_id;
