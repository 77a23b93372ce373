//! [`BrokerConnection::connect`] against a bare TLS server built by the
//! broker's own listener code ([`TlsContext`], `ssl.client.auth=required`),
//! with certificates made here: the peer's chain and host name are checked
//! (or the chain only, with `ssl.endpoint.identification.algorithm` empty),
//! the broker's certificate is presented, and an endpoint whose protocol the
//! broker has no settings for is refused before any socket is opened.

use std::path::{Path, PathBuf};
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tokio::io::AsyncReadExt;

use super::{BrokerConnection, ClientError, Endpoint};
use crate::listeners::SecurityProtocol;
use crate::security::inter_broker::{InterBrokerClient, InterBrokerSettings};
use crate::security::ktls::KtlsMode;
use crate::security::tls::{ClientAuth, TlsContext, TlsSettings};

/// A CA and a leaf it signed for `names`, as PEM files in `dir`.
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn pki(dir: &Path, tag: &str, names: &[&str]) -> Pki {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("CA");
    let leaf_key = KeyPair::generate().expect("key");
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let leaf = CertificateParams::new(names).expect("params").signed_by(&leaf_key, &ca).expect("leaf");
    let write = |name: &str, text: String| {
        let path = dir.join(format!("{tag}-{name}"));
        std::fs::write(&path, text).expect("write");
        path
    };
    Pki { ca: write("ca.pem", ca.pem()), cert: write("cert.pem", leaf.pem()), key: write("key.pem", leaf_key.serialize_pem()) }
}

fn tls_settings(p: &Pki, client_auth: ClientAuth) -> TlsSettings {
    TlsSettings {
        certificate: Some(p.cert.clone()),
        key: Some(p.key.clone()),
        truststore: Some(p.ca.clone()),
        client_auth,
        tls12: true,
        tls13: true,
        ktls: KtlsMode::Off,
        reload_interval_ms: 0,
    }
}

/// A TLS server that requires client certificates from `p`'s CA; returns its port.
async fn serve(p: &Pki) -> u16 {
    let tls = TlsContext::load(tls_settings(p, ClientAuth::Required)).expect("server TLS");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = tls.acceptor();
            tokio::spawn(async move {
                if let Ok(mut stream) = acceptor.accept(tcp).await {
                    let mut buf = [0u8; 64];
                    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                }
            });
        }
    });
    port
}

fn client(p: &Pki, verify_hostname: bool) -> InterBrokerClient {
    let settings = InterBrokerSettings {
        listener: "SSL".into(),
        protocol: SecurityProtocol::Ssl,
        verify_hostname,
    };
    InterBrokerClient::load(&settings, &tls_settings(p, ClientAuth::None)).expect("client TLS")
}

async fn connect(host: &str, port: u16, protocol: SecurityProtocol, security: &InterBrokerClient) -> Result<BrokerConnection, ClientError> {
    let endpoint = Endpoint { host: host.into(), port, protocol };
    BrokerConnection::connect(&endpoint, "test", Duration::from_secs(5), security).await
}

#[tokio::test]
async fn the_peer_certificate_is_checked_as_kafkas_endpoint_identification_says() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The certificate names `localhost` only.
    let ours = pki(dir.path(), "ours", &["localhost"]);
    let port = serve(&ours).await;

    let strict = client(&ours, true);
    let e = connect("127.0.0.1", port, SecurityProtocol::Ssl, &strict).await.expect_err("127.0.0.1 is not in the certificate");
    assert!(matches!(&e, ClientError::Tls { .. }) && e.to_string().contains("not valid for name"), "{e}");
    connect("localhost", port, SecurityProtocol::Ssl, &strict).await.expect("the registered host matches");
    connect("127.0.0.1", port, SecurityProtocol::Ssl, &client(&ours, false)).await.expect("chain only");

    // Another CA's certificate is refused even without host name checks.
    let theirs = pki(dir.path(), "theirs", &["localhost"]);
    let e = connect("localhost", port, SecurityProtocol::Ssl, &client(&theirs, false)).await.expect_err("untrusted chain");
    assert!(matches!(e, ClientError::Tls { .. }), "{e}");
}

#[tokio::test]
async fn an_endpoint_needing_what_the_broker_lacks_is_refused_before_connecting() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ours = pki(dir.path(), "ours", &["localhost"]);
    // Port 9 (discard) is never dialled: the refusal comes first.
    for protocol in [SecurityProtocol::Ssl, SecurityProtocol::SaslPlaintext, SecurityProtocol::SaslSsl] {
        let e = connect("localhost", 9, protocol, &InterBrokerClient::plaintext()).await.expect_err("no settings");
        assert!(matches!(e, ClientError::Security { .. }), "{protocol}: {e}");
    }
    let e = connect("localhost", 9, SecurityProtocol::SaslSsl, &client(&ours, true)).await.expect_err("no SASL yet");
    assert!(e.to_string().contains("SASL between brokers"), "{e}");
}
