//! The `abi-check` step, and fetching packages from Debian's experimental suite.

use super::*;

/// Runs `cargo xtask abi-check` against the Linux 7.3 `fuse.h`.
///
/// Skipped (with the reason) only off Debian, where no 7.3 header can be had
/// unless `XTASK_FUSE_H` names one.
pub(super) fn step_abi_check(ctx: &mut Ctx) -> Result<Outcome> {
    let header = match kernel_7_3_fuse_h(&ctx.root) {
        Ok(header) => header,
        Err(e) if e.downcast_ref::<NotDebian>().is_some() => {
            return Ok(Outcome::Skipped(format!(
                "no Linux 7.3 fuse.h: {}",
                one_line(&e)
            )))
        }
        Err(e) => return Err(e),
    };
    run_cmd(xtask().arg("abi-check").arg(&header).current_dir(&ctx.root))?;
    Ok(Outcome::Done)
}

/// The Linux 7.3 uapi `fuse.h`: `$XTASK_FUSE_H` if set, else the copy in
/// `../shared/reference/` if there is one, else the one in Debian
/// experimental's `linux-libc-dev` (downloaded once, then cached).
pub fn kernel_7_3_fuse_h(root: &Path) -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("XTASK_FUSE_H") {
        let path = PathBuf::from(path);
        println!("header: {} (XTASK_FUSE_H)", path.display());
        if !path.is_file() {
            bail!("XTASK_FUSE_H={} is not a file", path.display());
        }
        return Ok(path);
    }
    let shared = root.join("../shared/reference/linux-7.3-rc7/fuse.h");
    if shared.is_file() {
        println!("header: {}", shared.display());
        return Ok(shared);
    }
    println!("header: {} absent, using linux-libc-dev", shared.display());
    let pkg = debian_experimental_package("linux-libc-dev", "7.3~")?;
    let header = pkg.root.join("usr/include/linux/fuse.h");
    if !header.is_file() {
        bail!(
            "linux-libc-dev {} has no usr/include/linux/fuse.h",
            pkg.version
        );
    }
    println!(
        "header: {} (linux-libc-dev {})",
        header.display(),
        pkg.version
    );
    Ok(header)
}

/// A Debian package unpacked under `target/kernel-7.3/PACKAGE/`.
pub struct UnpackedPackage {
    /// The package's version.
    pub version: String,
    /// The unpacked tree (`dpkg-deb -x`): `root/usr/...`.
    pub root: PathBuf,
    /// The `.deb` itself.
    #[allow(dead_code)] // For the VM runner, which is not written yet.
    pub deb: PathBuf,
}

/// Fetches the newest version (at least `min_version`, a Debian version
/// such as `7.3~`) of `package` from Debian's `experimental` suite and
/// unpacks it under `target/kernel-7.3/PACKAGE/`.
///
/// The result is cached: once unpacked, later calls return it without any
/// network access. Used for `linux-libc-dev` (the 7.3 `fuse.h`) and meant for
/// the kernel package the VM runner boots (`linux-binary-7.3-cloud-amd64`;
/// [`ExperimentalApt::package_names`] finds such names). Needs root (apt).
pub fn debian_experimental_package(package: &str, min_version: &str) -> Result<UnpackedPackage> {
    let dir = target_dir().join("kernel-7.3").join(package);
    let marker = dir.join("VERSION");
    if let Ok(version) = fs::read_to_string(&marker) {
        let version = version.trim().to_string();
        if let Some(deb) = find_deb(&dir) {
            println!("{package} {version}: cached in {}", dir.display());
            return Ok(UnpackedPackage {
                version,
                root: dir.join("root"),
                deb,
            });
        }
    }
    let apt = ExperimentalApt::new()?;
    let version = apt
        .newest_version(package)?
        .with_context(|| format!("{package} is not in Debian experimental"))?;
    if !dpkg_version_ge(&version, min_version)? {
        bail!("Debian experimental has {package} {version}, older than {min_version}");
    }
    println!("{package}: downloading {version} from experimental");
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let deb = apt.download(package, &version, &dir)?;
    let tmp_root = dir.join("root.partial");
    run_cmd(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&tmp_root))?;
    fs::rename(&tmp_root, dir.join("root"))?;
    fs::write(&marker, format!("{version}\n"))?;
    Ok(UnpackedPackage {
        version,
        root: dir.join("root"),
        deb,
    })
}

/// The `.deb` in a directory, if there is one.
pub(super) fn find_deb(dir: &Path) -> Option<PathBuf> {
    fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension() == Some(OsStr::new("deb")))
}

/// Whether Debian version `a` >= `b` (`dpkg --compare-versions`).
pub(super) fn dpkg_version_ge(a: &str, b: &str) -> Result<bool> {
    Ok(Command::new("dpkg")
        .args(["--compare-versions", a, "ge", b])
        .status()
        .context("running dpkg --compare-versions")?
        .success())
}

/// apt pointed at Debian's `experimental` suite alone, through a temporary
/// sources file and package lists: the system's apt state is not touched.
pub struct ExperimentalApt {
    /// Holds the sources file, the lists and apt's cache.
    dir: tempfile::TempDir,
}

