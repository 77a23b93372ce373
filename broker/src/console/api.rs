//! The console's JSON API (`/api/...`): sessions and login, CSRF and
//! read-only checks, and one handler per route, each answering with the
//! admin CLI's `--format json` document for the same command, run on the
//! session's own Kafka client (see the module docs of [`super`]).
//!
//! Errors are `{"error": TEXT}`: 400 bad input or a refusal, 401 not logged
//! in, 403 CSRF, read-only or an ACL (Kafka's error name in the text), 404
//! not found, 502 the broker did not answer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{SystemTime, UNIX_EPOCH};

use floe_protocol::record_batch::CompressionType;
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{header, http, Method, Response, StatusCode};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use serde_json::{json, Map, Value};

use super::cli_call::{cli_json, run_cli, ApiError, ApiResult};
use super::session::{self, Session};
use super::state::Console;
use crate::cli;
use crate::cli::admin::{check, Admin, Target};
use crate::cli::output::{capture, Format, Output};

/// A response with `body` of `content_type`, and the headers every answer (the API's and
/// the static files') carries.
pub fn response(
    status: StatusCode,
    content_type: &str,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    let h = r.headers_mut();
    if let Ok(v) = header::HeaderValue::from_str(content_type) {
        h.insert(header::CONTENT_TYPE, v);
    }
    h.insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, header::HeaderValue::from_static("DENY"));
    h.insert(header::REFERRER_POLICY, header::HeaderValue::from_static("no-referrer"));
    h.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    r
}

fn argv(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_string()).collect()
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The largest integer a JavaScript number holds exactly (`Number.MAX_SAFE_INTEGER`, 2^53 - 1).
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Fields that hold 64-bit ids: strings in every answer, whatever their value.
const ID_FIELDS: &[&str] =
    &["snapshot_id", "parent_snapshot_id", "current_snapshot_id", "producer_id"];

/// `value` made safe for `JSON.parse`, which reads every number as a double
/// and so rounds integers beyond 2^53 (a snapshot id 2780273657115940031
/// would come out as 2780273657115940000, an id no table has). The CLI's
/// `--format json` keeps exact integers; the console's answers carry the
/// [`ID_FIELDS`] as decimal strings always (one type per field), and any
/// other integer beyond 2^53 (such as `Long.MAX_VALUE`) as a decimal string
/// too. Nothing is converted through `f64`.
pub fn for_javascript(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, v) in map.iter_mut() {
                match v {
                    Value::Number(n)
                        if ID_FIELDS.contains(&key.as_str()) && (n.is_i64() || n.is_u64()) =>
                    {
                        *v = Value::String(n.to_string())
                    }
                    _ => for_javascript(v),
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(for_javascript),
        Value::Number(n) => {
            let safe = n
                .as_i64()
                .map(i64::unsigned_abs)
                .or(n.as_u64())
                .is_none_or(|m| m <= MAX_SAFE_INTEGER);
            if !safe {
                *value = Value::String(n.to_string());
            }
        }
        _ => {}
    }
}

/// A JSON answer (its integers made safe by [`for_javascript`]), with `Set-Cookie` when given.
fn json_response(
    status: StatusCode,
    body: &Value,
    cookie: Option<String>,
) -> Response<Full<Bytes>> {
    let mut body = body.clone();
    for_javascript(&mut body);
    let mut r = response(status, "application/json", body.to_string());
    if let Some(c) = cookie.and_then(|c| header::HeaderValue::from_str(&c).ok()) {
        r.headers_mut().insert(header::SET_COOKIE, c);
    }
    r
}

fn error_response(e: &ApiError, cookie: Option<String>) -> Response<Full<Bytes>> {
    json_response(e.status, &json!({ "error": e.message }), cookie)
}

