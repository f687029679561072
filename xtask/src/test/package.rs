//! The `package` step: the crates as a project outside the workspace gets
//! them (docs/publishing.md).
//!
//! 1. `cargo package` of every published package (not `publish =
//!    false`), each unpacked from its `.crate` into
//!    `target/package-check/pkgs`; a package that ships tests, their data
//!    or build output fails the step.
//! 2. `cargo doc` of each unpacked package the way docs.rs builds it (its
//!    `[package.metadata.docs.rs]` features, `--cfg docsrs`), with
//!    `-D warnings`.
//! 3. Outside consumers (edition 2024, each its own workspace): path
//!    dependencies on the unpacked packages and a `[patch]` for the
//!    packages' registry dependencies on each other, built, mounted and
//!    read, then stopped with SIGTERM (each must unmount and exit; no mount
//!    is left behind on failure):
//!    - `readme-hello`: the README's "A minimal file system", verbatim;
//!    - `notes-uring`: `fusewire-transport-uring`'s `fuser_style` example
//!      (docs/porting-from-fuser.md), which must serve over io_uring, and
//!      `notes-dev`, the same with its one transport line switched to
//!      `/dev/fuse`;
//!    - `async-passthrough`: a directory served by the backend's async
//!      path (`async` feature) on an `async-io` io_uring runtime.
//!
//! The consumers and the docs share one target directory,
//! `target/package-check/target`, and start from the workspace's
//! `Cargo.lock`, so they build the dependencies' locked versions (and
//! need no registry look-up for them).

use super::*;

/// Where the step works, under the target directory.
const SCRATCH: &str = "package-check";

/// The README section whose code block is the first consumer's `main.rs`.
const README_SECTION: &str = "## A minimal file system";

/// The porting example's transport line, and what it becomes for
/// `/dev/fuse`.
const URING_LINE: &str =
    "let session = fuse_transport_uring::UringSession::mount(server, mnt, &options, config)?;";
/// See [`URING_LINE`].
const DEV_LINE: &str =
    "let session = fuse_transport_dev::DevSession::mount(server, mnt, &options, config)?;";

/// The async consumer's `main.rs`: the passthrough's `AsyncFileSystem`
/// served by a `FuseDevTask` on an `async-io` io_uring runtime, stopped
/// on SIGTERM from the main thread.
const ASYNC_MAIN: &str = r#"//! A directory served through the passthrough's async path on an
//! `async-io` io_uring runtime, until SIGTERM or an unmount.
use async_io::RuntimeType;
use fuse_backend_passthrough::{PassthroughConfig, PassthroughFs};
use fuse_server::{Server, Session};
use fuse_transport_dev::{FuseDevTask, MountOptions, TaskConfig};
use std::path::PathBuf;
use std::sync::{mpsc, Arc};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args_os().skip(1);
    let (Some(source), Some(mountpoint)) = (args.next(), args.next()) else {
        return Err("usage: async-passthrough SOURCE MOUNTPOINT".into());
    };
    let mountpoint = PathBuf::from(mountpoint);
    let fs = Arc::new(PassthroughFs::new(&source, PassthroughConfig::default())?);
    let server = Server::new_async(fs);
    // The task is made and run on the runtime's thread; this thread waits
    // for it and stops it on a signal.
    let (tx, rx) = mpsc::channel();
    let serving = std::thread::spawn(move || -> std::io::Result<()> {
        let runtime = RuntimeType::IoUring.build().map_err(std::io::Error::other)?;
        runtime.block_on(async move {
            let options = MountOptions::default().fsname("async-passthrough");
            let config = TaskConfig::default().runtime_name("uring");
            match FuseDevTask::mount(server, &mountpoint, &options, config) {
                Ok(task) => {
                    let task = Arc::new(task);
                    let _ = tx.send(Ok(task.clone()));
                    task.run_shared().await
                }
                Err(e) => {
                    let _ = tx.send(Err(e.to_string()));
                    Ok(())
                }
            }
        })
    });
    let task = match rx.recv() {
        Ok(mounted) => mounted?,
        // The thread ended before mounting: its runtime could not start.
        Err(_) => {
            serving.join().map_err(|_| "the serving thread panicked")??;
            return Err("the serving thread ended before mounting".into());
        }
    };
    println!("serving {} over {}", task.mountpoint().display(), task.transport());
    fuse_transport_dev::serve_until_signal(&*task)?;
    serving.join().map_err(|_| "the serving thread panicked")??;
    Ok(())
}
"#;

