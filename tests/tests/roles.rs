//! Roles and privileges: a lease belongs to the role that took it, only dlock_admin members
//! and superusers force-release or see other roles' owners, and the lease state is closed to
//! PUBLIC.

use std::time::Duration;

use dlock_tests::{Cluster, Session, SqlState, eventually, expect_sqlstate, key, owner};

/// Creates LOGIN roles (each test uses names of its own: roles are cluster-wide) and makes
/// the `admins` members of `dlock_admin`.
async fn create_roles(superuser: &Session, users: &[&str], admins: &[&str]) {
    let exists: bool = superuser
        .query_one("SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = 'dlock_admin')", &[])
        .await
        .unwrap()
        .get(0);
    assert!(exists, "CREATE EXTENSION dlock must create the role dlock_admin");
    for role in users.iter().chain(admins) {
        superuser.batch_execute(&format!("CREATE ROLE {role} LOGIN")).await.unwrap();
    }
    for role in admins {
        superuser.batch_execute(&format!("GRANT dlock_admin TO {role}")).await.unwrap();
    }
}

#[tokio::test]
async fn lease_of_another_role_cannot_be_renewed_or_released_even_with_its_owner() {
    const T: &str = "lease_of_another_role_cannot_be_renewed_or_released_even_with_its_owner";
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    create_roles(&superuser, &["scoping_r1", "scoping_r2"], &[]).await;
    let (r1, r2) = (cluster.connect_as("scoping_r1").await, cluster.connect_as("scoping_r2").await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = r1.try_acquire(&k, &o, "30s").await.unwrap().expect("r1 is granted");
    let before = superuser.lease(&k).await.unwrap().unwrap();
    assert_eq!(before.holder_role.as_deref(), Some("scoping_r1"));

    expect_sqlstate(r2.renew(&k, &o, Some("60s")).await, &SqlState::INSUFFICIENT_PRIVILEGE, "renew by r2");
    expect_sqlstate(r2.release(&k, &o).await, &SqlState::INSUFFICIENT_PRIVILEGE, "release by r2");
    assert_eq!(r2.renew(&k, &owner(T, "wrong"), Some("60s")).await.unwrap(), None, "r2, wrong owner");
    assert!(!r2.release(&k, &owner(T, "wrong")).await.unwrap(), "r2, wrong owner");
    assert_eq!(r2.release_all(&o).await.unwrap(), 0, "release_all frees only the caller's role's leases");
    assert_eq!(r2.try_acquire(&k, &owner(T, "r2"), "30s").await.unwrap(), None);
    assert_eq!(superuser.lease(&k).await.unwrap(), Some(before), "r1's lease is unchanged");

    assert!(r1.renew(&k, &o, Some("60s")).await.unwrap().is_some(), "r1 renews its own lease");
    assert!(r1.holds(&k, fence).await.unwrap());
    assert!(r1.release(&k, &o).await.unwrap(), "r1 releases its own lease");
}

#[tokio::test]
async fn set_role_decides_which_role_a_lease_belongs_to() {
    const T: &str = "set_role_decides_which_role_a_lease_belongs_to";
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    create_roles(&superuser, &["setrole_r1", "setrole_r2"], &[]).await;
    let switching = cluster.connect().await;
    let (k, o) = (key(T, "k"), owner(T, "o"));

    switching.batch_execute("SET ROLE setrole_r1").await.unwrap();
    let fence = switching.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let row = superuser.lease(&k).await.unwrap().unwrap();
    assert_eq!(row.holder_role.as_deref(), Some("setrole_r1"), "the lease's role is the current role");

    switching.batch_execute("SET ROLE setrole_r2").await.unwrap();
    expect_sqlstate(
        switching.renew(&k, &o, Some("30s")).await,
        &SqlState::INSUFFICIENT_PRIVILEGE,
        "renew after SET ROLE to another role",
    );
    let r1 = cluster.connect_as("setrole_r1").await;
    assert!(r1.renew(&k, &o, Some("30s")).await.unwrap().is_some(), "r1's own login renews it");
    assert!(r1.holds(&k, fence).await.unwrap());
    switching.batch_execute("SET ROLE setrole_r1").await.unwrap();
    assert!(switching.release(&k, &o).await.unwrap(), "release after SET ROLE back");
    switching.batch_execute("RESET ROLE").await.unwrap();
}

#[tokio::test]
async fn only_dlock_admin_members_and_superusers_force_release() {
    const T: &str = "only_dlock_admin_members_and_superusers_force_release";
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    create_roles(&superuser, &["force_r1", "force_r2"], &["force_admin"]).await;
    let (r1, r2) = (cluster.connect_as("force_r1").await, cluster.connect_as("force_r2").await);
    let admin = cluster.connect_as("force_admin").await;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    r1.try_acquire(&k, &o, "30s").await.unwrap().unwrap();
    let before = superuser.lease(&k).await.unwrap().unwrap();

    expect_sqlstate(r2.force_release(&k).await, &SqlState::INSUFFICIENT_PRIVILEGE, "force_release by r2");
    expect_sqlstate(r1.force_release(&k).await, &SqlState::INSUFFICIENT_PRIVILEGE, "force_release by r1");
    assert_eq!(superuser.lease(&k).await.unwrap(), Some(before), "the lease is unchanged");

    assert!(admin.force_release(&k).await.unwrap(), "a dlock_admin member force-releases");
    assert_eq!(superuser.lease(&k).await.unwrap(), None);
    assert_eq!(r1.renew(&k, &o, Some("30s")).await.unwrap(), None, "r1 no longer holds it");

    // Logged at LOG level, with who did it.
    eventually(Duration::from_secs(3), "a LOG line naming the key and force_admin", || async {
        cluster
            .server_log_tail(200)
            .lines()
            .any(|line| line.contains("LOG:") && line.contains(k.as_str()) && line.contains("force_admin"))
    })
    .await;
}

#[tokio::test]
async fn dlock_admin_members_renew_and_release_leases_of_any_role() {
    const T: &str = "dlock_admin_members_renew_and_release_leases_of_any_role";
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    create_roles(&superuser, &["admin_any_r1"], &["admin_any_admin"]).await;
    let (r1, admin) = (cluster.connect_as("admin_any_r1").await, cluster.connect_as("admin_any_admin").await);
    let o = owner(T, "o");
    let (k1, k2, k3) = (key(T, "k1"), key(T, "k2"), key(T, "k3"));
    for k in [&k1, &k2, &k3] {
        r1.try_acquire(k, &o, "30s").await.unwrap().unwrap();
    }
    assert!(admin.renew(&k1, &o, Some("60s")).await.unwrap().is_some(), "admin renews r1's lease");
    assert!(admin.release(&k1, &o).await.unwrap(), "admin releases r1's lease");
    assert_eq!(admin.release_all(&o).await.unwrap(), 2, "admin's release_all covers every role");
    for k in [&k1, &k2, &k3] {
        assert_eq!(superuser.lease(k).await.unwrap(), None, "{k} is free");
    }
}

#[tokio::test]
async fn locks_view_shows_owners_only_to_their_role_and_admins() {
    const T: &str = "locks_view_shows_owners_only_to_their_role_and_admins";
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    create_roles(&superuser, &["view_r1", "view_r2"], &["view_admin"]).await;
    let (r1, r2) = (cluster.connect_as("view_r1").await, cluster.connect_as("view_r2").await);
    let admin = cluster.connect_as("view_admin").await;
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = r1.try_acquire(&k, &o, "30s").await.unwrap().unwrap();

    let seen_by_r2 = r2.lease(&k).await.unwrap().expect("r2 sees the lease itself");
    assert_eq!(seen_by_r2.owner, None, "r2 must not see r1's owner");
    assert_eq!(seen_by_r2.fence, fence);
    assert_eq!(seen_by_r2.holder_role.as_deref(), Some("view_r1"));
    for (viewer, who) in [(&r1, "r1"), (&admin, "a dlock_admin member"), (&superuser, "a superuser")] {
        let row = viewer.lease(&k).await.unwrap().expect("the lease is listed");
        assert_eq!(row.owner.as_deref(), Some(o.as_str()), "{who} sees the owner");
    }
    assert!(r1.release(&k, &o).await.unwrap());
}

#[tokio::test]
async fn lease_state_is_closed_to_public() {
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    create_roles(&superuser, &["closed_user"], &[]).await;
    let user = cluster.connect_as("closed_user").await;

    // The objects exist (so a refusal below is 42501, not "does not exist").
    let row = superuser
        .query_one(
            "SELECT to_regclass('dlock_internal.lease') IS NOT NULL, \
                    to_regclass('dlock_internal.fence_seq') IS NOT NULL, \
                    (SELECT quote_ident(attname) FROM pg_attribute \
                      WHERE attrelid = to_regclass('dlock_internal.lease') AND attnum = 1)",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "dlock_internal.lease exists");
    assert!(row.get::<_, bool>(1), "dlock_internal.fence_seq exists");
    let column: String = row.get(2);

    // No ACL entry for PUBLIC (grantee 0) on the table or the sequence.
    let public_grants: i64 = superuser
        .query_one(
            "SELECT count(*) FROM pg_class c, \
                    aclexplode(coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::\"char\", c.relowner))) a \
              WHERE c.oid IN ('dlock_internal.lease'::regclass, 'dlock_internal.fence_seq'::regclass) \
                AND a.grantee = 0",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(public_grants, 0, "PUBLIC has privileges on the lease table or fence sequence");

    let refused = [
        "SELECT count(*) FROM dlock_internal.lease".to_string(),
        "INSERT INTO dlock_internal.lease DEFAULT VALUES".to_string(),
        format!("UPDATE dlock_internal.lease SET {column} = {column}"),
        "DELETE FROM dlock_internal.lease".to_string(),
        "TRUNCATE dlock_internal.lease".to_string(),
        "SELECT nextval('dlock_internal.fence_seq')".to_string(),
        "SELECT setval('dlock_internal.fence_seq', 1)".to_string(),
        "SELECT last_value FROM dlock_internal.fence_seq".to_string(),
    ];
    for sql in &refused {
        expect_sqlstate(user.batch_execute(sql).await, &SqlState::INSUFFICIENT_PRIVILEGE, sql);
    }

    // The same role uses the API normally.
    let (k, o) = (key("lease_state_is_closed_to_public", "k"), owner("lease_state_is_closed_to_public", "o"));
    assert!(user.try_acquire(&k, &o, "30s").await.unwrap().is_some());
    assert!(user.release(&k, &o).await.unwrap());
}

/// A refused renew or release lets go of the key before its error reaches the caller: the
/// server sends an error before it aborts the transaction, and a key lock still held then
/// made the holder's next try, sent the moment the error came back, answer NULL (busy).
#[tokio::test]
async fn a_refused_call_lets_go_of_the_key_before_it_answers() {
    const T: &str = "a_refused_call_lets_go_of_the_key_before_it_answers";
    const ROUNDS: usize = 300;
    let cluster = Cluster::shared();
    let superuser = cluster.connect().await;
    create_roles(&superuser, &["refused_r1", "refused_r2"], &[]).await;
    let (r1, r2) = (cluster.connect_as("refused_r1").await, cluster.connect_as("refused_r2").await);
    let (k, o) = (key(T, "k"), owner(T, "o"));
    let fence = r1.try_acquire(&k, &o, "60s").await.unwrap().expect("r1 is granted");
    let mut busy = [0; 2];
    for round in 0..ROUNDS {
        let refused = if round % 2 == 0 {
            r2.renew(&k, &o, Some("60s")).await.map(|_| ())
        } else {
            r2.release(&k, &o).await.map(|_| ())
        };
        expect_sqlstate(refused, &SqlState::INSUFFICIENT_PRIVILEGE, "r2 on r1's lease");
        match r1.try_acquire(&k, &o, "60s").await.unwrap() {
            Some(f) => assert_eq!(f, fence, "a reentry answers the lease's own fence"),
            None => busy[round % 2] += 1,
        }
    }
    assert_eq!(
        busy,
        [0, 0],
        "of {ROUNDS} reentries right after a refused renew or release, so many found the key busy"
    );
    assert_eq!(r1.release_all(&o).await.unwrap(), 1);
}
