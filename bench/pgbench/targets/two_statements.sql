-- The two-statement bound of a durable pair: a durable single-row UPDATE, then a read-only
-- statement (the release of a lock needs one more durable write in general; this is the floor).
\set k random(1, 1000)
UPDATE ceiling SET v = v + 1 WHERE id = :k;
SELECT 1;
