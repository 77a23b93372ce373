//! `floe topic consume`: not built yet.

use super::connect::ConnectArgs;
use super::output::Output;

/// `floe topic consume`.
#[derive(Debug, clap::Args)]
pub struct ConsumeArgs {
    /// The topic's name.
    pub topic: String,
}

/// Runs `floe topic consume`.
///
/// # Errors
/// What went wrong, for people.
pub async fn run(args: ConsumeArgs, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    let _ = (args, connect, out);
    anyhow::bail!("not built yet")
}
