//! floe-client's [`BrokerConnection::connect`] against the broker's own
//! listener code, with the settings [`inter_broker::load`] reads: a bare TLS
//! server ([`TlsContext`], `ssl.client.auth=required`) with certificates made
//! here, where the peer's chain and host name are checked (or the chain only,
//! with `ssl.endpoint.identification.algorithm` empty) and the broker's
//! certificate is presented; and a broker alone on a SASL_PLAINTEXT listener,
//! for PLAIN and SCRAM logins and a session renewed before it expires.
//! (An endpoint whose protocol the broker has no settings for is refused
//! before any socket is opened: floe-client's own tests.)

use std::path::{Path, PathBuf};
use std::time::Duration;

use floe_client::{BrokerConnection, ClientError, ClientSecurity, Endpoint};
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tokio::io::AsyncReadExt;

use crate::listeners::SecurityProtocol;
use crate::security::inter_broker::{self, InterBrokerSettings};
use crate::security::ktls::KtlsMode;
use crate::security::sasl::SaslMechanism;
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
    let ca =
        CertifiedIssuer::self_signed(ca_params, KeyPair::generate().expect("key")).expect("CA");
    let leaf_key = KeyPair::generate().expect("key");
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    let leaf =
        CertificateParams::new(names).expect("params").signed_by(&leaf_key, &ca).expect("leaf");
    let write = |name: &str, text: String| {
        let path = dir.join(format!("{tag}-{name}"));
        std::fs::write(&path, text).expect("write");
        path
    };
    Pki {
        ca: write("ca.pem", ca.pem()),
        cert: write("cert.pem", leaf.pem()),
        key: write("key.pem", leaf_key.serialize_pem()),
    }
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

fn client(p: &Pki, verify_hostname: bool) -> ClientSecurity {
    let settings = InterBrokerSettings {
        listener: "SSL".into(),
        protocol: SecurityProtocol::Ssl,
        verify_hostname,
        mechanism: SaslMechanism::Plain,
        credentials: None,
    };
    inter_broker::load(&settings, &tls_settings(p, ClientAuth::None)).expect("client TLS")
}

async fn connect(
    host: &str,
    port: u16,
    protocol: SecurityProtocol,
    security: &ClientSecurity,
) -> Result<BrokerConnection, ClientError> {
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
    let e = connect("127.0.0.1", port, SecurityProtocol::Ssl, &strict)
        .await
        .expect_err("127.0.0.1 is not in the certificate");
    assert!(
        matches!(&e, ClientError::Tls { .. }) && e.to_string().contains("not valid for name"),
        "{e}"
    );
    connect("localhost", port, SecurityProtocol::Ssl, &strict)
        .await
        .expect("the registered host matches");
    connect("127.0.0.1", port, SecurityProtocol::Ssl, &client(&ours, false))
        .await
        .expect("chain only");

    // Another CA's certificate is refused even without host name checks.
    let theirs = pki(dir.path(), "theirs", &["localhost"]);
    let e = connect("localhost", port, SecurityProtocol::Ssl, &client(&theirs, false))
        .await
        .expect_err("untrusted chain");
    assert!(matches!(e, ClientError::Tls { .. }), "{e}");
}

/// A broker alone serving one SASL_PLAINTEXT listener, with `broker:plain-pw`
/// as a PLAIN user and `connections.max.reauth.ms` = `reauth_ms`; returns its
/// port, and the sender that stops it.
async fn sasl_broker(dir: &Path, reauth_ms: u64) -> (u16, tokio::sync::watch::Sender<bool>) {
    use crate::config::{ConfigBuilder, Layer};
    let users = dir.join("plain-users");
    std::fs::write(&users, "broker:plain-pw\n").expect("users file");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut b = ConfigBuilder::new();
    for (k, v) in [
        ("listeners", format!("SASL_PLAINTEXT://127.0.0.1:{port}")),
        ("log.dirs", dir.join("data").display().to_string()),
        ("metrics.listen", String::new()),
        ("floe.iceberg.rest-listen", String::new()),
        ("floe.schema.registry.listen", String::new()),
        ("floe.sasl.plain.users.file", users.display().to_string()),
        ("connection.failed.authentication.delay.ms", "0".into()),
        ("connections.max.reauth.ms", reauth_ms.to_string()),
    ] {
        b.set(k, &v, Layer::CommandLine).expect("setting");
    }
    let config = b.build().expect("config");
    let (shutdown, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move { crate::run::serve(config, rx).await.expect("broker serves") });
    for _ in 0..200 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return (port, shutdown);
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("the broker never listened on {port}");
}

