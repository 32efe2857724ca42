-- 4 keys of a client's own at once with dlock_acquire_all, then each released (one statement).
SELECT dlock_acquire_all(ARRAY['all-' || :client_id || '-1', 'all-' || :client_id || '-2', 'all-' || :client_id || '-3', 'all-' || :client_id || '-4'], 'all-' || :client_id, '30 seconds', '30 seconds');
SELECT count(*) FILTER (WHERE dlock_release(k, 'all-' || :client_id)) FROM unnest(ARRAY['all-' || :client_id || '-1', 'all-' || :client_id || '-2', 'all-' || :client_id || '-3', 'all-' || :client_id || '-4']) AS k;
