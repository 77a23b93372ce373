//! `floe group`: not built yet.

use super::connect::ConnectArgs;
use super::output::Output;

/// `floe group ...`.
#[derive(Debug, clap::Subcommand)]
pub enum GroupCommand {
    /// Lists them.
    List,
}

/// Runs a `floe group` command.
///
/// # Errors
/// What went wrong, for people.
pub async fn run(command: GroupCommand, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    let _ = (command, connect, out);
    anyhow::bail!("not built yet")
}
