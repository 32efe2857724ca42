-- One client's durable commits: a single-row UPDATE per transaction.
UPDATE ceiling SET v = v + 1 WHERE id = 1;