/// A published package of the workspace, as `cargo metadata` describes it.
struct Published {
    /// The package name (`fusewire-server`).
    name: String,
    /// Its version.
    version: String,
    /// The dependency key users write, the library's name with dashes
    /// (`fuse-server`), so that `use fuse_server::...` works.
    key: String,
    /// The features docs.rs builds it with.
    doc_features: Vec<String>,
    /// Published packages it depends on (normal, non-optional).
    deps: Vec<String>,
}

impl Published {
    /// The unpacked package's folder name (`fusewire-server-0.1.0`).
    fn dir_name(&self) -> String {
        format!("{}-{}", self.name, self.version)
    }
}

/// One outside consumer crate.
struct Consumer {
    /// Its folder, package and binary name.
    name: &'static str,
    /// Direct dependencies on our packages: package name and features.
    deps: &'static [(&'static str, &'static [&'static str])],
    /// Other dependencies, as `[dependencies]` lines.
    others: &'static str,
    /// Its `main.rs`.
    main: String,
}

/// Packages, unpacks and checks the published crates, then builds and runs
/// the outside consumers.
pub(super) fn step_package(ctx: &mut Ctx) -> Result<Outcome> {
    if !is_root() {
        bail!("the consumers mount FUSE file systems with mount(2): this step needs root");
    }
    // --no-verify: cargo's own verification would build every package
    // again against a temporary registry; the docs and consumers below
    // build them from the unpacked packages, which checks more.
    // --allow-dirty: what is checked is the packages' contents, which a
    // local run with uncommitted edits should check too (CI's clone is
    // clean either way). Only the published packages: one that is not
    // (xtask) may depend on another that is not (test-support), which
    // cargo can't resolve for a package.
    let published = published_packages(&ctx.root)?;
    let mut package = cargo();
    package.args(["package", "--no-verify", "--allow-dirty"]);
    for p in &published {
        package.args(["-p", &p.name]);
    }
    run_cmd(package.current_dir(&ctx.root))?;
    let scratch = target_dir().join(SCRATCH);
    let pkgs = scratch.join("pkgs");
    if pkgs.exists() {
        fs::remove_dir_all(&pkgs).with_context(|| format!("removing {}", pkgs.display()))?;
    }
    fs::create_dir_all(&pkgs)?;
    let lock = fs::read_to_string(ctx.root.join("Cargo.lock")).context("reading Cargo.lock")?;
    for p in &published {
        let krate = target_dir()
            .join("package")
            .join(format!("{}.crate", p.dir_name()));
        run_cmd(
            Command::new("tar")
                .arg("-xzf")
                .arg(&krate)
                .arg("-C")
                .arg(&pkgs),
        )?;
        check_contents(&pkgs.join(p.dir_name()))?;
    }
    let names: Vec<_> = published.iter().map(|p| p.name.as_str()).collect();
    println!("unpacked: {}", names.join(", "));

    docs_rs(&scratch, &pkgs, &published, &lock)?;

    let consumers = consumers(&ctx.root, &pkgs, &published)?;
    for c in &consumers {
        write_consumer(&scratch, &published, c, &lock)?;
    }
    // One build after another into the shared target directory: the
    // dependencies are compiled once.
    let target = scratch.join("target");
    for c in &consumers {
        run_cmd(
            cargo()
                .arg("build")
                .arg("--manifest-path")
                .arg(scratch.join("consumers").join(c.name).join("Cargo.toml"))
                .env("CARGO_TARGET_DIR", &target),
        )?;
    }
    let bin = |name: &str| target.join("debug").join(name);
    let logs = scratch.join("logs");
    fs::create_dir_all(&logs)?;

    let work = tempfile::Builder::new()
        .prefix("xtask-package-")
        .tempdir()?;
    let mnt = work.path().join("mnt");
    fs::create_dir(&mnt)?;

    // The README's file system: hello.txt, read-only.
    let mount = DaemonMount::start(
        "readme-hello",
        Command::new(bin("readme-hello")),
        &mnt,
        &logs,
    )?;
    expect_file(&mnt.join("hello.txt"), b"Hello, world!\n")?;
    mount.stop()?;

    // The porting example over io_uring, then switched to /dev/fuse.
    for (name, transport) in [("notes-uring", "io_uring"), ("notes-dev", "/dev/fuse")] {
        let mount = DaemonMount::start(name, Command::new(bin(name)), &mnt, &logs)?;
        let serving = serving_line(&logs.join(format!("{name}.log")))?;
        if !serving.contains(&format!(" over {transport}")) {
            bail!(
                "{name} should serve over {transport}, but says `{serving}`{}",
                if transport == "io_uring" {
                    " (FUSE over io_uring needs `Y` in \
                     /sys/module/fuse/parameters/enable_uring: the setup step writes it)"
                } else {
                    ""
                }
            );
        }
        println!("{name}: {serving}");
        expect_file(
            &mnt.join("hello.txt"),
            b"Hello from a fuser-style file system!\n",
        )?;
        let new = mnt.join("new.txt");
        fs::write(&new, b"written through FUSE\n")?;
        expect_file(&new, b"written through FUSE\n")?;
        fs::remove_file(&new)?;
        mount.stop()?;
    }

    // The passthrough's async path over a directory of ours.
    let source = work.path().join("source");
    fs::create_dir(&source)?;
    fs::write(source.join("hello.txt"), b"Hello through async-io!\n")?;
    let mut cmd = Command::new(bin("async-passthrough"));
    cmd.arg(&source);
    let mount = DaemonMount::start("async-passthrough", cmd, &mnt, &logs)?;
    expect_file(&mnt.join("hello.txt"), b"Hello through async-io!\n")?;
    fs::write(mnt.join("new.txt"), b"written through FUSE\n")?;
    expect_file(&source.join("new.txt"), b"written through FUSE\n")?;
    mount.stop()?;
    Ok(Outcome::Done)
}

