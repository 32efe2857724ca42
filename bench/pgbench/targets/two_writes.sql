-- The two-write reference: the two-statement bound's row updated durably, then updated back in
-- a statement whose transaction commits without a WAL flush (as dlock commits a release). A
-- lock whose release writes (as every lock table's must) pays this second write, which the
-- bound's read-only second statement does not.
\set k random(1, 1000)
UPDATE ceiling SET v = v + 1 WHERE id = :k;
SELECT written_back(:k);
