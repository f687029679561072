//! Building the test binaries the guest runs.

use super::*;

pub(super) struct TestExe {
    /// The package it belongs to.
    pub(super) package: String,
    /// `package/lib`, `package/test/NAME`, ...: unique, no spaces.
    pub(super) name: String,
    /// The executable.
    pub(super) exe: PathBuf,
    /// The package's directory (cargo runs tests there).
    pub(super) dir: PathBuf,
}

/// What `cargo test --no-run` built.
pub(super) struct Built {
    /// The test executables.
    pub(super) tests: Vec<TestExe>,
    /// Other executables of the build (`[[bin]]`s, which integration tests
    /// find through `CARGO_BIN_EXE_*`).
    pub(super) bins: Vec<PathBuf>,
    /// `--measure-memory`: the daemon and the load generator.
    pub(super) measure: Option<(PathBuf, PathBuf)>,
}

/// Builds the packages' tests, statically linked, in `vm_dir`.
pub(super) fn build_tests(args: &VmArgs, packages: &[String], vm_dir: &Path) -> Result<Built> {
    let mut cargo_args = vec!["test", "--no-run"];
    for p in packages {
        cargo_args.extend(["-p", p.as_str()]);
    }
    if args.release {
        cargo_args.push("--release");
    }
    guest_build(&cargo_args, vm_dir)
}

/// `--measure-memory`: builds the daemon and the load generator
/// (`--release`, statically linked) in `vm_dir`.
pub(super) fn build_measurement(vm_dir: &Path) -> Result<Built> {
    let mut built = guest_build(
        &[
            "build",
            "--release",
            "-p",
            MEASURE_DAEMON.0,
            "--bin",
            MEASURE_DAEMON.1,
            "-p",
            MEASURE_LOAD.0,
            "--example",
            MEASURE_LOAD.1,
        ],
        vm_dir,
    )?;
    let find = |name: &str| {
        built
            .bins
            .iter()
            .find(|b| b.file_name().is_some_and(|n| n == name))
            .cloned()
            .with_context(|| format!("cargo built no executable named {name}"))
    };
    let daemon = find(MEASURE_DAEMON.1)?;
    let load = find(MEASURE_LOAD.1)?;
    println!(
        "daemon: {}
load generator: {}",
        daemon.display(),
        load.display()
    );
    built.bins.clear();
    built.measure = Some((daemon, load));
    Ok(built)
}

/// Runs `cargo CARGO_ARGS` for the guest (statically linked, `--target
/// GUEST_TARGET`, in `vm_dir`) and collects the executables it built.
pub(super) fn guest_build(cargo_args: &[&str], vm_dir: &Path) -> Result<Built> {
    let mut cmd = cargo();
    cmd.args(cargo_args)
        .arg("--message-format=json-render-diagnostics")
        .args(["--target", GUEST_TARGET])
        .arg("--target-dir")
        .arg(vm_dir)
        .current_dir(crate::workspace_root());
    // With --target, RUSTFLAGS reach only the target's crates: build scripts
    // and proc macros stay dynamically linked host code.
    let mut rustflags = std::env::var("RUSTFLAGS").unwrap_or_default();
    if !rustflags.is_empty() {
        rustflags.push(' ');
    }
    rustflags.push_str("-C target-feature=+crt-static");
    cmd.env("RUSTFLAGS", &rustflags)
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .stdout(Stdio::piped());
    let line = format!("RUSTFLAGS={} {}", sh_quote(&rustflags), display(&cmd));
    println!("$ {line}");
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start `{line}`"))?;
    let stdout = child.stdout.take().expect("piped stdout");
    let mut built = Built {
        tests: Vec::new(),
        bins: Vec::new(),
        measure: None,
    };
    for l in BufReader::new(stdout).lines() {
        let l = l.context("reading cargo's output")?;
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(&l) else {
            continue;
        };
        if let Some(artifact) = parse_artifact(&msg) {
            match artifact {
                Artifact::Test(t) => built.tests.push(t),
                Artifact::Bin(b) => built.bins.push(b),
            }
        }
    }
    let status = child.wait()?;
    if !status.success() {
        bail!("`{line}` failed ({status})");
    }
    built.tests.sort_by(|a, b| a.name.cmp(&b.name));
    built.tests.dedup_by(|a, b| a.exe == b.exe);
    built.bins.sort();
    built.bins.dedup();
    Ok(built)
}

/// An executable from one of cargo's `compiler-artifact` messages.
pub(super) enum Artifact {
    /// A test executable (profile.test).
    Test(TestExe),
    /// Another executable.
    Bin(PathBuf),
}

/// The executable a cargo JSON message announces, if any.
pub(super) fn parse_artifact(msg: &serde_json::Value) -> Option<Artifact> {
    if msg["reason"] != "compiler-artifact" {
        return None;
    }
    let exe = PathBuf::from(msg["executable"].as_str()?);
    if msg["profile"]["test"] != true {
        return Some(Artifact::Bin(exe));
    }
    let manifest = PathBuf::from(msg["manifest_path"].as_str()?);
    let dir = manifest.parent()?.to_path_buf();
    let package = msg["package_id"]
        .as_str()
        .and_then(package_name)
        .or_else(|| dir.file_name()?.to_str().map(str::to_string))?;
    let kind = msg["target"]["kind"][0].as_str().unwrap_or("unknown");
    let target = msg["target"]["name"].as_str().unwrap_or("unknown");
    let name = match kind {
        "lib" | "rlib" | "proc-macro" | "cdylib" | "dylib" | "staticlib" => {
            format!("{package}/lib")
        }
        _ => format!("{package}/{kind}/{target}"),
    };
    Some(Artifact::Test(TestExe {
        package,
        name,
        exe,
        dir,
    }))
}

/// A package's name from a cargo package ID: `path+file:///x/fuse-abi#0.1.0`
/// or `registry+https://...#serde@1.0.0` (or the old `name version (source)`).
pub(super) fn package_name(id: &str) -> Option<String> {
    if let Some((source, fragment)) = id.rsplit_once('#') {
        if let Some((name, _version)) = fragment.split_once('@') {
            return Some(name.to_string());
        }
        return source
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .map(str::to_string);
    }
    id.split_whitespace().next().map(str::to_string)
}

/// Compiles the FUSE INIT probe with `gcc -static` into `run_dir`.
pub(super) fn build_probe(run_dir: &Path) -> Result<PathBuf> {
    gcc_static(run_dir, "vm-probe", PROBE_SOURCE)
}

/// Compiles the C program `text` with `gcc -static` into `run_dir/name`
/// (its source beside it, `name.c`): the guest has no libraries.
pub(super) fn gcc_static(run_dir: &Path, name: &str, text: &str) -> Result<PathBuf> {
    let source = run_dir.join(format!("{name}.c"));
    let exe = run_dir.join(name);
    fs::write(&source, text)?;
    run_cmd(
        Command::new("gcc")
            .args(["-static", "-O2", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(&source),
    )?;
    Ok(exe)
}
