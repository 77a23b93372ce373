//! Who may use the Schema Registry: the broker's users and ACLs, over HTTP.
//!
//! - **Authentication**: when any Kafka listener uses SASL, every request needs
//!   HTTP basic auth (`Authorization: Basic base64(user:password)`) of a user the
//!   broker knows: a PLAIN user (`floe.sasl.plain.users.file`) or a SCRAM user
//!   (its password checked against the stored credential). Otherwise requests are
//!   `User:ANONYMOUS`, as on a PLAINTEXT listener.
//! - **Authorization**, when the broker's authorizer is on, with the broker's ACLs:
//!   a subject is guarded by the TOPIC it names, by the TopicNameStrategy the
//!   serializers use (`orders-value` and `orders-key` by topic `orders`; a subject
//!   without the suffix by the topic of its own name). Reading a subject (versions,
//!   lookups, compatibility checks, its config and mode) needs DESCRIBE (implied by
//!   READ and WRITE); registering and deleting need WRITE; a subject's config and
//!   mode need ALTER_CONFIGS on the topic, the registry's own need ALTER_CONFIGS on
//!   the CLUSTER. Schemas by id, the schema types and the global config and mode
//!   are readable by any authenticated user (a deserializer knows only an id).
//!   Subject listings leave out the subjects the user may not describe.

use std::net::IpAddr;
use std::sync::Arc;

use base64::Engine as _;

use crate::authorizer::acl::{AclOperation, ResourceType};
use crate::authorizer::{Authorizer, RequestContext, ANONYMOUS};
use crate::security::credentials::CredentialStore;
use floe_schema::rest::Route;

/// Why a request may not go on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Denied {
    /// No or bad credentials: 401.
    Unauthenticated(String),
    /// Authenticated, not allowed: 403.
    Forbidden(String),
}

/// The broker's users and ACLs, as the registry applies them (see the module doc).
#[derive(Debug, Clone)]
pub struct Access {
    /// `Some` when basic auth is required.
    credentials: Option<Arc<CredentialStore>>,
    authorizer: Arc<Authorizer>,
}

impl Access {
    /// Basic auth against `credentials` when `Some`; ACLs from `authorizer`.
    pub fn new(credentials: Option<Arc<CredentialStore>>, authorizer: Arc<Authorizer>) -> Self {
        Self { credentials, authorizer }
    }

    /// Anyone, everything: no SASL, no authorizer.
    pub fn open() -> Self {
        Self { credentials: None, authorizer: Arc::new(Authorizer::disabled()) }
    }

    /// The principal of a request with this `Authorization` header. Blocking
    /// (a SCRAM password check is PBKDF2): call off the async workers.
    pub(crate) fn authenticate(&self, authorization: Option<&[u8]>) -> Result<String, Denied> {
        let Some(credentials) = &self.credentials else { return Ok(ANONYMOUS.to_string()) };
        let header = authorization.ok_or_else(|| {
            Denied::Unauthenticated("no Authorization header (basic auth is required)".into())
        })?;
        let header = std::str::from_utf8(header)
            .map_err(|_| Denied::Unauthenticated("the Authorization header is not UTF-8".into()))?;
        let encoded =
            header.strip_prefix("Basic ").or_else(|| header.strip_prefix("basic ")).ok_or_else(
                || Denied::Unauthenticated("the Authorization header is not basic auth".into()),
            )?;
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| {
                Denied::Unauthenticated(
                    "the basic auth credentials are not base64 of user:password".into(),
                )
            })?;
        let (user, password) = decoded.split_once(':').ok_or_else(|| {
            Denied::Unauthenticated("the basic auth credentials have no ':'".into())
        })?;
        if user.is_empty() || !credentials.check_plain(user, password) {
            return Err(Denied::Unauthenticated(format!(
                "authentication failed for user {user:?}"
            )));
        }
        Ok(format!("User:{user}"))
    }

    /// Whether `principal` (from `host`) may make the request `route` names.
    pub(crate) fn authorize(
        &self,
        principal: &str,
        host: IpAddr,
        route: &Route,
    ) -> Result<(), Denied> {
        if !self.authorizer.enabled() {
            return Ok(());
        }
        let ctx = RequestContext { principal: principal.to_string(), host };
        let (op, resource, name) = match required(route) {
            Required::Authenticated => return Ok(()),
            Required::Subject(op, subject) => {
                (op, ResourceType::Topic, topic_of(subject).to_string())
            }
            Required::Cluster(op) => {
                (op, ResourceType::Cluster, crate::authorizer::acl::CLUSTER_NAME.to_string())
            }
        };
        if self.authorizer.authorize(&ctx, op, resource, &name) {
            Ok(())
        } else {
            Err(Denied::Forbidden(format!(
                "User {principal} is denied operation {op:?} on {} {name}",
                resource.name()
            )))
        }
    }

    /// Whether a subject appears in `principal`'s listings.
    pub(crate) fn may_see(&self, principal: &str, host: IpAddr, subject: &str) -> bool {
        let ctx = RequestContext { principal: principal.to_string(), host };
        self.authorizer.check(&ctx, AclOperation::Describe, ResourceType::Topic, topic_of(subject))
    }

    /// Whether listings must be filtered at all.
    pub(crate) fn filters_listings(&self) -> bool {
        self.authorizer.enabled()
    }
}

