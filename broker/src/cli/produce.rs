//! `floe topic produce`: not built yet.

use super::connect::ConnectArgs;
use super::output::Output;

/// `floe topic produce`.
#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    /// The topic's name.
    pub topic: String,
}

/// Runs `floe topic produce`.
///
/// # Errors
/// What went wrong, for people.
pub async fn run(args: ProduceArgs, connect: &ConnectArgs, out: Output) -> anyhow::Result<()> {
    let _ = (args, connect, out);
    anyhow::bail!("not built yet")
}
