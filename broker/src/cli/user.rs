//! `floe user`: SCRAM users (Kafka's `kafka-configs --entity-type users
//! --alter --add-config 'SCRAM-SHA-256=[password=...]'`), through
//! AlterUserScramCredentials and DescribeUserScramCredentials.
//!
//! The password never travels: as Kafka's admin client does, the CLI draws a
//! random salt and sends the salted password (RFC 5802 `Hi()`, PBKDF2 with
//! the mechanism's HMAC), from which the broker derives the keys it keeps.

use std::io::{BufRead, IsTerminal};
use std::num::NonZeroU32;

use anyhow::{anyhow, Context};
use bytes::Bytes;
use floe_broker::security::scram::{ScramMechanism, MAX_ITERATIONS, MIN_ITERATIONS};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;
use ring::rand::SecureRandom;
use serde_json::{json, Value};

use super::acl::usage_error;
use super::admin::{check, Admin, CliFailure, Target};
use super::connect::ConnectArgs;
use super::output::{Output, Table};

/// Salt length in bytes: random, as long as a SHA-256 digest (RFC 5802 sets no length).
const SALT_BYTES: usize = 32;

/// `--mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mechanism {
    /// SCRAM-SHA-256.
    #[value(name = "SCRAM-SHA-256")]
    Sha256,
    /// SCRAM-SHA-512.
    #[value(name = "SCRAM-SHA-512")]
    Sha512,
}

impl Mechanism {
    fn scram(self) -> ScramMechanism {
        match self {
            Mechanism::Sha256 => ScramMechanism::Sha256,
            Mechanism::Sha512 => ScramMechanism::Sha512,
        }
    }
}

/// `floe user ...`.
#[derive(Debug, clap::Subcommand)]
pub enum UserCommand {
    /// Creates a SCRAM user, or sets a new password for one (per mechanism:
    /// a user may have a SCRAM-SHA-256 and a SCRAM-SHA-512 credential).
    /// Needs the ALTER operation on the cluster (a super user, say).
    ///
    /// The password is read from stdin with --password-stdin (one line);
    /// --password works too but leaves it in the shell history and the
    /// process list.
    ///
    /// Examples:
    ///   echo "$ALICE_PASSWORD" | floe user create alice --password-stdin
    ///   floe user create etl --password-stdin --mechanism SCRAM-SHA-512 --iterations 8192 < etl.pw
    ///   floe user create alice --password-stdin -X security.protocol=SASL_SSL \
    ///       -X sasl.mechanism=SCRAM-SHA-256 -X sasl.username=admin -X sasl.password=... < alice.pw
    #[command(verbatim_doc_comment)]
    Create {
        /// The user's name (the principal is User:NAME).
        name: String,
        /// Read the password from the first line of stdin.
        #[arg(long, conflicts_with = "password")]
        password_stdin: bool,
        /// The password (prefer --password-stdin: this one lands in the shell history).
        #[arg(long, value_name = "PASSWORD")]
        password: Option<String>,
        /// The SCRAM mechanism the credential is for.
        #[arg(long, value_enum, default_value = "SCRAM-SHA-256")]
        mechanism: Mechanism,
        /// PBKDF2 iterations, 4096 to 16384 (more: slower to guess, slower to log in).
        #[arg(long, default_value_t = 4096)]
        iterations: i32,
    },
    /// Deletes a user's SCRAM credentials: every mechanism it has, or only --mechanism.
    /// Connections already logged in stay open until they re-authenticate.
    ///
    /// Examples:
    ///   floe user delete alice
    ///   floe user delete alice --mechanism SCRAM-SHA-512
    #[command(verbatim_doc_comment)]
    Delete {
        /// The user's name.
        name: String,
        /// Only this mechanism's credential [default: all of them].
        #[arg(long, value_enum)]
        mechanism: Option<Mechanism>,
    },
    /// Lists SCRAM users with their mechanisms and iteration counts (never a
    /// password or key: the broker keeps none it could show).
    ///
    /// Examples:
    ///   floe user list
    ///   floe user list alice bob --format json
    #[command(verbatim_doc_comment)]
    List {
        /// Only these users [default: all].
        names: Vec<String>,
    },
}

