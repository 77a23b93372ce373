//! `floe acl`: not built yet.

use super::connect::ConnectArgs;
use super::output::Output;

/// `floe acl ...`.
#[derive(Debug, clap::Subcommand)]
pub enum AclCommand {
    /// Lists them.
    List,
}

/// Runs a `floe acl` command.
///
/// # Errors
/// What went wrong, for people.
pub async fn run(command: AclCommand, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    let _ = (command, connect, out);
    anyhow::bail!("not built yet")
}
