//! `floe cluster`: not built yet.

use super::connect::ConnectArgs;
use super::output::Output;

/// `floe cluster ...`.
#[derive(Debug, clap::Subcommand)]
pub enum ClusterCommand {
    /// Lists them.
    List,
}

/// Runs a `floe cluster` command.
///
/// # Errors
/// What went wrong, for people.
pub async fn run(command: ClusterCommand, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    let _ = (command, connect, out);
    anyhow::bail!("not built yet")
}
