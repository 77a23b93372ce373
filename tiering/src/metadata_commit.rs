//! Commits a table metadata Floe built itself to the embedded SQL catalog.
//!
//! The iceberg crate (0.10) commits only what its own actions build, and its
//! `TableCommit` cannot be made outside the crate. Two changes Floe needs have no
//! action: a type promotion ([`crate::typed::promote`]) and a replace snapshot
//! ([`crate::compaction`]). Both are committed the way the crate's SQL catalog
//! commits anything: the new metadata is written as the table's next metadata
//! file, then the catalog's row is swapped from the metadata it was built on to
//! the new one, only if the row still points there (compare-and-swap). A lost
//! swap commits nothing; the metadata file written is never referenced. On a
//! REST catalog the same changes are sent as Iceberg REST commits (updates and
//! requirements), which the catalog applies only if the requirements hold.
//! [`DirectCommitter`] picks the path for a table.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;

use iceberg::spec::{
    Schema, Snapshot, SnapshotReference, SnapshotRetention, TableMetadata, TableMetadataBuilder,
    MAIN_BRANCH,
};
use iceberg::table::Table;
use iceberg::{MetadataLocation, TableRequirement, TableUpdate};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Connection};

/// Why [`commit_metadata`] committed nothing.
#[derive(Debug, thiserror::Error)]
pub enum MetadataCommitError {
    /// The table moved since `table` was loaded: nothing committed, retry on a fresh load.
    #[error("{0} changed since it was loaded; nothing committed")]
    Moved(String),
    /// Writing the metadata file or reaching the catalog failed.
    #[error("{0}")]
    Failed(String),
}

/// Commits `metadata` (built on `table`'s current metadata) as `table`'s next
/// metadata in the SQLite catalog `sqlite` named `catalog_name`; returns the new
/// metadata location.
///
/// # Errors
/// [`MetadataCommitError::Moved`] when the catalog's row no longer points at the
/// metadata `table` was loaded from; [`MetadataCommitError::Failed`] otherwise.
pub async fn commit_metadata(
    table: &Table,
    metadata: TableMetadata,
    sqlite: &Path,
    catalog_name: &str,
) -> Result<String, MetadataCommitError> {
    let failed = MetadataCommitError::Failed;
    let current = table
        .metadata_location()
        .ok_or_else(|| failed("the table has no metadata location".into()))?
        .to_string();
    let next = MetadataLocation::from_str(&current)
        .map_err(|e| failed(e.to_string()))?
        .with_next_version();
    metadata
        .write_to(table.file_io(), &next)
        .await
        .map_err(|e| failed(format!("cannot write {next}: {e}")))?;
    let next = next.to_string();
    let mut db = SqliteConnectOptions::new().filename(sqlite).connect().await.map_err(|e| {
        failed(format!("cannot open the catalog database {}: {e}", sqlite.display()))
    })?;
    let ident = table.identifier();
    let swapped = sqlx::query(
        "UPDATE iceberg_tables SET metadata_location = ?, previous_metadata_location = ? \
         WHERE catalog_name = ? AND table_namespace = ? AND table_name = ? AND metadata_location = ? \
         AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)",
    )
    .bind(&next)
    .bind(&current)
    .bind(catalog_name)
    .bind(ident.namespace().join("."))
    .bind(ident.name())
    .bind(&current)
    .execute(&mut db)
    .await
    .map_err(|e| failed(format!("cannot update the catalog: {e}")))?
    .rows_affected();
    let _ = db.close().await;
    if swapped != 1 {
        // Never referenced: remove it rather than leave it for a listing to find.
        let _ = table.file_io().delete(&next).await;
        return Err(MetadataCommitError::Moved(ident.to_string()));
    }
    Ok(next)
}

