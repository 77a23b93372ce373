//! DescribeUserScramCredentials and AlterUserScramCredentials: manage the
//! SCRAM users in the credential store.
//!
//! Alter receives salted passwords (clients run PBKDF2); the store keeps
//! only the derived StoredKey and ServerKey. A user named twice in one
//! request gets DUPLICATE_RESOURCE, bad mechanisms UNSUPPORTED_SASL_MECHANISM,
//! iterations outside 4096..=16384 UNACCEPTABLE_CREDENTIAL, deleting a
//! credential that does not exist RESOURCE_NOT_FOUND.
//!
//! In a cluster the credentials are cluster state (`scram/<user>` in etcd, one key per
//! user as Kafka's `/config/users/<u>`): a change is decided from the stored users it
//! names, written conditional on them being as read, and answered once this broker
//! authenticates with it; the others apply it from their watch ([`crate::cluster_configs`]).

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::authorizer::acl::AclOperation;
use crate::authorizer::RequestContext;
use crate::broker::Broker;
use crate::security::scram::{ScramCredential, ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use floe_protocol::response::message;

pub(super) fn handle_describe(
    broker: &Broker,
    ctx: &RequestContext,
    request: DescribeUserScramCredentialsRequest,
) -> DescribeUserScramCredentialsResponse {
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Describe) {
        return DescribeUserScramCredentialsResponse::default()
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(message("DESCRIBE on the cluster is needed"));
    }
    let known = broker.credentials.describe();
    let info = |mechanisms: &[(ScramMechanism, i32)]| -> Vec<CredentialInfo> {
        mechanisms
            .iter()
            .map(|(m, i)| {
                CredentialInfo::default().with_mechanism(m.wire_type()).with_iterations(*i)
            })
            .collect()
    };
    let results = match request.users {
        // Null or empty: every user.
        None => known.iter().map(|(u, m)| ok_result(u, info(m))).collect(),
        Some(users) if users.is_empty() => {
            known.iter().map(|(u, m)| ok_result(u, info(m))).collect()
        }
        Some(users) => {
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for u in &users {
                *counts.entry(u.name.to_string()).or_default() += 1;
            }
            counts
                .into_iter()
                .map(|(user, n)| match known.get(&user) {
                    _ if n > 1 => error_result(
                        &user,
                        ResponseError::DuplicateResource,
                        "user named more than once",
                    ),
                    Some(m) => ok_result(&user, info(m)),
                    None => error_result(
                        &user,
                        ResponseError::ResourceNotFound,
                        "no SCRAM credential for this user",
                    ),
                })
                .collect()
        }
    };
    DescribeUserScramCredentialsResponse::default().with_results(results)
}

fn ok_result(user: &str, infos: Vec<CredentialInfo>) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user.to_string()))
        .with_credential_infos(infos)
}

fn error_result(user: &str, e: ResponseError, text: &str) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user.to_string()))
        .with_error_code(e.code())
        .with_error_message(message(text))
}

