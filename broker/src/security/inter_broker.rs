//! What this broker presents when it connects to another (replica fetchers,
//! transaction markers): the inter-broker listener and its protocol, and the
//! TLS client configuration, by Kafka's setting names.
//!
//! [`InterBrokerSettings`] is read with the rest of the configuration and
//! refuses, at startup, a clustered broker whose inter-broker listener needs
//! TLS without `ssl.truststore.location` (Kafka falls back to the JVM's
//! default truststore; Floe has none). [`InterBrokerClient`] is what
//! connections use: the loaded `rustls` client configuration.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme, SupportedProtocolVersion};

use super::tls::{TlsError, TlsSettings};
use crate::listeners::{ListenerSpec, SecurityProtocol};
use crate::raw_config::{get, ConfigError};

/// The inter-broker client settings.
#[derive(Debug, Clone)]
pub struct InterBrokerSettings {
    /// `inter.broker.listener.name`, resolved: the listener whose endpoint in
    /// each broker's registration this broker connects to (the first listener
    /// when the setting is empty).
    pub listener: String,
    /// That listener's security protocol on this broker.
    pub protocol: SecurityProtocol,
    /// `ssl.endpoint.identification.algorithm`: `https` checks the peer's
    /// certificate against the host connected to; empty does not.
    pub verify_hostname: bool,
}

impl InterBrokerSettings {
    /// Reads the inter-broker settings. `clustered`: whether this broker has
    /// peers at all; a broker alone needs no truststore.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`]: an unknown listener or identification
    /// algorithm; in a cluster, a TLS inter-broker listener without
    /// `ssl.truststore.location`.
    pub(crate) fn from_raw(raw: &BTreeMap<String, String>, listeners: &[ListenerSpec], clustered: bool) -> Result<Self, ConfigError> {
        let invalid = |key: &str, value: &str, reason: String| ConfigError::InvalidValue { key: key.into(), value: value.into(), reason };
        let named = get(raw, "inter.broker.listener.name").trim();
        let spec = if named.is_empty() {
            listeners.first()
        } else {
            listeners.iter().find(|l| l.name.eq_ignore_ascii_case(named))
        };
        let (listener, protocol) = match spec {
            Some(l) => (l.name.clone(), l.protocol),
            None if clustered => return Err(invalid("inter.broker.listener.name", named, "no listener of this broker has that name".into())),
            // Alone, the setting names nothing this broker connects to.
            None => (named.to_string(), SecurityProtocol::Plaintext),
        };
        let algorithm = get(raw, "ssl.endpoint.identification.algorithm").trim();
        let verify_hostname = match algorithm.to_ascii_lowercase().as_str() {
            "https" => true,
            "" => false,
            _ => return Err(invalid("ssl.endpoint.identification.algorithm", algorithm, "expected `https` or empty".into())),
        };
        if clustered && protocol.uses_tls() && get(raw, "ssl.truststore.location").trim().is_empty() {
            return Err(invalid(
                "ssl.truststore.location",
                "",
                format!("the inter-broker listener {listener} is {protocol}: brokers check each other's certificates against this PEM file of CAs (Floe has no default truststore)"),
            ));
        }
        Ok(InterBrokerSettings { listener, protocol, verify_hostname })
    }
}

/// What an outbound inter-broker connection uses: TLS client configuration
/// (for SSL endpoints).
#[derive(Clone, Default)]
pub struct InterBrokerClient {
    tls: Option<Arc<ClientConfig>>,
}

impl fmt::Debug for InterBrokerClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InterBrokerClient").field("tls", &self.tls.is_some()).finish()
    }
}

impl InterBrokerClient {
    /// PLAINTEXT only: no TLS (a broker alone, tests).
    pub fn plaintext() -> Self {
        Self::default()
    }

    /// Loads what `settings` need: the truststore, this broker's certificate
    /// and key (presented to leaders that ask for client certificates) when
    /// the inter-broker listener uses TLS. Blocking file reads: call at startup.
    ///
    /// # Errors
    /// [`TlsError`] naming the file or setting at fault.
    pub fn load(settings: &InterBrokerSettings, tls: &TlsSettings) -> Result<Self, TlsError> {
        let tls_config = if settings.protocol.uses_tls() { Some(Arc::new(client_config(tls, settings.verify_hostname)?)) } else { None };
        Ok(InterBrokerClient { tls: tls_config })
    }

