//! Kernel TLS (kTLS): whether the kernel can encrypt TLS records itself, so
//! fetches on TLS listeners could use `sendfile` like plaintext ones.
//!
//! Whether the kernel can do it is decided once at startup. The probe asks
//! for the `tls` upper layer protocol on a connected loopback socket
//! (`setsockopt(TCP_ULP, "tls")`), which also autoloads the `tls` module where
//! it exists; the contents of `/proc/sys/net/ipv4/tcp_available_ulp` go into
//! the log line.
//!
//! Then, per connection, [`offload`] hands a finished TLS 1.3 session to the
//! kernel: rustls runs the handshake, the session's traffic keys and record
//! sequence numbers go to the socket (`TCP_ULP "tls"`, then `TLS_TX` and
//! `TLS_RX`), and from there the connection reads and writes plaintext on a
//! socket whose records the kernel encrypts and decrypts, so file regions go
//! out with `sendfile` ([`crate::server::ktls_stream`]).
//!
//! Only TLS 1.3 sessions are offloaded: their per-record nonce is the static
//! IV XOR the record sequence number for every cipher, in rustls and in the
//! kernel alike. TLS 1.2 AES-GCM carries an explicit nonce that rustls and
//! the kernel derive differently, so a handover could repeat a nonce under the
//! same key; TLS 1.2 sessions stay in user space (the copying path).

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use nix::libc;
use nix::sys::socket::setsockopt;
use nix::sys::socket::sockopt::{TcpTlsRx, TcpTlsTx, TcpUlp, TlsCryptoInfo};
use rustls::{ConnectionTrafficSecrets, ProtocolVersion};
use tokio::io::AsyncWriteExt;
use tokio_rustls::server::TlsStream;

use crate::server::ktls_stream::KtlsStream;
use crate::server::record_io::RecordIo;

/// `floe.ssl.ktls`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KtlsMode {
    /// Use kTLS when the kernel has it.
    Auto,
    /// Require it: the broker refuses to start without it.
    On,
    /// Never use it.
    Off,
}

/// What the startup probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KtlsSupport {
    /// The kernel accepted the `tls` ULP.
    Available,
    /// It did not; the reason, for the log.
    Unavailable(String),
}

const AVAILABLE_ULP: &str = "/proc/sys/net/ipv4/tcp_available_ulp";

/// Asks the kernel whether it has kTLS. Blocking (a loopback connect).
pub fn probe() -> KtlsSupport {
    let listed =
        std::fs::read_to_string(AVAILABLE_ULP).map(|s| s.trim().to_string()).unwrap_or_default();
    match try_tls_ulp() {
        Ok(()) => KtlsSupport::Available,
        Err(e) => KtlsSupport::Unavailable(format!(
            "setsockopt(TCP_ULP, \"tls\") failed: {e} ({AVAILABLE_ULP}: {listed:?})"
        )),
    }
}

/// The ULP, then TLS 1.3 keys for both directions (a throwaway key): a kernel
/// with the `tls` module but without TLS 1.3 receive support (before 5.1)
/// is found here, not by a client whose session would then be lost.
fn try_tls_ulp() -> std::io::Result<()> {
    // TCP_ULP is only accepted on an established connection.
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let _server = listener.accept()?;
    setsockopt(&client, TcpUlp::default(), b"tls").map_err(std::io::Error::from)?;
    let throwaway = TlsCryptoInfo::Aes128Gcm(libc::tls12_crypto_info_aes_gcm_128 {
        info: libc::tls_crypto_info {
            version: libc::TLS_1_3_VERSION,
            cipher_type: libc::TLS_CIPHER_AES_GCM_128,
        },
        iv: [0; 8],
        key: [0; 16],
        salt: [0; 4],
        rec_seq: [0; 8],
    });
    let keyed = |what: &str, r: nix::Result<()>| {
        r.map_err(|e| {
            std::io::Error::other(format!(
                "the tls ULP is there, but setsockopt({what}) with TLS 1.3 keys failed: {e}"
            ))
        })
    };
    keyed("TLS_TX", setsockopt(&client, TcpTlsTx, &throwaway))?;
    keyed("TLS_RX", setsockopt(&client, TcpTlsRx, &throwaway))
}

