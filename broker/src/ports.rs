//! The TCP ports a broker opens, by service: each with its setting and flag, so
//! a port that cannot be bound is named by what the user can change.
//!
//! [`check_ports`] tries every address before anything else starts, so a start
//! that finds several ports taken says so once, rather than one restart at a time.

use std::net::SocketAddr;

use crate::config::BrokerConfig;

/// What listens, and the setting and flag that move it: the one place these names live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kind {
    /// What listens there, for people: "Kafka listener", "web console".
    pub what: &'static str,
    /// The setting that moves it.
    pub setting: &'static str,
    /// The `floe` flag that moves it.
    pub flag: &'static str,
}

/// A Kafka listener (`listeners`).
pub const KAFKA: Kind = Kind { what: "Kafka listener", setting: "listeners", flag: "--listen" };
/// The Prometheus endpoint.
pub const METRICS: Kind =
    Kind { what: "Prometheus metrics", setting: "metrics.listen", flag: "--metrics-listen" };
/// The built-in Schema Registry.
pub const SCHEMA_REGISTRY: Kind = Kind {
    what: "Schema Registry",
    setting: "floe.schema.registry.listen",
    flag: "--schema-registry-listen",
};
/// The web console.
pub const CONSOLE: Kind =
    Kind { what: "web console", setting: "floe.console.listen", flag: "--console-listen" };
/// The read-only Iceberg REST catalog.
pub const ICEBERG_REST: Kind = Kind {
    what: "Iceberg REST catalog",
    setting: "floe.iceberg.rest-listen",
    flag: "--iceberg-rest-listen",
};

/// Every kind of service, each on a port of its own by default (9092, 9644, 8081, 8080, 8181).
pub const KINDS: [Kind; 5] = [KAFKA, METRICS, SCHEMA_REGISTRY, CONSOLE, ICEBERG_REST];

/// One service that listens on a TCP port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    /// What it is and how to move it.
    pub kind: Kind,
    /// The listener's name, for a Kafka listener (`PLAINTEXT`).
    pub listener: Option<String>,
    /// Where it binds.
    pub addr: SocketAddr,
}

impl Service {
    /// A service of `kind` at `addr`.
    pub fn new(kind: Kind, addr: SocketAddr) -> Self {
        Self { kind, listener: None, addr }
    }

    /// The Kafka listener `name` at `addr`.
    pub fn kafka(name: &str, addr: SocketAddr) -> Self {
        Self { kind: KAFKA, listener: Some(name.to_string()), addr }
    }
}

impl std::fmt::Display for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Kind { what, setting, flag } = self.kind;
        let name = self.listener.as_ref().map(|l| format!(" {l}")).unwrap_or_default();
        write!(f, "{what}{name} on {} (setting `{setting}`, flag {flag})", self.addr)
    }
}

/// Every service `config` binds, Kafka listeners first.
pub fn services(config: &BrokerConfig) -> Vec<Service> {
    let mut out: Vec<Service> =
        config.listeners.iter().map(|l| Service::kafka(&l.name, l.bind)).collect();
    let others = [
        (METRICS, config.metrics_listen),
        (SCHEMA_REGISTRY, config.schema_registry_listen),
        (CONSOLE, config.console_listen),
    ];
    out.extend(others.into_iter().filter_map(|(kind, addr)| addr.map(|a| Service::new(kind, a))));
    // With an external REST catalog the embedded one is not started.
    if config.tiering.catalog.catalog_type != floe_tiering::CatalogType::Rest {
        if let Some(addr) = config.iceberg_rest_listen {
            out.push(Service::new(ICEBERG_REST, addr));
        }
    }
    out
}

/// A port that could not be bound.
#[derive(Debug)]
pub struct PortConflict {
    /// The service that wanted it.
    pub service: Service,
    /// Why the bind failed.
    pub error: std::io::Error,
}

/// Every port that was taken, and what to do.
#[derive(Debug, thiserror::Error)]
#[error("{}", describe(.0))]
pub struct PortsInUse(pub Vec<PortConflict>);

