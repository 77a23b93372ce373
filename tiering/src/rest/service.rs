//! Answers a [`Route`] from the catalog: the status and JSON body of each reply.
//!
//! Reads go through `floe-tiering`'s [`CatalogReader`] (the SQLite catalog
//! opened read-only); nothing here writes. Errors are the spec's `ErrorModel`
//! with the exception types clients map: `NoSuchNamespaceException` and
//! `NoSuchTableException` (404), `ForbiddenException` for every write (403,
//! this catalog is written by Floe's tiering only), `BadRequestException`
//! (400), `InternalServerError` when the catalog fails (500).

use std::collections::{BTreeMap, HashMap};

use crate::iceberg::{NamespaceIdent, TableIdent};
use crate::CatalogReader;
use http::StatusCode;

use super::routes::{Route, ENDPOINTS};
use super::wire::{
    ConfigResponse, ErrorModel, ErrorResponse, GetNamespaceResponse, ListNamespacesResponse,
    ListTablesResponse, LoadTableResult, TableIdentifier,
};

/// A reply before it becomes an HTTP response.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// JSON, or nothing (HEAD, 204).
    pub body: Option<Vec<u8>>,
    /// The `Allow` header of a 405.
    pub allow: Option<&'static str>,
    /// What was wrong with the request or the catalog, for the log line (errors only).
    pub problem: Option<String>,
}

impl Reply {
    fn json(value: &impl serde::Serialize) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => {
                Self { status: StatusCode::OK, body: Some(body), allow: None, problem: None }
            }
            Err(e) => Self::error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalServerError",
                format!("cannot encode the reply: {e}"),
            ),
        }
    }

    fn empty(status: StatusCode) -> Self {
        Self { status, body: None, allow: None, problem: None }
    }

    fn error(status: StatusCode, kind: &'static str, message: String) -> Self {
        let model = ErrorResponse {
            error: ErrorModel { message: message.clone(), kind, code: status.as_u16() },
        };
        // An ErrorModel of strings and a number always encodes.
        let body = serde_json::to_vec(&model).unwrap_or_default();
        Self { status, body: Some(body), allow: None, problem: Some(message) }
    }

    /// The same reply without a body, for HEAD requests.
    fn headless(mut self) -> Self {
        self.body = None;
        self
    }
}

/// The read-only REST view of one catalog.
#[derive(Debug)]
pub struct RestCatalog {
    reader: CatalogReader,
    catalog_name: String,
    /// `file:///…/warehouse`: also accepted as `?warehouse=`.
    warehouse_location: String,
}

impl RestCatalog {
    /// Serves `reader`'s catalog as `catalog_name` (the `{prefix}` of its paths), its warehouse
    /// also nameable by `warehouse_location`.
    pub fn new(reader: CatalogReader, catalog_name: &str, warehouse_location: &str) -> Self {
        Self {
            reader,
            catalog_name: catalog_name.to_string(),
            warehouse_location: warehouse_location.to_string(),
        }
    }

    /// The name a `{prefix}` path segment may carry.
    pub fn catalog_name(&self) -> &str {
        &self.catalog_name
    }