/// The workspace's published packages (`publish` not `false`), in
/// `cargo metadata`'s order.
fn published_packages(root: &Path) -> Result<Vec<Published>> {
    let text = output(
        cargo()
            .args(["metadata", "--no-deps", "--format-version", "1"])
            .current_dir(root),
    )?;
    let meta: serde_json::Value = serde_json::from_str(&text).context("cargo metadata")?;
    let packages = meta["packages"].as_array().context("no packages")?;
    let published: Vec<&serde_json::Value> = packages
        .iter()
        // `publish` is null when allowed anywhere, `[]` for `publish = false`.
        .filter(|p| p["publish"].as_array().is_none_or(|a| !a.is_empty()))
        .collect();
    let names: Vec<&str> = published
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    let mut out = Vec::new();
    for p in &published {
        let name = p["name"].as_str().context("package without a name")?;
        let lib = p["targets"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["kind"][0] == "lib"))
            .and_then(|t| t["name"].as_str())
            .with_context(|| format!("{name} has no library"))?;
        let doc_features = p["metadata"]["docs"]["rs"]["features"]
            .as_array()
            .map(|f| {
                f.iter()
                    .filter_map(|f| Some(f.as_str()?.to_string()))
                    .collect()
            })
            .unwrap_or_default();
        let deps = p["dependencies"]
            .as_array()
            .map(|d| {
                d.iter()
                    .filter(|d| d["kind"].is_null() && d["optional"] != true)
                    .filter_map(|d| d["name"].as_str())
                    .filter(|n| names.contains(n))
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        out.push(Published {
            name: name.to_string(),
            version: p["version"].as_str().context("no version")?.to_string(),
            key: lib.replace('_', "-"),
            doc_features,
            deps,
        });
    }
    Ok(out)
}

/// Fails if an unpacked package holds tests, test data or build output.
fn check_contents(dir: &Path) -> Result<()> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d)? {
            let path = entry?.path();
            let rel = path.strip_prefix(dir).unwrap_or(&path);
            let top = rel.components().next().map(|c| c.as_os_str());
            let shipped_by_mistake = matches!(
                top.and_then(OsStr::to_str),
                Some("tests" | "target" | "benches" | "fuzz")
            ) || path
                .extension()
                .is_some_and(|e| e == "proptest-regressions");
            if shipped_by_mistake {
                bail!(
                    "{} ships {}: tests, their data and build output stay out of packages \
                     (`include` in its Cargo.toml)",
                    dir.display(),
                    rel.display()
                );
            }
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    Ok(())
}

/// `[patch.crates-io]` lines pointing `names` at the unpacked packages.
fn patch_section(pkgs_rel: &str, published: &[Published], names: &[&str]) -> String {
    let mut s = String::from(
        "# The packages' dependencies on each other name the registry, where they\n\
         # are not (yet): point them at the unpacked packages.\n\
         [patch.crates-io]\n",
    );
    for p in published
        .iter()
        .filter(|p| names.contains(&p.name.as_str()))
    {
        let _ = writeln!(
            s,
            "{} = {{ path = \"{pkgs_rel}/{}\" }}",
            p.name,
            p.dir_name()
        );
    }
    s
}

