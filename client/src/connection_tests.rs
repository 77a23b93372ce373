//! [`BrokerConnection::connect`] refuses an endpoint whose protocol needs TLS
//! or SASL settings it was not given, before any socket is opened. The
//! connection against real peers (certificate checks, PLAIN and SCRAM logins,
//! renewed sessions) is tested in the broker, against its own listener code
//! (`broker/src/cluster_replication/client_tests.rs`).

use std::sync::Arc;
use std::time::Duration;

use rustls::{ClientConfig, RootCertStore};

use super::{BrokerConnection, ClientError, ClientSecurity, Endpoint};
use crate::SecurityProtocol;

async fn connect(
    host: &str,
    port: u16,
    protocol: SecurityProtocol,
    security: &ClientSecurity,
) -> Result<BrokerConnection, ClientError> {
    let endpoint = Endpoint { host: host.into(), port, protocol };
    BrokerConnection::connect(&endpoint, "test", Duration::from_secs(5), security).await
}

/// TLS settings and no SASL login. The configuration trusts no CA: no
/// handshake is reached.
fn tls_only() -> ClientSecurity {
    let config =
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_root_certificates(RootCertStore::empty())
            .with_no_client_auth();
    ClientSecurity::new(Some(Arc::new(config)), None)
}

#[tokio::test]
async fn an_endpoint_needing_what_the_broker_lacks_is_refused_before_connecting() {
    // Port 9 (discard) is never dialled: the refusal comes first.
    for protocol in
        [SecurityProtocol::Ssl, SecurityProtocol::SaslPlaintext, SecurityProtocol::SaslSsl]
    {
        let e = connect("localhost", 9, protocol, &ClientSecurity::plaintext())
            .await
            .expect_err("no settings");
        assert!(matches!(e, ClientError::Security { .. }), "{protocol}: {e}");
    }
    let e = connect("localhost", 9, SecurityProtocol::SaslSsl, &tls_only())
        .await
        .expect_err("no SASL login");
    assert!(e.to_string().contains("SASL login"), "{e}");
}
