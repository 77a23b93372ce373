//! The web console (`floe.console.listen`, issue #17 part 2): an HTTP server
//! beside the broker that serves the embedded page (broker/console/) and a
//! JSON API under `/api/` (docs: README "Web console").
//!
//! The console is a Kafka client of the broker it runs in, built on the admin
//! CLI ([`crate::cli`]): each API answer is what `floe ... --format json`
//! prints, made by the same code ([`crate::cli::output::capture`]), over a
//! connection to the broker's own listener as the logged-in user. So the
//! broker's ACLs decide what each person sees and changes, with Kafka's error
//! names. Which listener: the first PLAINTEXT or SASL_PLAINTEXT one, else the
//! first SSL or SASL_SSL one, trusting `ssl.truststore.location` with the
//! hostname check off (the console connects to itself by IP); when the
//! listener asks for client certificates it presents the broker's own. A
//! login tries the listener's mechanisms in the order SCRAM-SHA-256,
//! SCRAM-SHA-512, PLAIN, and keeps the first the broker accepts.
//!
//! Owns: static files and routing to [`api`] (served by
//! [`floe_broker::http_server`]); [`state`]
//! holds the settings the console takes from the broker's and the shared
//! state, [`cli_call`] runs one CLI command for an answer, [`session`] keeps
//! sessions and CSRF tokens, [`history`] the metrics and lag samples,
//! [`bench`] the benchmark reports.

pub mod api;
pub mod bench;
pub mod cli_call;
pub mod history;
pub mod session;
pub mod state;

use std::sync::Arc;

use anyhow::Context;
use floe_broker::config::BrokerConfig;
use floe_broker::http_server::{self, BodyError};
use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{header, Request, Response, StatusCode};

use api::response;
pub use state::{Console, Settings};

/// Request bodies above this are refused (413).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;

const INDEX_HTML: &str = include_str!("../../console/index.html");
const APP_JS: &str = include_str!("../../console/app.js");
const STYLE_CSS: &str = include_str!("../../console/style.css");

/// Binds the console and starts it, with its samplers, on the current
/// runtime; returns once it listens (or `Ok` at once when it is off).
///
/// # Errors
/// Its settings are unusable, or its address cannot be bound.
pub async fn start(config: &BrokerConfig) -> anyhow::Result<()> {
    let Some(settings) = Settings::from_config(config)? else { return Ok(()) };
    let listener = http_server::bind(settings.listen).with_context(|| {
        format!("cannot bind the web console to {} (floe.console.listen, --console-listen): pick another address, or an empty one to turn the console off", settings.listen)
    })?;
    let local = listener.local_addr().unwrap_or(settings.listen);
    tracing::info!(address = %local, broker = %settings.broker.bootstrap, read_only = settings.read_only, "web console listening on http://{local}/");
    let console = Arc::new(Console {
        settings,
        sessions: session::Sessions::default(),
        metrics: history::MetricsHistory::default(),
        lag: history::LagHistory::default(),
    });
    tokio::spawn(history::sample_metrics(console.clone()));
    tokio::spawn(history::sample_lag(console.clone()));
    let options = http_server::Options { name: "web console", ..Default::default() };
    let serving =
        http_server::serve(listener, options, move |req, _peer| handle(console.clone(), req))
            .context("the web console's listener cannot join the runtime")?;
    tokio::spawn(serving);
    Ok(())
}

async fn handle(
    console: Arc<Console>,
    req: Request<hyper::body::Incoming>,
) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_string();
    if !path.starts_with("/api/") && path != "/api" {
        return static_file(&parts.method, &path);
    }
    // The body, at most MAX_BODY_BYTES.
    let body = match http_server::read_body(body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(e) => {
            let (status, text) = match e {
                BodyError::TooLarge(_) => (
                    StatusCode::PAYLOAD_TOO_LARGE,
                    format!("the request body is over {MAX_BODY_BYTES} bytes"),
                ),
                BodyError::Read(_) => (StatusCode::BAD_REQUEST, e.to_string()),
            };
            let mut r = response(
                status,
                "application/json",
                serde_json::json!({ "error": text }).to_string(),
            );
            // The rest of the body is left unread, so this connection cannot carry another
            // request: say so, or a client reusing it races the close.
            r.headers_mut().insert(
                hyper::header::CONNECTION,
                hyper::header::HeaderValue::from_static("close"),
            );
            return r;
        }
    };
    api::handle(&console, &parts, &path, body).await
}

fn static_file(method: &hyper::Method, path: &str) -> Response<Full<Bytes>> {
    if method != hyper::Method::GET && method != hyper::Method::HEAD {
        return response(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "method not allowed\n",
        );
    }
    let (content_type, body) = match path {
        "/" | "/index.html" => ("text/html; charset=utf-8", INDEX_HTML),
        "/app.js" => ("text/javascript; charset=utf-8", APP_JS),
        "/style.css" => ("text/css; charset=utf-8", STYLE_CSS),
        _ => return response(StatusCode::NOT_FOUND, "text/plain; charset=utf-8", "not found\n"),
    };
    let mut r = response(StatusCode::OK, content_type, body);
    // Same-origin scripts and styles only; charts are inline SVG, report images data or same-origin.
    r.headers_mut().insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static("default-src 'self'; img-src 'self' data: blob:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"),
    );
    r
}
