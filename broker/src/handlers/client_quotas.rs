//! DescribeClientQuotas and AlterClientQuotas (KIP-546): the quotas on
//! users and client ids, read and changed; [`crate::quota`] enforces them.
//!
//! As Kafka (`ClientQuotasImage.describe`, `ClientQuotaControlManager`):
//! a describe filter has at most one component per entity type, matching
//! a name exactly, the default, or any name ("specified"); `strict` wants
//! no other component in the entity. An alteration is checked per entity
//! (known entity types, no empty names, no key twice, keys valid for the
//! entity, values > 0 and whole for the byte rates) and applied per entity:
//! one bad entity does not stop the others. IP entities and
//! `controller_mutation_rate` are refused as INVALID_REQUEST: Floe does not
//! enforce them. Authorization: DESCRIBE_CONFIGS / ALTER_CONFIGS on the
//! cluster.
//!
//! In a cluster the quotas are cluster state (`configs/quotas/...` in etcd, one key per
//! entity as Kafka's `/config/users/<u>/clients/<c>`): the checked changes are applied
//! to the stored entities, written conditional on them being as read, and answered
//! once this broker enforces them; the others apply them from their watch
//! ([`crate::cluster_configs`]).

use std::collections::BTreeMap;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::AclOperation;
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::quota::entity::{EntityName, QuotaEntity, CLIENT_ID, USER};
use crate::quota::QUOTA_KEYS;
use floe_protocol::response::message;

const MATCH_EXACT: i8 = 0;
const MATCH_DEFAULT: i8 = 1;
const MATCH_SPECIFIED: i8 = 2;

/// What one describe component asks of an entity's component of its type.
enum Match {
    Is(EntityName),
    Any,
}

pub(super) fn handle_describe(
    broker: &Broker,
    ctx: &RequestContext,
    request: DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let failed = |error: ResponseError, reason: String| {
        DescribeClientQuotasResponse::default()
            .with_error_code(error.code())
            .with_error_message(message(reason))
            .with_entries(None)
    };
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::DescribeConfigs) {
        return failed(
            ResponseError::ClusterAuthorizationFailed,
            "DESCRIBE_CONFIGS on the cluster is needed".into(),
        );
    }
    let mut filter: BTreeMap<&str, Match> = BTreeMap::new();
    for c in &request.components {
        let kind = c.entity_type.as_str();
        if kind.is_empty() {
            return failed(ResponseError::InvalidRequest, "Invalid empty entity type.".into());
        }
        if filter.contains_key(kind) {
            return failed(
                ResponseError::InvalidRequest,
                format!("Entity type {kind} cannot appear more than once in the filter."),
            );
        }
        if kind != USER && kind != CLIENT_ID {
            return failed(
                ResponseError::UnsupportedVersion,
                format!("Unsupported entity type {kind}"),
            );
        }
        let m = match (c.match_type, &c._match) {
            (MATCH_EXACT, Some(name)) => Match::Is(EntityName::Named(name.to_string())),
            (MATCH_EXACT, None) => {
                return failed(
                    ResponseError::InvalidRequest,
                    "Request specified MATCH_TYPE_EXACT, but set match string to null.".into(),
                )
            }
            (MATCH_DEFAULT, None) => Match::Is(EntityName::Default),
            (MATCH_SPECIFIED, None) => Match::Any,
            (MATCH_DEFAULT | MATCH_SPECIFIED, Some(_)) => {
                return failed(
                    ResponseError::InvalidRequest,
                    format!("match type {} takes no match string", c.match_type),
                )
            }
            (other, _) => {
                return failed(
                    ResponseError::UnsupportedVersion,
                    format!("Unknown match type {other}"),
                )
            }
        };
        filter.insert(kind, m);
    }
    let matches = |entity: &QuotaEntity| {
        let parts = [(USER, &entity.user), (CLIENT_ID, &entity.client_id)];
        if request.strict && parts.iter().filter(|(_, p)| p.is_some()).count() != filter.len() {
            return false;
        }
        filter.iter().all(|(kind, m)| {
            let part = parts.iter().find(|(k, _)| k == kind).and_then(|(_, p)| p.as_ref());
            match (m, part) {
                (_, None) => false,
                (Match::Any, Some(_)) => true,
                (Match::Is(want), Some(have)) => want == have,
            }
        })
    };
    use kafka_protocol::messages::describe_client_quotas_response::{
        EntityData, EntryData, ValueData,
    };
    let entries = broker
        .quotas
        .snapshot()
        .iter()
        .filter(|(entity, _)| matches(entity))
        .map(|(entity, values)| {
            let mut parts = Vec::new();
            for (kind, part) in [(USER, &entity.user), (CLIENT_ID, &entity.client_id)] {
                if let Some(name) = part {
                    parts.push(
                        EntityData::default()
                            .with_entity_type(str_bytes(kind))
                            .with_entity_name(name.to_wire().map(str_bytes)),
                    );
                }
            }
            let values = values
                .iter()
                .map(|(k, v)| ValueData::default().with_key(str_bytes(k)).with_value(*v))
                .collect();
            EntryData::default().with_entity(parts).with_values(values)
        })
        .collect();
    DescribeClientQuotasResponse::default().with_entries(Some(entries))
}

