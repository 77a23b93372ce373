//! Answers a [`Route`] from the [`SchemaStore`]: the status and JSON body of
//! each reply, in the Confluent Schema Registry's shapes, so its clients parse
//! them unchanged.
//!
//! Errors are Confluent's `{"error_code": …, "message": …}` with the HTTP status
//! its first three digits give ([`RegistryError::http_status`]); requests that
//! are not the API's (unknown path, wrong method, a body that is not JSON) get
//! the JAX-RS answers Confluent's server gives them (404, 405, 400 / 422).

use http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::routes::Route;
use crate::compatibility::{CompatibilityLevel, Mode, SchemaType};
use crate::error::RegistryError;
use crate::records::SchemaReference;
use crate::registry::{RegisteredSchema, SchemaVersion, VersionSpec};
use crate::store::SchemaStore;

/// Confluent's content type, which its clients send and accept.
pub const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// A reply before it becomes an HTTP response.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body: JSON, or a schema's bare text.
    pub body: Vec<u8>,
    /// What was wrong, for the log line (errors only).
    pub problem: Option<String>,
}

impl Reply {
    fn json(value: &impl Serialize) -> Self {
        match serde_json::to_vec(value) {
            Ok(body) => Self { status: StatusCode::OK, body, problem: None },
            Err(e) => Self::error(500, 50001, format!("cannot encode the reply: {e}")),
        }
    }

    /// A schema's bare text (the `/schema` routes).
    fn text(text: String) -> Self {
        Self { status: StatusCode::OK, body: text.into_bytes(), problem: None }
    }

    /// Confluent's error body with `status`.
    pub fn error(status: u16, code: i32, message: String) -> Self {
        let body = json!({ "error_code": code, "message": message }).to_string().into_bytes();
        Self {
            status: StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            body,
            problem: Some(message),
        }
    }

    /// A registry error, with its own status and code.
    pub fn registry_error(e: &RegistryError) -> Self {
        Self::error(e.http_status(), e.error_code(), e.to_string())
    }
}

/// The body of a register, lookup or compatibility request.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SchemaRequest {
    #[serde(default)]
    schema: Option<String>,
    #[serde(default)]
    schema_type: Option<String>,
    #[serde(default)]
    references: Vec<SchemaReference>,
}

#[derive(Debug, Deserialize)]
struct ConfigRequest {
    #[serde(default)]
    compatibility: Option<String>,
    /// Some clients send the GET's field name back.
    #[serde(default, rename = "compatibilityLevel")]
    compatibility_level: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ModeRequest {
    #[serde(default)]
    mode: Option<String>,
}

/// A schema by id (`GET /schemas/ids/{id}`): `schemaType` and `references`
/// only when they say something, as Confluent writes them.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct SchemaById<'a> {
    schema: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    references: &'a [SchemaReference],
}

/// A subject's version (`GET /subjects/{s}/versions/{v}`, lookups).
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct VersionReply<'a> {
    subject: &'a str,
    version: i32,
    id: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    schema_type: Option<&'static str>,
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    references: &'a [SchemaReference],
    schema: &'a str,
}

fn type_name(t: SchemaType) -> Option<&'static str> {
    (t != SchemaType::Avro).then(|| t.name())
}

fn version_reply(v: &SchemaVersion) -> Reply {
    Reply::json(&VersionReply {
        subject: &v.subject,
        version: v.version,
        id: v.schema.id,
        schema_type: type_name(v.schema.schema_type),
        references: &v.schema.references,
        schema: &v.schema.schema,
    })
}

fn schema_reply(s: &RegisteredSchema) -> Reply {
    Reply::json(&SchemaById {
        schema: &s.schema,
        schema_type: type_name(s.schema_type),
        references: &s.references,
    })
}

/// An id path segment; Confluent answers a non-number as a missing schema.
fn parse_id(id: &str) -> Result<i32, RegistryError> {
    id.parse::<i32>().map_err(|_| RegistryError::SchemaNotFound)
}

fn parse_body<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Result<T, Reply> {
    serde_json::from_slice(body)
        .map_err(|e| Reply::error(422, 422, format!("Unrecognizable request body: {e}")))
}