/// Handles one `/api/...` request.
pub async fn handle(
    console: &Console,
    parts: &http::request::Parts,
    path: &str,
    body: Bytes,
) -> Response<Full<Bytes>> {
    let segments: Vec<String> = match path
        .trim_start_matches("/api")
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_encoding::percent_decode_str(s).decode_utf8().map(|c| c.into_owned()))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(s) => s,
        Err(_) => {
            return error_response(&ApiError::bad("the path is not UTF-8 once decoded"), None)
        }
    };
    let segs: Vec<&str> = segments.iter().map(String::as_str).collect();
    let method = &parts.method;
    let query: BTreeMap<String, String> =
        form_urlencoded::parse(parts.uri.query().unwrap_or("").as_bytes()).into_owned().collect();
    let cookie = parts
        .headers
        .get(header::COOKIE)
        .and_then(|v| v.to_str().ok())
        .and_then(session::cookie_value);
    let existing = cookie.and_then(|id| console.sessions.get(id));
    let settings = &console.settings;
    let login_required = settings.broker.login_required();

    // Session routes: usable before logging in.
    match (method, segs.as_slice()) {
        (&Method::GET, ["session"]) => {
            let (session, new_cookie) = match existing {
                Some(s) => (s, None),
                None => {
                    let s = console.sessions.create(None, None);
                    let c = session::set_cookie(&s.id);
                    (s, Some(c))
                }
            };
            let doc = json!({"user": session.user, "login_required": login_required, "read_only": settings.read_only, "csrf": session.csrf});
            return json_response(StatusCode::OK, &doc, new_cookie);
        }
        (&Method::POST, ["login"]) => {
            let Some(old) = existing else { return error_response(&csrf_error(), None) };
            if !csrf_ok(&old, parts) {
                return error_response(&csrf_error(), None);
            }
            return match login(console, &body).await {
                Ok(new) => {
                    console.sessions.remove(&old.id);
                    json_response(
                        StatusCode::OK,
                        &json!({"user": new.user, "csrf": new.csrf}),
                        Some(session::set_cookie(&new.id)),
                    )
                }
                Err(e) => error_response(&e, None),
            };
        }
        (&Method::POST, ["logout"]) => {
            if let Some(s) = existing {
                if !csrf_ok(&s, parts) {
                    return error_response(&csrf_error(), None);
                }
                console.sessions.remove(&s.id);
            }
            return json_response(StatusCode::OK, &json!({}), Some(session::clear_cookie()));
        }
        _ => {}
    }

    // Every other route: a session (anonymous ones are made on the fly when no login is needed).
    let mut new_cookie = None;
    let session = match existing {
        Some(s) if !login_required || s.user.is_some() => s,
        Some(_) => {
            return error_response(&ApiError::new(StatusCode::UNAUTHORIZED, "log in first"), None)
        }
        None if login_required => {
            return error_response(&ApiError::new(StatusCode::UNAUTHORIZED, "log in first"), None)
        }
        None => {
            let s = console.sessions.create(None, None);
            new_cookie = Some(session::set_cookie(&s.id));
            s
        }
    };
    let write = matches!(*method, Method::POST | Method::DELETE | Method::PUT | Method::PATCH);
    if write {
        if settings.read_only {
            return error_response(
                &ApiError::new(
                    StatusCode::FORBIDDEN,
                    "the console is read-only (floe.console.read-only=true)",
                ),
                new_cookie,
            );
        }
        if !csrf_ok(&session, parts) {
            return error_response(&csrf_error(), new_cookie);
        }
    }
    let body_json = || -> Result<Value, ApiError> {
        if body.is_empty() {
            return Ok(json!({}));
        }
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad(format!("the body is not JSON: {e}")))
    };

    // Benchmark files are not JSON.
    if let (&Method::GET, ["bench", name, file]) = (method, segs.as_slice()) {
        return match super::bench::file(settings.bench_dir.as_deref(), name, file) {
            Ok((content_type, bytes)) => {
                let mut r = response(StatusCode::OK, content_type, bytes);
                r.headers_mut().insert(
                    header::CONTENT_SECURITY_POLICY,
                    header::HeaderValue::from_static(
                        "default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:",
                    ),
                );
                r
            }
            Err(e) => error_response(&e, new_cookie),
        };
    }

    let result = match (method, segs.as_slice()) {
        (&Method::GET, ["overview"]) => overview(console, &session).await,
        (&Method::GET, ["topics"]) => {
            with_admin(console, &session, |a| {
                Box::pin(async move { cli_json(a, &argv(&["topic", "list", "--internal"])).await })
            })
            .await
        }
        (&Method::POST, ["topics"]) => match body_json().and_then(|b| create_topic_argv(&b)) {
            Ok(args) => {
                with_admin(console, &session, |a| Box::pin(async move { cli_json(a, &args).await }))
                    .await
            }
            Err(e) => Err(e),
        },
        (&Method::GET, ["topics", name]) => {
            let args = argv(&["topic", "describe", "--all-configs", "--", name]);
            with_admin(console, &session, |a| {
                Box::pin(async move {
                    cli_json(a, &args).await.map(|d| {
                        d.as_array().and_then(|v| v.first().cloned()).unwrap_or(Value::Null)
                    })
                })
            })
            .await
        }
        (&Method::POST, ["topics", name, "configs"]) => match body_json()
            .and_then(|b| alter_config_argv(name, &b))
        {
            Ok(args) => {
                with_admin(console, &session, |a| Box::pin(async move { cli_json(a, &args).await }))
                    .await
            }
            Err(e) => Err(e),
        },
        (&Method::DELETE, ["topics", name]) => {
            let args = argv(&["topic", "delete", "--", name]);
            let name = name.to_string();
            with_admin(console, &session, |a| {
                Box::pin(
                    async move { cli_json(a, &args).await.map(|_| json!({ "deleted": name })) },
                )
            })
            .await
        }
        (&Method::GET, ["topics", name, "messages"]) => {
            let name = name.to_string();
            let registry = settings.schema_registry.clone();
            with_admin(console, &session, |a| {
                Box::pin(async move { messages(a, &name, &query, registry).await })
            })
            .await
        }
        (&Method::POST, ["topics", name, "messages"]) => match body_json() {
            Ok(b) => {
                let name = name.to_string();
                with_admin(console, &session, |a| {
                    Box::pin(async move { produce(a, &name, &b).await })
                })
                .await
            }
            Err(e) => Err(e),
        },
        (&Method::GET, ["groups"]) => {
            with_admin(console, &session, |a| {
                Box::pin(async move { cli_json(a, &argv(&["group", "list"])).await })
            })
            .await
        }
        (&Method::GET, ["groups", id]) => {
            let args = argv(&["group", "describe", "--", id]);
            let doc = with_admin(console, &session, |a| {
                Box::pin(async move { cli_json(a, &args).await })
            })
            .await;
            doc.map(|mut d| {
                if let Some(obj) = d.as_object_mut() {
                    obj.insert("history".into(), console.lag.history(id));
                }
                d
            })
        }
        (&Method::POST, ["groups", id, "seek"]) => {
            match body_json().and_then(|b| seek_argv(id, &b)) {
                Ok(args) => {
                    with_admin(console, &session, |a| {
                        Box::pin(async move { cli_json(a, &args).await })
                    })
                    .await
                }
                Err(e) => Err(e),
            }
        }
        (&Method::GET, ["iceberg"]) => iceberg_overview(console, &session).await,
        (&Method::GET, ["iceberg", table, "snapshots"]) => {
            iceberg_snapshots(console, &session, table).await
        }
        (&Method::GET, ["acls"]) => {
            with_admin(console, &session, |a| {
                Box::pin(async move { cli_json(a, &argv(&["acl", "list"])).await })
            })
            .await
        }
        (&Method::POST, ["acls"]) => match body_json().and_then(|b| acl_argv("create", &b)) {
            Ok(args) => {
                with_admin(console, &session, |a| Box::pin(async move { cli_json(a, &args).await }))
                    .await
            }
            Err(e) => Err(e),
        },
        (&Method::DELETE, ["acls"]) => match body_json().and_then(|b| acl_argv("delete", &b)) {
            Ok(args) => {
                with_admin(console, &session, |a| Box::pin(async move { cli_json(a, &args).await }))
                    .await
            }
            Err(e) => Err(e),
        },
        (&Method::GET, ["users"]) => {
            with_admin(console, &session, |a| {
                Box::pin(async move { cli_json(a, &argv(&["user", "list"])).await })
            })
            .await
        }
        (&Method::POST, ["users"]) => match body_json().and_then(|b| create_user_argv(&b)) {
            Ok(args) => {
                with_admin(console, &session, |a| Box::pin(async move { cli_json(a, &args).await }))
                    .await
            }
            Err(e) => Err(e),
        },
        (&Method::DELETE, ["users", name]) => {
            let args = argv(&["user", "delete", "--", name]);
            with_admin(console, &session, |a| Box::pin(async move { cli_json(a, &args).await }))
                .await
        }
        (&Method::GET, ["bench"]) => Ok(super::bench::list(settings.bench_dir.as_deref())),
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no route {method} {path} (see the README's Web console section)"),
        )),
    };
    match result {
        Ok(doc) => json_response(StatusCode::OK, &doc, new_cookie),
        Err(e) => error_response(&e, new_cookie),
    }
}

