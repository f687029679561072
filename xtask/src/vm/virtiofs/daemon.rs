//! The daemons on the host: ours (`passthroughfs --vhost-user`, built
//! here) and virtiofsd (the benchmark's peer), their command lines, and
//! starting one until it listens. Apart from the boots, which only take
//! the sockets these leave.

use super::*;

/// The daemon, killed when dropped.
pub(super) struct Daemon(pub(super) Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// The virtiofsd version the benchmark compares with.
const VIRTIOFSD_VERSION: &str = "^1.14";

/// virtiofsd on `socket`, serving `shared` with `--cache cache`, honouring
/// the guest's O_DIRECT (virtiofsd drops it by default) and confining
/// nothing, as our daemon.
pub(super) fn virtiofsd_command(
    virtiofsd: &Path,
    socket: &Path,
    shared: &Path,
    cache: &str,
) -> Command {
    let mut cmd = Command::new(virtiofsd);
    cmd.arg("--socket-path")
        .arg(socket)
        .arg("--shared-dir")
        .arg(shared)
        .args(["--sandbox", "none", "--allow-direct-io", "--cache", cache]);
    cmd
}

/// `--virtiofsd`, else one under `target/tools` (installed there with
/// `cargo install` if missing: it needs libseccomp-dev and libcap-ng-dev).
pub(super) fn find_virtiofsd(args: &VmArgs) -> Result<PathBuf> {
    if let Some(p) = &args.virtiofsd {
        return Ok(p.clone());
    }
    let root = target_dir().join("tools");
    let exe = root.join("bin/virtiofsd");
    if exe.is_file() {
        return Ok(exe);
    }
    ensure_apt_packages(&["libseccomp-dev", "libcap-ng-dev", "pkg-config"])?;
    let mut cmd = cargo();
    cmd.args(["install", "--locked", "--root"])
        .arg(&root)
        .args(["virtiofsd", "--version", VIRTIOFSD_VERSION]);
    run_cmd(&mut cmd)?;
    Ok(exe)
}

/// `cargo build -p fusewire-passthroughfs` for the host; the executable.
pub(super) fn build_daemon(release: bool) -> Result<PathBuf> {
    let mut cmd = cargo();
    cmd.args([
        "build",
        "-p",
        "fusewire-passthroughfs",
        "--bin",
        "passthroughfs",
    ])
    .current_dir(crate::workspace_root());
    if release {
        cmd.arg("--release");
    }
    run_cmd(&mut cmd)?;
    let exe = target_dir()
        .join(if release { "release" } else { "debug" })
        .join("passthroughfs");
    if !exe.is_file() {
        bail!("cargo built no {}", exe.display());
    }
    Ok(exe)
}

pub(super) use crate::UNCONFINED;

/// `passthroughfs --vhost-user` on `socket`, serving `shared`, with
/// `--daemon-arg`s, logging at `rust_log`.
pub(super) fn our_daemon(
    args: &VmArgs,
    exe: &Path,
    socket: &Path,
    shared: &Path,
    rust_log: &str,
) -> Command {
    let mut cmd = Command::new(exe);
    cmd.arg("-f")
        .arg("--vhost-user")
        .arg(socket)
        .args(["--tag", TAG])
        .args(&args.daemon_arg)
        .arg(shared)
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| rust_log.into()),
        );
    cmd
}

/// Starts the daemon `cmd` (its output to `log`) and waits for it to
/// listen on `socket`.
pub(super) fn start_daemon(mut cmd: Command, socket: &Path, log: &Path) -> Result<Daemon> {
    let _ = fs::remove_file(socket);
    let log_file = fs::File::create(log)?;
    cmd.stdin(Stdio::null())
        .stdout(log_file.try_clone()?)
        .stderr(log_file);
    let line = display(&cmd);
    println!("$ {line} (log: {})", log.display());
    let mut daemon = Daemon(cmd.spawn().with_context(|| format!("starting `{line}`"))?);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !socket.exists() {
        if let Some(status) = daemon.0.try_wait()? {
            bail!(
                "`{line}` exited ({status}) before listening; its log:\n{}",
                fs::read_to_string(log).unwrap_or_default()
            );
        }
        if Instant::now() > deadline {
            bail!("`{line}` didn't listen on {} in 30 s", socket.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(daemon)
}
