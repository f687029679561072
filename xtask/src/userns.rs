//! `cargo xtask test-in-userns`.

/// Arguments of `cargo xtask test-in-userns`.
#[derive(clap::Args)]
pub struct UsernsArgs {}

/// Runs the suite in a user namespace.
pub fn run(_args: &UsernsArgs) -> anyhow::Result<()> {
    anyhow::bail!("test-in-userns: not written yet")
}