fn csrf_error() -> ApiError {
    ApiError::new(StatusCode::FORBIDDEN, "missing or wrong CSRF token")
}

fn csrf_ok(session: &Session, parts: &http::request::Parts) -> bool {
    parts
        .headers
        .get("x-csrf-token")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| session.csrf_matches(t))
}

/// A boxed future borrowing the session's client, for [`with_admin`].
type AdminFuture<'a> = std::pin::Pin<Box<dyn std::future::Future<Output = ApiResult> + Send + 'a>>;

/// Runs `f` on the session's Kafka client, connecting it first if need be;
/// a client whose broker stopped answering is dropped, to connect afresh next time.
async fn with_admin<F>(console: &Console, session: &Session, f: F) -> ApiResult
where
    F: for<'a> FnOnce(&'a mut Admin) -> AdminFuture<'a>,
{
    let mut guard = session.admin.lock().await;
    let admin = match guard.as_mut() {
        Some(a) => a,
        None => {
            let login = match (&session.user, &session.password, session.mechanism) {
                (Some(u), Some(p), Some(m)) => Some((u.as_str(), p.as_str(), m)),
                _ => None,
            };
            let args = console.settings.broker.connect_args(login);
            let connected = Admin::connect(&args).await.map_err(ApiError::from)?;
            guard.insert(connected)
        }
    };
    let result = f(admin).await;
    if matches!(&result, Err(e) if e.status == StatusCode::BAD_GATEWAY) {
        *guard = None;
    }
    result
}

/// POST /api/login: logs in to the broker with the credentials; a new session on success.
async fn login(console: &Console, body: &Bytes) -> Result<std::sync::Arc<Session>, ApiError> {
    let settings = &console.settings;
    if !settings.broker.login_required() {
        return Err(ApiError::bad(format!(
            "this broker's listener {} ({}) takes no login: the console works without one",
            settings.broker.bootstrap,
            settings.broker.protocol.name()
        )));
    }
    let doc: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad(format!("the body is not JSON: {e}")))?;
    let user = doc
        .get("username")
        .and_then(Value::as_str)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| ApiError::bad("give \"username\""))?;
    let password = doc
        .get("password")
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::bad("give \"password\""))?;
    // Each mechanism the listener enables, SCRAM first: a user may exist for PLAIN only.
    let mut refusals = Vec::new();
    for &mechanism in &settings.broker.mechanisms {
        let args = settings.broker.connect_args(Some((user, password, mechanism)));
        match Admin::connect(&args).await.map_err(ApiError::from) {
            Ok(admin) => {
                console.lag.set_login(user, password, mechanism);
                return Ok(console.sessions.create(
                    Some((user.to_string(), password.to_string(), mechanism)),
                    Some(admin),
                ));
            }
            Err(e) if e.status == StatusCode::UNAUTHORIZED => refusals.push(mechanism),
            Err(e) => return Err(e),
        }
    }
    Err(ApiError::new(
        StatusCode::UNAUTHORIZED,
        format!(
            "login refused: the broker accepted that user name and password with none of {}",
            refusals.join(", ")
        ),
    ))
}

async fn overview(console: &Console, session: &Session) -> ApiResult {
    let docs = with_admin(console, session, |a| {
        Box::pin(async move {
            let info = cli_json(a, &argv(&["cluster", "info"])).await?;
            // An unhealthy cluster is an answer, not an error.
            let health = match run_cli(a, &argv(&["cluster", "health"])).await {
                (Some(doc), _) => doc,
                (None, Err(e)) => return Err(e),
                (None, Ok(())) => Value::Null,
            };
            Ok(json!({"cluster": info, "health": health}))
        })
    })
    .await?;
    let mut doc = docs;
    if let Some(obj) = doc.as_object_mut() {
        obj.insert("metrics".into(), console.metrics.json(console.settings.metrics.is_some()));
    }
    Ok(doc)
}