/// Set once the kernel refused a real session's keys (after the startup
/// probe accepted throwaway ones: a cipher it lacks, say). That session was
/// lost; later ones stay in user space rather than share its fate.
static KERNEL_REFUSED_KEYS: AtomicBool = AtomicBool::new(false);

/// Whether TLS fetches may use kTLS, given the setting and the probe.
///
/// # Errors
/// A message for the operator when `floe.ssl.ktls=on` and the kernel lacks kTLS.
pub fn decide(mode: KtlsMode, support: &KtlsSupport) -> Result<bool, String> {
    match (mode, support) {
        (KtlsMode::Off, _) => Ok(false),
        (_, KtlsSupport::Available) => Ok(true),
        (KtlsMode::Auto, KtlsSupport::Unavailable(_)) => Ok(false),
        (KtlsMode::On, KtlsSupport::Unavailable(why)) => Err(format!(
            "floe.ssl.ktls=on but this kernel has no kernel TLS ({why}); load the `tls` module or set floe.ssl.ktls=auto"
        )),
    }
}

/// What became of a TLS session offered to the kernel.
#[derive(Debug)]
pub enum Offload {
    /// The kernel encrypts and decrypts the connection from now on.
    Kernel(KtlsStream),
    /// The session stays in user space (rustls), with the reason (the
    /// `outcome` label of `floe_ktls_sessions_total`).
    UserSpace(Box<TlsStream<RecordIo>>, &'static str),
}

/// Why a session could not be offloaded after its keys left rustls; the
/// connection cannot continue and is closed.
#[derive(Debug, thiserror::Error)]
pub enum OffloadError {
    /// Reading the rest of a record, or writing rustls' last records, failed.
    #[error("socket error while handing the session to the kernel: {0}")]
    Io(#[from] std::io::Error),
    /// rustls refused to give up the keys, or a record it processed was bad.
    #[error("rustls: {0}")]
    Rustls(#[from] rustls::Error),
    /// The kernel refused the keys.
    #[error("setsockopt({what}) failed: {errno}")]
    Kernel { what: &'static str, errno: nix::errno::Errno },
    /// A cipher the kernel interface has no struct for.
    #[error("cipher suite {0} cannot be offloaded")]
    Cipher(String),
}

/// Offers a session that has just finished its handshake (through
/// [`RecordIo`], so the socket sits on a record boundary) to the kernel.
///
/// Sessions stay in user space when they are not TLS 1.3 or when the socket
/// refuses the `tls` ULP; nothing irreversible has happened then. Once the
/// keys are taken out of rustls there is no way back: an error then closes
/// the connection.
///
/// # Errors
/// [`OffloadError`] after the point of no return.
pub async fn offload(mut stream: TlsStream<RecordIo>) -> Result<Offload, OffloadError> {
    let (io, conn) = stream.get_ref();
    if conn.protocol_version() != Some(ProtocolVersion::TLSv1_3) {
        stream.get_mut().0.pass_through();
        return Ok(Offload::UserSpace(Box::new(stream), "tls12"));
    }
    if KERNEL_REFUSED_KEYS.load(Ordering::Relaxed) {
        stream.get_mut().0.pass_through();
        return Ok(Offload::UserSpace(Box::new(stream), "disabled"));
    }
    // In its base state the tls ULP passes bytes through untouched, so a
    // socket that took it still works for rustls if we stop here.
    if setsockopt(io.socket(), TcpUlp::default(), b"tls").is_err() {
        stream.get_mut().0.pass_through();
        return Ok(Offload::UserSpace(Box::new(stream), "ulp_refused"));
    }
    let session = take_session(stream).await?;
    let suite = session.suite.clone();
    let tx = crypto_info(session.secrets.tx.0, &session.secrets.tx.1)
        .ok_or_else(|| OffloadError::Cipher(suite.clone()))?;
    let rx = crypto_info(session.secrets.rx.0, &session.secrets.rx.1)
        .ok_or_else(|| OffloadError::Cipher(suite.clone()))?;
    let socket = session.socket;
    let keyed = setsockopt(&socket.as_fd(), TcpTlsTx, &tx)
        .map_err(|errno| OffloadError::Kernel { what: "TLS_TX", errno })
        .and_then(|()| {
            setsockopt(&socket.as_fd(), TcpTlsRx, &rx)
                .map_err(|errno| OffloadError::Kernel { what: "TLS_RX", errno })
        });
    if let Err(e) = keyed {
        if !KERNEL_REFUSED_KEYS.swap(true, Ordering::Relaxed) {
            tracing::warn!(error = %e, suite = %suite, "the kernel refused a TLS session's keys: later TLS sessions stay in user space (copying path) until restart");
        }
        return Err(e);
    }
    Ok(Offload::Kernel(KtlsStream::new(socket, session.plaintext, record_limit(&suite))))
}

/// A TLS session taken out of rustls: what the kernel needs to carry it on.
struct TakenSession {
    /// The socket, on a record boundary: the next record rustls would have
    /// read is the next one the socket delivers.
    socket: tokio::net::TcpStream,
    /// Application data rustls had decrypted already.
    plaintext: Bytes,
    /// Keys and next sequence numbers, both directions.
    secrets: rustls::ExtractedSecrets,
    /// The cipher suite's name.
    suite: String,
}

/// Takes a finished session out of rustls: sends the records rustls still
/// holds, completes and hands it the record [`RecordIo`] had started, reads
/// out what it decrypted, and extracts the keys.
async fn take_session(stream: TlsStream<RecordIo>) -> Result<TakenSession, OffloadError> {
    let (mut io, mut conn) = stream.into_inner();

    // Records rustls still has to send (TLS 1.3 session tickets) go out under
    // its keys and sequence numbers, before the kernel takes over.
    let mut outgoing = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut outgoing)?;
    }
    io.write_all(&outgoing).await?;
    // A record started but not handed to rustls is finished and handed over,
    // so the kernel's first record starts right after it.
    let held = io.finish_record().await?;
    if !held.is_empty() {
        let mut slice = held.as_slice();
        while !slice.is_empty() {
            conn.read_tls(&mut slice)?;
        }
        conn.process_new_packets()?;
    }
    // Application data rustls already decrypted is served before the socket's.
    let mut plaintext = Vec::new();
    match conn.reader().read_to_end(&mut plaintext) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        Err(e) => return Err(OffloadError::Io(e)),
    }
    let suite =
        conn.negotiated_cipher_suite().map(|s| format!("{:?}", s.suite())).unwrap_or_default();
    let secrets = conn.dangerous_extract_secrets()?;
    let socket = io.into_socket();
    Ok(TakenSession { socket, plaintext: Bytes::from(plaintext), secrets, suite })
}

/// How many records a connection may send under one key before it is
/// closed (the client reconnects with fresh keys). The kernel does not
/// rotate keys, and rustls is no longer there to; RFC 8446 §5.5 limits
/// AES-GCM to 2^24.5 records per key. Floe counts records from above (see
/// [`KtlsStream`]) and stops at 2^23, well inside that.
fn record_limit(suite: &str) -> u64 {
    if suite.contains("CHACHA20") {
        u64::MAX
    } else {
        1 << 23
    }
}

/// The kernel's `tls12_crypto_info_*` for one direction of a TLS 1.3 session:
/// rustls' 12-byte IV is the kernel's salt (its first 4 bytes) and IV (the
/// last 8) for AES-GCM, and the whole IV for ChaCha20-Poly1305; `seq` is the
/// next record's sequence number.
pub fn crypto_info(seq: u64, secrets: &ConnectionTrafficSecrets) -> Option<TlsCryptoInfo> {
    let rec_seq = seq.to_be_bytes();
    let info = |cipher_type| libc::tls_crypto_info { version: libc::TLS_1_3_VERSION, cipher_type };
    Some(match secrets {
        ConnectionTrafficSecrets::Aes128Gcm { key, iv } => {
            let iv = iv.as_ref();
            TlsCryptoInfo::Aes128Gcm(libc::tls12_crypto_info_aes_gcm_128 {
                info: info(libc::TLS_CIPHER_AES_GCM_128),
                iv: iv.get(4..12)?.try_into().ok()?,
                key: key.as_ref().try_into().ok()?,
                salt: iv.get(..4)?.try_into().ok()?,
                rec_seq,
            })
        }
        ConnectionTrafficSecrets::Aes256Gcm { key, iv } => {
            let iv = iv.as_ref();
            TlsCryptoInfo::Aes256Gcm(libc::tls12_crypto_info_aes_gcm_256 {
                info: info(libc::TLS_CIPHER_AES_GCM_256),
                iv: iv.get(4..12)?.try_into().ok()?,
                key: key.as_ref().try_into().ok()?,
                salt: iv.get(..4)?.try_into().ok()?,
                rec_seq,
            })
        }
        ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => {
            TlsCryptoInfo::Chacha20Poly1305(libc::tls12_crypto_info_chacha20_poly1305 {
                info: info(libc::TLS_CIPHER_CHACHA20_POLY1305),
                iv: iv.as_ref().try_into().ok()?,
                key: key.as_ref().try_into().ok()?,
                salt: [],
                rec_seq,
            })
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_without_kernel_support_is_refused_and_auto_falls_back() {
        let missing = KtlsSupport::Unavailable("no tls ULP".into());
        assert!(decide(KtlsMode::On, &missing).is_err());
        assert_eq!(decide(KtlsMode::Auto, &missing), Ok(false));
        assert_eq!(decide(KtlsMode::Off, &KtlsSupport::Available), Ok(false));
        assert_eq!(decide(KtlsMode::Auto, &KtlsSupport::Available), Ok(true));
    }

    /// The kernel's side of TLS 1.3 record protection (RFC 8446 §5.2–5.3),
    /// played with `ring` from nothing but a `tls12_crypto_info_*`: the nonce
    /// is salt‖iv XOR the sequence number, the additional data the record
    /// header, the inner plaintext ends with the content type.
    struct KernelModel {
        key: ring::aead::LessSafeKey,
        iv: [u8; 12],
        seq: u64,
    }

    impl KernelModel {
        fn new(info: &TlsCryptoInfo) -> Self {
            use ring::aead::{UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305};
            let (alg, key, iv, seq): (_, Vec<u8>, Vec<u8>, [u8; 8]) = match info {
                TlsCryptoInfo::Aes128Gcm(c) => {
                    (&AES_128_GCM, c.key.to_vec(), [&c.salt[..], &c.iv[..]].concat(), c.rec_seq)
                }
                TlsCryptoInfo::Aes256Gcm(c) => {
                    (&AES_256_GCM, c.key.to_vec(), [&c.salt[..], &c.iv[..]].concat(), c.rec_seq)
                }
                TlsCryptoInfo::Chacha20Poly1305(c) => {
                    (&CHACHA20_POLY1305, c.key.to_vec(), c.iv.to_vec(), c.rec_seq)
                }
            };
            let key = ring::aead::LessSafeKey::new(UnboundKey::new(alg, &key).unwrap());
            Self { key, iv: iv.try_into().unwrap(), seq: u64::from_be_bytes(seq) }
        }

        fn nonce(&mut self) -> ring::aead::Nonce {
            let mut nonce = self.iv;
            for (n, s) in nonce[4..].iter_mut().zip(self.seq.to_be_bytes()) {
                *n ^= s;
            }
            self.seq += 1;
            ring::aead::Nonce::assume_unique_for_key(nonce)
        }

        fn seal(&mut self, plaintext: &[u8]) -> Vec<u8> {
            let mut inner = [plaintext, &[23]].concat();
            let len = (inner.len() + 16) as u16;
            let header = [23, 3, 3, (len >> 8) as u8, len as u8];
            let nonce = self.nonce();
            self.key
                .seal_in_place_append_tag(nonce, ring::aead::Aad::from(header), &mut inner)
                .unwrap();
            [&header[..], &inner].concat()
        }

        /// (content type, plaintext) of one whole record.
        fn open(&mut self, record: &[u8]) -> (u8, Vec<u8>) {
            let (header, body) = record.split_at(5);
            let mut body = body.to_vec();
            let nonce = self.nonce();
            let plain = self
                .key
                .open_in_place(nonce, ring::aead::Aad::from(header), &mut body)
                .expect("record decrypts");
            let end = plain.iter().rposition(|&b| b != 0).unwrap();
            (plain[end], plain[..end].to_vec())
        }
    }

    async fn read_record(socket: &mut tokio::net::TcpStream) -> Vec<u8> {
        use tokio::io::AsyncReadExt;
        let mut header = [0u8; 5];
        socket.read_exact(&mut header).await.unwrap();
        let mut body = vec![0u8; usize::from(u16::from_be_bytes([header[3], header[4]]))];
        socket.read_exact(&mut body).await.unwrap();
        [&header[..], &body].concat()
    }

    /// A server and a client config over one self-signed certificate; the
    /// client offers only `suite` and `version`.
    fn configs(
        suite: rustls::SupportedCipherSuite,
        version: &'static rustls::SupportedProtocolVersion,
    ) -> (rustls::ServerConfig, rustls::ClientConfig) {
        use rustls::crypto::ring as provider;
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let chain = vec![cert.cert.der().clone()];
        let key = rustls::pki_types::PrivateKeyDer::Pkcs8(cert.signing_key.serialize_der().into());
        let mut server = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
            provider::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain.clone(), key)
        .unwrap();
        server.enable_secret_extraction = true;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(chain[0].clone()).unwrap();
        let client_provider = rustls::crypto::CryptoProvider {
            cipher_suites: vec![suite],
            ..provider::default_provider()
        };
        let client =
            rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(client_provider))
                .with_protocol_versions(&[version])
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
        (server, client)
    }

    /// Runs a handshake on a loopback socket; the client then sends
    /// `request-1` at once (as Kafka clients send ApiVersions), `request-2`
    /// a little later, and returns the first 8 bytes it reads.
    async fn handshake(
        server: rustls::ServerConfig,
        client: rustls::ClientConfig,
    ) -> (TlsStream<RecordIo>, tokio::task::JoinHandle<[u8; 8]>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let client_task = tokio::spawn(async move {
            let socket = tokio::net::TcpStream::connect(addr).await.unwrap();
            let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(client));
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let mut tls = connector.connect(name, socket).await.unwrap();
            tls.write_all(b"request-1").await.unwrap();
            tls.flush().await.unwrap();
            tokio::time::sleep(std::time::Duration::from_millis(30)).await;
            tls.write_all(b"request-2").await.unwrap();
            tls.flush().await.unwrap();
            let mut response = [0u8; 8];
            tls.read_exact(&mut response).await.unwrap();
            response
        });
        let (socket, _) = listener.accept().await.unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(server));
        let stream = acceptor.accept(RecordIo::new(socket)).await.unwrap();
        (stream, client_task)
    }

