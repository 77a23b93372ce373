//! A broker's registration: what it stores in etcd under its lease, and what every
//! other broker reads to answer Metadata for it.

use serde::{Deserialize, Serialize};

/// One listener of a broker, as clients reach it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerEndpoint {
    /// The listener's name (`PLAINTEXT`, `SASL_SSL`, ... or a custom name).
    pub listener: String,
    /// The advertised host and port.
    pub host: String,
    pub port: i32,
    /// The security protocol (`PLAINTEXT`, `SSL`, `SASL_PLAINTEXT`, `SASL_SSL`).
    pub security_protocol: String,
}

/// A live broker: stored as JSON at `<prefix>/brokers/<node.id>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BrokerRegistration {
    pub node_id: i32,
    /// `broker.rack`, if set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rack: Option<String>,
    pub endpoints: Vec<BrokerEndpoint>,
    /// Set by a broker in controlled shutdown: the controller moves its leaderships
    /// away and takes it out of every ISR, as if it were gone, while it still serves.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shutting_down: bool,
    /// The base URL of this broker's Schema Registry, if it runs one: where the
    /// other brokers' registries forward writes while this broker leads `_schemas`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema_registry: Option<String>,
}

impl BrokerRegistration {
    /// The endpoint on the listener named `listener`, where clients of that listener
    /// reach this broker (Kafka answers Metadata with the brokers' endpoints on the
    /// listener the request came in on, and leaves out brokers without one).
    pub fn endpoint(&self, listener: &str) -> Option<&BrokerEndpoint> {
        self.endpoints.iter().find(|e| e.listener == listener)
    }

    /// `host:port` of every endpoint, for log lines and errors.
    pub fn describe_endpoints(&self) -> String {
        let all: Vec<String> = self
            .endpoints
            .iter()
            .map(|e| format!("{}://{}:{}", e.listener, e.host, e.port))
            .collect();
        all.join(",")
    }
}
