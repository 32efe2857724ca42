-- The peer dlock is measured against: the lock table a team writes by hand when it has no
-- dlock. One row per held key; an expired row may be taken over; release deletes by owner.
-- It has the problems dlock exists to solve (no fence, no waiting, no role scoping, not
-- reentrant, release of an expired-and-retaken key by the old owner is silently a no-op),
-- but it is the honest baseline for the cost of "a lock is a row".
CREATE TABLE naive_lock (
  key        text PRIMARY KEY,
  owner      text NOT NULL,
  expires_at timestamptz NOT NULL
);

-- true when granted, NULL when someone else holds the key.
CREATE FUNCTION naive_acquire(p_key text, p_owner text, p_ttl interval) RETURNS boolean
LANGUAGE sql AS $$
  INSERT INTO naive_lock AS l (key, owner, expires_at)
  VALUES (p_key, p_owner, now() + p_ttl)
  ON CONFLICT (key) DO UPDATE
    SET owner = excluded.owner, expires_at = excluded.expires_at
    WHERE l.expires_at < now()
  RETURNING true
$$;

-- true when the caller's row was deleted, NULL otherwise.
CREATE FUNCTION naive_release(p_key text, p_owner text) RETURNS boolean
LANGUAGE sql AS $$
  DELETE FROM naive_lock WHERE key = p_key AND owner = p_owner
  RETURNING true
$$;
