//! `cargo xtask test`.

/// Arguments of `cargo xtask test`.
#[derive(clap::Args)]
pub struct TestArgs {}

/// Runs the suite.
pub fn run(_args: &TestArgs) -> anyhow::Result<()> {
    anyhow::bail!("test: not written yet")
}
