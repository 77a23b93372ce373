//! Schema Registry paths to [`Route`]s, as the Confluent Schema Registry's REST
//! API lays them out (`/subjects/{subject}/versions/{version}`, `/schemas/ids/{id}`,
//! `/config`, `/mode`, `/compatibility/...`).
//!
//! Pure parsing, no I/O, so every path and method is unit-tested here. Subjects
//! arrive percent-encoded (clients encode `/` and `:` in them); a version stays
//! text here, because a bad one is the registry's 42202, not a 404.

use http::Method;

/// What a request asks for.
///
/// The flags are the query's `?name=true`: `deleted` includes soft-deleted
/// subjects or versions, `deleted_only` lists only those, `permanent` deletes
/// for good (after a soft delete), `normalize` compares or registers the
/// schema's normalized form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /`: an empty object (clients probe it).
    Root,
    /// `GET /schemas/types`.
    SchemaTypes,
    /// `GET /contexts`: only the default context.
    Contexts,
    /// `GET /schemas/ids/{id}`.
    SchemaById {
        /// The id, as the path has it.
        id: String,
        /// `format=serialized` asks for a Protobuf schema as a base64 `FileDescriptorProto`.
        format: Option<String>,
    },
    /// `GET /schemas/ids/{id}/schema`: the bare text.
    SchemaTextById {
        /// The id, as the path has it.
        id: String,
    },
    /// `GET /schemas/ids/{id}/subjects`.
    SubjectsOfId {
        /// The id, as the path has it.
        id: String,
        /// `?deleted=true`.
        deleted: bool,
    },
    /// `GET /schemas/ids/{id}/versions`.
    VersionsOfId {
        /// The id, as the path has it.
        id: String,
        /// `?deleted=true`.
        deleted: bool,
    },
    /// `GET /subjects`.
    Subjects {
        /// `?subjectPrefix=`: only the subjects starting with it.
        prefix: Option<String>,
        /// `?deleted=true`.
        deleted: bool,
        /// `?deletedOnly=true`.
        deleted_only: bool,
    },
    /// `GET /subjects/{subject}/versions`.
    Versions {
        /// The subject, percent-decoded.
        subject: String,
        /// `?deleted=true`.
        deleted: bool,
        /// `?deletedOnly=true`.
        deleted_only: bool,
    },
    /// `GET /subjects/{subject}/versions/{version}`.
    Version {
        /// The subject, percent-decoded.
        subject: String,
        /// A number or `latest`, as the path has it.
        version: String,
        /// `?deleted=true`.
        deleted: bool,
        /// `?format=`, as for [`Route::SchemaById`].
        format: Option<String>,
    },
    /// `GET /subjects/{subject}/versions/{version}/schema`.
    VersionText {
        /// The subject, percent-decoded.
        subject: String,
        /// A number or `latest`, as the path has it.
        version: String,
        /// `?deleted=true`.
        deleted: bool,
    },
    /// `GET /subjects/{subject}/versions/{version}/referencedby`.
    ReferencedBy {
        /// The subject, percent-decoded.
        subject: String,
        /// A number or `latest`, as the path has it.
        version: String,
    },
    /// `POST /subjects/{subject}/versions`.
    Register {
        /// The subject, percent-decoded.
        subject: String,
        /// `?normalize=true`.
        normalize: bool,
    },
    /// `POST /subjects/{subject}`: is this schema registered under the subject?
    Lookup {
        /// The subject, percent-decoded.
        subject: String,
        /// `?deleted=true`.
        deleted: bool,
        /// `?normalize=true`.
        normalize: bool,
    },
    /// `DELETE /subjects/{subject}`.
    DeleteSubject {
        /// The subject, percent-decoded.
        subject: String,
        /// `?permanent=true`.
        permanent: bool,
    },
    /// `DELETE /subjects/{subject}/versions/{version}`.
    DeleteVersion {
        /// The subject, percent-decoded.
        subject: String,
        /// A number or `latest`, as the path has it.
        version: String,
        /// `?permanent=true`.
        permanent: bool,
    },
    /// `POST /compatibility/subjects/{subject}/versions[/{version}]`.
    Compatibility {
        /// The subject, percent-decoded.
        subject: String,
        /// The version checked against; every one the level names when absent.
        version: Option<String>,
        /// `?verbose=true`: the reasons of an incompatibility too.
        verbose: bool,
        /// `?normalize=true`.
        normalize: bool,
    },
    /// `GET /config[/{subject}]`.
    GetConfig {
        /// The subject; the registry's own when absent.
        subject: Option<String>,
        /// `?defaultToGlobal=true`: the global level when the subject has none.
        default_to_global: bool,
    },
    /// `PUT /config[/{subject}]`.
    SetConfig {
        /// The subject; the registry's own when absent.
        subject: Option<String>,
    },
    /// `DELETE /config[/{subject}]`.
    DeleteConfig {
        /// The subject; the registry's own when absent.
        subject: Option<String>,
    },
    /// `GET /mode[/{subject}]`.
    GetMode {
        /// The subject; the registry's own when absent.
        subject: Option<String>,
        /// `?defaultToGlobal=true`: the global mode when the subject has none.
        default_to_global: bool,
    },
    /// `PUT /mode[/{subject}]`.
    SetMode {
        /// The subject; the registry's own when absent.
        subject: Option<String>,
    },
    /// `DELETE /mode/{subject}`.
    DeleteMode {
        /// The subject, percent-decoded.
        subject: String,
    },
    /// A path the registry serves, with a method it does not.
    MethodNotAllowed,
    /// Not a route.
    NotFound,
}

