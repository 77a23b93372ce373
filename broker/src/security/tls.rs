//! TLS for SSL and SASL_SSL listeners: settings, the `rustls` server
//! configuration built from PEM files, and its reload.
//!
//! The acceptor in use is behind a lock that is only held to clone an `Arc`,
//! so a reload (SIGHUP, or a changed file when
//! `floe.ssl.reload.interval.ms` is set) swaps it for new connections while
//! established connections keep the session they negotiated. A reload that
//! fails (a half-written file, a key that does not match) is logged and the
//! previous configuration stays in force.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::SystemTime;

use floe_client::tls::{pem_error, protocol_versions, read_certificates, read_private_key};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

// Reading PEM files and the error of building a TLS configuration are shared
// with the client side (floe-client's TLS for outbound connections).
pub use floe_client::tls::TlsError;

use super::ktls::KtlsMode;
use crate::raw_config::{get, parse, ConfigError};

/// Whether TLS clients must present a certificate (Kafka's `ssl.client.auth`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    /// Client certificates are not asked for.
    None,
    /// Asked for and verified if sent; a client without one is still accepted.
    Requested,
    /// A client without a certificate that chains to the truststore is refused.
    Required,
}

/// The `ssl.*` settings.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    /// `ssl.certificate.location`: the certificate chain, PEM.
    pub certificate: Option<PathBuf>,
    /// `ssl.key.location`: the private key, PEM.
    pub key: Option<PathBuf>,
    /// `ssl.truststore.location`: CA certificates for client certificates, PEM.
    pub truststore: Option<PathBuf>,
    /// `ssl.client.auth`.
    pub client_auth: ClientAuth,
    /// `ssl.enabled.protocols`: offer TLS 1.2.
    pub tls12: bool,
    /// `ssl.enabled.protocols`: offer TLS 1.3.
    pub tls13: bool,
    /// `floe.ssl.ktls`.
    pub ktls: KtlsMode,
    /// `floe.ssl.reload.interval.ms`; 0 reloads on SIGHUP only.
    pub reload_interval_ms: u64,
}

impl TlsSettings {
    /// Reads the `ssl.*` settings from the raw configuration.
    ///
    /// # Errors
    /// [`ConfigError::InvalidValue`] for an unknown client auth mode, protocol or kTLS mode.
    pub(crate) fn from_raw(raw: &BTreeMap<String, String>) -> Result<Self, ConfigError> {
        let path = |key: &str| match get(raw, key).trim() {
            "" => None,
            p => Some(PathBuf::from(p)),
        };
        let invalid = |key: &str, reason: &str| ConfigError::InvalidValue {
            key: key.into(),
            value: get(raw, key).into(),
            reason: reason.into(),
        };
        let client_auth = match get(raw, "ssl.client.auth").trim().to_ascii_lowercase().as_str() {
            "" | "none" => ClientAuth::None,
            "requested" => ClientAuth::Requested,
            "required" => ClientAuth::Required,
            _ => return Err(invalid("ssl.client.auth", "expected none, requested or required")),
        };
        let (mut tls12, mut tls13) = (false, false);
        for p in
            get(raw, "ssl.enabled.protocols").split(',').map(str::trim).filter(|p| !p.is_empty())
        {
            match p {
                "TLSv1.2" => tls12 = true,
                "TLSv1.3" => tls13 = true,
                _ => {
                    return Err(invalid(
                        "ssl.enabled.protocols",
                        "only TLSv1.2 and TLSv1.3 are offered",
                    ))
                }
            }
        }
        if !tls12 && !tls13 {
            return Err(invalid("ssl.enabled.protocols", "no protocol enabled"));
        }
        let ktls = match get(raw, "floe.ssl.ktls").trim().to_ascii_lowercase().as_str() {
            "" | "auto" => KtlsMode::Auto,
            "on" | "true" => KtlsMode::On,
            "off" | "false" => KtlsMode::Off,
            _ => return Err(invalid("floe.ssl.ktls", "expected auto, on or off")),
        };
        Ok(TlsSettings {
            certificate: path("ssl.certificate.location"),
            key: path("ssl.key.location"),
            truststore: path("ssl.truststore.location"),
            client_auth,
            tls12,
            tls13,
            ktls,
            reload_interval_ms: parse(raw, "floe.ssl.reload.interval.ms")?,
        })
    }
}

/// The TLS acceptor of the broker's TLS listeners, reloadable.
#[derive(Debug)]
pub struct TlsContext {
    settings: TlsSettings,
    /// Held only to clone or replace the `Arc`: never across an `.await`.
    current: RwLock<Loaded>,
}

#[derive(Clone)]
struct Loaded {
    acceptor: TlsAcceptor,
    /// Modification times of the certificate, key and truststore files when read.
    modified: Vec<Option<SystemTime>>,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded").field("modified", &self.modified).finish_non_exhaustive()
    }
}

