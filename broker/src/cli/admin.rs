//! The admin commands' Kafka client: one connection per broker, the API
//! versions each broker speaks, and the routing a request needs (any broker,
//! a partition's leader, the controller, a group's coordinator).
//!
//! It speaks only the Kafka protocol, through the broker's own outbound
//! connection (floe-client's [`BrokerConnection`]: TLS and SASL included), so
//! every command works against any Kafka-compatible cluster, not only Floe.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use floe_broker::listeners::SecurityProtocol;
use floe_broker::security::inter_broker;
use floe_client::{BrokerConnection, ClientError, ClientSecurity, Endpoint};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiVersionsRequest, FindCoordinatorRequest, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::{Request, StrBytes};

use super::connect::ConnectArgs;

/// The client id every request carries (visible in the broker's request log).
pub const CLIENT_ID: &str = "floe-cli";

/// Which broker a request goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Whichever broker the client is connected to.
    Any,
    /// This broker (a partition's leader, a group's coordinator).
    Node(i32),
    /// The cluster's controller (CreateTopics, DeleteTopics, CreatePartitions...).
    Controller,
}

/// Why a command failed in a way its exit code should tell apart.
#[derive(Debug, thiserror::Error)]
pub enum CliFailure {
    /// No broker could be reached, or the login was refused (exit code 3).
    #[error("{0}")]
    Unreachable(String),
    /// What was named does not exist (exit code 4).
    #[error("{0}")]
    NotFound(String),
    /// A usage error clap cannot see: a bad `-X` property or profile line (exit code 2).
    #[error("{0}")]
    Usage(String),
}

/// The exit code for `error`: 3 when no broker answered or the login failed,
/// 4 when the topic, group or user named does not exist, 2 for a usage error
/// clap cannot see (a bad `-X`), 1 otherwise (the cluster refused; the
/// message says why). Clap's own usage errors exit 2 too.
pub fn exit_code(error: &anyhow::Error) -> u8 {
    for cause in error.chain() {
        if let Some(f) = cause.downcast_ref::<CliFailure>() {
            return match f {
                CliFailure::Unreachable(_) => 3,
                CliFailure::NotFound(_) => 4,
                CliFailure::Usage(_) => 2,
            };
        }
        if let Some(c) = cause.downcast_ref::<ClientError>() {
            return match c {
                ClientError::Encode { .. } | ClientError::Decode { .. } => 1,
                _ => 3,
            };
        }
    }
    1
}

/// One error for a command that acted on several things: `Ok` when none
/// failed, the error itself when one did, else every message joined (not
/// found when every one was).
pub fn combine_failures(mut failures: Vec<anyhow::Error>) -> anyhow::Result<()> {
    match failures.len() {
        0 => Ok(()),
        1 => Err(failures.remove(0)),
        _ => {
            let not_found = failures
                .iter()
                .all(|e| matches!(e.downcast_ref::<CliFailure>(), Some(CliFailure::NotFound(_))));
            let text = failures.iter().map(|e| format!("{e:#}")).collect::<Vec<_>>().join("; ");
            if not_found {
                Err(CliFailure::NotFound(text).into())
            } else {
                Err(anyhow!(text))
            }
        }
    }
}

/// A Kafka error code as Kafka names it (`UNKNOWN_TOPIC_OR_PARTITION`), or
/// `None` for 0.
pub fn error_name(code: i16) -> Option<String> {
    if code == 0 {
        return None;
    }
    match ResponseError::try_from_code(code) {
        Some(e) => {
            let camel = format!("{e:?}");
            let mut name = String::new();
            for (i, c) in camel.chars().enumerate() {
                if c.is_ascii_uppercase() && i > 0 {
                    name.push('_');
                }
                name.push(c.to_ascii_uppercase());
            }
            Some(name)
        }
        None => Some(format!("ERROR_CODE_{code}")),
    }
}