    /// The reply to `route`, read from the catalog.
    pub async fn answer(&self, route: &Route) -> Reply {
        match route {
            Route::Config { warehouse } => self.config(warehouse.as_deref()),
            Route::ListNamespaces { parent } => {
                let parent = parent.as_ref().map(|p| ident(p));
                match self.reader.namespaces(parent.as_ref()).await {
                    Ok(Some(list)) => Reply::json(&ListNamespacesResponse { namespaces: list.iter().map(levels).collect() }),
                    Ok(None) => no_such_namespace(parent.as_ref().map_or_else(Vec::new, levels).as_slice()),
                    Err(e) => failed(e),
                }
            }
            Route::Namespace { namespace, head } => {
                let reply = match self.reader.namespace(&ident(namespace)).await {
                    Ok(Some(_)) if *head => Reply::empty(StatusCode::NO_CONTENT),
                    Ok(Some(ns)) => Reply::json(&GetNamespaceResponse {
                        namespace: levels(ns.name()),
                        properties: ns.properties().iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
                    }),
                    Ok(None) => no_such_namespace(namespace),
                    Err(e) => failed(e),
                };
                if *head {
                    reply.headless()
                } else {
                    reply
                }
            }
            Route::ListTables { namespace } => match self.reader.tables(&ident(namespace)).await {
                Ok(Some(tables)) => Reply::json(&ListTablesResponse {
                    identifiers: tables
                        .iter()
                        .map(|t| TableIdentifier { namespace: levels(t.namespace()), name: t.name().to_string() })
                        .collect(),
                }),
                Ok(None) => no_such_namespace(namespace),
                Err(e) => failed(e),
            },
            Route::ListViews { namespace } => match self.reader.namespace(&ident(namespace)).await {
                Ok(Some(_)) => Reply::json(&ListTablesResponse { identifiers: Vec::new() }),
                Ok(None) => no_such_namespace(namespace),
                Err(e) => failed(e),
            },
            Route::Table { namespace, table, head } => {
                let reply = match self.reader.table(&TableIdent::new(ident(namespace), table.clone())).await {
                    Ok(Some(_)) if *head => Reply::empty(StatusCode::NO_CONTENT),
                    Ok(Some(state)) => Reply::json(&LoadTableResult {
                        metadata_location: state.metadata_location.as_deref(),
                        metadata: &state.metadata,
                        config: HashMap::new(),
                    }),
                    Ok(None) => Reply::error(
                        StatusCode::NOT_FOUND,
                        "NoSuchTableException",
                        format!("table does not exist: {}.{table}", namespace.join(".")),
                    ),
                    Err(e) => failed(e),
                };
                if *head {
                    reply.headless()
                } else {
                    reply
                }
            }
            Route::MetricsReport => Reply::empty(StatusCode::NO_CONTENT),
            Route::Write { operation } => Reply::error(
                StatusCode::FORBIDDEN,
                "ForbiddenException",
                format!("read-only catalog: cannot {operation}; Floe's catalog is written by its tiering only"),
            ),
            Route::MethodNotAllowed { allow } => Reply {
                allow: Some(*allow),
                ..Reply::error(StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowedException", format!("method not allowed here; allowed: {allow}"))
            },
            Route::NotFound { reason } => Reply::error(StatusCode::NOT_FOUND, "NotFoundException", format!("not an Iceberg REST route: {reason}")),
        }
    }

    fn config(&self, warehouse: Option<&str>) -> Reply {
        if let Some(w) = warehouse {
            let known = [self.catalog_name.as_str(), self.warehouse_location.as_str()];
            let known_path = self.warehouse_location.strip_prefix("file://");
            if !w.is_empty() && !known.contains(&w) && known_path != Some(w) {
                return Reply::error(
                    StatusCode::BAD_REQUEST,
                    "BadRequestException",
                    format!(
                        "unknown warehouse `{w}`: this server serves catalog `{}` (warehouse {})",
                        self.catalog_name, self.warehouse_location
                    ),
                );
            }
        }
        Reply::json(&ConfigResponse {
            defaults: BTreeMap::new(),
            overrides: BTreeMap::new(),
            endpoints: ENDPOINTS.iter().map(|e| e.to_string()).collect(),
        })
    }
}

fn ident(levels: &[String]) -> NamespaceIdent {
    // `Route` guarantees at least one non-empty level, so `from_vec` cannot fail; fall back to one level anyway.
    NamespaceIdent::from_vec(levels.to_vec())
        .unwrap_or_else(|_| NamespaceIdent::new(levels.join(".")))
}

fn levels(ns: &NamespaceIdent) -> Vec<String> {
    ns.iter().cloned().collect()
}

fn no_such_namespace(namespace: &[String]) -> Reply {
    Reply::error(
        StatusCode::NOT_FOUND,
        "NoSuchNamespaceException",
        format!("namespace does not exist: {}", namespace.join(".")),
    )
}

fn failed(e: crate::TieringError) -> Reply {
    Reply::error(StatusCode::INTERNAL_SERVER_ERROR, "InternalServerError", e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::routes::route;
    use http::Method;

    fn body(reply: &Reply) -> serde_json::Value {
        serde_json::from_slice(reply.body.as_deref().expect("a body")).expect("JSON")
    }

    async fn get(rest: &RestCatalog, method: Method, path: &str) -> Reply {
        let (path, query) = path.split_once('?').map_or((path, None), |(p, q)| (p, Some(q)));
        rest.answer(&route(&method, path, query, rest.catalog_name())).await
    }

    #[tokio::test]
    async fn answers_from_the_catalog_and_refuses_writes() {
        let dir = tempfile::tempdir().unwrap();
        let (db, warehouse) = (dir.path().join("catalog.db"), dir.path().join("warehouse"));
        let writer =
            crate::IcebergCatalog::open_sqlite("floe", &db, &warehouse, "kafka").await.unwrap();
        writer.topic_table("orders", "id-1", "day(timestamp)").await.unwrap();
        let location = format!("file://{}", warehouse.display());
        let rest =
            RestCatalog::new(CatalogReader::sqlite("floe", &db, &warehouse), "floe", &location);

        let config = get(&rest, Method::GET, "/v1/config?warehouse=floe").await;
        assert_eq!(config.status, StatusCode::OK);
        assert!(body(&config)["endpoints"]
            .as_array()
            .unwrap()
            .contains(&"GET /v1/{prefix}/namespaces".into()));
        assert_eq!(
            get(&rest, Method::GET, &format!("/v1/config?warehouse={location}")).await.status,
            StatusCode::OK
        );
        let bad = get(&rest, Method::GET, "/v1/config?warehouse=elsewhere").await;
        assert_eq!(
            (bad.status, body(&bad)["error"]["type"].as_str()),
            (StatusCode::BAD_REQUEST, Some("BadRequestException"))
        );

        assert_eq!(
            body(&get(&rest, Method::GET, "/v1/namespaces").await),
            serde_json::json!({"namespaces": [["kafka"]]})
        );
        assert_eq!(
            body(&get(&rest, Method::GET, "/v1/namespaces/kafka").await)["namespace"],
            serde_json::json!(["kafka"])
        );
        assert_eq!(
            body(&get(&rest, Method::GET, "/v1/namespaces/kafka/tables").await),
            serde_json::json!({"identifiers": [{"namespace": ["kafka"], "name": "orders"}]})
        );
        let table = get(&rest, Method::GET, "/v1/namespaces/kafka/tables/orders").await;
        assert_eq!(table.status, StatusCode::OK);
        let table = body(&table);
        assert!(
            table["metadata-location"].as_str().unwrap().ends_with(".metadata.json"),
            "{table}"
        );
        assert_eq!(table["metadata"]["properties"]["floe.topic-id"], "id-1");
        assert_eq!(table["metadata"]["format-version"], 2);
        let head = get(&rest, Method::HEAD, "/v1/namespaces/kafka/tables/orders").await;
        assert_eq!((head.status, head.body), (StatusCode::NO_CONTENT, None));

        let missing = get(&rest, Method::GET, "/v1/namespaces/kafka/tables/nope").await;
        assert_eq!(
            (missing.status, body(&missing)["error"]["type"].as_str()),
            (StatusCode::NOT_FOUND, Some("NoSuchTableException"))
        );
        let missing = get(&rest, Method::HEAD, "/v1/namespaces/kafka/tables/nope").await;
        assert_eq!((missing.status, missing.body), (StatusCode::NOT_FOUND, None));
        let missing = get(&rest, Method::GET, "/v1/namespaces/nope/tables").await;
        assert_eq!(
            (missing.status, body(&missing)["error"]["type"].as_str()),
            (StatusCode::NOT_FOUND, Some("NoSuchNamespaceException"))
        );
        assert_eq!(
            get(&rest, Method::HEAD, "/v1/namespaces/nope").await.status,
            StatusCode::NOT_FOUND
        );

        let drop = get(&rest, Method::DELETE, "/v1/namespaces/kafka/tables/orders").await;
        assert_eq!(drop.status, StatusCode::FORBIDDEN);
        assert_eq!(body(&drop)["error"]["code"], 403);
        assert!(body(&drop)["error"]["message"].as_str().unwrap().contains("read-only"));
        // Still there: nothing was written.
        assert_eq!(
            get(&rest, Method::HEAD, "/v1/namespaces/kafka/tables/orders").await.status,
            StatusCode::NO_CONTENT
        );
        let put = get(&rest, Method::PUT, "/v1/config").await;
        assert_eq!((put.status, put.allow), (StatusCode::METHOD_NOT_ALLOWED, Some("GET")));
        assert_eq!(get(&rest, Method::GET, "/v1/nope").await.status, StatusCode::NOT_FOUND);
    }
}