impl ExperimentalApt {
    /// Writes the temporary sources file (the mirror is the one
    /// `/etc/apt/sources.list.d/debian.sources` names) and runs `apt-get update`.
    pub fn new() -> Result<Self> {
        let uri = debian_mirror()?;
        let dir = tempfile::Builder::new().prefix("xtask-apt-").tempdir()?;
        fs::create_dir_all(dir.path().join("lists/partial"))?;
        fs::create_dir_all(dir.path().join("cache/archives/partial"))?;
        fs::write(
            dir.path().join("experimental.sources"),
            format!(
                "Types: deb\nURIs: {uri}\nSuites: experimental\nComponents: main\n\
                 Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n"
            ),
        )?;
        let apt = Self { dir };
        run_cmd(apt.command("apt-get").args(["update", "-qq"]))?;
        Ok(apt)
    }

    /// An apt command (`apt-get`, `apt-cache`) using only these sources.
    fn command(&self, program: &str) -> Command {
        let d = self.dir.path().display();
        let mut cmd = Command::new(program);
        for opt in [
            "Dir::Etc::sourcelist=/dev/null".to_string(),
            format!("Dir::Etc::sourceparts={d}"),
            format!("Dir::State::Lists={d}/lists"),
            format!("Dir::Cache={d}/cache"),
            // Quiets "download is performed unsandboxed" for root-only dirs.
            "APT::Sandbox::User=root".to_string(),
        ] {
            cmd.arg("-o").arg(opt);
        }
        cmd
    }

    /// Package names in experimental that start with `prefix`
    /// (e.g. `linux-binary-7.` for the kernel packages).
    #[allow(dead_code)] // For the VM runner, which is not written yet.
    pub fn package_names(&self, prefix: &str) -> Result<Vec<String>> {
        let out = output(self.command("apt-cache").args(["pkgnames", prefix]))?;
        let mut names: Vec<String> = out.lines().map(str::to_string).collect();
        names.sort();
        Ok(names)
    }

    /// The newest version of `package` in experimental, if it is there.
    pub fn newest_version(&self, package: &str) -> Result<Option<String>> {
        let out = output(self.command("apt-cache").args(["madison", package]))?;
        let mut newest: Option<String> = None;
        // Lines: "pkg | version | uri experimental/main amd64 Packages".
        for line in out.lines() {
            let mut fields = line.split('|').map(str::trim);
            let (Some(name), Some(version)) = (fields.next(), fields.next()) else {
                continue;
            };
            if name != package {
                continue;
            }
            match &newest {
                Some(n) if !dpkg_version_ge(version, n)? => {}
                _ => newest = Some(version.to_string()),
            }
        }
        Ok(newest)
    }

    /// Downloads `package` at `version` into `dest`; returns the `.deb`.
    pub fn download(&self, package: &str, version: &str, dest: &Path) -> Result<PathBuf> {
        let scratch = self.dir.path().join("download");
        fs::create_dir_all(&scratch)?;
        run_cmd(
            self.command("apt-get")
                .args(["download", "-q", &format!("{package}={version}")])
                .current_dir(&scratch),
        )?;
        let deb = find_deb(&scratch).with_context(|| format!("apt-get download {package}"))?;
        let target = dest.join(deb.file_name().expect("a file name"));
        // The scratch dir may be on another file system than target/.
        fs::copy(&deb, &target).with_context(|| format!("copying to {}", target.display()))?;
        fs::remove_file(&deb)?;
        Ok(target)
    }
}

/// The Debian mirror this machine's apt uses.
///
/// `XTASK_DEBIAN_MIRROR` overrides it (e.g. on a machine that is not Debian,
/// where the answer is otherwise a [`NotDebian`] error).
pub(super) fn debian_mirror() -> Result<String> {
    if let Some(uri) = std::env::var_os("XTASK_DEBIAN_MIRROR") {
        return Ok(uri.to_string_lossy().into_owned());
    }
    let os = fs::read_to_string("/etc/os-release").unwrap_or_default();
    let id = os
        .lines()
        .find_map(|l| l.strip_prefix("ID="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_default();
    if id != "debian" {
        return Err(NotDebian(format!(
            "this system is not Debian (ID={id}) and XTASK_DEBIAN_MIRROR is not set"
        ))
        .into());
    }
    if let Ok(text) = fs::read_to_string("/etc/apt/sources.list.d/debian.sources") {
        if let Some(uri) = text
            .lines()
            .filter_map(|l| l.strip_prefix("URIs:"))
            .filter_map(|l| l.split_whitespace().next())
            .next()
        {
            return Ok(uri.to_string());
        }
    }
    // One-line style: "deb URI SUITE COMPONENTS", skipping the security archive.
    let text = fs::read_to_string("/etc/apt/sources.list").unwrap_or_default();
    text.lines()
        .map(str::split_whitespace)
        .filter_map(|mut f| (f.next() == Some("deb")).then(|| f.next()).flatten())
        .find(|uri| !uri.contains("security"))
        .map(str::to_string)
        .context("no Debian mirror in /etc/apt/sources.list.d/debian.sources or sources.list")
}

/// The error when Debian's archive cannot be reached because the system
/// is not Debian (so the header or package cannot be had here).
#[derive(Debug)]
pub struct NotDebian(String);

impl std::fmt::Display for NotDebian {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotDebian {}