/// `Err` naming `what` and the Kafka error, unless `code` is 0.
pub fn check(code: i16, message: Option<&StrBytes>, what: &str) -> anyhow::Result<()> {
    match error_name(code) {
        None => Ok(()),
        Some(name) => {
            let detail = message
                .map(|m| m.as_str())
                .filter(|m| !m.is_empty())
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            let hint = hint(code);
            if code == ResponseError::UnknownTopicOrPartition.code()
                || code == ResponseError::GroupIdNotFound.code()
                || code == ResponseError::ResourceNotFound.code()
            {
                return Err(CliFailure::NotFound(format!("{what}: {name}{detail}{hint}")).into());
            }
            bail!("{what}: {name}{detail}{hint}")
        }
    }
}

/// What to do about the common errors, for people.
fn hint(code: i16) -> &'static str {
    let e = ResponseError::try_from_code(code);
    match e {
        Some(ResponseError::TopicAuthorizationFailed | ResponseError::GroupAuthorizationFailed | ResponseError::ClusterAuthorizationFailed) => {
            " (the principal lacks an ACL for this: `floe acl list` shows the ACLs, `floe acl create` grants one)"
        }
        Some(ResponseError::UnknownTopicOrPartition) => " (see `floe topic list`)",
        Some(ResponseError::GroupIdNotFound) => " (see `floe group list`)",
        Some(ResponseError::NonEmptyGroup) => " (stop the group's consumers first)",
        Some(ResponseError::InvalidReplicationFactor) => " (at most the number of brokers: see `floe cluster info`)",
        Some(ResponseError::TopicAlreadyExists) => " (pick another name, or `floe topic describe` it)",
        Some(ResponseError::SecurityDisabled) => " (the broker has no authorizer or SASL configured)",
        _ => "",
    }
}

struct Connection {
    conn: BrokerConnection,
    /// API key → (min, max) version the broker speaks.
    versions: HashMap<i16, (i16, i16)>,
}

/// A connected admin client.
pub struct Admin {
    bootstrap: Vec<String>,
    protocol: SecurityProtocol,
    security: ClientSecurity,
    timeout: Duration,
    /// Connections by `host:port`.
    connections: HashMap<String, Connection>,
    /// The address the bootstrap connection went to.
    bootstrap_addr: String,
    /// Node id → `host:port`, from the last Metadata.
    brokers: BTreeMap<i32, String>,
    controller: Option<i32>,
}

impl Admin {
    /// Connects to the first bootstrap broker that answers ApiVersions, and
    /// reads the cluster's brokers.
    ///
    /// # Errors
    /// [`CliFailure::Unreachable`] naming every address tried and why.
    pub async fn connect(args: &ConnectArgs) -> anyhow::Result<Admin> {
        let props = args.properties()?;
        let (security, protocol) = inter_broker::for_client(&props).map_err(|e| anyhow!("{e}"))?;
        let timeout = Duration::from_millis(args.timeout_ms);
        let mut admin = Admin {
            bootstrap: args.bootstrap(),
            protocol,
            security,
            timeout,
            connections: HashMap::new(),
            bootstrap_addr: String::new(),
            brokers: BTreeMap::new(),
            controller: None,
        };
        let mut failures = Vec::new();
        for addr in admin.bootstrap.clone() {
            match admin.open(&addr).await {
                Ok(()) => {
                    admin.bootstrap_addr = addr;
                    admin.metadata(Some(&[])).await?;
                    return Ok(admin);
                }
                Err(e) => {
                    // A refused login is not a missing broker: say what to check instead.
                    if let Some(ClientError::Authentication { addr, mechanism, message }) =
                        e.downcast_ref::<ClientError>()
                    {
                        return Err(CliFailure::Unreachable(format!(
                            "the broker at {addr} refused the SASL {mechanism} login: {message} \
                             (check -X sasl.username, sasl.password and sasl.mechanism, or the profile)"
                        ))
                        .into());
                    }
                    failures.push(format!("{e}"))
                }
            }
        }
        Err(CliFailure::Unreachable(format!(
            "no broker answered ({}). Is one running there? Give the right address with --brokers HOST:PORT (or FLOE_BROKERS); \
             a TLS or SASL listener needs -X security.protocol=... and its settings",
            failures.join("; ")
        ))
        .into())
    }