/// Runs a `floe user` command.
///
/// # Errors
/// What went wrong, for people; [`super::admin::exit_code`] tells the exit code.
pub async fn run(command: UserCommand, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    match command {
        UserCommand::Create { name, password_stdin, password, mechanism, iterations } => {
            // Everything the user controls is checked before connecting.
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
                usage_error(&format!(
                    "--iterations {iterations}: Kafka takes {MIN_ITERATIONS} to {MAX_ITERATIONS}"
                ));
            }
            let password = read_password(password_stdin, password)?;
            let mut admin = Admin::connect(connect).await?;
            create(&mut admin, out, &name, &password, mechanism.scram(), iterations).await
        }
        UserCommand::Delete { name, mechanism } => {
            let mut admin = Admin::connect(connect).await?;
            delete(&mut admin, out, &name, mechanism.map(Mechanism::scram)).await
        }
        UserCommand::List { names } => {
            let mut admin = Admin::connect(connect).await?;
            let users = describe(&mut admin, &names).await?;
            print_users(out, &users);
            Ok(())
        }
    }
}

/// Runs a `floe user` command on a connected client (the web console's way
/// in): the password of `create` comes in `--password` (no stdin here), and
/// what would be a usage error is an error.
///
/// # Errors
/// As [`run`], or a missing password or iteration count out of range.
pub async fn execute(admin: &mut Admin, command: UserCommand, out: Output) -> anyhow::Result<()> {
    match command {
        UserCommand::Create { name, password, mechanism, iterations, .. } => {
            if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
                anyhow::bail!(
                    "iterations {iterations}: Kafka takes {MIN_ITERATIONS} to {MAX_ITERATIONS}"
                );
            }
            let password = password
                .filter(|p| !p.is_empty())
                .ok_or_else(|| anyhow!("give the user's password"))?;
            create(admin, out, &name, &password, mechanism.scram(), iterations).await
        }
        UserCommand::Delete { name, mechanism } => {
            delete(admin, out, &name, mechanism.map(Mechanism::scram)).await
        }
        UserCommand::List { names } => {
            let users = describe(admin, &names).await?;
            print_users(out, &users);
            Ok(())
        }
    }
}

/// The password from --password (with a warning) or stdin's first line.
fn read_password(from_stdin: bool, given: Option<String>) -> anyhow::Result<String> {
    let password = if let Some(p) = given {
        eprintln!("warning: --password leaves the password in the shell history and the process list; prefer --password-stdin");
        p
    } else if from_stdin {
        if std::io::stdin().is_terminal() {
            eprintln!("password (one line):");
        }
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .context("cannot read the password from stdin")?;
        line.trim_end_matches(['\n', '\r']).to_string()
    } else {
        usage_error("give the password: `--password-stdin` (e.g. `echo \"$PW\" | floe user create NAME --password-stdin`) or `--password P`");
    };
    if password.is_empty() {
        usage_error("the password is empty (--password-stdin reads the first line of stdin)");
    }
    Ok(password)
}

async fn create(
    admin: &mut Admin,
    out: Output,
    name: &str,
    password: &str,
    mechanism: ScramMechanism,
    iterations: i32,
) -> anyhow::Result<()> {
    let mut salt = vec![0u8; SALT_BYTES];
    ring::rand::SystemRandom::new().fill(&mut salt).map_err(|_| {
        anyhow!("the system's random number generator failed; no salt to make the credential with")
    })?;
    let rounds = u32::try_from(iterations)
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or_else(|| anyhow!("--iterations {iterations} is not a positive count"))?;
    let salted = mechanism.salted_password(password.as_bytes(), &salt, rounds);
    let upsertion = ScramCredentialUpsertion::default()
        .with_name(StrBytes::from_string(name.to_string()))
        .with_mechanism(mechanism.wire_type())
        .with_iterations(iterations)
        .with_salt(Bytes::from(salt))
        .with_salted_password(Bytes::from(salted));
    let request = AlterUserScramCredentialsRequest::default().with_upsertions(vec![upsertion]);
    let response = admin.call(Target::Controller, &request).await?;
    let result = response
        .results
        .first()
        .ok_or_else(|| anyhow!("AlterUserScramCredentials answered nothing for {name}"))?;
    check(
        result.error_code,
        result.error_message.as_ref(),
        &format!("setting {}'s {} credential", name, mechanism.name()),
    )?;
    out.done(
        &json!({"user": name, "mechanism": mechanism.name(), "iterations": iterations}),
        &format!("user {name}: {} credential set ({iterations} iterations); it logs in with sasl.mechanism={}", mechanism.name(), mechanism.name()),
    );
    Ok(())
}