pub(super) async fn handle_alter(
    broker: &Broker,
    ctx: &RequestContext,
    request: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    use kafka_protocol::messages::alter_client_quotas_response::{EntityData, EntryData};
    let authorized = broker.authorizer.authorize_cluster(ctx, AclOperation::AlterConfigs);
    // Each entity: its echo for the response, and the checked change or the error.
    let mut checked = Vec::with_capacity(request.entries.len());
    let mut seen = Vec::new();
    for entry in &request.entries {
        let echo: Vec<EntityData> = entry
            .entity
            .iter()
            .map(|e| {
                EntityData::default()
                    .with_entity_type(e.entity_type.clone())
                    .with_entity_name(e.entity_name.clone())
            })
            .collect();
        let outcome = if authorized {
            check(entry).and_then(|(entity, ops)| {
                if seen.contains(&entity) {
                    return Err((
                        ResponseError::InvalidRequest,
                        format!("Ignoring duplicate entity {entity:?}"),
                    ));
                }
                seen.push(entity.clone());
                Ok((entity, ops))
            })
        } else {
            Err((
                ResponseError::ClusterAuthorizationFailed,
                "ALTER_CONFIGS on the cluster is needed".to_string(),
            ))
        };
        checked.push((echo, outcome));
    }
    let changes: Vec<QuotaChange> =
        checked.iter().filter_map(|(_, o)| o.as_ref().ok().cloned()).collect();
    let mut write_error = None;
    if !request.validate_only && !changes.is_empty() && broker.cluster.shared().is_some() {
        write_error = alter_in_cluster(broker, &changes).await.err();
    } else if !request.validate_only && !changes.is_empty() {
        let quotas = broker.quotas.clone();
        let written = tokio::task::spawn_blocking(move || {
            quotas.change(|set| {
                for (entity, ops) in changes {
                    let values = set.entry(entity).or_default();
                    for (key, value) in ops {
                        match value {
                            Some(v) => values.insert(key, v),
                            None => values.remove(&key),
                        };
                    }
                }
            })
        })
        .await;
        match written {
            Ok(Ok(())) => tracing::info!(
                entities = checked.iter().filter(|(_, o)| o.is_ok()).count(),
                "altered client quotas"
            ),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot persist client quotas");
                write_error = Some((ResponseError::KafkaStorageError, e.to_string()));
            }
            Err(e) => {
                tracing::error!(error = %e, "client quota task failed");
                write_error = Some((ResponseError::UnknownServerError, e.to_string()));
            }
        }
    }
    let entries = checked
        .into_iter()
        .map(|(echo, outcome)| {
            let entry = EntryData::default().with_entity(echo);
            let failure = match outcome {
                Err(failure) => Some(failure),
                Ok(_) => write_error.clone(),
            };
            match failure {
                Some((error, reason)) => {
                    entry.with_error_code(error.code()).with_error_message(message(reason))
                }
                None => entry,
            }
        })
        .collect();
    AlterClientQuotasResponse::default().with_entries(entries)
}

/// One entity's checked change: each key set to a value, or removed (`None`).
type QuotaChange = (QuotaEntity, Vec<(String, Option<f64>)>);

type Checked = Result<QuotaChange, (ResponseError, String)>;