    async fn open(&mut self, addr: &str) -> anyhow::Result<()> {
        let (host, port) = split_host_port(addr)?;
        let endpoint = Endpoint { host, port, protocol: self.protocol };
        let mut conn =
            BrokerConnection::connect(&endpoint, CLIENT_ID, self.timeout, &self.security).await?;
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("floe-cli"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let response = conn.call(3, &request).await?;
        check(response.error_code, None, &format!("ApiVersions from {addr}"))?;
        let versions =
            response.api_keys.iter().map(|k| (k.api_key, (k.min_version, k.max_version))).collect();
        self.connections.insert(addr.to_string(), Connection { conn, versions });
        Ok(())
    }

    /// The brokers of the last Metadata: node id → `host:port`.
    pub fn brokers(&self) -> &BTreeMap<i32, String> {
        &self.brokers
    }

    /// The highest version of `R` both this client and the broker at `addr` speak, at most `cap`.
    fn version<R: Request>(&self, addr: &str, cap: Option<i16>) -> anyhow::Result<i16> {
        let conn = self.connections.get(addr).ok_or_else(|| anyhow!("not connected to {addr}"))?;
        let Some(&(lo, hi)) = conn.versions.get(&R::KEY) else {
            bail!(
                "the broker at {addr} does not support API key {} (not in its ApiVersions)",
                R::KEY
            );
        };
        let mut v = hi.min(R::VERSIONS.max);
        if let Some(cap) = cap {
            v = v.min(cap);
        }
        if v < lo.max(R::VERSIONS.min) {
            bail!("no version of API key {} is spoken by both this client ({}..={}) and the broker at {addr} ({lo}..={hi})", R::KEY, R::VERSIONS.min, R::VERSIONS.max);
        }
        Ok(v)
    }

    /// Sends `request` to `target` at the best common version (at most `cap`) and returns the response and the version used.
    ///
    /// # Errors
    /// The connection's error, or no common version.
    pub async fn call_versioned<R: Request>(
        &mut self,
        target: Target,
        request: &R,
        cap: Option<i16>,
    ) -> anyhow::Result<(R::Response, i16)> {
        let addr = self.address(target).await?;
        self.call_at(&addr, request, cap).await
    }

    /// Sends `request` to the broker at `addr`, connecting first if need be.
    async fn call_at<R: Request>(
        &mut self,
        addr: &str,
        request: &R,
        cap: Option<i16>,
    ) -> anyhow::Result<(R::Response, i16)> {
        let addr = addr.to_string();
        if !self.connections.contains_key(&addr) {
            self.open(&addr).await.with_context(|| format!("cannot connect to broker {addr}"))?;
        }
        let version = self.version::<R>(&addr, cap)?;
        let conn =
            self.connections.get_mut(&addr).ok_or_else(|| anyhow!("not connected to {addr}"))?;
        match conn.conn.call(version, request).await {
            Ok(r) => Ok((r, version)),
            Err(e) => {
                // A broken connection is opened again on the next call.
                self.connections.remove(&addr);
                Err(e.into())
            }
        }
    }

    /// The version [`call`](Self::call) will use for `R` at `target`, for
    /// requests whose fields differ by version (set only what that version has:
    /// the encoder refuses a field the version lacks).
    ///
    /// # Errors
    /// The connection's error, or no common version.
    pub async fn negotiate<R: Request>(&mut self, target: Target) -> anyhow::Result<i16> {
        let addr = self.address(target).await?;
        if !self.connections.contains_key(&addr) {
            self.open(&addr).await.with_context(|| format!("cannot connect to broker {addr}"))?;
        }
        self.version::<R>(&addr, None)
    }

    /// [`call_versioned`](Self::call_versioned) without a cap, the response only.
    pub async fn call<R: Request>(
        &mut self,
        target: Target,
        request: &R,
    ) -> anyhow::Result<R::Response> {
        Ok(self.call_versioned(target, request, None).await?.0)
    }

    async fn address(&mut self, target: Target) -> anyhow::Result<String> {
        let node = match target {
            Target::Any => return Ok(self.bootstrap_addr.clone()),
            Target::Node(id) => id,
            Target::Controller => match self.controller {
                Some(id) if id >= 0 => id,
                _ => return Ok(self.bootstrap_addr.clone()),
            },
        };
        if !self.brokers.contains_key(&node) {
            self.metadata(Some(&[])).await?;
        }
        self.brokers
            .get(&node)
            .cloned()
            .ok_or_else(|| anyhow!("broker {node} is not in the cluster's metadata"))
    }

    /// Metadata for `topics` (`None`: every topic; `Some(&[])`: brokers only);
    /// refreshes the broker list.
    ///
    /// # Errors
    /// The call's error.
    pub async fn metadata(
        &mut self,
        topics: Option<&[String]>,
    ) -> anyhow::Result<MetadataResponse> {
        let request = MetadataRequest::default()
            .with_topics(topics.map(|names| {
                names
                    .iter()
                    .map(|n| {
                        MetadataRequestTopic::default()
                            .with_name(Some(TopicName(StrBytes::from_string(n.clone()))))
                    })
                    .collect()
            }))
            .with_allow_auto_topic_creation(false)
            .with_include_topic_authorized_operations(false);
        let addr = self.bootstrap_addr.clone();
        let (response, _) = self.call_at(&addr, &request, None).await?;
        self.brokers = response
            .brokers
            .iter()
            .map(|b| (b.node_id.0, format!("{}:{}", b.host.as_str(), b.port)))
            .collect();
        self.controller = Some(response.controller_id.0);
        Ok(response)
    }

    /// The coordinator of `key` (`key_type` 0: a group, 1: a transactional id).
    ///
    /// # Errors
    /// The call's error, or the coordinator's error code (COORDINATOR_NOT_AVAILABLE...).
    pub async fn coordinator(&mut self, key: &str, key_type: i8) -> anyhow::Result<i32> {
        let mut last = String::new();
        for _ in 0..10 {
            let version = self.negotiate::<FindCoordinatorRequest>(Target::Any).await?;
            let mut request = FindCoordinatorRequest::default().with_key_type(key_type);
            if version >= 4 {
                request.coordinator_keys = vec![StrBytes::from_string(key.to_string())];
            } else {
                request.key = StrBytes::from_string(key.to_string());
            }
            let (response, version) =
                self.call_versioned(Target::Any, &request, Some(version)).await?;
            let (code, message, node) = if version >= 4 {
                let c = response
                    .coordinators
                    .first()
                    .ok_or_else(|| anyhow!("FindCoordinator answered no coordinator for {key}"))?;
                (c.error_code, c.error_message.clone(), c.node_id.0)
            } else {
                (response.error_code, response.error_message.clone(), response.node_id.0)
            };
            if code == ResponseError::CoordinatorNotAvailable.code()
                || code == ResponseError::CoordinatorLoadInProgress.code()
            {
                last = error_name(code).unwrap_or_default();
                tokio::time::sleep(Duration::from_millis(300)).await;
                continue;
            }
            check(code, message.as_ref(), &format!("finding the coordinator of {key}"))?;
            return Ok(node);
        }
        bail!("finding the coordinator of {key}: still {last} after 3 s (is the cluster starting?)")
    }
}

/// `host:port` split; IPv6 addresses in brackets.
fn split_host_port(addr: &str) -> anyhow::Result<(String, u16)> {
    let (host, port) =
        addr.rsplit_once(':').ok_or_else(|| anyhow!("broker address `{addr}` is not HOST:PORT"))?;
    let port =
        port.parse().map_err(|_| anyhow!("broker address `{addr}`: `{port}` is not a port"))?;
    Ok((host.trim_start_matches('[').trim_end_matches(']').to_string(), port))
}
