//! Telling a TLS failure from other connection failures, and saying why in words: the driver
//! has no kind for it, and rustls' verdict hides inside an I/O error.

/// What went wrong setting up TLS, if that is what `e` is about: rustls' verdict (it is
/// wrapped in an `io::Error`, whose `source()` skips it, so it is looked for by hand), or
/// tokio-postgres' own (a server that does not offer TLS).
pub(super) fn failure(e: &tokio_postgres::Error) -> Option<String> {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(error) = cause {
        let rustls = error
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            .or_else(|| error.downcast_ref::<rustls::Error>());
        match rustls {
            Some(rustls::Error::InvalidCertificate(why)) => {
                return Some(format!(
                    "the server's certificate could not be verified: {}",
                    certificate_error(why)
                ));
            }
            Some(other) => return Some(format!("the TLS handshake failed: {other}")),
            None => cause = error.source(),
        }
    }
    // tokio-postgres' message for its TLS errors (it has no kind to ask for); its reason is
    // the error's source.
    let message = e.to_string();
    if !message.starts_with("error performing TLS handshake") {
        return None;
    }
    Some(match std::error::Error::source(e) {
        Some(reason) => format!("{message}: {reason}"),
        None => message,
    })
}

/// Why a certificate was refused, in words where rustls has none of its own.
fn certificate_error(error: &rustls::CertificateError) -> String {
    match error {
        rustls::CertificateError::UnknownIssuer => {
            "it is not signed by a certificate authority of sslrootcert (UnknownIssuer)".into()
        }
        // A self-signed server certificate marked CA:TRUE given as its own root (OpenSSL's
        // `req -x509` default): WebPKI takes no CA certificate as a server's.
        rustls::CertificateError::Other(other) if format!("{other:?}").contains("CaUsedAsEndEntity") => {
            "the server presents a CA certificate as its own (CaUsedAsEndEntity): give the server a \
             certificate signed by the CA in sslrootcert (a self-signed one must not be marked CA:TRUE)"
                .into()
        }
        other => other.to_string(),
    }
}