fn describe(conflicts: &[PortConflict]) -> String {
    let mut out = format!(
        "cannot bind {} port{}:",
        conflicts.len(),
        if conflicts.len() == 1 { "" } else { "s" }
    );
    for c in conflicts {
        out.push_str(&format!("\n  {}: {}", c.service, c.error));
    }
    out.push_str(
        "\nIs another Floe or Kafka running here? Move a service with its flag (an empty address turns \
         every service but the Kafka listener off), or run a second broker beside the first with \
         `floe --port-offset 10 --data-dir ./floe-data-2`.",
    );
    out
}

/// Binds each service's address for a moment (port 0 needs no check), and reports
/// every one that is taken. The services bind for real later; this is what makes a
/// start with several conflicts name them all at once.
///
/// # Errors
/// [`PortsInUse`] with every conflict.
pub fn check_ports(services: &[Service]) -> Result<(), PortsInUse> {
    let mut conflicts = Vec::new();
    let mut seen: Vec<SocketAddr> = Vec::new();
    for service in services {
        if service.addr.port() == 0 {
            continue;
        }
        if seen.contains(&service.addr) {
            let error = std::io::Error::new(
                std::io::ErrorKind::AddrInUse,
                "the same address as another of Floe's services",
            );
            conflicts.push(PortConflict { service: service.clone(), error });
            continue;
        }
        seen.push(service.addr);
        if let Err(error) = std::net::TcpListener::bind(service.addr) {
            conflicts.push(PortConflict { service: service.clone(), error });
        }
    }
    if conflicts.is_empty() {
        Ok(())
    } else {
        Err(PortsInUse(conflicts))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_taken_port_is_named_with_its_setting_and_flag() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken_too = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut b = crate::config::ConfigBuilder::new();
        let set = |b: &mut crate::config::ConfigBuilder, k: &str, v: String| {
            b.set_from(k, v, "test").unwrap()
        };
        set(&mut b, "listeners", taken.local_addr().unwrap().to_string());
        set(&mut b, "floe.console.listen", taken_too.local_addr().unwrap().to_string());
        for k in ["metrics.listen", "floe.schema.registry.listen", "floe.iceberg.rest-listen"] {
            set(&mut b, k, "127.0.0.1:0".into());
        }
        let config = b.build().unwrap();
        let err = check_ports(&services(&config)).unwrap_err();
        assert_eq!(err.0.len(), 2);
        let text = err.to_string();
        assert!(text.starts_with("cannot bind 2 ports:"), "{text}");
        assert!(
            text.contains("Kafka listener PLAINTEXT on")
                && text.contains("(setting `listeners`, flag --listen)"),
            "{text}"
        );
        assert!(
            text.contains("web console on")
                && text.contains("(setting `floe.console.listen`, flag --console-listen)"),
            "{text}"
        );
        assert!(text.contains("--port-offset 10"), "{text}");
    }

    #[test]
    fn the_defaults_are_five_services() {
        let config = crate::config::ConfigBuilder::new().build().unwrap();
        let ports: Vec<(u16, &str)> =
            services(&config).iter().map(|s| (s.addr.port(), s.kind.setting)).collect();
        assert_eq!(
            ports,
            [
                (9092, "listeners"),
                (9644, "metrics.listen"),
                (8081, "floe.schema.registry.listen"),
                (8080, "floe.console.listen"),
                (8181, "floe.iceberg.rest-listen")
            ]
        );
        let mut b = crate::config::ConfigBuilder::new();
        b.set_from("floe.port.offset", "10", "test").unwrap();
        b.set_from("floe.console.listen", "127.0.0.1:7000", "test").unwrap();
        let config = b.build().unwrap();
        let ports: Vec<u16> = services(&config).iter().map(|s| s.addr.port()).collect();
        // An address set by hand stays as set.
        assert_eq!(ports, [9102, 9654, 8091, 7000, 8191]);
    }
}
