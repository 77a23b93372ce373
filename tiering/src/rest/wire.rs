//! The JSON bodies of the Iceberg REST catalog API that Floe sends.
//!
//! Field names and shapes follow the Iceberg REST OpenAPI spec (kebab-case
//! keys, namespaces as arrays of levels). Our own serde types rather than
//! `iceberg-catalog-rest`'s: that crate is a client (it pulls in reqwest),
//! its error wrapper and config response cannot be built outside it, and its
//! list responses send `"next-page-token": null`, which a strict reader may
//! refuse. The table metadata itself is the iceberg crate's `TableMetadata`,
//! serialized by the crate.

use std::collections::{BTreeMap, HashMap};

use crate::iceberg::spec::TableMetadata;
use serde::Serialize;

/// `GET /v1/config`.
#[derive(Debug, Serialize)]
pub(crate) struct ConfigResponse {
    /// Properties a client uses unless it set them itself.
    pub(crate) defaults: BTreeMap<String, String>,
    /// Properties that win over the client's own.
    pub(crate) overrides: BTreeMap<String, String>,
    /// The routes this server serves (`"GET /v1/{prefix}/namespaces"`, …), so
    /// clients do not try writes a read-only catalog cannot take.
    pub(crate) endpoints: Vec<String>,
}

/// `GET /v1/namespaces`: every namespace in one page (no `next-page-token`).
#[derive(Debug, Serialize)]
pub(crate) struct ListNamespacesResponse {
    pub(crate) namespaces: Vec<Vec<String>>,
}

/// `GET /v1/namespaces/{ns}`.
#[derive(Debug, Serialize)]
pub(crate) struct GetNamespaceResponse {
    pub(crate) namespace: Vec<String>,
    pub(crate) properties: BTreeMap<String, String>,
}

/// A table's name in its namespace.
#[derive(Debug, Serialize)]
pub(crate) struct TableIdentifier {
    pub(crate) namespace: Vec<String>,
    pub(crate) name: String,
}

/// `GET /v1/namespaces/{ns}/tables` (and `/views`): every identifier in one page.
#[derive(Debug, Serialize)]
pub(crate) struct ListTablesResponse {
    pub(crate) identifiers: Vec<TableIdentifier>,
}

/// `GET /v1/namespaces/{ns}/tables/{table}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) struct LoadTableResult<'a> {
    /// Where the current metadata file is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) metadata_location: Option<&'a str>,
    /// The current metadata, as the metadata file holds it.
    pub(crate) metadata: &'a TableMetadata,
    /// Table-specific client configuration (none: the files are local).
    pub(crate) config: HashMap<String, String>,
}

/// Every non-2xx answer: `{"error": {"message", "type", "code"}}`.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorResponse {
    pub(crate) error: ErrorModel,
}

/// The spec's `ErrorModel`.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorModel {
    /// What went wrong, for a human.
    pub(crate) message: String,
    /// The exception type clients map to their errors (`NoSuchTableException`, …).
    #[serde(rename = "type")]
    pub(crate) kind: &'static str,
    /// The HTTP status, repeated.
    pub(crate) code: u16,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_the_spec_field_names() {
        let err = ErrorResponse {
            error: ErrorModel { message: "m".into(), kind: "NoSuchTableException", code: 404 },
        };
        assert_eq!(
            serde_json::to_value(&err).unwrap(),
            serde_json::json!({"error": {"message": "m", "type": "NoSuchTableException", "code": 404}})
        );
        let tables = ListTablesResponse {
            identifiers: vec![TableIdentifier {
                namespace: vec!["kafka".into()],
                name: "t".into(),
            }],
        };
        assert_eq!(
            serde_json::to_value(&tables).unwrap(),
            serde_json::json!({"identifiers": [{"namespace": ["kafka"], "name": "t"}]})
        );
        let config = ConfigResponse {
            defaults: BTreeMap::new(),
            overrides: BTreeMap::new(),
            endpoints: vec!["GET /v1/{prefix}/namespaces".into()],
        };
        assert_eq!(
            serde_json::to_value(&config).unwrap(),
            serde_json::json!({"defaults": {}, "overrides": {}, "endpoints": ["GET /v1/{prefix}/namespaces"]})
        );
    }
}