fn str_field<'a>(body: &'a Value, key: &str) -> Option<&'a str> {
    body.get(key).and_then(Value::as_str)
}

fn required<'a>(body: &'a Value, key: &str) -> Result<&'a str, ApiError> {
    str_field(body, key)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::bad(format!("give \"{key}\" (a non-empty string)")))
}

/// A JSON number or numeric string field as text, if present and not null.
fn number_field(body: &Value, key: &str) -> Result<Option<String>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) if n.is_i64() => Ok(Some(n.to_string())),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) if s.trim().parse::<i64>().is_ok() => Ok(Some(s.trim().to_string())),
        Some(other) => Err(ApiError::bad(format!("\"{key}\" must be a whole number, not {other}"))),
    }
}

/// A `{"k": "v"}` object as `k=v` strings.
fn string_map(body: &Value, key: &str) -> Result<Vec<String>, ApiError> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Object(m)) => m
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => Ok(format!("{k}={s}")),
                Value::Number(n) => Ok(format!("{k}={n}")),
                Value::Bool(b) => Ok(format!("{k}={b}")),
                other => {
                    Err(ApiError::bad(format!("\"{key}\".\"{k}\" must be a string, not {other}")))
                }
            })
            .collect(),
        Some(other) => {
            Err(ApiError::bad(format!("\"{key}\" must be an object of settings, not {other}")))
        }
    }
}

fn create_topic_argv(body: &Value) -> Result<Vec<String>, ApiError> {
    let name = required(body, "name")?;
    let mut args = argv(&["topic", "create"]);
    if let Some(p) = number_field(body, "partitions")? {
        args.push(format!("--partitions={p}"));
    }
    if let Some(r) = number_field(body, "replicas")? {
        args.push(format!("--replicas={r}"));
    }
    for c in string_map(body, "configs")? {
        args.push(format!("--config={c}"));
    }
    args.extend(["--".to_string(), name.to_string()]);
    Ok(args)
}

fn alter_config_argv(name: &str, body: &Value) -> Result<Vec<String>, ApiError> {
    let mut args = argv(&["topic", "alter-config"]);
    for c in string_map(body, "set")? {
        args.push(format!("--set={c}"));
    }
    match body.get("delete") {
        None | Some(Value::Null) => {}
        Some(Value::Array(keys)) => {
            for k in keys {
                let k = k
                    .as_str()
                    .ok_or_else(|| ApiError::bad("\"delete\" must be a list of setting names"))?;
                args.push(format!("--delete={k}"));
            }
        }
        Some(_) => return Err(ApiError::bad("\"delete\" must be a list of setting names")),
    }
    args.extend(["--".to_string(), name.to_string()]);
    Ok(args)
}

fn seek_argv(group: &str, body: &Value) -> Result<Vec<String>, ApiError> {
    let to = required(body, "to")?;
    let mut args = vec!["group".to_string(), "seek".to_string(), format!("--to={to}")];
    if let Some(topic) = str_field(body, "topic").filter(|t| !t.is_empty()) {
        args.push(format!("--topic={topic}"));
    }
    if body.get("dry_run").and_then(Value::as_bool).unwrap_or(false) {
        args.push("--dry-run".to_string());
    }
    args.extend(["--".to_string(), group.to_string()]);
    Ok(args)
}

/// `acl create` or `acl delete` flags from the API's fields (`delete`: each field a filter, absent matches any).
fn acl_argv(verb: &str, body: &Value) -> Result<Vec<String>, ApiError> {
    let mut args = vec!["acl".to_string(), verb.to_string()];
    let create = verb == "create";
    if let Some(principal) = str_field(body, "principal").filter(|p| !p.is_empty()) {
        let flag =
            match str_field(body, "permission").unwrap_or("allow").to_ascii_lowercase().as_str() {
                "allow" => "--allow-principal",
                "deny" => "--deny-principal",
                other => {
                    return Err(ApiError::bad(format!(
                        "\"permission\" is allow or deny, not {other}"
                    )))
                }
            };
        args.push(format!("{flag}={principal}"));
    } else if create {
        return Err(ApiError::bad("give \"principal\", e.g. User:alice"));
    }
    if let Some(op) = str_field(body, "operation").filter(|o| !o.is_empty()) {
        args.push(format!("--operation={op}"));
    } else if create {
        return Err(ApiError::bad("give \"operation\": Read, Write, Create, Delete, Alter, Describe, ClusterAction, DescribeConfigs, AlterConfigs, IdempotentWrite or All"));
    }
    let resource_type =
        str_field(body, "resource_type").unwrap_or("").to_ascii_lowercase().replace('_', "-");
    let name = str_field(body, "name").unwrap_or("");
    match resource_type.as_str() {
        "topic" | "group" | "transactional-id" => {
            if name.is_empty() {
                return Err(ApiError::bad(format!(
                    "give \"name\" of the {resource_type} (`*` for every one)"
                )));
            }
            args.push(format!("--{resource_type}={name}"));
        }
        "cluster" => args.push("--cluster".to_string()),
        "" if !create => {}
        other => {
            return Err(ApiError::bad(format!(
                "\"resource_type\" is topic, group, cluster or transactional-id, not `{other}`"
            )))
        }
    }
    if let Some(pattern) = str_field(body, "pattern").filter(|p| !p.is_empty()) {
        args.push(format!("--resource-pattern-type={pattern}"));
    }
    if let Some(host) = str_field(body, "host").filter(|h| !h.is_empty()) {
        args.push(format!("--host={host}"));
    }
    Ok(args)
}

