//! TLS with libpq's `sslmode` meanings, on rustls (tokio-postgres itself only knows disable,
//! prefer and require, and never verifies anything: that is the connector's job).

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::Error;

/// How much TLS a connection asks for (`sslmode`, `PGSSLMODE`), as libpq reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS if the server offers it, else plain (libpq's default).
    #[default]
    Prefer,
    /// TLS or no connection.
    Require,
    /// TLS, and the server's certificate must chain to the root certificate.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host connected to.
    VerifyFull,
}

impl FromStr for SslMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "disable" => Ok(SslMode::Disable),
            "prefer" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-ca" => Ok(SslMode::VerifyCa),
            "verify-full" => Ok(SslMode::VerifyFull),
            // libpq's plain-first mode: tokio-postgres cannot fall back from plain to TLS.
            "allow" => Err("sslmode=allow is not supported: use prefer or disable".into()),
            other => {
                Err(format!("sslmode={other:?}: expected disable, prefer, require, verify-ca or verify-full"))
            }
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        })
    }
}

impl SslMode {
    /// What tokio-postgres is told: whether to ask for TLS, and whether to insist.
    pub(crate) fn for_tokio_postgres(self) -> tokio_postgres::config::SslMode {
        use tokio_postgres::config::SslMode as Pg;
        match self {
            SslMode::Disable => Pg::Disable,
            SslMode::Prefer => Pg::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => Pg::Require,
        }
    }

    fn verifies(self) -> bool {
        matches!(self, SslMode::VerifyCa | SslMode::VerifyFull)
    }
}

/// The TLS side of a connection string: the mode, and the root certificate(s) to verify with.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct TlsSettings {
    pub(crate) mode: SslMode,
    /// `sslrootcert`, or libpq's default `~/.postgresql/root.crt` when that file exists.
    pub(crate) root_cert: Option<PathBuf>,
}

impl TlsSettings {
    /// Checks that the settings can work: the verifying modes need a root certificate.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.mode.verifies() && self.root_cert.is_none() {
            return Err(Error::Config(format!(
                "sslmode={} needs the root certificate to verify the server with: set sslrootcert \
                 (or PGSSLROOTCERT, or put it in ~/.postgresql/root.crt), or use sslmode=require \
                 to encrypt without verifying",
                self.mode
            )));
        }
        Ok(())
    }

    /// The connector for tokio-postgres. Like libpq, `prefer` and `require` verify the chain
    /// too when a root certificate is given; `verify-full` also checks the host name.
    /// Reads the root certificate file now: [`Error::Config`] if it cannot.
    pub(crate) fn connector(&self) -> Result<MakeRustlsConnect, Error> {
        self.check()?;
        let (path, mode) = match (&self.root_cert, self.mode) {
            // Disable: never used to connect (tokio-postgres is told not to), but one is needed.
            (_, SslMode::Disable) | (None, _) => return Ok(self.unverified_connector()),
            (Some(path), mode) => (path, mode),
        };
        let provider = provider();
        let chain =
            WebPkiServerVerifier::builder_with_provider(Arc::new(read_roots(path)?), provider.clone())
                .build()
                .map_err(|e| Error::Config(format!("cannot verify with {}: {e}", path.display())))?;
        let verifier: Arc<dyn ServerCertVerifier> =
            if mode == SslMode::VerifyFull { chain } else { Arc::new(ChainOnly(chain)) };
        Ok(connector(provider, verifier))
    }

    /// A connector that encrypts without verifying the server's certificate (whatever the
    /// mode and root certificate say).
    pub(crate) fn unverified_connector(&self) -> MakeRustlsConnect {
        let provider = provider();
        let verifier = Arc::new(AnyCertificate { algorithms: provider.signature_verification_algorithms });
        connector(provider, verifier)
    }
}

/// rustls' crypto from the pure-Rust `ring` crate, named rather than left to the process-wide
/// default (which an application may not have installed, or may have set to another).
fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn connector(provider: Arc<CryptoProvider>, verifier: Arc<dyn ServerCertVerifier>) -> MakeRustlsConnect {
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        // Only fails for a provider without TLS 1.2 and 1.3 cipher suites; ring has both.
        .expect("ring's provider supports the default TLS versions")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    MakeRustlsConnect::new(config)
}

/// The certificates of a PEM file (one or more).
fn read_roots(path: &Path) -> Result<RootCertStore, Error> {
    let unreadable = |e: &dyn fmt::Display| {
        Error::Config(format!("cannot read the root certificate file sslrootcert={}: {e}", path.display()))
    };
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(path).map_err(|e| unreadable(&e))? {
        roots.add(certificate.map_err(|e| unreadable(&e))?).map_err(|e| unreadable(&e))?;
    }
    if roots.is_empty() {
        return Err(unreadable(&"no PEM certificate in it"));
    }
    Ok(roots)
}

/// `require` and `prefer` without a root certificate: encrypted, but anyone's certificate is
/// taken (libpq's meaning; it protects against eavesdroppers, not against impostors). The
/// handshake's signatures are still checked against the certificate presented.
#[derive(Debug)]
struct AnyCertificate {
    algorithms: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `verify-ca`: the whole of WebPKI's verification but the host name. WebPKI checks the chain
/// (signatures, validity, usage) before the name, so a name error means the chain passed.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn libpqs_modes_parse_and_print_back() {
        for mode in
            [SslMode::Disable, SslMode::Prefer, SslMode::Require, SslMode::VerifyCa, SslMode::VerifyFull]
        {
            assert_eq!(mode.to_string().parse::<SslMode>(), Ok(mode));
        }
        assert!("allow".parse::<SslMode>().unwrap_err().contains("not supported"));
        assert!("verify_full".parse::<SslMode>().is_err());
        assert!("".parse::<SslMode>().is_err());
    }

    #[test]
    fn verifying_modes_need_a_root_certificate() {
        for mode in [SslMode::VerifyCa, SslMode::VerifyFull] {
            let settings = TlsSettings { mode, root_cert: None };
            assert!(matches!(settings.connector(), Err(Error::Config(m)) if m.contains("sslrootcert")));
        }
        for mode in [SslMode::Disable, SslMode::Prefer, SslMode::Require] {
            assert!(TlsSettings { mode, root_cert: None }.connector().is_ok(), "{mode}");
        }
    }

    #[test]
    fn an_unreadable_or_empty_root_certificate_file_is_a_config_error() {
        let missing =
            TlsSettings { mode: SslMode::VerifyFull, root_cert: Some("/nonexistent/dlock/root.crt".into()) };
        assert!(matches!(missing.connector(), Err(Error::Config(m)) if m.contains("/nonexistent/dlock")));
        let empty = std::env::temp_dir().join(format!("dlock-empty-root-{}.crt", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let settings = TlsSettings { mode: SslMode::VerifyCa, root_cert: Some(empty.clone()) };
        let outcome = settings.connector();
        std::fs::remove_file(&empty).unwrap();
        assert!(matches!(outcome, Err(Error::Config(m)) if m.contains("no PEM certificate")));
    }
}
