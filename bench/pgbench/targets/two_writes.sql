-- The two-write reference: the two-statement bound's row updated, then updated back, each
-- committed durably. A lock whose release writes (as every lock table's must) pays this second
-- write, which the bound's read-only second statement does not.
\set k random(1, 1000)
UPDATE ceiling SET v = v + 1 WHERE id = :k;
UPDATE ceiling SET v = v - 1 WHERE id = :k;