fn sasl_client(mechanism: SaslMechanism, username: &str, password: &str) -> ClientSecurity {
    use floe_client::SaslCredentials;
    let settings = InterBrokerSettings {
        listener: "SASL_PLAINTEXT".into(),
        protocol: SecurityProtocol::SaslPlaintext,
        verify_hostname: true,
        mechanism,
        credentials: Some(SaslCredentials { username: username.into(), password: password.into() }),
    };
    let no_tls = TlsSettings {
        certificate: None,
        key: None,
        truststore: None,
        client_auth: ClientAuth::None,
        tls12: true,
        tls13: true,
        ktls: KtlsMode::Off,
        reload_interval_ms: 0,
    };
    inter_broker::load(&settings, &no_tls).expect("client")
}

#[tokio::test]
async fn plain_and_scram_logins_against_a_broker() {
    use kafka_protocol::messages::alter_user_scram_credentials_request::ScramCredentialUpsertion;
    use kafka_protocol::messages::{AlterUserScramCredentialsRequest, MetadataRequest};
    use kafka_protocol::protocol::StrBytes;

    use crate::security::scram::ScramMechanism;

    let dir = tempfile::tempdir().expect("tempdir");
    let (port, _shutdown) = sasl_broker(dir.path(), 0).await;
    let sasl = SecurityProtocol::SaslPlaintext;

    // PLAIN, then SCRAM credentials for the same user set over that connection.
    let mut conn =
        connect("127.0.0.1", port, sasl, &sasl_client(SaslMechanism::Plain, "broker", "plain-pw"))
            .await
            .expect("PLAIN login");
    let upsert = |m: ScramMechanism| {
        let salt = b"unit-test-salt-1".to_vec();
        let salted = m.salted_password(
            b"scram-pw",
            &salt,
            std::num::NonZeroU32::new(4096).expect("nonzero"),
        );
        ScramCredentialUpsertion::default()
            .with_name(StrBytes::from_static_str("broker"))
            .with_mechanism(m.wire_type())
            .with_iterations(4096)
            .with_salt(salt.into())
            .with_salted_password(salted.into())
    };
    let altered = conn
        .call(
            0,
            &AlterUserScramCredentialsRequest::default().with_upsertions(vec![
                upsert(ScramMechanism::Sha256),
                upsert(ScramMechanism::Sha512),
            ]),
        )
        .await
        .expect("AlterUserScramCredentials");
    assert!(altered.results.iter().all(|r| r.error_code == 0), "{altered:?}");

    for m in [ScramMechanism::Sha256, ScramMechanism::Sha512] {
        let mut conn = connect(
            "127.0.0.1",
            port,
            sasl,
            &sasl_client(SaslMechanism::Scram(m), "broker", "scram-pw"),
        )
        .await
        .expect("SCRAM login");
        conn.call(12, &MetadataRequest::default()).await.expect("a request after the login");
        let e = connect(
            "127.0.0.1",
            port,
            sasl,
            &sasl_client(SaslMechanism::Scram(m), "broker", "guessed-pw"),
        )
        .await
        .expect_err("wrong password");
        let text = e.to_string();
        assert!(
            matches!(e, ClientError::Authentication { .. })
                && text.contains(m.name())
                && text.contains("SaslAuthenticationFailed"),
            "{text}"
        );
        assert!(!text.contains("guessed-pw"), "{text}");
    }
    let e = connect(
        "127.0.0.1",
        port,
        sasl,
        &sasl_client(SaslMechanism::Plain, "broker", "guessed-pw"),
    )
    .await
    .expect_err("wrong PLAIN password");
    assert!(matches!(e, ClientError::Authentication { mechanism: "PLAIN", .. }), "{e}");
}

#[tokio::test]
async fn a_session_with_a_lifetime_is_renewed_on_the_same_connection() {
    use kafka_protocol::messages::MetadataRequest;

    let dir = tempfile::tempdir().expect("tempdir");
    // The broker closes a connection whose login is older than 600 ms (KIP-368).
    let (port, _shutdown) = sasl_broker(dir.path(), 600).await;
    let security = sasl_client(SaslMechanism::Plain, "broker", "plain-pw");
    let mut conn = connect("127.0.0.1", port, SecurityProtocol::SaslPlaintext, &security)
        .await
        .expect("login");
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        conn.call(12, &MetadataRequest::default()).await.expect("renewed in time, never closed");
    }
}