impl Route {
    /// A short, fixed label for metrics.
    pub fn label(&self) -> &'static str {
        match self {
            Route::Root => "root",
            Route::SchemaTypes => "schema_types",
            Route::Contexts => "contexts",
            Route::SchemaById { .. } => "schema_by_id",
            Route::SchemaTextById { .. } => "schema_text_by_id",
            Route::SubjectsOfId { .. } => "subjects_of_id",
            Route::VersionsOfId { .. } => "versions_of_id",
            Route::Subjects { .. } => "list_subjects",
            Route::Versions { .. } => "list_versions",
            Route::Version { .. } => "get_version",
            Route::VersionText { .. } => "get_version_schema",
            Route::ReferencedBy { .. } => "referenced_by",
            Route::Register { .. } => "register",
            Route::Lookup { .. } => "lookup",
            Route::DeleteSubject { .. } => "delete_subject",
            Route::DeleteVersion { .. } => "delete_version",
            Route::Compatibility { .. } => "compatibility",
            Route::GetConfig { .. } => "get_config",
            Route::SetConfig { .. } => "set_config",
            Route::DeleteConfig { .. } => "delete_config",
            Route::GetMode { .. } => "get_mode",
            Route::SetMode { .. } => "set_mode",
            Route::DeleteMode { .. } => "delete_mode",
            Route::MethodNotAllowed => "method_not_allowed",
            Route::NotFound => "not_found",
        }
    }

    /// Whether the route changes the registry (it must be planned, appended and applied).
    pub fn is_write(&self) -> bool {
        matches!(
            self,
            Route::Register { .. }
                | Route::DeleteSubject { .. }
                | Route::DeleteVersion { .. }
                | Route::SetConfig { .. }
                | Route::DeleteConfig { .. }
                | Route::SetMode { .. }
                | Route::DeleteMode { .. }
        )
    }
}

/// The query string's parameters, decoded.
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: Option<&str>) -> Self {
        Self(
            query
                .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
                .unwrap_or_default(),
        )
    }

    fn get(&self, name: &str) -> Option<String> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    /// `?name=true` (any case); absent or anything else is false.
    fn flag(&self, name: &str) -> bool {
        self.get(name).is_some_and(|v| v.eq_ignore_ascii_case("true"))
    }
}