fn create_user_argv(body: &Value) -> Result<Vec<String>, ApiError> {
    let name = required(body, "name")?;
    let password = required(body, "password")?;
    let mut args = vec!["user".to_string(), "create".to_string(), format!("--password={password}")];
    if let Some(m) = str_field(body, "mechanism").filter(|m| !m.is_empty()) {
        args.push(format!("--mechanism={m}"));
    }
    args.extend(["--".to_string(), name.to_string()]);
    Ok(args)
}

/// POST /api/topics/{name}/messages: one record, as `floe topic produce` sends it.
async fn produce(admin: &mut Admin, topic: &str, body: &Value) -> ApiResult {
    let text = |key: &str| -> Result<Option<Vec<u8>>, ApiError> {
        match body.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone().into_bytes())),
            Some(other) => {
                Err(ApiError::bad(format!("\"{key}\" must be a string or null, not {other}")))
            }
        }
    };
    let (key, value) = (text("key")?, text("value")?);
    let mut headers = Vec::new();
    match body.get("headers") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for h in items {
                let pair = h
                    .as_array()
                    .filter(|p| p.len() == 2)
                    .ok_or_else(|| ApiError::bad("each header is [\"key\", \"value\"]"))?;
                let k = pair[0]
                    .as_str()
                    .ok_or_else(|| ApiError::bad("a header's key must be a string"))?;
                let v = match &pair[1] {
                    Value::Null => None,
                    Value::String(s) => Some(s.clone().into_bytes()),
                    _ => return Err(ApiError::bad("a header's value must be a string or null")),
                };
                headers.push((k.as_bytes().to_vec(), v));
            }
        }
        Some(_) => return Err(ApiError::bad("\"headers\" must be a list of [\"key\", \"value\"]")),
    }
    let partition = number_field(body, "partition")?
        .map(|p| p.parse::<i32>())
        .transpose()
        .map_err(|_| ApiError::bad("\"partition\" is out of range"))?;
    let record = cli::records::NewRecord { key, value, headers, timestamp: now_ms() };
    let out = Output { format: Format::Json };
    let (mut docs, result) = capture(cli::produce::produce(
        admin,
        topic,
        vec![record],
        partition,
        -1,
        CompressionType::None,
        30_000,
        out,
    ))
    .await;
    result.map_err(ApiError::from)?;
    Ok(docs.pop().unwrap_or(Value::Null))
}

/// Where a message page starts in a partition (`offset=`).
fn start_offset(spec: &str, log_start: i64, high_watermark: i64) -> Result<i64, ApiError> {
    let bad = || {
        ApiError::bad(format!("offset `{spec}` is not beginning, end, N or -N (N before the end)"))
    };
    Ok(match spec {
        "beginning" | "earliest" => log_start,
        "end" | "latest" => high_watermark,
        s if s.starts_with('-') => {
            let n: i64 = s[1..].parse().map_err(|_| bad())?;
            (high_watermark - n).max(log_start)
        }
        s => s
            .parse::<i64>()
            .ok()
            .filter(|o| *o >= 0)
            .ok_or_else(bad)?
            .clamp(log_start, high_watermark),
    })
}

/// GET /api/topics/{name}/messages: a page of records from one partition (or,
/// without `partition=`, from each: `limit` records per partition, from
/// `offset`, or from `offsets=P:O,...` where given), as `floe topic consume
/// --format json` prints them.
async fn messages(
    admin: &mut Admin,
    topic: &str,
    query: &BTreeMap<String, String>,
    registry: Option<String>,
) -> ApiResult {
    let limit: usize = match query.get("limit") {
        None => 50,
        Some(l) => l
            .parse::<usize>()
            .ok()
            .filter(|l| (1..=500).contains(l))
            .ok_or_else(|| ApiError::bad(format!("limit `{l}` is not 1 to 500")))?,
    };
    let spec = query.get("offset").map_or("beginning", String::as_str);
    let metadata = cli::produce::topic_metadata(admin, topic).await?;
    let all: Vec<i32> = metadata
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let chosen: Vec<i32> = match query.get("partition").filter(|p| !p.is_empty()) {
        Some(p) => {
            let p: i32 =
                p.parse().map_err(|_| ApiError::bad(format!("partition `{p}` is not a number")))?;
            if !all.contains(&p) {
                return Err(ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("topic {topic} has no partition {p} (it has {})", all.len()),
                ));
            }
            vec![p]
        }
        None => all.clone(),
    };
    let names = [topic.to_string()];
    let earliest =
        cli::offsets::list_offsets(admin, &metadata, &names, cli::offsets::EARLIEST, false).await?;
    let latest =
        cli::offsets::list_offsets(admin, &metadata, &names, cli::offsets::LATEST, false).await?;
    // `offsets=P:O,P:O`: where each partition goes on from (the `next_offsets` of the page before).
    let mut per_partition: BTreeMap<i32, String> = BTreeMap::new();
    for item in query
        .get("offsets")
        .map(String::as_str)
        .unwrap_or("")
        .split(',')
        .filter(|i| !i.trim().is_empty())
    {
        let (p, o) = item
            .split_once(':')
            .and_then(|(p, o)| Some((p.trim().parse::<i32>().ok()?, o.trim().to_string())))
            .ok_or_else(|| {
                ApiError::bad(format!(
                    "offsets: `{item}` is not PARTITION:OFFSET (e.g. offsets=0:120,1:97)"
                ))
            })?;
        per_partition.insert(p, o);
    }
    let mut decoder = registry.map(cli::consume::SchemaDecoder::new);
    let mut out = Vec::new();
    let mut next = Map::new();
    let mut ends = Map::new();
    for &p in &chosen {
        let log_start = earliest.get(&(topic.to_string(), p)).copied().unwrap_or(0);
        let hw = latest.get(&(topic.to_string(), p)).copied().unwrap_or(0);
        let mut position =
            start_offset(per_partition.get(&p).map_or(spec, String::as_str), log_start, hw)?;
        let mut taken = 0usize;
        for _round in 0..20 {
            if taken >= limit || position >= hw {
                break;
            }
            let leader = cli::produce::leader_of(&metadata, topic, p).ok_or_else(|| {
                ApiError::new(StatusCode::BAD_GATEWAY, format!("{topic} [{p}] has no leader"))
            })?;
            let request = FetchRequest::default()
                .with_max_wait_ms(0)
                .with_min_bytes(1)
                .with_max_bytes(4 * 1024 * 1024)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.to_string())))
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(p)
                        .with_fetch_offset(position)
                        .with_partition_max_bytes(1024 * 1024)])]);
            let (response, _) = admin
                .call_versioned(
                    Target::Node(leader),
                    &request,
                    Some(cli::consume::FETCH_VERSION_CAP),
                )
                .await?;
            check(response.error_code, None, &format!("fetching {topic} [{p}]"))?;
            let Some(part) = response
                .responses
                .iter()
                .flat_map(|t| t.partitions.iter())
                .find(|x| x.partition_index == p)
            else {
                break;
            };
            check(part.error_code, None, &format!("fetching {topic} [{p}] at offset {position}"))?;
            let bytes = part.records.as_deref().unwrap_or_default();
            let mut decoded = cli::records::decode_fetched(bytes, position, None).map_err(|e| {
                ApiError::bad(format!("reading {topic} [{p}] at offset {position}: {e}"))
            })?;
            if let Some(d) = decoder.as_mut() {
                for r in &mut decoded.records {
                    r.key = d.decode(r.key.take()).await;
                    r.value = d.decode(r.value.take()).await;
                }
            }
            let before = position;
            for r in &decoded.records {
                if taken >= limit {
                    break;
                }
                out.push(cli::consume::record_json(topic, p, r));
                taken += 1;
                position = r.offset + 1;
            }
            if taken < limit {
                position = position.max(decoded.next_offset);
            }
            if position == before {
                break;
            }
        }
        next.insert(p.to_string(), json!(position));
        ends.insert(p.to_string(), json!({"log_start_offset": log_start, "high_watermark": hw}));
    }
    let single = if chosen.len() == 1 { next.values().next().cloned() } else { None };
    Ok(
        json!({"topic": topic, "messages": out, "next_offset": single, "next_offsets": next, "offsets": ends}),
    )
}

