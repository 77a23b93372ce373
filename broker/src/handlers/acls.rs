//! DescribeAcls, CreateAcls, DeleteAcls: the ACL bindings, read and changed.
//!
//! Describing needs DESCRIBE on the cluster, changing needs ALTER on the
//! cluster, as in Kafka. With no authorizer configured the three answer
//! SECURITY_DISABLED. Changes go to disk on the blocking pool and are
//! durable before the response (see [`crate::authorizer::store`]).
//!
//! In a cluster the bindings are cluster state: a change is decided from etcd's
//! bindings (`acls/<ResourceType>/<PatternType>/<name>`, one key per resource pattern,
//! as Kafka's `/kafka-acl/<type>/<name>`), written conditional on every changed key
//! being as read (decided again otherwise), and answered once this broker enforces
//! it; the other brokers apply it from their watch ([`crate::cluster_configs`]).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::{AclBinding, AclBindingFilter, AclOperation, ResourcePattern};
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use floe_protocol::response::message;

fn text(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

pub(super) fn handle_describe(
    broker: &Broker,
    ctx: &RequestContext,
    request: DescribeAclsRequest,
) -> DescribeAclsResponse {
    let refuse = |code: ResponseError, why: String| {
        DescribeAclsResponse::default()
            .with_error_code(code.code())
            .with_error_message(message(why))
    };
    let Some(store) = broker.authorizer.store() else {
        return refuse(ResponseError::SecurityDisabled, "no authorizer is configured".into());
    };
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Describe) {
        return refuse(
            ResponseError::ClusterAuthorizationFailed,
            "DescribeAcls needs DESCRIBE on the cluster".into(),
        );
    }
    let filter = match AclBindingFilter::from_wire(
        request.resource_type_filter,
        request.resource_name_filter.as_deref(),
        request.pattern_type_filter,
        request.principal_filter.as_deref(),
        request.host_filter.as_deref(),
        request.operation,
        request.permission_type,
    ) {
        Ok(f) => f,
        Err(e) => return refuse(ResponseError::InvalidRequest, e.to_string()),
    };
    // Grouped by resource pattern, as Kafka answers.
    let mut by_resource: BTreeMap<ResourcePattern, Vec<AclDescription>> = BTreeMap::new();
    for b in store.snapshot().iter().filter(|b| filter.matches(b)) {
        by_resource.entry(b.pattern.clone()).or_default().push(
            AclDescription::default()
                .with_principal(text(&b.entry.principal))
                .with_host(text(&b.entry.host))
                .with_operation(b.entry.operation.code())
                .with_permission_type(b.entry.permission.code()),
        );
    }
    let resources = by_resource
        .into_iter()
        .map(|(p, acls)| {
            DescribeAclsResource::default()
                .with_resource_type(p.resource_type.code())
                .with_resource_name(text(&p.name))
                .with_pattern_type(p.pattern_type.code())
                .with_acls(acls)
        })
        .collect();
    DescribeAclsResponse::default().with_resources(resources)
}