    /// The TLS client configuration, if loaded.
    pub fn tls(&self) -> Option<&Arc<ClientConfig>> {
        self.tls.as_ref()
    }
}

fn read_certificates(what: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem_error = |e: &dyn fmt::Display| TlsError::Pem { what, path: path.to_path_buf(), reason: e.to_string() };
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(path).map_err(|e| pem_error(&e))?.collect::<Result<_, _>>().map_err(|e| pem_error(&e))?;
    if certs.is_empty() {
        return Err(pem_error(&"no CERTIFICATE section"));
    }
    Ok(certs)
}

/// The `rustls` client configuration: the truststore's CAs, this broker's
/// certificate as client certificate, the enabled TLS versions.
fn client_config(settings: &TlsSettings, verify_hostname: bool) -> Result<ClientConfig, TlsError> {
    let ca_path = settings.truststore.as_deref().ok_or(TlsError::Missing("ssl.truststore.location"))?;
    let mut roots = RootCertStore::empty();
    for cert in read_certificates("CA certificates", ca_path)? {
        roots.add(cert).map_err(|e| TlsError::Pem { what: "CA certificates", path: ca_path.to_path_buf(), reason: e.to_string() })?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut versions: Vec<&'static SupportedProtocolVersion> = Vec::new();
    if settings.tls13 {
        versions.push(&rustls::version::TLS13);
    }
    if settings.tls12 {
        versions.push(&rustls::version::TLS12);
    }
    let builder = ClientConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions)?;
    let builder = if verify_hostname {
        builder.with_root_certificates(roots)
    } else {
        let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| TlsError::Verifier(e.to_string()))?;
        builder.dangerous().with_custom_certificate_verifier(Arc::new(ChainOnly(inner)))
    };
    // The broker's own certificate, for leaders with `ssl.client.auth=required`.
    match (settings.certificate.as_deref(), settings.key.as_deref()) {
        (Some(cert_path), Some(key_path)) => {
            let chain = read_certificates("certificate chain", cert_path)?;
            let key = PrivateKeyDer::from_pem_file(key_path)
                .map_err(|e| TlsError::Pem { what: "private key", path: key_path.to_path_buf(), reason: e.to_string() })?;
            Ok(builder.with_client_auth_cert(chain, key)?)
        }
        _ => Ok(builder.with_no_client_auth()),
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
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Err(rustls::Error::InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. })) => {
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(&self, message: &[u8], cert: &CertificateDer<'_>, dss: &DigitallySignedStruct) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut r: BTreeMap<String, String> = [("ssl.endpoint.identification.algorithm", "https")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        r.extend(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        r
    }

    fn listeners(text: &str) -> Vec<ListenerSpec> {
        crate::listeners::parse_listeners(text, "", &format!("{},INTERNAL:SASL_SSL", crate::listeners::DEFAULT_PROTOCOL_MAP)).expect("listeners")
    }

    #[test]
    fn a_cluster_refuses_tls_without_truststore() {
        let ls = listeners("INTERNAL://127.0.0.1:0");
        let err = |r: &BTreeMap<String, String>| match InterBrokerSettings::from_raw(r, &ls, true) {
            Err(ConfigError::InvalidValue { key, value, .. }) => (key, value),
            other => panic!("{other:?}"),
        };
        assert_eq!(err(&raw(&[])).0, "ssl.truststore.location");
        let ssl = listeners("SSL://127.0.0.1:0");
        let s = InterBrokerSettings::from_raw(&raw(&[("ssl.truststore.location", "/ca.pem")]), &ssl, true).expect("settings");
        assert_eq!((s.listener.as_str(), s.protocol, s.verify_hostname), ("SSL", SecurityProtocol::Ssl, true));
        assert_eq!(err(&raw(&[("ssl.endpoint.identification.algorithm", "http")])).0, "ssl.endpoint.identification.algorithm");
        // Alone, a broker connects to no one: nothing more is needed.
        InterBrokerSettings::from_raw(&raw(&[]), &ls, false).expect("alone");
    }
}