/// Commits `updates` to `table` in the REST catalog `config` describes, on the
/// condition `requirements` (Iceberg's REST commit: `POST
/// /v1/{prefix}/namespaces/{namespace}/tables/{table}`). The iceberg crate's REST
/// client sends only what its own actions build, so this speaks the protocol
/// itself, with the same settings: the prefix the catalog's `/v1/config` names,
/// the bearer token `rest.token`, or one exchanged for `rest.credential` at
/// `/v1/oauth/tokens`.
///
/// # Errors
/// [`MetadataCommitError::Moved`] when the catalog answers 409 (a requirement
/// failed: the table moved); [`MetadataCommitError::Failed`] otherwise.
pub async fn commit_rest(
    config: &crate::CatalogConfig,
    table: &Table,
    requirements: Vec<iceberg::TableRequirement>,
    updates: Vec<iceberg::TableUpdate>,
) -> Result<(), MetadataCommitError> {
    let failed = MetadataCommitError::Failed;
    let client = reqwest::Client::builder()
        .connect_timeout(std::time::Duration::from_secs(10))
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .map_err(|e| failed(format!("cannot build an HTTP client: {e}")))?;
    let base = reqwest::Url::parse(config.uri.trim_end_matches('/'))
        .map_err(|e| failed(format!("the REST catalog URI is not a URL: {e}")))?;
    let url_of = |segments: &[&str]| {
        let mut url = base.clone();
        url.path_segments_mut()
            .map_err(|()| failed("the REST catalog URI cannot take a path".into()))?
            .pop_if_empty()
            .extend(segments);
        Ok::<_, MetadataCommitError>(url)
    };
    let token = rest_token(config, &client, &url_of(&["v1", "oauth", "tokens"])?).await?;
    let authed = |r: reqwest::RequestBuilder| match &token {
        Some(t) => r.bearer_auth(t),
        None => r,
    };
    // The prefix the catalog wants in every path (its `/v1/config` answer, as the crate's client reads it).
    let mut config_url = url_of(&["v1", "config"])?;
    if !config.warehouse.is_empty() {
        config_url.query_pairs_mut().append_pair("warehouse", &config.warehouse);
    }
    let answer = authed(client.get(config_url))
        .send()
        .await
        .map_err(|e| failed(format!("GET /v1/config: {e}")))?;
    let status = answer.status();
    let text = answer.text().await.map_err(|e| failed(format!("GET /v1/config: {e}")))?;
    if !status.is_success() {
        return Err(failed(format!("GET /v1/config answered {status}: {text}")));
    }
    let catalog_config: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| failed(format!("GET /v1/config: {e}")))?;
    let prefix = ["overrides", "defaults"]
        .iter()
        .find_map(|k| catalog_config.get(k)?.get("prefix")?.as_str().map(str::to_string))
        .filter(|p| !p.is_empty());
    let ident = table.identifier();
    // A multi-level namespace is one path segment, its parts joined by 0x1F (the REST spec's separator).
    let namespace = ident.namespace().join("\u{1f}");
    let mut segments = vec!["v1"];
    if let Some(p) = &prefix {
        segments.push(p);
    }
    segments.extend(["namespaces", &namespace, "tables", ident.name()]);
    let body = serde_json::json!({
        "identifier": { "namespace": ident.namespace().as_ref(), "name": ident.name() },
        "requirements": requirements,
        "updates": updates,
    });
    let answer = authed(client.post(url_of(&segments)?))
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string())
        .send()
        .await
        .map_err(|e| failed(format!("commit to the REST catalog: {e}")))?;
    match answer.status().as_u16() {
        200..=299 => Ok(()),
        409 => Err(MetadataCommitError::Moved(ident.to_string())),
        code => {
            let text = answer.text().await.unwrap_or_default();
            Err(failed(format!(
                "the REST catalog answered the commit of {ident} with {code}: {text}"
            )))
        }
    }
}

/// The bearer token for REST requests: `rest.token`, or one exchanged for `rest.credential`.
async fn rest_token(
    config: &crate::CatalogConfig,
    client: &reqwest::Client,
    url: &reqwest::Url,
) -> Result<Option<String>, MetadataCommitError> {
    let failed = MetadataCommitError::Failed;
    if !config.rest_token.is_empty() {
        return Ok(Some(config.rest_token.expose().to_string()));
    }
    if config.rest_credential.is_empty() {
        return Ok(None);
    }
    let credential = config.rest_credential.expose();
    let (id, secret) = credential.split_once(':').unwrap_or(("", credential));
    let mut form = url::form_urlencoded::Serializer::new(String::new());
    form.append_pair("grant_type", "client_credentials").append_pair("scope", "catalog");
    if !id.is_empty() {
        form.append_pair("client_id", id);
    }
    form.append_pair("client_secret", secret);
    let answer = client
        .post(url.clone())
        .header(reqwest::header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(form.finish())
        .send()
        .await
        .map_err(|e| failed(format!("OAuth2 token exchange: {e}")))?;
    let status = answer.status();
    let text = answer.text().await.map_err(|e| failed(format!("OAuth2 token exchange: {e}")))?;
    if !status.is_success() {
        return Err(failed(format!("the REST catalog refused the credential ({status})")));
    }
    let token: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| failed(format!("OAuth2 token answer: {e}")))?;
    token
        .get("access_token")
        .and_then(|t| t.as_str())
        .map(|t| Some(t.to_string()))
        .ok_or_else(|| failed("the OAuth2 token answer has no access_token".into()))
}