pub(super) async fn handle_alter(
    broker: &Broker,
    ctx: &RequestContext,
    request: AlterUserScramCredentialsRequest,
) -> AlterUserScramCredentialsResponse {
    if !broker.authorizer.authorize_cluster(ctx, AclOperation::Alter) {
        let users: BTreeSet<String> = request
            .deletions
            .iter()
            .map(|d| d.name.to_string())
            .chain(request.upsertions.iter().map(|u| u.name.to_string()))
            .collect();
        let results = users
            .into_iter()
            .map(|u| {
                AlterUserScramCredentialsResult::default()
                    .with_user(StrBytes::from_string(u))
                    .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
                    .with_error_message(message("ALTER on the cluster is needed"))
            })
            .collect();
        return AlterUserScramCredentialsResponse::default().with_results(results);
    }
    // Kafka refuses a (user, mechanism) named twice across deletions and upsertions.
    let mut seen: BTreeMap<(String, i8), usize> = BTreeMap::new();
    for d in &request.deletions {
        *seen.entry((d.name.to_string(), d.mechanism)).or_default() += 1;
    }
    for u in &request.upsertions {
        *seen.entry((u.name.to_string(), u.mechanism)).or_default() += 1;
    }
    let mut failed: BTreeMap<String, (ResponseError, String)> = BTreeMap::new();
    let mut fail = |user: &str, e: ResponseError, text: String| {
        failed.entry(user.to_string()).or_insert((e, text));
    };
    let mut deletions = Vec::new();
    for d in &request.deletions {
        let user = d.name.to_string();
        match ScramMechanism::from_wire_type(d.mechanism) {
            _ if user.is_empty() => {
                fail(&user, ResponseError::UnacceptableCredential, "empty user name".into())
            }
            _ if seen[&(user.clone(), d.mechanism)] > 1 => {
                fail(&user, ResponseError::DuplicateResource, "credential named twice".into())
            }
            None => fail(
                &user,
                ResponseError::UnsupportedSaslMechanism,
                format!("unknown mechanism {}", d.mechanism),
            ),
            Some(m) => deletions.push((user, m)),
        }
    }
    let mut upsertions = Vec::new();
    for u in &request.upsertions {
        let user = u.name.to_string();
        match ScramMechanism::from_wire_type(u.mechanism) {
            _ if user.is_empty() => {
                fail(&user, ResponseError::UnacceptableCredential, "empty user name".into())
            }
            _ if seen[&(user.clone(), u.mechanism)] > 1 => {
                fail(&user, ResponseError::DuplicateResource, "credential named twice".into())
            }
            None => fail(
                &user,
                ResponseError::UnsupportedSaslMechanism,
                format!("unknown mechanism {}", u.mechanism),
            ),
            Some(_) if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&u.iterations) => fail(
                &user,
                ResponseError::UnacceptableCredential,
                format!(
                    "iterations must be in {MIN_ITERATIONS}..={MAX_ITERATIONS}, got {}",
                    u.iterations
                ),
            ),
            Some(_) if u.salt.is_empty() || u.salted_password.is_empty() => fail(
                &user,
                ResponseError::UnacceptableCredential,
                "empty salt or salted password".into(),
            ),
            Some(m) => upsertions.push((
                user,
                m,
                ScramCredential::from_salted_password(m, &u.salt, u.iterations, &u.salted_password),
            )),
        }
    }
    // A user with any refused change keeps all its credentials as they were (Kafka applies per user).
    deletions.retain(|(u, _)| !failed.contains_key(u));
    upsertions.retain(|(u, _, _)| !failed.contains_key(u));
    let users: BTreeSet<String> = request
        .deletions
        .iter()
        .map(|d| d.name.to_string())
        .chain(request.upsertions.iter().map(|u| u.name.to_string()))
        .collect();

    let store = broker.credentials.clone();
    let deleted_names: Vec<(String, ScramMechanism)> = deletions.clone();
    let applied: Result<Vec<bool>, String> = if broker.cluster.shared().is_some() {
        alter_in_cluster(broker, &deletions, &upsertions).await.map_err(|e| {
            tracing::warn!(error = %e, "cannot write SCRAM credentials to the cluster metadata");
            e.to_string()
        })
    } else {
        match tokio::task::spawn_blocking(move || store.alter(&deletions, upsertions)).await {
            Ok(Ok(existed)) => Ok(existed),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "cannot store SCRAM credentials");
                Err(e.to_string())
            }
            Err(e) => Err(e.to_string()),
        }
    };
    let mut missing: BTreeSet<String> = BTreeSet::new();
    let store_error = match applied {
        Ok(existed) => {
            for ((user, m), was) in deleted_names.iter().zip(existed) {
                if !was {
                    tracing::debug!(%user, mechanism = m.name(), "deleting a SCRAM credential that does not exist");
                    missing.insert(user.clone());
                }
            }
            None
        }
        Err(e) => Some(e),
    };
    let results = users
        .into_iter()
        .map(|user| {
            let result = AlterUserScramCredentialsResult::default()
                .with_user(StrBytes::from_string(user.clone()));
            if let Some((e, text)) = failed.get(&user) {
                return result.with_error_code(e.code()).with_error_message(message(text.clone()));
            }
            if let Some(text) = &store_error {
                return result
                    .with_error_code(ResponseError::UnknownServerError.code())
                    .with_error_message(message(text.clone()));
            }
            if missing.contains(&user) {
                return result
                    .with_error_code(ResponseError::ResourceNotFound.code())
                    .with_error_message(message(
                        "attempt to delete a user credential that does not exist",
                    ));
            }
            tracing::info!(%user, "SCRAM credentials altered");
            result
        })
        .collect();
    AlterUserScramCredentialsResponse::default().with_results(results)
}

/// AlterUserScramCredentials in a cluster: applies the deletions and upsertions to the
/// users stored in etcd, then waits until this broker authenticates with the result.
/// Returns, per deletion, whether the credential existed.
async fn alter_in_cluster(
    broker: &Broker,
    deletions: &[(String, ScramMechanism)],
    upsertions: &[(String, ScramMechanism, ScramCredential)],
) -> Result<Vec<bool>, floe_cluster::ClusterError> {
    let Some(shared) = broker.cluster.shared() else { return Ok(vec![false; deletions.len()]) };
    let mut existed = Vec::new();
    let decide = |current: &BTreeMap<String, Vec<u8>>| -> Result<Vec<floe_cluster::Change>, std::convert::Infallible> {
        let before = crate::cluster_configs::stored_scram(current.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut after = before.clone();
        existed = deletions
            .iter()
            .map(|(user, m)| {
                let Some(map) = after.get_mut(user) else { return false };
                let removed = map.remove(m).is_some();
                if map.is_empty() {
                    after.remove(user);
                }
                removed
            })
            .collect();
        for (user, m, credential) in upsertions {
            after.entry(user.clone()).or_default().insert(*m, credential.clone());
        }
        let users: BTreeSet<&String> = deletions.iter().map(|(u, _)| u).chain(upsertions.iter().map(|(u, _, _)| u)).collect();
        Ok(users
            .into_iter()
            .filter(|u| before.get(*u) != after.get(*u))
            .map(|u| (u.clone(), after.get(u).map(|m| serde_json::to_vec(m).unwrap_or_default())))
            .collect())
    };
    match shared.update(crate::cluster_configs::SCRAM_DIR, decide).await? {
        Ok(Some(revision)) => {
            crate::cluster_configs::await_applied(
                broker,
                crate::cluster_configs::SCRAM_DIR,
                revision,
            )
            .await
        }
        Ok(None) => {}
        Err(never) => match never {},
    }
    Ok(existed)
}