pub(super) async fn handle_create(
    broker: &Broker,
    ctx: &RequestContext,
    request: CreateAclsRequest,
) -> CreateAclsResponse {
    let all_failed = |code: ResponseError, why: &str| {
        let results = request
            .creations
            .iter()
            .map(|_| {
                AclCreationResult::default()
                    .with_error_code(code.code())
                    .with_error_message(message(why))
            })
            .collect();
        CreateAclsResponse::default().with_results(results)
    };
    if !broker.authorizer.enabled() {
        return all_failed(ResponseError::SecurityDisabled, "no authorizer is configured");
    }
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Alter) {
        return all_failed(
            ResponseError::ClusterAuthorizationFailed,
            "CreateAcls needs ALTER on the cluster",
        );
    }
    // Valid bindings are stored together; each invalid one gets its own error.
    let parsed: Vec<Result<AclBinding, String>> = request
        .creations
        .iter()
        .map(|c| {
            AclBinding::from_wire(
                c.resource_type,
                &c.resource_name,
                c.resource_pattern_type,
                &c.principal,
                &c.host,
                c.operation,
                c.permission_type,
            )
            .map_err(|e| e.to_string())
        })
        .collect();
    let valid: Vec<AclBinding> = parsed.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
    let stored = if valid.is_empty() {
        Ok(())
    } else if broker.cluster.shared().is_some() {
        create_in_cluster(broker, &valid).await
    } else {
        let authorizer = broker.authorizer.clone();
        let to_store = valid.clone();
        match tokio::task::spawn_blocking(move || authorizer.store().map(|s| s.add(&to_store)))
            .await
        {
            Ok(Some(Ok(()))) => Ok(()),
            Ok(Some(Err(e))) => Err(e.to_string()),
            Ok(None) => Err("no authorizer is configured".to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    if let Err(e) = &stored {
        tracing::error!(error = %e, "cannot store ACLs");
    } else if !valid.is_empty() {
        tracing::info!(principal = %ctx.principal, created = valid.len(), "ACLs created");
    }
    let results = parsed
        .into_iter()
        .map(|p| match (p, &stored) {
            (Err(why), _) => AclCreationResult::default()
                .with_error_code(ResponseError::InvalidRequest.code())
                .with_error_message(message(why)),
            (Ok(_), Err(why)) => AclCreationResult::default()
                .with_error_code(ResponseError::UnknownServerError.code())
                .with_error_message(message(why.clone())),
            (Ok(_), Ok(())) => AclCreationResult::default(),
        })
        .collect();
    CreateAclsResponse::default().with_results(results)
}

pub(super) async fn handle_delete(
    broker: &Broker,
    ctx: &RequestContext,
    request: DeleteAclsRequest,
) -> DeleteAclsResponse {
    let all_failed = |code: ResponseError, why: &str| {
        let results = request
            .filters
            .iter()
            .map(|_| {
                DeleteAclsFilterResult::default()
                    .with_error_code(code.code())
                    .with_error_message(message(why))
            })
            .collect();
        DeleteAclsResponse::default().with_filter_results(results)
    };
    if !broker.authorizer.enabled() {
        return all_failed(ResponseError::SecurityDisabled, "no authorizer is configured");
    }
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Alter) {
        return all_failed(
            ResponseError::ClusterAuthorizationFailed,
            "DeleteAcls needs ALTER on the cluster",
        );
    }
    let parsed: Vec<Result<AclBindingFilter, String>> = request
        .filters
        .iter()
        .map(|f| {
            AclBindingFilter::from_wire(
                f.resource_type_filter,
                f.resource_name_filter.as_deref(),
                f.pattern_type_filter,
                f.principal_filter.as_deref(),
                f.host_filter.as_deref(),
                f.operation,
                f.permission_type,
            )
            .map_err(|e| e.to_string())
        })
        .collect();
    let valid: Vec<AclBindingFilter> =
        parsed.iter().filter_map(|p| p.as_ref().ok().cloned()).collect();
    let authorizer = broker.authorizer.clone();
    let removed = if broker.cluster.shared().is_some() {
        delete_in_cluster(broker, &valid).await
    } else {
        match tokio::task::spawn_blocking(move || authorizer.store().map(|s| s.remove(&valid)))
            .await
        {
            Ok(Some(Ok(removed))) => Ok(removed),
            Ok(Some(Err(e))) => Err(e.to_string()),
            Ok(None) => Err("no authorizer is configured".to_string()),
            Err(e) => Err(e.to_string()),
        }
    };
    let mut removed = match removed {
        Ok(r) => {
            let count: usize = r.iter().map(Vec::len).sum();
            tracing::info!(principal = %ctx.principal, deleted = count, "ACLs deleted");
            r.into_iter()
        }
        Err(e) => {
            tracing::error!(error = %e, "cannot delete ACLs");
            return all_failed(ResponseError::UnknownServerError, &e);
        }
    };
    let results = parsed
        .into_iter()
        .map(|p| match p {
            Err(why) => DeleteAclsFilterResult::default()
                .with_error_code(ResponseError::InvalidRequest.code())
                .with_error_message(message(why)),
            Ok(_) => {
                let matched = removed.next().unwrap_or_default();
                DeleteAclsFilterResult::default().with_matching_acls(
                    matched
                        .iter()
                        .map(|b| {
                            DeleteAclsMatchingAcl::default()
                                .with_resource_type(b.pattern.resource_type.code())
                                .with_resource_name(text(&b.pattern.name))
                                .with_pattern_type(b.pattern.pattern_type.code())
                                .with_principal(text(&b.entry.principal))
                                .with_host(text(&b.entry.host))
                                .with_operation(b.entry.operation.code())
                                .with_permission_type(b.entry.permission.code())
                        })
                        .collect(),
                )
            }
        })
        .collect();
    DeleteAclsResponse::default().with_filter_results(results)
}

/// The cluster's bindings by key, as stored.
fn stored(current: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, BTreeSet<AclBinding>> {
    crate::cluster_configs::stored_acls(current.iter().map(|(k, v)| (k.clone(), v.clone())))
}

/// The writes that turn `before` into `after`: changed keys, an emptied one deleted.
fn acl_changes(
    before: &BTreeMap<String, BTreeSet<AclBinding>>,
    after: &BTreeMap<String, BTreeSet<AclBinding>>,
) -> Vec<floe_cluster::Change> {
    let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    keys.into_iter()
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| {
            let value = after
                .get(k)
                .filter(|set| !set.is_empty())
                .map(|set| serde_json::to_vec(&set.iter().collect::<Vec<_>>()).unwrap_or_default());
            (k.clone(), value)
        })
        .collect()
}

/// CreateAcls in a cluster: adds `bindings` to etcd's, then waits until this broker enforces them.
async fn create_in_cluster(broker: &Broker, bindings: &[AclBinding]) -> Result<(), String> {
    let Some(shared) = broker.cluster.shared() else { return Err("not in a cluster".into()) };
    let decide = |current: &BTreeMap<String, Vec<u8>>| -> Result<Vec<floe_cluster::Change>, std::convert::Infallible> {
        let before = stored(current);
        let mut after = before.clone();
        for b in bindings {
            after.entry(crate::cluster_configs::acl_key(b)).or_default().insert(b.clone());
        }
        Ok(acl_changes(&before, &after))
    };
    match shared.update(crate::cluster_configs::ACLS_DIR, decide).await {
        Ok(Ok(Some(revision))) => {
            crate::cluster_configs::await_applied(
                broker,
                crate::cluster_configs::ACLS_DIR,
                revision,
            )
            .await;
            Ok(())
        }
        Ok(Ok(None)) => Ok(()),
        Ok(Err(never)) => match never {},
        Err(e) => Err(e.to_string()),
    }
}

/// DeleteAcls in a cluster: removes from etcd's bindings those the filters match (each
/// filter reports its matches in the set before any removal, as on a broker alone),
/// then waits until this broker enforces the rest.
async fn delete_in_cluster(
    broker: &Broker,
    filters: &[AclBindingFilter],
) -> Result<Vec<Vec<AclBinding>>, String> {
    let Some(shared) = broker.cluster.shared() else { return Err("not in a cluster".into()) };
    let mut matched: Vec<Vec<AclBinding>> = Vec::new();
    let decide = |current: &BTreeMap<String, Vec<u8>>| -> Result<Vec<floe_cluster::Change>, std::convert::Infallible> {
        let before = stored(current);
        matched = filters.iter().map(|f| before.values().flatten().filter(|b| f.matches(b)).cloned().collect()).collect();
        let mut after = before.clone();
        for b in matched.iter().flatten() {
            if let Some(set) = after.get_mut(&crate::cluster_configs::acl_key(b)) {
                set.remove(b);
            }
        }
        Ok(acl_changes(&before, &after))
    };
    match shared.update(crate::cluster_configs::ACLS_DIR, decide).await {
        Ok(Ok(Some(revision))) => {
            crate::cluster_configs::await_applied(
                broker,
                crate::cluster_configs::ACLS_DIR,
                revision,
            )
            .await;
            Ok(matched)
        }
        Ok(Ok(None)) => Ok(matched),
        Ok(Err(never)) => match never {},
        Err(e) => Err(e.to_string()),
    }
}