    const TLS13_SUITES: [rustls::SupportedCipherSuite; 3] = [
        rustls::crypto::ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
        rustls::crypto::ring::cipher_suite::TLS13_AES_256_GCM_SHA384,
        rustls::crypto::ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ];

    /// A session taken from rustls after a real handshake on a loopback socket
    /// carries on under the kernel's rules with the keys, IVs and sequence
    /// numbers `crypto_info` gives it: what the client sent after the handshake
    /// is read whole (partly decrypted by rustls already, the rest from the
    /// socket), and a record sealed as the kernel would is read by the client.
    /// On a kernel without kTLS, this is what is left to check of the handover.
    #[tokio::test]
    async fn a_taken_session_carries_on_under_the_kernels_record_rules() {
        use tokio::io::AsyncWriteExt;
        for suite in TLS13_SUITES {
            let (server, client) = configs(suite, &rustls::version::TLS13);
            let (stream, client_task) = handshake(server, client).await;
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            let mut session = take_session(stream).await.unwrap();
            assert!(
                session.secrets.tx.0 > 0,
                "{suite:?}: rustls sent session tickets under the traffic key"
            );

            let mut rx = KernelModel::new(
                &crypto_info(session.secrets.rx.0, &session.secrets.rx.1).unwrap(),
            );
            let mut received = session.plaintext.to_vec();
            while received.len() < b"request-1request-2".len() {
                let (content_type, plain) = rx.open(&read_record(&mut session.socket).await);
                assert_eq!(content_type, 23, "{suite:?}: application data");
                received.extend_from_slice(&plain);
            }
            assert_eq!(received, b"request-1request-2", "{suite:?}");

            let mut tx = KernelModel::new(
                &crypto_info(session.secrets.tx.0, &session.secrets.tx.1).unwrap(),
            );
            session.socket.write_all(&tx.seal(b"response")).await.unwrap();
            assert_eq!(&client_task.await.unwrap(), b"response", "{suite:?}");
        }
    }

