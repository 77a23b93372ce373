//! `floe user`: not built yet.

use super::connect::ConnectArgs;
use super::output::Output;

/// `floe user ...`.
#[derive(Debug, clap::Subcommand)]
pub enum UserCommand {
    /// Lists them.
    List,
}

/// Runs a `floe user` command.
///
/// # Errors
/// What went wrong, for people.
pub async fn run(command: UserCommand, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    let _ = (command, connect, out);
    anyhow::bail!("not built yet")
}
