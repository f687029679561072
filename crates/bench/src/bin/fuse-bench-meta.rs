//! `fuse-bench-meta`: the metadata workloads of `cargo xtask bench`
//! (create, readdir, readdir-stat, stat, delete, first-list; see `bench::meta`),
//! writing fio-shaped JSON.
//!
//! ```text
//! fuse-bench-meta KIND --dir DIR --files N [--ramp SECS] [--runtime SECS] [--output FILE]
//! ```

use bench::meta::{fio_json, run, Kind, Options};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// Run one metadata workload and print fio-shaped JSON.
#[derive(Parser)]
#[command(name = "fuse-bench-meta", version, about)]
struct Args {
    /// The workload.
    #[arg(value_enum)]
    kind: Kind,
    /// The directory to work in (it holds, or gets, f.0 … f.N-1).
    #[arg(long)]
    dir: PathBuf,
    /// Number of files.
    #[arg(long, value_name = "N")]
    files: usize,
    /// Seconds run first and discarded (readdir, readdir-stat, stat).
    #[arg(long, value_name = "SECS", default_value_t = 1.0)]
    ramp: f64,
    /// Seconds measured (readdir, readdir-stat, stat).
    #[arg(long, value_name = "SECS", default_value_t = 5.0)]
    runtime: f64,
    /// Write the JSON here instead of standard output.
    #[arg(long, value_name = "FILE")]
    output: Option<PathBuf>,
}

fn secs(what: &str, s: f64) -> Result<Duration, String> {
    Duration::try_from_secs_f64(s).map_err(|_| format!("--{what} must be seconds >= 0, not {s}"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = (|| -> Result<(), String> {
        let opts = Options {
            dir: args.dir.clone(),
            files: args.files,
            ramp: secs("ramp", args.ramp)?,
            runtime: secs("runtime", args.runtime)?,
        };
        let outcome = run(args.kind, &opts).map_err(|e| e.to_string())?;
        let text =
            serde_json::to_string_pretty(&fio_json(&outcome, &opts)).map_err(|e| e.to_string())?;
        match &args.output {
            Some(path) => std::fs::write(path, text + "\n")
                .map_err(|e| format!("writing {}: {e}", path.display())),
            None => {
                println!("{text}");
                Ok(())
            }
        }
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "fuse-bench-meta: {} in {}: {e}",
                args.kind.name(),
                args.dir.display()
            );
            ExitCode::FAILURE
        }
    }
}
