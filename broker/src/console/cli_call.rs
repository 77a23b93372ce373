//! One admin CLI command run for an API answer: `floe ARGV... --format json`
//! parsed as the CLI parses it and run on the console's connection, its JSON
//! document back ([`cli_json`]), its failure as the status and message the API
//! answers ([`ApiError`]).

use clap::Parser;
use hyper::StatusCode;
use serde_json::Value;

use crate::cli::admin::{exit_code, Admin};
use crate::cli::output::{capture, Format, Output};
use crate::cli::{self, AdminCommand};

/// An API error: the status and the message for `{"error": ...}`.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// What went wrong, for people.
    pub message: String,
}

impl ApiError {
    /// A 400 with `message`.
    pub fn bad(message: impl Into<String>) -> Self {
        ApiError { status: StatusCode::BAD_REQUEST, message: message.into() }
    }
    /// `status` with `message`.
    pub fn new(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError { status, message: message.into() }
    }
}

impl From<anyhow::Error> for ApiError {
    /// The status a command's error maps to: Kafka's authorization errors are
    /// 403, what does not exist 404, a refused login 401, no answer 502, and
    /// any other refusal 400.
    fn from(e: anyhow::Error) -> Self {
        let message = format!("{e:#}");
        let status = if message.contains("AUTHORIZATION_FAILED") {
            StatusCode::FORBIDDEN
        } else {
            match exit_code(&e) {
                4 => StatusCode::NOT_FOUND,
                3 if message.contains("refused the SASL") => StatusCode::UNAUTHORIZED,
                3 => StatusCode::BAD_GATEWAY,
                _ => StatusCode::BAD_REQUEST,
            }
        };
        ApiError { status, message }
    }
}

/// An API answer: its JSON document, or the error.
pub type ApiResult = Result<Value, ApiError>;

/// `floe ARGV...` as the CLI parses it, for [`cli_json`].
#[derive(Debug, Parser)]
#[command(name = "floe", no_binary_name = true)]
pub(super) struct Argv {
    #[command(subcommand)]
    command: AdminCommand,
}

/// Runs `floe ARGV... --format json` on `admin` and returns what it would
/// print, with the command's result (a command may print and still fail:
/// `cluster health` of an unhealthy cluster).
pub(super) async fn run_cli(
    admin: &mut Admin,
    argv: &[String],
) -> (Option<Value>, Result<(), ApiError>) {
    let parsed = match Argv::try_parse_from(argv) {
        Ok(p) => p,
        Err(e) => return (None, Err(ApiError::bad(e.render().to_string().trim().to_string()))),
    };
    let out = Output { format: Format::Json };
    if let AdminCommand::Acl { command, .. } = &parsed.command {
        if let Err(message) = cli::acl::validate(command) {
            return (None, Err(ApiError::bad(message)));
        }
    }
    let (mut docs, result) = capture(async move {
        match parsed.command {
            AdminCommand::Topic { command, .. } => cli::topic::execute(admin, command, out).await,
            AdminCommand::Group { command, .. } => cli::group::execute(admin, command, out).await,
            AdminCommand::Cluster { command, .. } => {
                cli::cluster::execute(admin, command, out).await
            }
            AdminCommand::Acl { command, .. } => cli::acl::execute(admin, command, out).await,
            AdminCommand::User { command, .. } => cli::user::execute(admin, command, out).await,
        }
    })
    .await;
    (docs.pop(), result.map_err(ApiError::from))
}

/// [`run_cli`]'s document, or its error.
pub async fn cli_json(admin: &mut Admin, argv: &[String]) -> ApiResult {
    match run_cli(admin, argv).await {
        (doc, Ok(())) => Ok(doc.unwrap_or(Value::Null)),
        (_, Err(e)) => Err(e),
    }
}