async fn delete(
    admin: &mut Admin,
    out: Output,
    name: &str,
    mechanism: Option<ScramMechanism>,
) -> anyhow::Result<()> {
    let mechanisms: Vec<ScramMechanism> = match mechanism {
        Some(m) => vec![m],
        None => {
            let users = describe(admin, &[name.to_string()]).await?;
            users
                .iter()
                .flat_map(|u| u["credentials"].as_array().cloned().unwrap_or_default())
                .filter_map(|c| c["mechanism"].as_str().and_then(ScramMechanism::from_name))
                .collect()
        }
    };
    if mechanisms.is_empty() {
        return Err(CliFailure::NotFound(format!(
            "user {name} has no SCRAM credential (see `floe user list`)"
        ))
        .into());
    }
    let deletions = mechanisms
        .iter()
        .map(|m| {
            ScramCredentialDeletion::default()
                .with_name(StrBytes::from_string(name.to_string()))
                .with_mechanism(m.wire_type())
        })
        .collect();
    let request = AlterUserScramCredentialsRequest::default().with_deletions(deletions);
    let response = admin.call(Target::Controller, &request).await?;
    for result in &response.results {
        check(
            result.error_code,
            result.error_message.as_ref(),
            &format!("deleting {}'s credentials", result.user.as_str()),
        )?;
    }
    let names: Vec<&str> = mechanisms.iter().map(|m| m.name()).collect();
    out.done(
        &json!({"user": name, "deleted": names}),
        &format!(
            "user {name}: deleted its {} {}",
            names.join(" and "),
            if names.len() == 1 { "credential" } else { "credentials" }
        ),
    );
    Ok(())
}

/// The users' credentials: `[{user, credentials: [{mechanism, iterations}]}]`.
async fn describe(admin: &mut Admin, names: &[String]) -> anyhow::Result<Vec<Value>> {
    let users = (!names.is_empty()).then(|| {
        names
            .iter()
            .map(|n| UserName::default().with_name(StrBytes::from_string(n.clone())))
            .collect()
    });
    let response = admin
        .call(Target::Any, &DescribeUserScramCredentialsRequest::default().with_users(users))
        .await?;
    check(response.error_code, response.error_message.as_ref(), "listing SCRAM users")?;
    let mut out = Vec::new();
    for r in &response.results {
        check(r.error_code, r.error_message.as_ref(), &format!("user {}", r.user.as_str()))
            .map_err(|e| {
                if r.error_code == kafka_protocol::error::ResponseError::ResourceNotFound.code() {
                    CliFailure::NotFound(format!("{e:#} (see `floe user list`)")).into()
                } else {
                    e
                }
            })?;
        let credentials: Vec<Value> = r
            .credential_infos
            .iter()
            .map(|c| {
                let mechanism = ScramMechanism::from_wire_type(c.mechanism)
                    .map_or_else(|| format!("UNKNOWN({})", c.mechanism), |m| m.name().to_string());
                json!({"mechanism": mechanism, "iterations": c.iterations})
            })
            .collect();
        out.push(json!({"user": r.user.as_str(), "credentials": credentials}));
    }
    out.sort_by(|a, b| a["user"].as_str().cmp(&b["user"].as_str()));
    Ok(out)
}

fn print_users(out: Output, users: &[Value]) {
    let mut table = Table::new(&["user", "mechanism", "iterations"]);
    for u in users {
        for c in u["credentials"].as_array().into_iter().flatten() {
            table.row([
                u["user"].as_str().unwrap_or(""),
                c["mechanism"].as_str().unwrap_or(""),
                &c["iterations"].to_string(),
            ]);
        }
    }
    let notes = if users.is_empty() {
        vec!["no SCRAM users (create one: floe user create NAME --password-stdin)".to_string()]
    } else {
        vec![]
    };
    out.print(&Value::Array(users.to_vec()), &table, &notes);
}
