//! Iceberg REST paths to [`Route`]s: the read routes Floe serves, the write
//! routes it refuses, and everything else.
//!
//! Pure parsing, no I/O, so every path and method is unit-tested here. Paths
//! follow the Iceberg REST OpenAPI (`/v1/config`, `/v1/{prefix}/namespaces/…`).
//! Floe advertises no prefix; a `{prefix}` segment equal to the catalog's name
//! is accepted as well, for clients configured with one. A multi-level
//! namespace is one path segment with its levels joined by `%1F` (the unit
//! separator), as the spec says.

use http::Method;

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /v1/config[?warehouse=…]`.
    Config {
        /// The warehouse the client asked for, if any.
        warehouse: Option<String>,
    },
    /// `GET /v1/namespaces[?parent=…]`.
    ListNamespaces {
        /// List the children of this namespace instead of the top level.
        parent: Option<Vec<String>>,
    },
    /// `GET|HEAD /v1/namespaces/{ns}`.
    Namespace {
        /// The namespace's levels.
        namespace: Vec<String>,
        /// HEAD: existence only, no body.
        head: bool,
    },
    /// `GET /v1/namespaces/{ns}/tables`.
    ListTables {
        /// The namespace's levels.
        namespace: Vec<String>,
    },
    /// `GET /v1/namespaces/{ns}/views`: Floe has no views; the list is empty.
    ListViews {
        /// The namespace's levels.
        namespace: Vec<String>,
    },
    /// `GET|HEAD /v1/namespaces/{ns}/tables/{table}`.
    Table {
        /// The namespace's levels.
        namespace: Vec<String>,
        /// The table's name.
        table: String,
        /// HEAD: existence only, no body.
        head: bool,
    },
    /// `POST /v1/namespaces/{ns}/tables/{table}/metrics`: a client's scan
    /// report. Not a change to the catalog; accepted and dropped.
    MetricsReport,
    /// A write route of the spec (create, commit, drop, rename, register,
    /// properties, transactions): refused, this catalog is read-only.
    Write {
        /// What the request would have done, for the error message.
        operation: &'static str,
    },
    /// A path Floe serves, with a method it does not (e.g. `PUT /v1/config`).
    MethodNotAllowed {
        /// The methods the path takes, for the `Allow` header.
        allow: &'static str,
    },
    /// A path that is not a route (or a malformed one).
    NotFound {
        /// Why, for the error message.
        reason: String,
    },
}

impl Route {
    /// A short, fixed label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Route::Config { .. } => "config",
            Route::ListNamespaces { .. } => "list_namespaces",
            Route::Namespace { head: false, .. } => "load_namespace",
            Route::Namespace { head: true, .. } => "namespace_exists",
            Route::ListTables { .. } => "list_tables",
            Route::ListViews { .. } => "list_views",
            Route::Table { head: false, .. } => "load_table",
            Route::Table { head: true, .. } => "table_exists",
            Route::MetricsReport => "report_metrics",
            Route::Write { .. } => "refused_write",
            Route::MethodNotAllowed { .. } => "method_not_allowed",
            Route::NotFound { .. } => "not_found",
        }
    }
}

/// The endpoints Floe serves, in the form the spec's `ConfigResponse.endpoints` lists them.
pub const ENDPOINTS: &[&str] = &[
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "POST /v1/{prefix}/namespaces/{namespace}/tables/{table}/metrics",
    "GET /v1/{prefix}/namespaces/{namespace}/views",
];

/// The first segments of the routes after `/v1/[{prefix}/]`.
const ROOTS: &[&str] = &["namespaces", "tables", "transactions", "views"];

/// Parses a request line. `path` is the URI's path (still percent-encoded),
/// `query` its query string; `prefix` is the one `{prefix}` value accepted.
pub fn route(method: &Method, path: &str, query: Option<&str>, prefix: &str) -> Route {
    let not_found = |reason: &str| Route::NotFound { reason: reason.to_string() };
    let Some(rest) = path.strip_prefix("/v1/") else { return not_found("paths start with /v1/") };
    let raw: Vec<&str> = rest.trim_end_matches('/').split('/').collect();
    let mut segments = Vec::with_capacity(raw.len());
    for s in raw {
        match percent_encoding::percent_decode_str(s).decode_utf8() {
            Ok(decoded) => segments.push(decoded.into_owned()),
            Err(_) => return not_found("a path segment is not UTF-8 once percent-decoded"),
        }
    }
    let mut segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    if segments.first() == Some(&"config") {
        return match (method, segments.len()) {
            (&Method::GET, 1) => Route::Config { warehouse: query_param(query, "warehouse") },
            (_, 1) => Route::MethodNotAllowed { allow: "GET" },
            _ => not_found("no such route under /v1/config"),
        };
    }
    // An optional {prefix}: accepted when it names this catalog.
    if segments.len() > 1 && segments[0] == prefix && ROOTS.contains(&segments[1]) {
        segments.remove(0);
    }
    let write = |operation: &'static str| Route::Write { operation };
    match segments.as_slice() {
        ["namespaces"] => match *method {
            Method::GET => match query_param(query, "parent").map(|p| namespace_levels(&p)) {
                None => Route::ListNamespaces { parent: None },
                Some(Some(parent)) => Route::ListNamespaces { parent: Some(parent) },
                Some(None) => not_found("`parent` is not a valid namespace"),
            },
            Method::POST => write("create namespace"),
            _ => Route::MethodNotAllowed { allow: "GET, POST" },
        },
        ["tables", "rename"] => match *method {
            Method::POST => write("rename table"),
            _ => Route::MethodNotAllowed { allow: "POST" },
        },
        ["transactions", "commit"] => match *method {
            Method::POST => write("commit transaction"),
            _ => Route::MethodNotAllowed { allow: "POST" },
        },
        ["views", "rename"] => match *method {
            Method::POST => write("rename view"),
            _ => Route::MethodNotAllowed { allow: "POST" },
        },
        ["namespaces", ns, rest @ ..] => {
            let Some(namespace) = namespace_levels(ns) else {
                return not_found("empty namespace level");
            };
            namespace_route(method, namespace, rest)
        }
        _ => not_found("no such route"),
    }
}

/// Routes under `/v1/namespaces/{ns}`; `rest` is what follows the namespace.
fn namespace_route(method: &Method, namespace: Vec<String>, rest: &[&str]) -> Route {
    let write = |operation: &'static str| Route::Write { operation };
    match rest {
        [] => match *method {
            Method::GET => Route::Namespace { namespace, head: false },
            Method::HEAD => Route::Namespace { namespace, head: true },
            Method::DELETE => write("drop namespace"),
            _ => Route::MethodNotAllowed { allow: "GET, HEAD, DELETE" },
        },
        ["properties"] => match *method {
            Method::POST => write("update namespace properties"),
            _ => Route::MethodNotAllowed { allow: "POST" },
        },
        ["register"] => match *method {
            Method::POST => write("register table"),
            _ => Route::MethodNotAllowed { allow: "POST" },
        },
        ["tables"] => match *method {
            Method::GET => Route::ListTables { namespace },
            Method::POST => write("create table"),
            _ => Route::MethodNotAllowed { allow: "GET, POST" },
        },
        ["views"] => match *method {
            Method::GET => Route::ListViews { namespace },
            Method::POST => write("create view"),
            _ => Route::MethodNotAllowed { allow: "GET, POST" },
        },
        ["views", _] => match *method {
            Method::GET | Method::HEAD => {
                Route::NotFound { reason: "Floe's catalog has no views".into() }
            }
            Method::POST => write("replace view"),
            Method::DELETE => write("drop view"),
            _ => Route::MethodNotAllowed { allow: "GET, HEAD, POST, DELETE" },
        },
        ["tables", table] if !table.is_empty() => match *method {
            Method::GET => Route::Table { namespace, table: table.to_string(), head: false },
            Method::HEAD => Route::Table { namespace, table: table.to_string(), head: true },
            Method::POST => write("commit table"),
            Method::DELETE => write("drop table"),
            _ => Route::MethodNotAllowed { allow: "GET, HEAD, POST, DELETE" },
        },
        ["tables", table, "metrics"] if !table.is_empty() => match *method {
            Method::POST => Route::MetricsReport,
            _ => Route::MethodNotAllowed { allow: "POST" },
        },
        _ => Route::NotFound { reason: "no such route".into() },
    }
}

/// A decoded namespace segment split into its levels (`a%1Fb` → `[a, b]`); `None` if a level is empty.
fn namespace_levels(segment: &str) -> Option<Vec<String>> {
    let levels: Vec<String> = segment.split('\u{1f}').map(str::to_string).collect();
    levels.iter().all(|l| !l.is_empty()).then_some(levels)
}

/// The first value of `name` in a query string, form-decoded.
fn query_param(query: Option<&str>, name: &str) -> Option<String> {
    form_urlencoded::parse(query?.as_bytes()).find(|(k, _)| k == name).map(|(_, v)| v.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: Method, path_and_query: &str) -> Route {
        let (path, query) = match path_and_query.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (path_and_query, None),
        };
        route(&method, path, query, "floe")
    }

    fn ns(levels: &[&str]) -> Vec<String> {
        levels.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn read_routes() {
        assert_eq!(r(Method::GET, "/v1/config"), Route::Config { warehouse: None });
        assert_eq!(
            r(Method::GET, "/v1/config?warehouse=floe"),
            Route::Config { warehouse: Some("floe".into()) }
        );
        assert_eq!(
            r(Method::GET, "/v1/config?warehouse=file%3A%2F%2F%2Fw"),
            Route::Config { warehouse: Some("file:///w".into()) }
        );
        assert_eq!(r(Method::GET, "/v1/namespaces"), Route::ListNamespaces { parent: None });
        assert_eq!(
            r(Method::GET, "/v1/namespaces?parent=a%1Fb"),
            Route::ListNamespaces { parent: Some(ns(&["a", "b"])) }
        );
        assert_eq!(
            r(Method::GET, "/v1/namespaces/kafka"),
            Route::Namespace { namespace: ns(&["kafka"]), head: false }
        );
        assert_eq!(
            r(Method::HEAD, "/v1/namespaces/kafka"),
            Route::Namespace { namespace: ns(&["kafka"]), head: true }
        );
        assert_eq!(
            r(Method::GET, "/v1/namespaces/a%1Fb/tables"),
            Route::ListTables { namespace: ns(&["a", "b"]) }
        );
        assert_eq!(
            r(Method::GET, "/v1/namespaces/kafka/views"),
            Route::ListViews { namespace: ns(&["kafka"]) }
        );
        assert_eq!(
            r(Method::GET, "/v1/namespaces/kafka/tables/my%20topic"),
            Route::Table { namespace: ns(&["kafka"]), table: "my topic".into(), head: false }
        );
        assert_eq!(
            r(Method::HEAD, "/v1/namespaces/kafka/tables/t/"),
            Route::Table { namespace: ns(&["kafka"]), table: "t".into(), head: true }
        );
        assert_eq!(r(Method::POST, "/v1/namespaces/kafka/tables/t/metrics"), Route::MetricsReport);
    }

    #[test]
    fn the_catalog_name_is_accepted_as_prefix() {
        assert_eq!(r(Method::GET, "/v1/floe/namespaces"), Route::ListNamespaces { parent: None });
        assert_eq!(
            r(Method::GET, "/v1/floe/namespaces/kafka/tables/t"),
            Route::Table { namespace: ns(&["kafka"]), table: "t".into(), head: false }
        );
        assert!(matches!(r(Method::GET, "/v1/other/namespaces"), Route::NotFound { .. }));
    }

    #[test]
    fn every_write_route_is_refused() {
        for (method, path, operation) in [
            (Method::POST, "/v1/namespaces", "create namespace"),
            (Method::DELETE, "/v1/namespaces/kafka", "drop namespace"),
            (Method::POST, "/v1/namespaces/kafka/properties", "update namespace properties"),
            (Method::POST, "/v1/namespaces/kafka/tables", "create table"),
            (Method::POST, "/v1/namespaces/kafka/register", "register table"),
            (Method::POST, "/v1/namespaces/kafka/tables/t", "commit table"),
            (Method::DELETE, "/v1/namespaces/kafka/tables/t", "drop table"),
            (Method::POST, "/v1/tables/rename", "rename table"),
            (Method::POST, "/v1/transactions/commit", "commit transaction"),
            (Method::POST, "/v1/floe/namespaces/kafka/views", "create view"),
            (Method::DELETE, "/v1/namespaces/kafka/views/v", "drop view"),
        ] {
            assert_eq!(r(method.clone(), path), Route::Write { operation }, "{method} {path}");
        }
    }

    #[test]
    fn other_methods_and_paths() {
        assert_eq!(r(Method::PUT, "/v1/config"), Route::MethodNotAllowed { allow: "GET" });
        assert_eq!(
            r(Method::PUT, "/v1/namespaces/kafka/tables/t"),
            Route::MethodNotAllowed { allow: "GET, HEAD, POST, DELETE" }
        );
        assert_eq!(r(Method::GET, "/v1/tables/rename"), Route::MethodNotAllowed { allow: "POST" });
        for path in [
            "/",
            "/v2/config",
            "/v1/",
            "/v1/config/extra",
            "/v1/nope",
            "/v1/namespaces/kafka/tables/t/nope",
            "/v1/namespaces/a%1F%1Fb",
            "/v1/namespaces/%FF%FE/tables",
            "/v1/namespaces/kafka/views/v",
            "/v1/namespaces?parent=a%1F",
        ] {
            assert!(
                matches!(r(Method::GET, path), Route::NotFound { .. }),
                "{path}: {:?}",
                r(Method::GET, path)
            );
        }
    }
}
