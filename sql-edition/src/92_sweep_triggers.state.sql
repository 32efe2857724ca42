-- One page per row a grant added; one grant in eight that wrote over a row (a new fence) too:
-- those ask with sweep_later. No WHEN clause: an UPDATE would read and plan one at every
-- statement (a WHEN on every grant's fence cost 30k instructions per grant on 15).
CREATE CONSTRAINT TRIGGER sweep_after_insert AFTER INSERT ON dlock_internal.lease
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION dlock_internal.sweep_at_commit();
CREATE CONSTRAINT TRIGGER sweep_after_grant AFTER UPDATE OF max_holders ON dlock_internal.lease
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    EXECUTE FUNCTION dlock_internal.sweep_at_commit();
