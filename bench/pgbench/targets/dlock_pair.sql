-- dlock's durable pair on the client's own key, again and again (a job's or a resource's lock):
-- two autocommit statements; the key's row is written over in place.
SELECT dlock_acquire('p' || :client_id, 'o' || :client_id, '30 seconds');
SELECT dlock_release('p' || :client_id, 'o' || :client_id);
