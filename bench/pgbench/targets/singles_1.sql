-- The same 1 keys taken one acquire at a time (in one statement), then each released.
SELECT count(dlock_acquire(k, 'one-' || :client_id, '30 seconds', '30 seconds')) FROM unnest(ARRAY['one-' || :client_id || '-1']) AS k;
SELECT count(*) FILTER (WHERE dlock_release(k, 'one-' || :client_id)) FROM unnest(ARRAY['one-' || :client_id || '-1']) AS k;