/// A catalog that takes hand-built commits: Floe's SQL catalog (by
/// compare-and-swap of its row) or a REST catalog (a conditional REST commit).
#[derive(Debug, Clone)]
pub enum DirectCommitter {
    /// Floe's SQL catalog: the SQLite database and the catalog's name.
    Sql(PathBuf, String),
    /// A REST catalog.
    Rest(Arc<crate::CatalogConfig>),
}

impl DirectCommitter {
    /// Makes `snapshot` (built on `table`'s current snapshot) the table's `main`,
    /// only if `main` is still where `table` has it.
    ///
    /// # Errors
    /// [`MetadataCommitError::Moved`] when the table moved; `Failed` otherwise.
    pub async fn commit_snapshot(
        &self,
        table: &Table,
        snapshot: Snapshot,
    ) -> Result<(), MetadataCommitError> {
        let reference = SnapshotReference::new(
            snapshot.snapshot_id(),
            SnapshotRetention::branch(None, None, None),
        );
        match self {
            Self::Sql(db, name) => {
                let metadata = builder(table)
                    .add_snapshot(snapshot)
                    .and_then(|b| b.set_ref(MAIN_BRANCH, reference))
                    .and_then(TableMetadataBuilder::build)
                    .map_err(|e| {
                        MetadataCommitError::Failed(format!("cannot build the metadata: {e}"))
                    })?
                    .metadata;
                commit_metadata(table, metadata, db, name).await.map(drop)
            }
            Self::Rest(config) => {
                let requirements = vec![
                    TableRequirement::UuidMatch { uuid: table.metadata().uuid() },
                    TableRequirement::RefSnapshotIdMatch {
                        r#ref: MAIN_BRANCH.to_string(),
                        snapshot_id: table.metadata().current_snapshot_id(),
                    },
                ];
                let updates = vec![
                    TableUpdate::AddSnapshot { snapshot },
                    TableUpdate::SetSnapshotRef { ref_name: MAIN_BRANCH.to_string(), reference },
                ];
                commit_rest(config, table, requirements, updates).await
            }
        }
    }

    /// Makes `schema` the table's current schema (a type promotion: same field ids),
    /// only if the current schema is still `table`'s.
    ///
    /// # Errors
    /// [`MetadataCommitError::Moved`] when the table moved; `Failed` otherwise.
    pub async fn commit_current_schema(
        &self,
        table: &Table,
        schema: Schema,
    ) -> Result<(), MetadataCommitError> {
        match self {
            Self::Sql(db, name) => {
                let metadata = builder(table)
                    .add_current_schema(schema)
                    .and_then(TableMetadataBuilder::build)
                    .map_err(|e| {
                        MetadataCommitError::Failed(format!("cannot build the metadata: {e}"))
                    })?
                    .metadata;
                commit_metadata(table, metadata, db, name).await.map(drop)
            }
            Self::Rest(config) => {
                let fresh_id =
                    table.metadata().schemas_iter().map(|s| s.schema_id()).max().unwrap_or(0) + 1;
                let schema =
                    schema.into_builder().with_schema_id(fresh_id).build().map_err(|e| {
                        MetadataCommitError::Failed(format!("cannot build the schema: {e}"))
                    })?;
                let requirements = vec![
                    TableRequirement::UuidMatch { uuid: table.metadata().uuid() },
                    TableRequirement::CurrentSchemaIdMatch {
                        current_schema_id: table.metadata().current_schema_id(),
                    },
                ];
                // -1: the schema this commit adds.
                let updates = vec![
                    TableUpdate::AddSchema { schema },
                    TableUpdate::SetCurrentSchema { schema_id: -1 },
                ];
                commit_rest(config, table, requirements, updates).await
            }
        }
    }
}

fn builder(table: &Table) -> TableMetadataBuilder {
    TableMetadataBuilder::new_from_metadata(
        table.metadata().clone(),
        table.metadata_location().map(str::to_string),
    )
}