/// Runs a catalog read on a blocking thread with its own runtime and a
/// deadline, so that a slow or stuck catalog never holds a console worker.
async fn on_catalog<F, Fut>(what: &str, f: F) -> Result<(Vec<Value>, anyhow::Result<()>), ApiError>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let task = tokio::task::spawn_blocking(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        Ok::<_, anyhow::Error>(runtime.block_on(capture(f())))
    });
    match tokio::time::timeout(std::time::Duration::from_secs(30), task).await {
        Err(_) => Err(ApiError::new(
            StatusCode::BAD_GATEWAY,
            format!("{what}: the Iceberg catalog did not answer within 30 s"),
        )),
        Ok(Err(e)) => Err(ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, format!("{what}: {e}"))),
        Ok(Ok(Err(e))) => Err(ApiError::from(e)),
        Ok(Ok(Ok(r))) => Ok(r),
    }
}

/// The snippets that read `table` from DuckDB, pyiceberg and Spark.
fn queries(console: &Console, table: &str, metadata_location: Option<&str>) -> Value {
    let s = &console.settings;
    let ns = &s.namespace;
    let location = metadata_location.unwrap_or("METADATA_LOCATION");
    let duckdb = format!(
        "INSTALL iceberg; LOAD iceberg;\nSELECT * FROM iceberg_scan('{location}') LIMIT 10;"
    );
    let catalog_name = &s.catalog.name;
    let pyiceberg = match (&s.iceberg_rest, s.catalog.sqlite_path()) {
        (Some(rest), _) => format!(
            "from pyiceberg.catalog.rest import RestCatalog\ncatalog = RestCatalog(\"{catalog_name}\", uri=\"{rest}\")\ntable = catalog.load_table(\"{ns}.{table}\")\nprint(table.scan(limit=10).to_arrow())"
        ),
        (None, Some(db)) => format!(
            "from pyiceberg.catalog.sql import SqlCatalog\ncatalog = SqlCatalog(\"{catalog_name}\", uri=\"sqlite:///{}\")\ntable = catalog.load_table(\"{ns}.{table}\")\nprint(table.scan(limit=10).to_arrow())",
            db.display()
        ),
        (None, None) => format!(
            "from pyiceberg.catalog import load_catalog\ncatalog = load_catalog(\"{catalog_name}\")  # {}\ntable = catalog.load_table(\"{ns}.{table}\")\nprint(table.scan(limit=10).to_arrow())",
            s.catalog.describe()
        ),
    };
    let spark = format!("SELECT * FROM {catalog_name}.{ns}.{table} LIMIT 10;");
    json!({"duckdb": duckdb, "pyiceberg": pyiceberg, "spark": spark})
}

