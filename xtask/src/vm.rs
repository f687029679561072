//! `cargo xtask test-in-vm`.

/// Arguments of `cargo xtask test-in-vm`.
#[derive(clap::Args)]
pub struct VmArgs {}

/// Boots the 7.3 kernel and runs the tests that need it.
pub fn run(_args: &VmArgs) -> anyhow::Result<()> {
    anyhow::bail!("test-in-vm: not written yet")
}
