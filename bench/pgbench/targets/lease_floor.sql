-- The floor of a table with a row per lease, on the client's own key: a plain INSERT of the
-- lease (its unique index entry included), committed durably, then its DELETE committed without
-- a WAL flush (as dlock commits a release that hands nothing on); no function, no check of an
-- existing lease.
INSERT INTO floor_lease (key, owner, expires_at) VALUES ('f' || :client_id, 'o' || :client_id, now() + interval '30 seconds');
DELETE FROM floor_lease WHERE key = 'f' || :client_id AND owner = 'o' || :client_id AND set_config('synchronous_commit', 'off', true) IS NOT NULL;
