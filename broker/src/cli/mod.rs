//! The admin commands of the `floe` binary (`floe topic`, `floe group`,
//! `floe cluster`, `floe acl`, `floe user`): Kafka's shell tools in one
//! binary, speaking only the Kafka protocol, so they work against any Kafka
//! cluster as well as Floe.
//!
//! These modules belong to the binary, not the library: they are the edge
//! where errors become messages and exit codes ([`admin::exit_code`]).
//! Each command group lives in its own file; [`admin`] connects and routes,
//! [`output`] prints tables, JSON or YAML.

pub mod acl;
pub mod admin;
pub mod avro_json;
pub mod cluster;
pub mod connect;
pub mod consume;
pub mod group;
pub mod iceberg;
pub mod offsets;
pub mod output;
pub mod partitioner;
pub mod produce;
pub mod records;
pub mod topic;
pub mod user;

use connect::ConnectArgs;
use output::Output;

/// Options of every admin command group: where to connect and how to print.
#[derive(Debug, Clone, clap::Args)]
pub struct Common {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Output format: aligned `table` for people, `json` or `yaml` for scripts.
    // One type with `topic consume`'s own --format (which also takes a
    // template such as '%k %v'): clap hands a global's value between levels by id.
    #[arg(long, short = 'f', global = true, default_value = "table", value_name = "FORMAT", value_parser = consume::parse_output_format)]
    pub format: consume::PrintFormat,
}

/// The admin command groups, flattened into `floe`'s subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum AdminCommand {
    /// Create, list, describe, change, trim and delete topics; produce and consume.
    #[command(after_help = "Examples:
  floe topic create orders --partitions 6 -c retention.ms=604800000
  floe topic list --format json
  printf 'k1:v1\\nk2:v2\\n' | floe topic produce orders -K:
  floe topic consume orders --offset beginning --num 10 --format '%p %o %k %v'
  floe topic describe orders --brokers kafka-1:9092,kafka-2:9092")]
    Topic {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        command: topic::TopicCommand,
    },
    /// Consumer groups: list, describe with lag per partition, seek, delete.
    #[command(after_help = "Examples:
  floe group list --state Stable
  floe group describe billing --format json      # per-partition `lag`
  floe group seek billing --to earliest --topic orders --dry-run
  floe group delete old-billing")]
    Group {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        command: group::GroupCommand,
    },
    /// The cluster: its brokers, controller and health.
    #[command(after_help = "Examples:
  floe cluster info
  floe cluster health || echo 'under-replicated or offline partitions'")]
    Cluster {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        command: cluster::ClusterCommand,
    },
    /// Access control lists (when the broker has an authorizer).
    #[command(after_help = "Examples:
  floe acl create --allow-principal User:alice --operation Read --topic orders --profile admin.properties
  floe acl list --topic orders
  floe acl delete --allow-principal User:alice --operation Read --topic orders")]
    Acl {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        command: acl::AclCommand,
    },
    /// SCRAM users (SASL/SCRAM-SHA-256 and -512 credentials).
    #[command(after_help = "Examples:
  echo \"$ALICE_PASSWORD\" | floe user create alice --password-stdin --mechanism SCRAM-SHA-512
  floe user list
  floe user delete alice")]
    User {
        #[command(flatten)]
        common: Common,
        #[command(subcommand)]
        command: user::UserCommand,
    },
}

/// Runs an admin command on a single-threaded runtime; returns the process exit code.
pub fn run(command: AdminCommand) -> u8 {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            return 1;
        }
    };
    let result = runtime.block_on(async move {
        match command {
            AdminCommand::Topic { common, command } => {
                topic::run(command, &common.connect, Output { format: common.format.output() })
                    .await
            }
            AdminCommand::Group { common, command } => {
                group::run(command, &common.connect, Output { format: common.format.output() })
                    .await
            }
            AdminCommand::Cluster { common, command } => {
                cluster::run(command, &common.connect, Output { format: common.format.output() })
                    .await
            }
            AdminCommand::Acl { common, command } => {
                acl::run(command, &common.connect, Output { format: common.format.output() }).await
            }
            AdminCommand::User { common, command } => {
                user::run(command, &common.connect, Output { format: common.format.output() }).await
            }
        }
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("error: {e:#}");
            admin::exit_code(&e)
        }
    }
}
