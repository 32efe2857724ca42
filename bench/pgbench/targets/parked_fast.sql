-- A waiter parked on a held fast key for up to 40 s (query text names it "parked").
SELECT dlock_fast_acquire('parked', 'c' || :client_id, '5 seconds', '40 seconds');
