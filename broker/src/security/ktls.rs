//! Kernel TLS (kTLS): whether the kernel can encrypt TLS records itself, so
//! fetches on TLS listeners could use `sendfile` like plaintext ones.
//!
//! Decided once at startup. The probe asks the kernel for the `tls` upper
//! layer protocol on a connected loopback socket (`setsockopt(TCP_ULP,
//! "tls")`), which also autoloads the `tls` module where it exists; the
//! contents of `/proc/sys/net/ipv4/tcp_available_ulp` go into the log line.
//! Handing a session's keys to the kernel is not implemented yet: where the
//! kernel has kTLS, TLS fetches still take the copying path, and the log
//! says so.

use std::net::{TcpListener, TcpStream};

use nix::sys::socket::{setsockopt, sockopt::TcpUlp};

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
    let listed = std::fs::read_to_string(AVAILABLE_ULP).map(|s| s.trim().to_string()).unwrap_or_default();
    match try_tls_ulp() {
        Ok(()) => KtlsSupport::Available,
        Err(e) => KtlsSupport::Unavailable(format!("setsockopt(TCP_ULP, \"tls\") failed: {e} ({AVAILABLE_ULP}: {listed:?})")),
    }
}

fn try_tls_ulp() -> std::io::Result<()> {
    // TCP_ULP is only accepted on an established connection.
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let client = TcpStream::connect(listener.local_addr()?)?;
    let _server = listener.accept()?;
    setsockopt(&client, TcpUlp::default(), b"tls").map_err(std::io::Error::from)
}

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
