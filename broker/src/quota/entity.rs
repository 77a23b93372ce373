//! Client quota entities (KIP-55, KIP-546): who a quota applies to, and which
//! configured quota applies to a given (user, client id).
//!
//! An entity names a user, a client id, or both; either name may be the
//! default (`<default>`, null on the wire). The quota that applies to a
//! request is the first of these that sets the key, most specific first:
//! `/users/U/clients/C`, `/users/U/clients/<default>`, `/users/U`,
//! `/users/<default>/clients/C`, `/users/<default>/clients/<default>`,
//! `/users/<default>`, `/clients/C`, `/clients/<default>`.
//!
//! The level that matched also says who shares a rate (Kafka's metric tags):
//! a quota on `/users/U` is one rate for all of U's clients, one on
//! `/users/U/clients/<default>` is a rate per (U, client id).

use serde::{Deserialize, Serialize};

/// Kafka's entity type names.
pub const USER: &str = "user";
/// Kafka's entity type names.
pub const CLIENT_ID: &str = "client-id";

/// One component of an entity: a specific name or the default.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum EntityName {
    /// `<default>`: every name without a quota of its own.
    Default,
    /// One user or client id.
    Named(String),
}

impl EntityName {
    /// From the wire: null is the default.
    pub fn from_wire(name: Option<&str>) -> Self {
        name.map_or(EntityName::Default, |n| EntityName::Named(n.to_string()))
    }

    /// To the wire: the default is null.
    pub fn to_wire(&self) -> Option<&str> {
        match self {
            EntityName::Default => None,
            EntityName::Named(n) => Some(n),
        }
    }
}

/// A quota entity: a user, a client id, or a user's client id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct QuotaEntity {
    /// The user component, if any.
    pub user: Option<EntityName>,
    /// The client-id component, if any.
    pub client_id: Option<EntityName>,
}

/// The rate a request is counted in: the matched entity's metric tags
/// (user and client id, empty where the quota does not distinguish).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RateKey {
    /// The user, or empty.
    pub user: String,
    /// The client id, or empty.
    pub client_id: String,
}

/// The eight levels of KIP-55's precedence for `user` and `client_id`, most
/// specific first, each with the tags of the rate it implies.
pub fn precedence(user: &str, client_id: &str) -> [(QuotaEntity, RateKey); 8] {
    let named = |s: &str| Some(EntityName::Named(s.to_string()));
    let default = || Some(EntityName::Default);
    let entity = |user, client_id| QuotaEntity { user, client_id };
    let tags = |u: &str, c: &str| RateKey { user: u.to_string(), client_id: c.to_string() };
    [
        (entity(named(user), named(client_id)), tags(user, client_id)),
        (entity(named(user), default()), tags(user, client_id)),
        (entity(named(user), None), tags(user, "")),
        (entity(default(), named(client_id)), tags(user, client_id)),
        (entity(default(), default()), tags(user, client_id)),
        (entity(default(), None), tags(user, "")),
        (entity(None, named(client_id)), tags("", client_id)),
        (entity(None, default()), tags("", client_id)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_runs_from_user_and_client_to_default_client() {
        let levels = precedence("alice", "app");
        assert_eq!(
            levels[0].0,
            QuotaEntity {
                user: Some(EntityName::Named("alice".into())),
                client_id: Some(EntityName::Named("app".into()))
            }
        );
        assert_eq!(levels[2].1, RateKey { user: "alice".into(), client_id: String::new() });
        assert_eq!(levels[7].0, QuotaEntity { user: None, client_id: Some(EntityName::Default) });
        assert_eq!(levels[7].1, RateKey { user: String::new(), client_id: "app".into() });
    }
}