/// Kafka's per-entity validation of one alteration.
fn check(entry: &kafka_protocol::messages::alter_client_quotas_request::EntryData) -> Checked {
    let invalid = |reason: String| Err((ResponseError::InvalidRequest, reason));
    if entry.entity.is_empty() {
        return invalid("Invalid empty client quota entity".into());
    }
    let mut entity = QuotaEntity { user: None, client_id: None };
    for e in &entry.entity {
        let kind = e.entity_type.as_str();
        let slot = match kind {
            USER => &mut entity.user,
            CLIENT_ID => &mut entity.client_id,
            "ip" => {
                return invalid(
                    "IP quotas (connection_creation_rate) are not supported by Floe".into(),
                )
            }
            other => return invalid(format!("Unhandled client quota entity type: {other}")),
        };
        if slot.is_some() {
            return invalid(format!("Invalid client quota entity, duplicate entity entry {kind}"));
        }
        if e.entity_name.as_ref().is_some_and(|n| n.is_empty()) {
            return invalid(format!("Empty {kind} not supported"));
        }
        *slot = Some(EntityName::from_wire(e.entity_name.as_deref()));
    }
    let mut ops: Vec<(String, Option<f64>)> = Vec::with_capacity(entry.ops.len());
    for op in &entry.ops {
        let key = op.key.as_str();
        if ops.iter().any(|(k, _)| k == key) {
            return invalid(format!(
                "Duplicate quota key {key} not updating quota for this entity"
            ));
        }
        if op.remove {
            ops.push((key.to_string(), None));
            continue;
        }
        let Some((_, whole)) = QUOTA_KEYS.iter().find(|(k, _)| *k == key) else {
            return invalid(format!("Invalid configuration key {key}"));
        };
        if op.value.is_nan() || op.value <= 0.0 {
            return invalid(format!("Quota {key} must be greater than 0"));
        }
        if *whole && (op.value % 1.0).abs() > 1e-10 {
            return invalid(format!("{key} cannot be a fractional value."));
        }
        ops.push((key.to_string(), Some(op.value)));
    }
    Ok((entity, ops))
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// AlterClientQuotas in a cluster: applies `changes` to the entities stored in etcd,
/// then waits until this broker enforces them.
async fn alter_in_cluster(
    broker: &Broker,
    changes: &[QuotaChange],
) -> Result<(), (ResponseError, String)> {
    use crate::cluster_configs::{quota_key, StoredQuota, CONFIGS_DIR};
    let Some(shared) = broker.cluster.shared() else { return Ok(()) };
    let decide = |stored: &BTreeMap<String, Vec<u8>>| -> Result<Vec<floe_cluster::Change>, std::convert::Infallible> {
        let mut next: BTreeMap<String, StoredQuota> = BTreeMap::new();
        for (entity, ops) in changes {
            let key = quota_key(entity);
            let q = next.entry(key.clone()).or_insert_with(|| {
                stored
                    .get(&key)
                    .and_then(|v| serde_json::from_slice::<StoredQuota>(v).ok())
                    .unwrap_or(StoredQuota { entity: entity.clone(), values: BTreeMap::new() })
            });
            for (k, value) in ops {
                match value {
                    Some(v) => q.values.insert(k.clone(), *v),
                    None => q.values.remove(k),
                };
            }
        }
        Ok(next
            .into_iter()
            .filter(|(key, q)| match stored.get(key) {
                None => !q.values.is_empty(),
                Some(v) => serde_json::from_slice::<StoredQuota>(v).ok().as_ref() != Some(q),
            })
            .map(|(key, q)| (key, (!q.values.is_empty()).then(|| serde_json::to_vec(&q).unwrap_or_default())))
            .collect())
    };
    match shared.update(CONFIGS_DIR, decide).await {
        Ok(Ok(Some(revision))) => {
            crate::cluster_configs::await_applied(broker, CONFIGS_DIR, revision).await;
            tracing::info!(entities = changes.len(), "altered client quotas in the cluster");
            Ok(())
        }
        Ok(Ok(None)) => Ok(()),
        Ok(Err(never)) => match never {},
        Err(e) => {
            tracing::warn!(error = %e, "cannot write client quotas to the cluster metadata");
            Err((crate::cluster_configs::error_code(&e), e.to_string()))
        }
    }
}
