-- The same 4 keys taken one acquire at a time (in one statement), then each released.
SELECT count(dlock_acquire(k, 'one-' || :client_id, '30 seconds', '30 seconds')) FROM unnest(ARRAY['one-' || :client_id || '-1', 'one-' || :client_id || '-2', 'one-' || :client_id || '-3', 'one-' || :client_id || '-4']) AS k;
SELECT count(*) FILTER (WHERE dlock_release(k, 'one-' || :client_id)) FROM unnest(ARRAY['one-' || :client_id || '-1', 'one-' || :client_id || '-2', 'one-' || :client_id || '-3', 'one-' || :client_id || '-4']) AS k;