impl TlsContext {
    /// Loads the certificate, key and truststore. Blocking file reads: call at startup or off the request runtime.
    ///
    /// # Errors
    /// [`TlsError`] saying which file or setting is at fault.
    pub fn load(settings: TlsSettings) -> Result<Self, TlsError> {
        let loaded = build(&settings)?;
        Ok(TlsContext { settings, current: RwLock::new(loaded) })
    }

    /// The acceptor for a new connection.
    pub fn acceptor(&self) -> TlsAcceptor {
        // A poisoned lock only means a reload panicked mid-swap; the value is still whole.
        self.current.read().unwrap_or_else(|p| p.into_inner()).acceptor.clone()
    }

    /// Re-reads the files and, if they make a valid configuration, uses it
    /// for new connections. Blocking file reads.
    ///
    /// # Errors
    /// [`TlsError`]; the previous configuration stays in force.
    pub fn reload(&self) -> Result<(), TlsError> {
        let loaded = build(&self.settings)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = loaded;
        Ok(())
    }

    /// Whether any of the files changed since the last (re)load.
    pub fn files_changed(&self) -> bool {
        let now = modification_times(&self.settings);
        self.current.read().unwrap_or_else(|p| p.into_inner()).modified != now
    }

    /// The settings it was built from.
    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }
}

fn modification_times(settings: &TlsSettings) -> Vec<Option<SystemTime>> {
    [&settings.certificate, &settings.key, &settings.truststore]
        .into_iter()
        .map(|p| p.as_ref().and_then(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok()))
        .collect()
}

fn build(settings: &TlsSettings) -> Result<Loaded, TlsError> {
    // Read the times first: a file replaced while we read it is then seen as changed again.
    let modified = modification_times(settings);
    let cert_path =
        settings.certificate.as_deref().ok_or(TlsError::Missing("ssl.certificate.location"))?;
    let key_path = settings.key.as_deref().ok_or(TlsError::Missing("ssl.key.location"))?;
    let chain = read_certificates("certificate chain", cert_path)?;
    let key = read_private_key(key_path)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&protocol_versions(settings.tls12, settings.tls13))?;
    let builder = match settings.client_auth {
        ClientAuth::None => builder.with_no_client_auth(),
        mode => {
            let ca_path = settings
                .truststore
                .as_deref()
                .ok_or(TlsError::Missing("ssl.truststore.location"))?;
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_file_iter(ca_path)
                .map_err(|e| pem_error("CA certificates", ca_path, e))?
            {
                let cert = cert.map_err(|e| pem_error("CA certificates", ca_path, e))?;
                roots.add(cert).map_err(|e| pem_error("CA certificates", ca_path, e))?;
            }
            let mut verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            if mode == ClientAuth::Requested {
                verifier = verifier.allow_unauthenticated();
            }
            builder.with_client_cert_verifier(
                verifier.build().map_err(|e| TlsError::Verifier(e.to_string()))?,
            )
        }
    };
    let mut config = builder.with_single_cert(chain, key)?;
    // Lets a finished session's keys be handed to the kernel (kTLS); the
    // keys stay inside this process either way.
    config.enable_secret_extraction = true;
    Ok(Loaded { acceptor: TlsAcceptor::from(Arc::new(config)), modified })
}

/// Reloads `tls` on SIGHUP and, with `floe.ssl.reload.interval.ms`, when its
/// files change; returns when `shutdown` turns true. New connections get the
/// new certificate; established ones keep their session.
pub async fn reload_on_signal(
    tls: Arc<TlsContext>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangup = match signal(SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP: TLS certificates reload only on file change");
            None
        }
    };
    let interval_ms = tls.settings().reload_interval_ms;
    let mut poll = tokio::time::interval(std::time::Duration::from_millis(interval_ms.max(1)));
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let why = tokio::select! {
            Some(()) = async { match hangup.as_mut() { Some(h) => h.recv().await, None => std::future::pending().await } } => "SIGHUP",
            _ = poll.tick(), if interval_ms > 0 => {
                if !tls.files_changed() {
                    continue;
                }
                "files changed"
            }
            _ = shutdown.changed() => return,
        };
        let ctx = tls.clone();
        match tokio::task::spawn_blocking(move || ctx.reload()).await {
            Ok(Ok(())) => {
                tracing::info!(trigger = why, "reloaded TLS certificate, key and truststore")
            }
            Ok(Err(e)) => {
                tracing::error!(trigger = why, error = %e, "TLS reload failed; keeping the previous certificate")
            }
            Err(e) => tracing::error!(error = %e, "TLS reload task failed"),
        }
    }
}