/// GET /api/iceberg: the tables, each partition's committed offset and lag, and query snippets.
async fn iceberg_overview(console: &Console, session: &Session) -> ApiResult {
    let (catalog, ns) = (console.settings.catalog.clone(), console.settings.namespace.clone());
    let (mut docs, result) = on_catalog("listing the Iceberg tables", move || async move {
        cli::iceberg::tables(&catalog, &ns, Output { format: Format::Json }).await
    })
    .await?;
    if let Err(e) = result {
        let e = ApiError::from(e);
        if e.status == StatusCode::NOT_FOUND {
            // No catalog yet: nothing has been tiered.
            return Ok(json!({"tables": [], "status": [], "note": e.message}));
        }
        return Err(e);
    }
    let mut tables = docs.pop().unwrap_or(Value::Array(Vec::new()));
    let names: Vec<String> = tables
        .as_array()
        .map(|t| t.iter().filter_map(|r| r["table"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    // What the logged-in user may see: the tables of topics it may describe
    // (the broker's ACLs, through Metadata), with their high watermarks.
    let (visible, hws) = visible_topics(console, session, names).await?;
    if let Some(rows) = tables.as_array_mut() {
        rows.retain(|r| r["table"].as_str().is_some_and(|t| visible.contains(t)));
    }
    let mut status = Vec::new();
    if let Some(rows) = tables.as_array_mut() {
        for row in rows {
            let table = row["table"].as_str().unwrap_or("").to_string();
            let committed = row["committed_next_offsets"].as_object().cloned().unwrap_or_default();
            let mut partitions: BTreeMap<i32, Option<i64>> =
                committed.iter().filter_map(|(p, o)| Some((p.parse().ok()?, o.as_i64()))).collect();
            for (t, p) in hws.keys() {
                if *t == table {
                    partitions.entry(*p).or_insert(None);
                }
            }
            let parts: Vec<Value> = partitions
                .iter()
                .map(|(p, c)| {
                    let hw = hws.get(&(table.clone(), *p)).copied();
                    let lag = hw.map(|h| h - c.unwrap_or(0));
                    json!({"partition": p, "committed_offset": c, "high_watermark": hw, "lag_records": lag, "lag_ms": null})
                })
                .collect();
            let parts = with_lag_in_time(console, session, &table, parts).await;
            let q = queries(console, &table, row["metadata_location"].as_str());
            if let Some(obj) = row.as_object_mut() {
                obj.insert("queries".into(), q);
            }
            status.push(json!({"table": table, "partitions": parts}));
        }
    }
    Ok(json!({"tables": tables, "status": status}))
}

/// Fills `lag_ms` of the partitions with untiered records: how long ago the
/// oldest of them was written (its timestamp, read with a one-record fetch at
/// the committed offset). Left null where it cannot be read; at most 64
/// partitions per table, so that a page view stays a handful of fetches.
async fn with_lag_in_time(
    console: &Console,
    session: &Session,
    table: &str,
    mut parts: Vec<Value>,
) -> Vec<Value> {
    let lagging: Vec<(usize, i32, i64)> = parts
        .iter()
        .enumerate()
        .filter(|(_, p)| p["lag_records"].as_i64().is_some_and(|l| l > 0))
        .filter_map(|(i, p)| {
            Some((
                i,
                i32::try_from(p["partition"].as_i64()?).ok()?,
                p["committed_offset"].as_i64().unwrap_or(0),
            ))
        })
        .take(64)
        .collect();
    if lagging.is_empty() {
        return parts;
    }
    let topic = table.to_string();
    let wanted = lagging.clone();
    let found = with_admin(console, session, |a| {
        Box::pin(async move {
            let mut stamps = Vec::new();
            for (i, p, committed) in wanted {
                let query: BTreeMap<String, String> = [
                    ("partition".to_string(), p.to_string()),
                    ("offset".to_string(), committed.to_string()),
                    ("limit".to_string(), "1".to_string()),
                ]
                .into();
                if let Ok(doc) = messages(a, &topic, &query, None).await {
                    if let Some(ts) = doc["messages"][0]["timestamp"].as_i64() {
                        stamps.push(json!([i, ts]));
                    }
                }
            }
            Ok(Value::Array(stamps))
        })
    })
    .await;
    let now = now_ms();
    for stamp in found.ok().and_then(|v| v.as_array().cloned()).unwrap_or_default() {
        let (Some(i), Some(ts)) =
            (stamp[0].as_u64().and_then(|i| usize::try_from(i).ok()), stamp[1].as_i64())
        else {
            continue;
        };
        if let Some(obj) = parts.get_mut(i).and_then(Value::as_object_mut) {
            obj.insert("lag_ms".into(), json!((now - ts).max(0)));
        }
    }
    parts
}

/// Of `names`, the topics the session's user may describe (Metadata answers
/// them without an error), and their partitions' high watermarks.
async fn visible_topics(
    console: &Console,
    session: &Session,
    names: Vec<String>,
) -> Result<(BTreeSet<String>, BTreeMap<(String, i32), i64>), ApiError> {
    if names.is_empty() {
        return Ok((BTreeSet::new(), BTreeMap::new()));
    }
    let doc = with_admin(console, session, |a| {
        Box::pin(async move {
            let metadata = a.metadata(Some(&names)).await?;
            let present: Vec<String> = metadata.topics.iter().filter(|t| t.error_code == 0).filter_map(|t| t.name.as_ref().map(|n| n.to_string())).collect();
            let hw = cli::offsets::list_offsets(a, &metadata, &present, cli::offsets::LATEST, false).await?;
            Ok(json!({"present": present, "hw": hw.into_iter().map(|((t, p), o)| json!([t, p, o])).collect::<Vec<_>>()}))
        })
    })
    .await?;
    let visible = doc["present"]
        .as_array()
        .map(|a| a.iter().filter_map(|t| t.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let hws = doc["hw"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|e| {
            Some((
                (e[0].as_str()?.to_string(), i32::try_from(e[1].as_i64()?).ok()?),
                e[2].as_i64()?,
            ))
        })
        .collect();
    Ok((visible, hws))
}

/// GET /api/iceberg/{table}/snapshots: `floe iceberg snapshots` and the query snippets.
async fn iceberg_snapshots(console: &Console, session: &Session, table: &str) -> ApiResult {
    // A table is the copy of a topic: shown only to whom the broker lets describe the topic.
    let topic = table.to_string();
    with_admin(console, session, |a| {
        Box::pin(async move {
            let metadata = a.metadata(Some(std::slice::from_ref(&topic))).await?;
            for t in &metadata.topics {
                check(
                    t.error_code,
                    None,
                    &format!("topic {topic} (its table is shown to those who may describe it)"),
                )?;
            }
            Ok(Value::Null)
        })
    })
    .await?;
    let (catalog, ns, name) =
        (console.settings.catalog.clone(), console.settings.namespace.clone(), table.to_string());
    let (mut docs, result) = on_catalog("listing the snapshots", move || async move {
        cli::iceberg::snapshots(&catalog, &ns, &name, Output { format: Format::Json }).await
    })
    .await?;
    result.map_err(ApiError::from)?;
    let (catalog, ns) = (console.settings.catalog.clone(), console.settings.namespace.clone());
    let (mut tables, _) = on_catalog("listing the Iceberg tables", move || async move {
        cli::iceberg::tables(&catalog, &ns, Output { format: Format::Json }).await
    })
    .await?;
    let location = tables.pop().and_then(|t| {
        t.as_array().and_then(|rows| {
            rows.iter()
                .find(|r| r["table"] == table)
                .and_then(|r| r["metadata_location"].as_str().map(str::to_string))
        })
    });
    Ok(
        json!({"table": table, "snapshots": docs.pop().unwrap_or(Value::Array(Vec::new())), "queries": queries(console, table, location.as_deref())}),
    )
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::console::cli_call::Argv;

    #[test]
    fn start_offsets_stay_in_the_log() {
        assert_eq!(start_offset("beginning", 5, 20).unwrap(), 5);
        assert_eq!(start_offset("end", 5, 20).unwrap(), 20);
        assert_eq!(start_offset("-3", 5, 20).unwrap(), 17);
        assert_eq!(start_offset("-100", 5, 20).unwrap(), 5);
        assert_eq!(start_offset("2", 5, 20).unwrap(), 5);
        assert_eq!(start_offset("12", 5, 20).unwrap(), 12);
        assert!(start_offset("x", 5, 20).is_err());
    }

    #[test]
    fn bodies_become_the_clis_flags() {
        let b = json!({"name": "orders", "partitions": 3, "replicas": null, "configs": {"retention.ms": "1000"}});
        assert_eq!(
            create_topic_argv(&b).unwrap(),
            argv(&[
                "topic",
                "create",
                "--partitions=3",
                "--config=retention.ms=1000",
                "--",
                "orders"
            ])
        );
        assert!(create_topic_argv(&json!({"partitions": 3})).is_err());
        assert!(create_topic_argv(&json!({"name": "x", "partitions": "many"})).is_err());
        let a = json!({"principal": "User:alice", "operation": "Read", "permission": "allow", "resource_type": "topic", "name": "t", "pattern": "literal", "host": "*"});
        assert_eq!(
            acl_argv("create", &a).unwrap(),
            argv(&[
                "acl",
                "create",
                "--allow-principal=User:alice",
                "--operation=Read",
                "--topic=t",
                "--resource-pattern-type=literal",
                "--host=*"
            ])
        );
        assert!(acl_argv("create", &json!({"operation": "Read"})).is_err());
        assert_eq!(
            seek_argv("g", &json!({"to": "shift:-5", "dry_run": true})).unwrap(),
            argv(&["group", "seek", "--to=shift:-5", "--dry-run", "--", "g"])
        );
    }

    #[test]
    fn ids_and_integers_beyond_2_53_travel_as_strings() {
        let mut doc = json!({
            "snapshots": [{"snapshot_id": 2_780_273_657_115_940_031_i64, "parent_snapshot_id": null, "sequence_number": 3},
                          {"snapshot_id": 12, "parent_snapshot_id": 2_780_273_657_115_940_031_i64}],
            "current_snapshot_id": -4_611_686_018_427_387_904_i64,
            "offsets": [9_007_199_254_740_991_i64, 9_007_199_254_740_992_i64, i64::MAX, -9_007_199_254_740_993_i64, u64::MAX],
            "ratio": 0.5,
        });
        for_javascript(&mut doc);
        assert_eq!(doc["snapshots"][0]["snapshot_id"], "2780273657115940031");
        assert_eq!(doc["snapshots"][0]["parent_snapshot_id"], Value::Null);
        assert_eq!(doc["snapshots"][0]["sequence_number"], 3);
        assert_eq!(doc["snapshots"][1]["snapshot_id"], "12", "an id is a string even when small");
        assert_eq!(doc["snapshots"][1]["parent_snapshot_id"], "2780273657115940031");
        assert_eq!(doc["current_snapshot_id"], "-4611686018427387904");
        assert_eq!(
            doc["offsets"],
            json!([
                9_007_199_254_740_991_i64,
                "9007199254740992",
                "9223372036854775807",
                "-9007199254740993",
                "18446744073709551615"
            ])
        );
        assert_eq!(doc["ratio"], 0.5);
    }

    #[test]
    fn argv_parses_as_the_cli_does() {
        assert!(Argv::try_parse_from(argv(&[
            "topic",
            "describe",
            "--all-configs",
            "--",
            "-weird"
        ]))
        .is_ok());
        assert!(Argv::try_parse_from(argv(&["topic", "nonsense"])).is_err());
    }
}
