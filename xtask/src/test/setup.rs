//! The `setup` step: apt packages, pjdfstest, FUSE over io_uring, fusectl.

use super::*;

/// Debian packages the suite and its later steps (VM, benchmarks) use.
pub(super) const APT_PACKAGES: &[&str] = &[
    "fuse3",
    "libfuse3-dev",
    "pkg-config",
    "fio",
    "strace",
    "uidmap",
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    // passthroughfs's man test reads the page with `man -l`.
    "man-db",
];

/// The pjdfstest release the configuration in `xtask/pjdfstest.toml` is for.
pub(super) const PJDFSTEST_VERSION: &str = "0.2.2";

/// The kernel switch for FUSE over io_uring (6.14 and later).
pub(super) const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Where the fuse control file system is mounted.
pub(super) const FUSECTL_DIR: &str = "/sys/fs/fuse/connections";

/// Makes the machine ready; idempotent and quick when nothing is missing.
pub(super) fn step_setup(_ctx: &mut Ctx) -> Result<Outcome> {
    if !is_root() {
        bail!(
            "the suite needs root (it installs packages, mounts FUSE file systems and \
             switches users); without root, run `cargo xtask test-in-userns`"
        );
    }
    ensure_apt_packages(APT_PACKAGES)?;
    ensure_pjdfstest()?;
    enable_fuse_uring()?;
    mount_fusectl();
    Ok(Outcome::Done)
}

/// Whether `dpkg -s` reports a package as installed.
pub(super) fn dpkg_installed(package: &str) -> bool {
    Command::new("dpkg")
        .args(["-s", package])
        .stderr(Stdio::null())
        .output()
        .is_ok_and(|o| {
            o.status.success()
                && String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .any(|l| l.trim() == "Status: install ok installed")
        })
}

/// Installs the packages `dpkg -s` does not know as installed; runs
/// `apt-get update` (and retries) only if the first install fails.
pub fn ensure_apt_packages(packages: &[&str]) -> Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        println!("apt packages: all present ({})", packages.join(" "));
        return Ok(());
    }
    println!("apt packages missing: {}", missing.join(" "));
    let install = || {
        run_cmd(
            Command::new("apt-get")
                .args(["install", "-y", "--no-install-recommends"])
                .args(&missing)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    if install().is_err() {
        println!("install failed; refreshing the package lists and trying again");
        run_cmd(
            Command::new("apt-get")
                .args(["update", "-q"])
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )?;
        install()?;
    }
    Ok(())
}

/// Finds pjdfstest (PATH or `~/.cargo/bin`) and checks its version.
pub(crate) fn pjdfstest_binary() -> Option<(PathBuf, String)> {
    let path = find_program("pjdfstest")?;
    let version = Command::new(&path)
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    Some((path, version))
}

/// Installs pjdfstest with `cargo install` unless the right version is there.
pub(crate) fn ensure_pjdfstest() -> Result<()> {
    match pjdfstest_binary() {
        Some((path, version)) if version.ends_with(PJDFSTEST_VERSION) => {
            println!("pjdfstest: {} ({version})", path.display());
            return Ok(());
        }
        Some((path, version)) => println!(
            "pjdfstest: {} is `{version}`, not {PJDFSTEST_VERSION}: installing that",
            path.display()
        ),
        None => println!("pjdfstest: not found, installing {PJDFSTEST_VERSION}"),
    }
    run_cmd(cargo().args([
        "install",
        "pjdfstest",
        "--version",
        PJDFSTEST_VERSION,
        "--locked",
    ]))
}

/// Turns FUSE over io_uring on, where the kernel has the switch.
pub(crate) fn enable_fuse_uring() -> Result<()> {
    let path = Path::new(ENABLE_URING);
    if !path.exists() {
        println!("{ENABLE_URING}: absent (kernel without FUSE over io_uring); left alone");
        return Ok(());
    }
    let before = fs::read_to_string(path).with_context(|| format!("reading {ENABLE_URING}"))?;
    let before = before.trim();
    if before == "Y" {
        println!("{ENABLE_URING}: already Y");
        return Ok(());
    }
    fs::write(path, "Y").with_context(|| format!("writing Y to {ENABLE_URING}"))?;
    let after = fs::read_to_string(path).with_context(|| format!("reading {ENABLE_URING}"))?;
    println!("{ENABLE_URING}: was {before}, now {}", after.trim());
    if after.trim() != "Y" {
        bail!("{ENABLE_URING} is still {} after writing Y", after.trim());
    }
    Ok(())
}

/// Mounts fusectl if it is not mounted; a failure is only noted.
pub(crate) fn mount_fusectl() {
    if mounts().iter().any(|m| m.fstype == "fusectl") {
        println!("fusectl: mounted on {FUSECTL_DIR}");
        return;
    }
    match run_cmd(Command::new("mount").args(["-t", "fusectl", "none", FUSECTL_DIR])) {
        Ok(()) => println!("fusectl: mounted on {FUSECTL_DIR}"),
        Err(e) => println!(
            "note: cannot mount fusectl ({}); tests that need {FUSECTL_DIR} will say so",
            one_line(&e)
        ),
    }
}