/// The schema of a request, checked for the basics every type shares.
fn schema_request(body: &[u8]) -> Result<(SchemaType, String, Vec<SchemaReference>), Reply> {
    let req: SchemaRequest = parse_body(body)?;
    let schema_type = SchemaType::parse(req.schema_type.as_deref())
        .map_err(|e| Reply::registry_error(&RegistryError::InvalidSchema(e)))?;
    match req.schema {
        Some(text) if !text.trim().is_empty() => Ok((schema_type, text, req.references)),
        _ => Err(Reply::registry_error(&RegistryError::InvalidSchema("Empty schema".into()))),
    }
}

/// Answers `route` (with the request's `body`) from `store`. Blocking: storage
/// reads and, for writes, an append and an fsync.
pub fn answer(store: &SchemaStore, route: &Route, body: &[u8]) -> Reply {
    let result = match route {
        Route::Root => Ok(Reply::json(&json!({}))),
        Route::SchemaTypes => Ok(Reply::json(&["JSON", "PROTOBUF", "AVRO"])),
        Route::Contexts => Ok(Reply::json(&["."])),
        Route::MethodNotAllowed => {
            return Reply::error(405, 405, "HTTP 405 Method Not Allowed".into())
        }
        Route::NotFound => return Reply::error(404, 404, "HTTP 404 Not Found".into()),
        _ if route.is_write() => return write(store, route, body),
        _ => read(store, route, body),
    };
    result.unwrap_or_else(|e| match e {
        Failure::Registry(e) => Reply::registry_error(&e),
        Failure::Reply(r) => r,
    })
}

/// Why a request failed: a registry error, or a reply already made (a bad body).
enum Failure {
    Registry(RegistryError),
    Reply(Reply),
}

impl From<RegistryError> for Failure {
    fn from(e: RegistryError) -> Self {
        Failure::Registry(e)
    }
}

impl From<Reply> for Failure {
    fn from(r: Reply) -> Self {
        Failure::Reply(r)
    }
}

fn read(store: &SchemaStore, route: &Route, body: &[u8]) -> Result<Reply, Failure> {
    Ok(match route {
        Route::SchemaById { id, .. } => {
            let id = parse_id(id)?;
            store.read(|r| r.schema_by_id(id).map(schema_reply))?
        }
        Route::SchemaTextById { id } => {
            let id = parse_id(id)?;
            store.read(|r| r.schema_by_id(id).map(|s| Reply::text(s.schema.clone())))?
        }
        Route::SubjectsOfId { id, deleted } => {
            let id = parse_id(id)?;
            let mut subjects: Vec<String> = store
                .read(|r| r.versions_of_id(id, *deleted))?
                .into_iter()
                .map(|(s, _)| s)
                .collect();
            subjects.dedup();
            Reply::json(&subjects)
        }
        Route::VersionsOfId { id, deleted } => {
            let id = parse_id(id)?;
            let pairs = store.read(|r| r.versions_of_id(id, *deleted))?;
            Reply::json(
                &pairs
                    .iter()
                    .map(|(subject, version)| json!({ "subject": subject, "version": version }))
                    .collect::<Vec<_>>(),
            )
        }
        Route::Subjects { prefix, deleted, deleted_only } => {
            let (all, live) = store.read(|r| Ok((r.subjects(true), r.subjects(false))))?;
            let keep = |s: &String| {
                let is_live = live.binary_search(s).is_ok();
                (if *deleted_only { !is_live } else { *deleted || is_live })
                    && prefix.as_deref().is_none_or(|p| s.starts_with(p))
            };
            Reply::json(&all.into_iter().filter(keep).collect::<Vec<_>>())
        }
        Route::Versions { subject, deleted, deleted_only } => {
            let versions = if *deleted_only {
                store.read(|r| {
                    let live = r.versions(subject, false).unwrap_or_default();
                    Ok(r.versions(subject, true)?
                        .into_iter()
                        .filter(|v| !live.contains(v))
                        .collect::<Vec<_>>())
                })?
            } else {
                store.read(|r| r.versions(subject, *deleted))?
            };
            Reply::json(&versions)
        }
        Route::Version { subject, version, deleted, .. } => {
            let spec = VersionSpec::parse(version)?;
            store.read(|r| r.version(subject, spec, *deleted).map(|v| version_reply(&v)))?
        }
        Route::VersionText { subject, version, deleted } => {
            let spec = VersionSpec::parse(version)?;
            store.read(|r| {
                r.version(subject, spec, *deleted).map(|v| Reply::text(v.schema.schema))
            })?
        }
        Route::ReferencedBy { subject, version } => {
            let spec = VersionSpec::parse(version)?;
            Reply::json(&store.read(|r| r.referenced_by(subject, spec))?)
        }
        Route::Lookup { subject, deleted, .. } => {
            let (schema_type, text, references) = schema_request(body)?;
            store.read(|r| {
                r.lookup(subject, schema_type, &text, &references, *deleted)
                    .map(|v| version_reply(&v))
            })?
        }
        Route::Compatibility { subject, version, verbose, .. } => {
            let (schema_type, text, references) = schema_request(body)?;
            let against = version.as_deref().map(VersionSpec::parse).transpose()?;
            let reasons = store.read(|r| {
                r.check_compatibility(subject, against, schema_type, &text, &references)
            })?;
            let mut reply = json!({ "is_compatible": reasons.is_empty() });
            if *verbose {
                reply["messages"] = json!(reasons);
            }
            Reply::json(&reply)
        }
        Route::GetConfig { subject: None, .. } => Reply::json(
            &json!({ "compatibilityLevel": store.read(|r| Ok(r.compatibility(None)))?.name() }),
        ),
        Route::GetConfig { subject: Some(s), default_to_global } => {
            let level = store.read(|r| {
                if *default_to_global {
                    Ok(r.compatibility(Some(s)))
                } else {
                    r.subject_compatibility(s)
                }
            })?;
            Reply::json(&json!({ "compatibilityLevel": level.name() }))
        }
        Route::GetMode { subject: None, .. } => {
            Reply::json(&json!({ "mode": store.read(|r| Ok(r.mode(None)))?.name() }))
        }
        Route::GetMode { subject: Some(s), default_to_global } => {
            let mode = store.read(|r| {
                if *default_to_global {
                    Ok(r.mode(Some(s)))
                } else {
                    r.subject_mode(s)
                }
            })?;
            Reply::json(&json!({ "mode": mode.name() }))
        }
        _ => Reply::error(404, 404, "HTTP 404 Not Found".into()),
    })
}

