-- The durable-commit ceiling: one single-row UPDATE per transaction, committed durably.
\set k random(1, 1000)
UPDATE ceiling SET v = v + 1 WHERE id = :k;
