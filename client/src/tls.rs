//! Client-side TLS: the `rustls` configuration an outbound connection
//! presents (the CAs the peer's certificate must chain to, a client
//! certificate, the enabled TLS versions, Kafka's
//! `ssl.endpoint.identification.algorithm`), and the PEM reading the broker's
//! server-side TLS shares.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
    SupportedProtocolVersion,
};
use thiserror::Error;

/// Why a TLS configuration could not be built.
#[derive(Debug, Error)]
pub enum TlsError {
    /// A setting a TLS listener needs is empty.
    #[error("`{0}` must be set for SSL and SASL_SSL listeners")]
    Missing(&'static str),
    /// A PEM file could not be read or holds nothing usable.
    #[error("cannot read {what} from {path}: {reason}")]
    Pem {
        /// What was looked for (certificate chain, private key, CA certificates).
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The parser's complaint.
        reason: String,
    },
    /// rustls refused the material (a key that does not match, a bad certificate).
    #[error("invalid TLS configuration: {0}")]
    Rustls(#[from] rustls::Error),
    /// The client-certificate verifier could not be built.
    #[error("cannot verify client certificates: {0}")]
    Verifier(String),
}

/// What a client's TLS configuration is read from, by Kafka's setting names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsClientSettings {
    /// `ssl.truststore.location`: the CA certificates the peer's certificate must chain to, PEM.
    pub truststore: Option<PathBuf>,
    /// `ssl.certificate.location`: the certificate chain presented when the peer asks for one, PEM.
    pub certificate: Option<PathBuf>,
    /// `ssl.key.location`: its private key, PEM.
    pub key: Option<PathBuf>,
    /// `ssl.enabled.protocols`: offer TLS 1.2.
    pub tls12: bool,
    /// `ssl.enabled.protocols`: offer TLS 1.3.
    pub tls13: bool,
    /// `ssl.endpoint.identification.algorithm`: `https` checks the peer's
    /// certificate against the host connected to; empty does not.
    pub verify_hostname: bool,
}

impl TlsClientSettings {
    /// The `rustls` client configuration: the truststore's CAs, the
    /// certificate presented as client certificate, the enabled TLS versions.
    /// Blocking file reads: call at startup.
    ///
    /// # Errors
    /// [`TlsError`] naming the file or setting at fault.
    pub fn client_config(&self) -> Result<ClientConfig, TlsError> {
        let ca_path =
            self.truststore.as_deref().ok_or(TlsError::Missing("ssl.truststore.location"))?;
        let mut roots = RootCertStore::empty();
        for cert in read_certificates("CA certificates", ca_path)? {
            roots.add(cert).map_err(|e| TlsError::Pem {
                what: "CA certificates",
                path: ca_path.to_path_buf(),
                reason: e.to_string(),
            })?;
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&protocol_versions(self.tls12, self.tls13))?;
        let builder = if self.verify_hostname {
            builder.with_root_certificates(roots)
        } else {
            let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| TlsError::Verifier(e.to_string()))?;
            builder.dangerous().with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
        };
        // The broker's own certificate, for leaders with `ssl.client.auth=required`.
        match (self.certificate.as_deref(), self.key.as_deref()) {
            (Some(cert_path), Some(key_path)) => {
                let chain = read_certificates("certificate chain", cert_path)?;
                let key = read_private_key(key_path)?;
                Ok(builder.with_client_auth_cert(chain, key)?)
            }
            _ => Ok(builder.with_no_client_auth()),
        }
    }
}

/// Kafka's `ssl.endpoint.identification.algorithm=` (empty): the chain must
/// reach a trusted CA and be valid now, but any host name is accepted.
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
        // webpki checks the chain before the name: a name error means the chain was good.
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
        {
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

/// A [`TlsError::Pem`] for `what` in the file at `path`.
pub fn pem_error(what: &'static str, path: &Path, e: impl std::fmt::Display) -> TlsError {
    TlsError::Pem { what, path: path.to_path_buf(), reason: e.to_string() }
}

/// The certificates of the PEM file at `path` (`what` names them in errors); at least one.
pub fn read_certificates(
    what: &'static str,
    path: &Path,
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
        .map_err(|e| pem_error(what, path, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| pem_error(what, path, e))?;
    if certs.is_empty() {
        return Err(pem_error(what, path, "no CERTIFICATE section"));
    }
    Ok(certs)
}

/// The private key of the PEM file at `path`.
pub fn read_private_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| pem_error("private key", path, e))
}

/// The TLS versions `ssl.enabled.protocols` allows, newest first.
pub fn protocol_versions(tls12: bool, tls13: bool) -> Vec<&'static SupportedProtocolVersion> {
    let mut versions: Vec<&'static SupportedProtocolVersion> = Vec::new();
    if tls13 {
        versions.push(&rustls::version::TLS13);
    }
    if tls12 {
        versions.push(&rustls::version::TLS12);
    }
    versions
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(truststore: Option<&str>) -> TlsClientSettings {
        TlsClientSettings {
            truststore: truststore.map(PathBuf::from),
            certificate: None,
            key: None,
            tls12: true,
            tls13: true,
            verify_hostname: true,
        }
    }

    #[test]
    fn the_setting_or_file_at_fault_is_named() {
        let e = settings(None).client_config().expect_err("no truststore");
        assert!(matches!(e, TlsError::Missing("ssl.truststore.location")), "{e}");
        let e = settings(Some("/nonexistent/ca.pem")).client_config().expect_err("no such file");
        assert!(
            matches!(&e, TlsError::Pem { what: "CA certificates", .. })
                && e.to_string().contains("/nonexistent/ca.pem"),
            "{e}"
        );
    }
}
