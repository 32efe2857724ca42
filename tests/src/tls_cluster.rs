//! A throwaway certificate authority, and a test cluster serving a certificate it signed.

use std::path::PathBuf;

use crate::Cluster;
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};

/// The names the server's certificate is for: `localhost` is deliberately not one of them.
pub const SERVER_NAMES: [&str; 2] = ["db.dlock.test", "127.0.0.1"];

/// A cluster serving TLS, and the root certificates to verify it with (or fail to).
pub struct TlsCluster {
    pub cluster: &'static Cluster,
    /// The CA that signed the server's certificate (PEM file).
    pub ca: PathBuf,
    /// Another CA, which signed nothing the server has.
    pub other_ca: PathBuf,
}

impl TlsCluster {
    /// Starts the cluster shared by this test binary under `name` and turns TLS on, with a
    /// fresh CA and a server certificate for [`SERVER_NAMES`]. `None`, said on stderr, when the
    /// PostgreSQL under test was built without TLS (the PostgreSQL 18 that `make setup`
    /// installs): the client's TLS does not depend on the server's version, and the run on
    /// Debian's 15 tests it.
    pub async fn start(name: &'static str) -> Option<TlsCluster> {
        let cluster = Cluster::shared_named(name, &[]);
        if !cluster.supports_tls().await {
            eprintln!(
                "TLS tests not run: the PostgreSQL under test was built without TLS (ssl_library is empty)"
            );
            return None;
        }
        let ca = certificate_authority("dlock test CA");
        let server_key = KeyPair::generate().expect("server key");
        let names: Vec<String> = SERVER_NAMES.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).expect("server names");
        params.distinguished_name.push(DnType::CommonName, "dlock test server");
        let server = params.signed_by(&server_key, &ca).expect("server certificate");
        // The chain the server presents: its certificate, then the CA's.
        let chain = format!("{}{}", server.pem(), ca.pem());
        cluster.enable_tls(&chain, &server_key.serialize_pem()).await;
        let write = |file: &str, pem: String| {
            let path = cluster.dir().join(file);
            std::fs::write(&path, pem).expect("write a root certificate");
            path
        };
        let other = certificate_authority("some other CA");
        Some(TlsCluster {
            cluster,
            ca: write("root.crt", ca.pem()),
            other_ca: write("other-root.crt", other.pem()),
        })
    }

    /// A `key=value` connection string of database `postgres` as `postgres`, at `host` (with
    /// `hostaddr=127.0.0.1` when it is a name), and `extra` parameters.
    pub fn url(&self, host: &str, extra: &str) -> String {
        let port = self.cluster.port();
        let hostaddr = if host.parse::<std::net::IpAddr>().is_ok() {
            String::new()
        } else {
            " hostaddr=127.0.0.1".into()
        };
        format!("host={host}{hostaddr} port={port} user=postgres dbname=postgres {extra}")
    }
}

fn certificate_authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("CA key")).expect("CA certificate")
}
