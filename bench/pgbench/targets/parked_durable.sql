-- A waiter parked on a held durable key for up to 40 s (query text names it "parked").
SELECT dlock_acquire('parked', 'c' || :client_id, '30 seconds', '40 seconds');
