-- The uncontended durable pair over the PL/pgSQL floor (floor.sql), as pair.sql over dlock.
SELECT floor_acquire('p' || :client_id, 'o' || :client_id, '30 seconds');
SELECT floor_release('p' || :client_id, 'o' || :client_id);