/// `cargo doc` of every unpacked package as docs.rs builds it (its
/// docs.rs features, `--cfg docsrs`) with `-D warnings`, in a workspace of
/// the unpacked packages (so `--features` can name each one's).
fn docs_rs(scratch: &Path, pkgs: &Path, published: &[Published], lock: &str) -> Result<()> {
    let members: Vec<String> = published
        .iter()
        .map(|p| format!("\"{}\"", p.dir_name()))
        .collect();
    let names: Vec<&str> = published.iter().map(|p| p.name.as_str()).collect();
    let manifest = format!(
        "# Written by `cargo xtask test` (step package): the unpacked packages.\n\
         [workspace]\nresolver = \"2\"\nmembers = [{}]\n\n{}",
        members.join(", "),
        patch_section(".", published, &names)
    );
    fs::write(pkgs.join("Cargo.toml"), manifest)?;
    fs::write(pkgs.join("Cargo.lock"), lock)?;
    // One invocation for all, so the dependencies are compiled once. Each
    // package gets its docs.rs features; the union adds none to any, as
    // every feature one package turns on in another (passthroughfs's) is
    // among that one's docs.rs features.
    let features: Vec<String> = published
        .iter()
        .flat_map(|p| {
            p.doc_features
                .iter()
                .map(move |f| format!("{}/{f}", p.name))
        })
        .collect();
    let mut cmd = cargo();
    cmd.args(["doc", "--no-deps", "--workspace"])
        .current_dir(pkgs)
        .env("CARGO_TARGET_DIR", scratch.join("target"))
        .env("RUSTDOCFLAGS", "--cfg docsrs -D warnings");
    if !features.is_empty() {
        cmd.arg("--features").arg(features.join(","));
    }
    run_cmd(&mut cmd)
}

/// The consumers: the README's file system, the porting example over
/// io_uring and over `/dev/fuse`, and the async passthrough.
fn consumers(root: &Path, pkgs: &Path, published: &[Published]) -> Result<Vec<Consumer>> {
    let readme = fs::read_to_string(root.join("README.md")).context("reading README.md")?;
    let uring = published
        .iter()
        .find(|p| p.key == "fuse-transport-uring")
        .context("fuse-transport-uring is not published")?;
    let example = pkgs.join(uring.dir_name()).join("examples/fuser_style.rs");
    let notes = fs::read_to_string(&example)
        .with_context(|| format!("reading {} from the package", example.display()))?;
    if notes.matches(URING_LINE).count() != 1 {
        bail!(
            "{} should hold the line `{URING_LINE}` once (its transport switch)",
            example.display()
        );
    }
    let notes_dev = notes.replace(URING_LINE, DEV_LINE);
    // The porting example, as it is (io_uring) and switched to /dev/fuse.
    let porting = |name: &'static str, main: String| Consumer {
        name,
        deps: &[
            ("fusewire-server", &[]),
            ("fusewire-transport-dev", &[]),
            ("fusewire-transport-uring", &[]),
        ],
        others: "libc = \"0.2\"\n",
        main,
    };
    Ok(vec![
        Consumer {
            name: "readme-hello",
            deps: &[("fusewire-server", &[]), ("fusewire-transport-dev", &[])],
            others: "",
            main: readme_code(&readme)?,
        },
        porting("notes-uring", notes),
        porting("notes-dev", notes_dev),
        Consumer {
            name: "async-passthrough",
            deps: &[
                ("fusewire-server", &[]),
                ("fusewire-transport-dev", &["tokio"]),
                ("fusewire-async-io", &[]),
                ("fusewire-backend-passthrough", &["async"]),
            ],
            others: "",
            main: ASYNC_MAIN.to_string(),
        },
    ])
}

/// The code block of the README's [`README_SECTION`].
fn readme_code(readme: &str) -> Result<String> {
    let section = readme
        .split_once(README_SECTION)
        .with_context(|| format!("README.md has no `{README_SECTION}` section"))?
        .1;
    let fence = section
        .find("```rust")
        .with_context(|| format!("no ```rust block under `{README_SECTION}`"))?;
    let body = section[fence..]
        .split_once('\n')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let end = body
        .find("\n```")
        .with_context(|| format!("the code block under `{README_SECTION}` does not end"))?;
    Ok(format!("{}\n", &body[..end]))
}