fn write(store: &SchemaStore, route: &Route, body: &[u8]) -> Reply {
    let result: Result<Reply, Failure> = (|| {
        Ok(match route {
            Route::Register { subject, normalize } => {
                let (schema_type, text, references) = schema_request(body)?;
                let id = store.write(|r| {
                    // normalize=true registers the schema's normalized text (identity is normalized either way).
                    let text = if *normalize {
                        r.normalized(schema_type, &text, &references)?
                    } else {
                        text.clone()
                    };
                    r.register(subject, schema_type, &text, &references)
                })?;
                Reply::json(&json!({ "id": id }))
            }
            Route::DeleteSubject { subject, permanent } => {
                Reply::json(&store.write(|r| r.delete_subject(subject, *permanent))?)
            }
            Route::DeleteVersion { subject, version, permanent } => {
                let spec = VersionSpec::parse(version)?;
                Reply::json(&store.write(|r| r.delete_version(subject, spec, *permanent))?)
            }
            Route::SetConfig { subject } => {
                let req: ConfigRequest = parse_body(body)?;
                let name = req.compatibility.or(req.compatibility_level).unwrap_or_default();
                let level = CompatibilityLevel::parse(&name)
                    .ok_or(RegistryError::InvalidCompatibilityLevel)?;
                let level = store.write(|r| Ok(r.set_compatibility(subject.as_deref(), level)))?;
                Reply::json(&json!({ "compatibility": level.name() }))
            }
            Route::DeleteConfig { subject } => {
                let had = store.write(|r| r.delete_compatibility(subject.as_deref()))?;
                Reply::json(&json!({ "compatibilityLevel": had.name() }))
            }
            Route::SetMode { subject } => {
                let req: ModeRequest = parse_body(body)?;
                let mode = Mode::parse(req.mode.as_deref().unwrap_or_default())
                    .ok_or(RegistryError::InvalidMode)?;
                let mode = store.write(|r| Ok(r.set_mode(subject.as_deref(), mode)))?;
                Reply::json(&json!({ "mode": mode.name() }))
            }
            Route::DeleteMode { subject } => {
                let had = store.write(|r| r.delete_mode(subject))?;
                Reply::json(&json!({ "mode": had.name() }))
            }
            _ => Reply::error(404, 404, "HTTP 404 Not Found".into()),
        })
    })();
    result.unwrap_or_else(|e| match e {
        Failure::Registry(e) => Reply::registry_error(&e),
        Failure::Reply(r) => r,
    })
}