/// What a route needs.
enum Required<'a> {
    Authenticated,
    Subject(AclOperation, &'a str),
    Cluster(AclOperation),
}

fn required(route: &Route) -> Required<'_> {
    use AclOperation::{AlterConfigs, Describe, Write};
    match route {
        Route::Versions { subject, .. }
        | Route::Version { subject, .. }
        | Route::VersionText { subject, .. }
        | Route::ReferencedBy { subject, .. }
        | Route::Lookup { subject, .. }
        | Route::Compatibility { subject, .. }
        | Route::GetConfig { subject: Some(subject), .. }
        | Route::GetMode { subject: Some(subject), .. } => Required::Subject(Describe, subject),
        Route::Register { subject, .. }
        | Route::DeleteSubject { subject, .. }
        | Route::DeleteVersion { subject, .. } => Required::Subject(Write, subject),
        Route::SetConfig { subject: Some(subject) }
        | Route::DeleteConfig { subject: Some(subject) }
        | Route::SetMode { subject: Some(subject) }
        | Route::DeleteMode { subject } => Required::Subject(AlterConfigs, subject),
        Route::SetConfig { subject: None }
        | Route::DeleteConfig { subject: None }
        | Route::SetMode { subject: None } => Required::Cluster(AlterConfigs),
        _ => Required::Authenticated,
    }
}

/// The topic a subject is guarded by: its name without `-key` / `-value`.
fn topic_of(subject: &str) -> &str {
    subject
        .strip_suffix("-value")
        .or_else(|| subject.strip_suffix("-key"))
        .filter(|t| !t.is_empty())
        .unwrap_or(subject)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_map_to_their_topics_and_routes_to_operations() {
        assert_eq!(topic_of("orders-value"), "orders");
        assert_eq!(topic_of("orders-key"), "orders");
        assert_eq!(topic_of("shop.Order"), "shop.Order");
        assert_eq!(topic_of("-value"), "-value");
        assert!(matches!(
            required(&Route::Register { subject: "s".into(), normalize: false }),
            Required::Subject(AclOperation::Write, "s")
        ));
        assert!(matches!(
            required(&Route::SetConfig { subject: None }),
            Required::Cluster(AclOperation::AlterConfigs)
        ));
        assert!(matches!(
            required(&Route::SchemaById { id: "1".into(), format: None }),
            Required::Authenticated
        ));
    }

    #[test]
    fn without_sasl_everyone_is_anonymous() {
        assert_eq!(Access::open().authenticate(None), Ok(ANONYMOUS.to_string()));
    }
}
