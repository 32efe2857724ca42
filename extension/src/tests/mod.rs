//! Single-session rules of the contract, through the SQL surface, inside one pgrx test
//! transaction each (rolled back afterwards). Multi-session behaviour lives in /tests.

use pgrx::prelude::*;

#[pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn one<T: IntoDatum + FromDatum>(sql: &str) -> Option<T> {
        Spi::get_one::<T>(sql).expect("query runs")
    }

    fn fence(sql: &str) -> i64 {
        one::<i64>(sql).expect("a fence")
    }

    fn holds(key: &str, fence: i64) -> Option<bool> {
        Spi::get_one_with_args::<bool>("SELECT dlock_holds($1, $2)", &[key.into(), fence.into()])
            .expect("query runs")
    }

    /// Runs `sql` in a subtransaction and returns the SQLSTATE it failed with (None: no error).
    fn sqlstate(sql: &str) -> Option<String> {
        Spi::run(
            "DO $d$ BEGIN IF to_regprocedure('pg_temp.sqlstate_of(text)') IS NULL THEN \
             CREATE FUNCTION pg_temp.sqlstate_of(q text) RETURNS text LANGUAGE plpgsql AS $$ \
             BEGIN EXECUTE q; RETURN NULL; EXCEPTION WHEN OTHERS THEN RETURN SQLSTATE; END $$; \
             END IF; END $d$",
        )
        .expect("helper created");
        Spi::get_one_with_args::<String>("SELECT pg_temp.sqlstate_of($1)", &[sql.into()])
            .expect("helper runs")
    }

    #[pg_test]
    fn free_key_is_granted_with_a_positive_fence() {
        let f = fence("SELECT dlock_acquire('t:free', 'a', '10s')");
        assert!(f > 0);
        assert_eq!(one::<i32>("SELECT hold_count FROM dlock_locks WHERE key = 't:free'"), Some(1));
        assert_eq!(
            one::<bool>(
                "SELECT expires_at BETWEEN clock_timestamp() + '9s' AND clock_timestamp() + '10s' \
                 FROM dlock_locks WHERE key = 't:free'"
            ),
            Some(true)
        );
    }

    #[pg_test]
    fn reentrant_acquire_returns_the_same_fence_and_counts_holds() {
        let f1 = fence("SELECT dlock_acquire('t:re', 'a', '10s')");
        let f2 = fence("SELECT dlock_acquire('t:re', 'a', '10s')");
        assert_eq!(f1, f2);
        assert_eq!(one::<i32>("SELECT hold_count FROM dlock_locks WHERE key = 't:re'"), Some(2));
        assert_eq!(one::<bool>("SELECT dlock_release('t:re', 'a')"), Some(true));
        assert_eq!(holds("t:re", f1), Some(true));
        assert_eq!(one::<bool>("SELECT dlock_release('t:re', 'a')"), Some(true));
        assert_eq!(holds("t:re", f1), Some(false));
    }

    #[pg_test]
    fn another_owner_gets_null_at_once_and_nothing_changes() {
        let f = fence("SELECT dlock_acquire('t:busy', 'a', '10s')");
        assert_eq!(one::<i64>("SELECT dlock_acquire('t:busy', 'b', '10s')"), None);
        assert_eq!(one::<i64>("SELECT fence FROM dlock_locks WHERE key = 't:busy'"), Some(f));
        assert_eq!(one::<String>("SELECT owner FROM dlock_locks WHERE key = 't:busy'").as_deref(), Some("a"));
    }

    #[pg_test]
    fn release_counts_down_and_the_last_release_frees_the_key() {
        fence("SELECT dlock_acquire('t:rel', 'a', '10s')");
        fence("SELECT dlock_acquire('t:rel', 'a', '10s')");
        assert_eq!(one::<bool>("SELECT dlock_release('t:rel', 'a')"), Some(true));
        assert_eq!(one::<i32>("SELECT hold_count FROM dlock_locks WHERE key = 't:rel'"), Some(1));
        assert_eq!(one::<bool>("SELECT dlock_release('t:rel', 'a')"), Some(true));
        assert_eq!(one::<i64>("SELECT count(*) FROM dlock_locks WHERE key = 't:rel'"), Some(0));
        assert_eq!(one::<bool>("SELECT dlock_release('t:rel', 'a')"), Some(false));
    }

    #[pg_test]
    fn release_by_other_owner_is_refused() {
        fence("SELECT dlock_acquire('t:other', 'a', '10s')");
        assert_eq!(one::<bool>("SELECT dlock_release('t:other', 'b')"), Some(false));
        assert_eq!(one::<bool>("SELECT dlock_release('t:unknown', 'b')"), Some(false));
        assert_eq!(
            one::<String>("SELECT owner FROM dlock_locks WHERE key = 't:other'").as_deref(),
            Some("a")
        );
    }

    #[pg_test]
    fn fences_strictly_increase_across_release_and_expiry() {
        let f1 = fence("SELECT dlock_acquire('t:fence', 'a', '10s')");
        one::<bool>("SELECT dlock_release('t:fence', 'a')");
        let f2 = fence("SELECT dlock_acquire('t:fence', 'b', '10ms')");
        Spi::run("SELECT pg_sleep(0.03)").unwrap();
        let f3 = fence("SELECT dlock_acquire('t:fence', 'c', '10s')");
        assert!(f1 < f2 && f2 < f3, "{f1} < {f2} < {f3}");
    }

    #[pg_test]
    fn expired_lease_is_free_for_the_next_and_dead_for_its_old_owner() {
        let f = fence("SELECT dlock_acquire('t:exp', 'a', '10ms')");
        Spi::run("SELECT pg_sleep(0.03)").unwrap();
        assert_eq!(one::<i64>("SELECT count(*) FROM dlock_locks WHERE key = 't:exp'"), Some(0));
        assert_eq!(holds("t:exp", f), Some(false));
        assert_eq!(one::<TimestampWithTimeZone>("SELECT dlock_renew('t:exp', 'a', '10s')"), None);
        assert_eq!(one::<bool>("SELECT dlock_release('t:exp', 'a')"), Some(false));
        let g = fence("SELECT dlock_acquire('t:exp', 'b', '10s')");
        assert!(g > f);
    }

    #[pg_test]
    fn renew_moves_expiry_to_now_plus_ttl_for_the_holder_only() {
        let f = fence("SELECT dlock_acquire('t:renew', 'a', '10s')");
        assert_eq!(
            one::<bool>("SELECT dlock_renew('t:renew', 'a', '1 hour') > clock_timestamp() + '59 min'"),
            Some(true)
        );
        assert_eq!(one::<TimestampWithTimeZone>("SELECT dlock_renew('t:renew', 'b', '1 hour')"), None);
        assert_eq!(one::<i64>("SELECT fence FROM dlock_locks WHERE key = 't:renew'"), Some(f));
        assert_eq!(one::<i32>("SELECT hold_count FROM dlock_locks WHERE key = 't:renew'"), Some(1));
        // Renew can also shorten: it is now + ttl, not greatest().
        assert_eq!(
            one::<bool>("SELECT dlock_renew('t:renew', 'a', '1s') < clock_timestamp() + '2s'"),
            Some(true)
        );
    }

    #[pg_test]
    fn session_bound_lease_never_expires_and_renews_to_infinity() {
        fence("SELECT dlock_acquire('t:sb', 'a', NULL)");
        assert_eq!(
            one::<String>("SELECT expires_at::text FROM dlock_locks WHERE key = 't:sb'").as_deref(),
            Some("infinity")
        );
        assert_eq!(one::<String>("SELECT dlock_renew('t:sb', 'a', '1s')::text").as_deref(), Some("infinity"));
        assert_eq!(one::<i64>("SELECT dlock_acquire('t:sb', 'b', '1s')"), None);
    }

    #[pg_test]
    fn holds_is_true_only_for_the_live_fence() {
        let f = fence("SELECT dlock_acquire('t:holds', 'a', '10s')");
        assert_eq!(holds("t:holds", f), Some(true));
        assert_eq!(holds("t:holds", f + 1), Some(false));
        one::<bool>("SELECT dlock_release('t:holds', 'a')");
        assert_eq!(holds("t:holds", f), Some(false));
    }

    #[pg_test]
    fn release_all_frees_every_key_of_the_owner_and_no_other() {
        fence("SELECT dlock_acquire('t:all1', 'a', '10s')");
        fence("SELECT dlock_acquire('t:all1', 'a', '10s')");
        fence("SELECT dlock_acquire('t:all2', 'a', NULL)");
        fence("SELECT dlock_acquire('t:all3', 'b', '10s')");
        assert_eq!(one::<i32>("SELECT dlock_release_all('a')"), Some(2));
        assert_eq!(one::<i64>("SELECT count(*) FROM dlock_locks WHERE key LIKE 't:all%'"), Some(1));
        assert_eq!(one::<i32>("SELECT dlock_release_all('a')"), Some(0));
    }

    #[pg_test]
    fn bad_inputs_get_their_sqlstates() {
        let long_key = format!("SELECT dlock_acquire('{}', 'a', '1s')", "k".repeat(1025));
        let long_owner = format!("SELECT dlock_acquire('k', '{}', '1s')", "o".repeat(257));
        let cases: &[(&str, &str)] = &[
            ("SELECT dlock_acquire(NULL, 'a', '1s')", "22004"),
            ("SELECT dlock_acquire('k', NULL, '1s')", "22004"),
            ("SELECT dlock_acquire('', 'a', '1s')", "22023"),
            (&long_key, "22023"),
            ("SELECT dlock_acquire('k', '', '1s')", "22023"),
            (&long_owner, "22023"),
            ("SELECT dlock_acquire('k', 'a', '0s')", "22023"),
            ("SELECT dlock_acquire('k', 'a', '-1s')", "22023"),
            ("SELECT dlock_acquire('k', 'a', '1 day 1 second')", "22023"),
            ("SELECT dlock_acquire('k', 'a', '1 mon')", "22023"),
            ("SELECT dlock_acquire('k', 'a', '1s', '-1ms')", "22023"),
            ("SELECT dlock_renew(NULL, 'a', '1s')", "22004"),
            ("SELECT dlock_renew('k', 'a', NULL)", "22004"),
            ("SELECT dlock_renew('k', 'a', '0s')", "22023"),
            ("SELECT dlock_release('k', NULL)", "22004"),
            ("SELECT dlock_release('', 'a')", "22023"),
            ("SELECT dlock_release_all(NULL)", "22004"),
            ("SELECT dlock_release_all('')", "22023"),
            ("SELECT dlock_holds(NULL, 1)", "22004"),
            ("SELECT dlock_holds('k', NULL)", "22004"),
            ("SELECT dlock_force_release(NULL)", "22004"),
        ];
        for (sql, state) in cases {
            assert_eq!(sqlstate(sql).as_deref(), Some(*state), "{}", &sql[..sql.len().min(80)]);
        }
        // The limits themselves are accepted.
        let at_limit =
            format!("SELECT dlock_acquire('{}', '{}', '1 day')", "k".repeat(1024), "o".repeat(256));
        assert_eq!(sqlstate(&at_limit), None);
    }

    #[pg_test]
    fn max_ttl_bounds_every_ttl() {
        Spi::run("SET dlock.max_ttl = '10s'").unwrap();
        assert_eq!(sqlstate("SELECT dlock_acquire('t:max', 'a', '11s')").as_deref(), Some("22023"));
        assert!(one::<i64>("SELECT dlock_acquire('t:max', 'a', '10s')").is_some());
        assert_eq!(sqlstate("SELECT dlock_renew('t:max', 'a', '1 min')").as_deref(), Some("22023"));
        Spi::run("CREATE ROLE dlock_t_user").unwrap();
        Spi::run("SET ROLE dlock_t_user").unwrap();
        assert_eq!(sqlstate("SET dlock.max_ttl = '1 min'").as_deref(), Some("42501"));
        Spi::run("RESET ROLE").unwrap();
    }

    #[pg_test]
    fn another_role_with_the_right_owner_gets_42501() {
        Spi::run("CREATE ROLE dlock_t_r1; CREATE ROLE dlock_t_r2").unwrap();
        Spi::run("SET ROLE dlock_t_r1").unwrap();
        let f = fence("SELECT dlock_acquire('t:role', 'a', '10s')");
        Spi::run("SET ROLE dlock_t_r2").unwrap();
        assert_eq!(sqlstate("SELECT dlock_renew('t:role', 'a', '10s')").as_deref(), Some("42501"));
        assert_eq!(sqlstate("SELECT dlock_release('t:role', 'a')").as_deref(), Some("42501"));
        assert_eq!(sqlstate("SELECT dlock_force_release('t:role')").as_deref(), Some("42501"));
        // Another owner string is simply not the holder.
        assert_eq!(one::<bool>("SELECT dlock_release('t:role', 'b')"), Some(false));
        // And r2 does not see r1's owner string.
        assert_eq!(one::<String>("SELECT owner FROM dlock_locks WHERE key = 't:role'"), None);
        assert_eq!(one::<i64>("SELECT fence FROM dlock_locks WHERE key = 't:role'"), Some(f));
        assert_eq!(one::<i32>("SELECT dlock_release_all('a')"), Some(0));
        Spi::run("SET ROLE dlock_t_r1").unwrap();
        assert_eq!(one::<String>("SELECT owner FROM dlock_locks WHERE key = 't:role'").as_deref(), Some("a"));
        Spi::run("RESET ROLE").unwrap();
    }

    #[pg_test]
    fn dlock_admin_members_can_force_release_and_see_owners() {
        Spi::run("CREATE ROLE dlock_t_owner; CREATE ROLE dlock_t_admin IN ROLE dlock_admin").unwrap();
        Spi::run("SET ROLE dlock_t_owner").unwrap();
        fence("SELECT dlock_acquire('t:force', 'a', '10s')");
        Spi::run("SET ROLE dlock_t_admin").unwrap();
        assert_eq!(
            one::<String>("SELECT owner FROM dlock_locks WHERE key = 't:force'").as_deref(),
            Some("a")
        );
        assert_eq!(one::<bool>("SELECT dlock_force_release('t:force')"), Some(true));
        assert_eq!(one::<bool>("SELECT dlock_force_release('t:force')"), Some(false));
        Spi::run("RESET ROLE").unwrap();
        assert_eq!(one::<i64>("SELECT count(*) FROM dlock_locks WHERE key = 't:force'"), Some(0));
    }

    #[pg_test]
    fn public_cannot_touch_the_lease_table() {
        Spi::run("CREATE ROLE dlock_t_public").unwrap();
        Spi::run("SET ROLE dlock_t_public").unwrap();
        for sql in [
            "SELECT * FROM dlock_internal.lease",
            "INSERT INTO dlock_internal.lease VALUES ('k', 'o', 1, 1, 1, now(), now(), 1)",
            "UPDATE dlock_internal.lease SET owner = 'x'",
            "DELETE FROM dlock_internal.lease",
            "SELECT nextval('dlock_internal.fence_seq')",
        ] {
            assert_eq!(sqlstate(sql).as_deref(), Some("42501"), "{sql}");
        }
        // The functions themselves work for this role.
        assert!(one::<i64>("SELECT dlock_acquire('t:pub', 'a', '10s')").is_some());
        Spi::run("RESET ROLE").unwrap();
    }

    /// Fast mode's functions pin no search_path because they run no SQL: any statement run
    /// inside `forbid_sql` is an internal error, not a statement.
    #[pg_test]
    #[should_panic(expected = "SQL inside a function that must run none")]
    fn no_statement_runs_where_sql_is_forbidden() {
        crate::pg::spi::forbid_sql(|| crate::pg::spi::connect(crate::store::all));
    }

    /// Outside it, the same statement runs (the refusal is the mark's, not the statement's).
    #[pg_test]
    fn statements_run_where_sql_is_allowed() {
        let _ = fence("SELECT dlock_acquire('t:allowed', 'a', '10s')");
        let rows = crate::pg::spi::connect(crate::store::all);
        assert!(rows.iter().any(|(key, _)| key == "t:allowed"));
    }

    /// Every statement dlock runs is planned under its own search_path: a caller's
    /// `search_path` with a schema of its own first changes nothing dlock reads.
    #[pg_test]
    fn a_callers_search_path_reaches_no_statement() {
        Spi::run(
            "CREATE SCHEMA t_hostile; \
             CREATE FUNCTION t_hostile.never(text, text) RETURNS boolean LANGUAGE sql AS 'SELECT false'; \
             CREATE OPERATOR t_hostile.= (LEFTARG = text, RIGHTARG = text, FUNCTION = t_hostile.never)",
        )
        .unwrap();
        let _ = fence("SELECT dlock_acquire('t:path', 'a', '10s')");
        Spi::run("SET search_path = t_hostile, pg_catalog, public").unwrap();
        let rows = crate::pg::spi::connect(crate::store::all);
        Spi::run("RESET search_path").unwrap();
        assert!(rows.iter().any(|(key, _)| key == "t:path"), "the lease is read whatever the path");
    }
}
