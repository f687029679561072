//! `cargo xtask bench`.

/// Arguments of `cargo xtask bench`.
#[derive(clap::Args)]
pub struct BenchArgs {}

/// Runs the benchmark matrix.
pub fn run(_args: &BenchArgs) -> anyhow::Result<()> {
    anyhow::bail!("bench: not written yet")
}
