//! The guest kernel: Debian's Linux 7.3 image, fetched and cached.

use super::*;

pub(super) struct Kernel {
    /// Its `vmlinuz`.
    pub(super) vmlinuz: PathBuf,
    /// Package, version and where it came from, for the log and summary.
    pub(super) about: String,
}

/// The kernel series (`(7, 3)`) of a name `linux-binary-7.3-cloud-amd64`.
pub(super) fn kernel_series(package: &str) -> Option<(u32, u32)> {
    let series = package
        .strip_prefix(KERNEL_PACKAGE_PREFIX)?
        .strip_suffix(KERNEL_PACKAGE_SUFFIX)?;
    let (major, minor) = series.split_once('.')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

/// The newest-series kernel package name (>= [`MIN_SERIES`]) among `names`.
pub(super) fn newest_kernel_package<I: IntoIterator<Item = String>>(names: I) -> Option<String> {
    names
        .into_iter()
        .filter_map(|n| kernel_series(&n).map(|s| (s, n)))
        .filter(|(s, _)| *s >= MIN_SERIES)
        .max()
        .map(|(_, n)| n)
}

/// Where [`debian_experimental_package`] keeps its packages.
pub(super) fn kernel_cache_dir() -> PathBuf {
    target_dir().join("kernel-7.3")
}

/// Kernel packages already unpacked in the cache.
pub(super) fn cached_kernel_packages() -> Vec<String> {
    let Ok(entries) = fs::read_dir(kernel_cache_dir()) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| e.path().join("root").is_dir())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| kernel_series(n).is_some())
        .collect()
}

/// The kernel to boot: `--kernel`, else the newest cached 7.3+ cloud kernel,
/// else (or with `--refresh-kernel`) the newest one in Debian experimental.
pub(super) fn find_kernel(args: &VmArgs) -> Result<Kernel> {
    if let Some(path) = &args.kernel {
        if !path.is_file() {
            bail!("--kernel {}: no such file", path.display());
        }
        return Ok(Kernel {
            vmlinuz: path.clone(),
            about: "given with --kernel".into(),
        });
    }
    let cached = newest_kernel_package(cached_kernel_packages());
    let (package, how) = match cached {
        Some(package) if !args.refresh_kernel => (package, "cached"),
        _ => {
            let apt = ExperimentalApt::new()?;
            let names = apt.package_names(KERNEL_PACKAGE_PREFIX)?;
            let package = newest_kernel_package(names).with_context(|| {
                format!(
                    "Debian experimental has no {KERNEL_PACKAGE_PREFIX}X.Y{KERNEL_PACKAGE_SUFFIX} \
                     with X.Y >= {}.{}",
                    MIN_SERIES.0, MIN_SERIES.1
                )
            })?;
            println!("newest kernel package in experimental: {package}");
            if args.refresh_kernel {
                // The cache answers without asking apt: empty it so the
                // newest version is downloaded.
                let dir = kernel_cache_dir().join(&package);
                if dir.exists() {
                    println!("--refresh-kernel: removing {}", dir.display());
                    fs::remove_dir_all(&dir)
                        .with_context(|| format!("removing {}", dir.display()))?;
                }
            }
            (package, "downloaded")
        }
    };
    let unpacked = debian_experimental_package(&package, MIN_VERSION)?;
    let vmlinuz = find_vmlinuz(&unpacked.root)
        .with_context(|| format!("{package} has no usr/lib/modules/*/vmlinuz"))?;
    Ok(Kernel {
        vmlinuz,
        about: format!("{package} {}, {how}", unpacked.version),
    })
}

/// `usr/lib/modules/*/vmlinuz` (or `boot/vmlinuz-*`) in an unpacked package.
pub(super) fn find_vmlinuz(root: &Path) -> Option<PathBuf> {
    let modules = fs::read_dir(root.join("usr/lib/modules")).ok();
    let boot = fs::read_dir(root.join("boot")).ok();
    let mut found: Vec<PathBuf> = modules
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("vmlinuz"))
        .chain(
            boot.into_iter()
                .flatten()
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("vmlinuz"))
                }),
        )
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.pop()
}