    /// `offload` on this machine's kernel: with kTLS the kernel carries the
    /// session (a real round trip through it), without it the socket refuses
    /// the ULP and the session carries on in rustls; TLS 1.2 always stays in
    /// rustls. Either way the client reads and writes as before.
    #[tokio::test]
    async fn offload_hands_tls13_to_the_kernel_or_leaves_the_session_working() {
        use crate::server::stream::ClientStream;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let kernel_has_ktls = probe() == KtlsSupport::Available;
        let tls12 = rustls::crypto::ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256;
        let cases = TLS13_SUITES
            .into_iter()
            .map(|s| (s, &rustls::version::TLS13))
            .chain([(tls12, &rustls::version::TLS12)]);
        for (suite, version) in cases {
            let (server, client) = configs(suite, version);
            let (stream, client_task) = handshake(server, client).await;
            let (mut stream, outcome) = match offload(stream).await.unwrap() {
                Offload::Kernel(k) => (ClientStream::Ktls(k), "offloaded"),
                Offload::UserSpace(tls, why) => (ClientStream::Tls(tls), why),
            };
            let expected = match (version == &rustls::version::TLS13, kernel_has_ktls) {
                (false, _) => "tls12",
                (true, true) => "offloaded",
                (true, false) => "ulp_refused",
            };
            assert_eq!(outcome, expected, "{suite:?}");
            let mut received = [0u8; 18];
            stream.read_exact(&mut received).await.unwrap();
            assert_eq!(&received, b"request-1request-2", "{suite:?}");
            stream.write_all(b"response").await.unwrap();
            stream.flush().await.unwrap();
            assert_eq!(&client_task.await.unwrap(), b"response", "{suite:?}");
        }
    }

    #[test]
    fn probe_agrees_with_the_kernels_ulp_list() {
        // Where the list names `tls` the probe must succeed; where the module
        // is absent it must fail (it may also be loadable without being listed).
        let listed = std::fs::read_to_string(AVAILABLE_ULP).unwrap_or_default();
        if listed.split_whitespace().any(|u| u == "tls") {
            assert_eq!(probe(), KtlsSupport::Available);
        }
    }
}