/// Parses a request line: `path` still percent-encoded, `query` the raw query string.
pub fn route(method: &Method, path: &str, query: Option<&str>) -> Route {
    let mut segments = Vec::new();
    for raw in path.trim_matches('/').split('/').filter(|s| !s.is_empty()) {
        match percent_encoding::percent_decode_str(raw).decode_utf8() {
            Ok(s) => segments.push(s.into_owned()),
            Err(_) => return Route::NotFound,
        }
    }
    let q = Query::parse(query);
    let segments: Vec<&str> = segments.iter().map(String::as_str).collect();
    let only = |wanted: &Method, route: Route| {
        if method == wanted {
            route
        } else {
            Route::MethodNotAllowed
        }
    };
    match segments.as_slice() {
        [] => only(&Method::GET, Route::Root),
        ["schemas", "types"] => only(&Method::GET, Route::SchemaTypes),
        ["contexts"] => only(&Method::GET, Route::Contexts),
        ["schemas", "ids", id] => {
            only(&Method::GET, Route::SchemaById { id: id.to_string(), format: q.get("format") })
        }
        ["schemas", "ids", id, "schema"] => {
            only(&Method::GET, Route::SchemaTextById { id: id.to_string() })
        }
        ["schemas", "ids", id, "subjects"] => only(
            &Method::GET,
            Route::SubjectsOfId { id: id.to_string(), deleted: q.flag("deleted") },
        ),
        ["schemas", "ids", id, "versions"] => only(
            &Method::GET,
            Route::VersionsOfId { id: id.to_string(), deleted: q.flag("deleted") },
        ),
        ["subjects"] => only(
            &Method::GET,
            Route::Subjects {
                prefix: q.get("subjectPrefix"),
                deleted: q.flag("deleted"),
                deleted_only: q.flag("deletedOnly"),
            },
        ),
        ["subjects", subject] => {
            let subject = subject.to_string();
            match *method {
                Method::POST => Route::Lookup {
                    subject,
                    deleted: q.flag("deleted"),
                    normalize: q.flag("normalize"),
                },
                Method::DELETE => Route::DeleteSubject { subject, permanent: q.flag("permanent") },
                _ => Route::MethodNotAllowed,
            }
        }
        ["subjects", subject, "versions"] => {
            let subject = subject.to_string();
            match *method {
                Method::GET => Route::Versions {
                    subject,
                    deleted: q.flag("deleted"),
                    deleted_only: q.flag("deletedOnly"),
                },
                Method::POST => Route::Register { subject, normalize: q.flag("normalize") },
                _ => Route::MethodNotAllowed,
            }
        }
        ["subjects", subject, "versions", version] => {
            let (subject, version) = (subject.to_string(), version.to_string());
            match *method {
                Method::GET => Route::Version {
                    subject,
                    version,
                    deleted: q.flag("deleted"),
                    format: q.get("format"),
                },
                Method::DELETE => {
                    Route::DeleteVersion { subject, version, permanent: q.flag("permanent") }
                }
                _ => Route::MethodNotAllowed,
            }
        }
        ["subjects", subject, "versions", version, "schema"] => only(
            &Method::GET,
            Route::VersionText {
                subject: subject.to_string(),
                version: version.to_string(),
                deleted: q.flag("deleted"),
            },
        ),
        ["subjects", subject, "versions", version, "referencedby"] => only(
            &Method::GET,
            Route::ReferencedBy { subject: subject.to_string(), version: version.to_string() },
        ),
        ["compatibility", "subjects", subject, "versions", rest @ ..] if rest.len() <= 1 => only(
            &Method::POST,
            Route::Compatibility {
                subject: subject.to_string(),
                version: rest.first().map(|v| v.to_string()),
                verbose: q.flag("verbose"),
                normalize: q.flag("normalize"),
            },
        ),
        ["config", rest @ ..] | ["mode", rest @ ..] if rest.len() <= 1 => {
            let subject = rest.first().map(|s| s.to_string());
            let default_to_global = q.flag("defaultToGlobal");
            if segments[0] == "config" {
                match *method {
                    Method::GET => Route::GetConfig { subject, default_to_global },
                    Method::PUT => Route::SetConfig { subject },
                    Method::DELETE => Route::DeleteConfig { subject },
                    _ => Route::MethodNotAllowed,
                }
            } else {
                match (method.clone(), subject) {
                    (Method::GET, subject) => Route::GetMode { subject, default_to_global },
                    (Method::PUT, subject) => Route::SetMode { subject },
                    (Method::DELETE, Some(subject)) => Route::DeleteMode { subject },
                    _ => Route::MethodNotAllowed,
                }
            }
        }
        _ => Route::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(method: Method, path: &str, query: Option<&str>) -> Route {
        route(&method, path, query)
    }

    #[test]
    fn subjects_and_versions() {
        assert_eq!(
            r(Method::GET, "/subjects", Some("deleted=true")),
            Route::Subjects { prefix: None, deleted: true, deleted_only: false }
        );
        assert_eq!(
            r(Method::POST, "/subjects/orders-value/versions", Some("normalize=false")),
            Route::Register { subject: "orders-value".into(), normalize: false }
        );
        assert_eq!(
            r(Method::GET, "/subjects/a%2Fb/versions/latest", None),
            Route::Version {
                subject: "a/b".into(),
                version: "latest".into(),
                deleted: false,
                format: None
            }
        );
        assert_eq!(
            r(Method::DELETE, "/subjects/s/versions/2", Some("permanent=true")),
            Route::DeleteVersion { subject: "s".into(), version: "2".into(), permanent: true }
        );
        assert_eq!(
            r(Method::POST, "/subjects/s", Some("deleted=true")),
            Route::Lookup { subject: "s".into(), deleted: true, normalize: false }
        );
        assert_eq!(
            r(Method::DELETE, "/subjects/s/", None),
            Route::DeleteSubject { subject: "s".into(), permanent: false }
        );
        assert_eq!(
            r(Method::GET, "/subjects/s/versions/1/referencedby", None),
            Route::ReferencedBy { subject: "s".into(), version: "1".into() }
        );
        assert_eq!(r(Method::PUT, "/subjects/s/versions", None), Route::MethodNotAllowed);
    }

    #[test]
    fn schemas_config_mode_compatibility() {
        assert_eq!(
            r(Method::GET, "/schemas/ids/7", Some("subject=s&format=serialized")),
            Route::SchemaById { id: "7".into(), format: Some("serialized".into()) }
        );
        assert_eq!(
            r(Method::GET, "/schemas/ids/7/versions", None),
            Route::VersionsOfId { id: "7".into(), deleted: false }
        );
        assert_eq!(r(Method::GET, "/schemas/types", None), Route::SchemaTypes);
        assert_eq!(r(Method::PUT, "/config", None), Route::SetConfig { subject: None });
        assert_eq!(
            r(Method::GET, "/config/s", Some("defaultToGlobal=true")),
            Route::GetConfig { subject: Some("s".into()), default_to_global: true }
        );
        assert_eq!(r(Method::DELETE, "/mode", None), Route::MethodNotAllowed);
        assert_eq!(r(Method::DELETE, "/mode/s", None), Route::DeleteMode { subject: "s".into() });
        assert_eq!(
            r(Method::POST, "/compatibility/subjects/s/versions/latest", Some("verbose=true")),
            Route::Compatibility {
                subject: "s".into(),
                version: Some("latest".into()),
                verbose: true,
                normalize: false
            }
        );
        assert_eq!(
            r(Method::POST, "/compatibility/subjects/s/versions", None),
            Route::Compatibility {
                subject: "s".into(),
                version: None,
                verbose: false,
                normalize: false
            }
        );
        assert_eq!(r(Method::GET, "/nope", None), Route::NotFound);
        assert_eq!(r(Method::GET, "/subjects/%FF", None), Route::NotFound);
        assert!(Route::Register { subject: "s".into(), normalize: false }.is_write());
        assert!(!Route::Lookup { subject: "s".into(), deleted: false, normalize: false }.is_write());
    }
}