/// Writes a consumer's `Cargo.toml` (path dependencies, the `[patch]` for
/// the packages it reaches), its `main.rs` and the workspace's lock file.
fn write_consumer(scratch: &Path, published: &[Published], c: &Consumer, lock: &str) -> Result<()> {
    let dir = scratch.join("consumers").join(c.name);
    fs::create_dir_all(dir.join("src"))?;
    let rel = "../../pkgs";
    let mut deps = String::new();
    let mut reached: Vec<&str> = Vec::new();
    for (name, features) in c.deps {
        let features = if features.is_empty() {
            String::new()
        } else {
            let quoted: Vec<_> = features.iter().map(|f| format!("\"{f}\"")).collect();
            format!(", features = [{}]", quoted.join(", "))
        };
        let p = published
            .iter()
            .find(|p| p.name == *name)
            .with_context(|| format!("{name} is not a published package of the workspace"))?;
        let _ = writeln!(
            deps,
            "{} = {{ package = \"{}\", path = \"{rel}/{}\"{features} }}",
            p.key,
            p.name,
            p.dir_name()
        );
        reach(published, &p.name, &mut reached);
    }
    deps.push_str(c.others);
    let manifest = format!(
        "# Written by `cargo xtask test` (step package): a crate outside the\n\
         # workspace that uses the packages alone.\n\
         [package]\nname = \"{}\"\nversion = \"0.0.0\"\nedition = \"2024\"\npublish = false\n\n\
         [dependencies]\n{deps}\n{}\n# A workspace of its own.\n[workspace]\n",
        c.name,
        patch_section(rel, published, &reached)
    );
    fs::write(dir.join("Cargo.toml"), manifest)?;
    fs::write(dir.join("src/main.rs"), &c.main)?;
    fs::write(dir.join("Cargo.lock"), lock)?;
    Ok(())
}

/// Adds `name` and the published packages it depends on to `reached`.
fn reach<'a>(published: &'a [Published], name: &str, reached: &mut Vec<&'a str>) {
    let Some(p) = published.iter().find(|p| p.name == name) else {
        return;
    };
    if reached.contains(&p.name.as_str()) {
        return;
    }
    reached.push(&p.name);
    for d in &p.deps {
        reach(published, d, reached);
    }
}

/// The first `serving ... over ...` line of a daemon's log. The daemon
/// prints it once its mount call returned, which may be a moment after
/// the mount shows: wait for it up to [`DAEMON_TIMEOUT`].
fn serving_line(log: &Path) -> Result<String> {
    let deadline = Instant::now() + DAEMON_TIMEOUT;
    loop {
        let text = crate::text::read_text(log)?;
        if let Some(line) = text.lines().find(|l| l.starts_with("serving ")) {
            return Ok(line.to_string());
        }
        if Instant::now() >= deadline {
            bail!(
                "{} has no `serving ... over ...` line {} s after the mount",
                log.display(),
                DAEMON_TIMEOUT.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Fails unless `path` holds exactly `want`.
fn expect_file(path: &Path, want: &[u8]) -> Result<()> {
    let got = fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if got != want {
        bail!(
            "{} holds {:?}, not {:?}",
            path.display(),
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(want)
        );
    }
    println!("{}: {:?}", path.display(), String::from_utf8_lossy(&got));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readme_code_is_the_sections_block() {
        let readme = "# x\n```rust\nnot this\n```\n## A minimal file system\n\ntext\n\n\
                      ```rust,no_run\nfn main() {}\n```\n## Next\n```rust\nnor this\n```\n";
        assert_eq!(readme_code(readme).unwrap(), "fn main() {}\n");
        assert!(readme_code("# no such section\n").is_err());
    }

    #[test]
    fn the_workspace_readme_has_the_consumers_code() {
        let readme = fs::read_to_string(crate::workspace_root().join("README.md")).unwrap();
        assert!(readme_code(&readme).unwrap().contains("fn main()"));
    }

    #[test]
    fn the_porting_example_has_its_transport_line_once() {
        let example = fs::read_to_string(
            crate::workspace_root().join("crates/fuse-transport-uring/examples/fuser_style.rs"),
        )
        .unwrap();
        assert_eq!(example.matches(URING_LINE).count(), 1);
        // The comment shows the /dev/fuse line as users will write it.
        assert!(example.contains(DEV_LINE));
    }
}
