//! Writes the man page `passthroughfs.1`, generated with `clap_mangen` from
//! the daemon's command-line definition (`passthroughfs::cli::Args`), so
//! that `--help` and the page can't disagree. `cargo xtask man` runs it:
//!
//! ```sh
//! cargo run -p fusewire-passthroughfs --example man -- OUT
//! ```
//!
//! OUT is the page's path, or a directory to write `passthroughfs.1` into.
//!
//! Sections: NAME (one line, [`SUMMARY`]); SYNOPSIS, DESCRIPTION and
//! OPTIONS as clap_mangen renders them, with the help texts' backtick
//! quotes (Markdown in `--help`, literal characters in roff) as double
//! quotes; SIGNALS from `passthroughfs::cli::SIGNALS_HELP` (the `--help` text
//! after the options, which clap_mangen would reflow into one paragraph
//! headed EXTRA); ENVIRONMENT (`RUST_LOG`, `NO_COLOR`); SEE ALSO; VERSION.

use clap::CommandFactory;
use clap_mangen::roff::{bold, italic, roman, Inline, Roff};
use clap_mangen::Man;
use passthroughfs::cli::{Args, SIGNALS_HELP};
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    match run(std::env::args_os().skip(1)) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("man: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Writes the page to the path in `args` (a directory gets
/// `passthroughfs.1` inside it) and returns the page's path.
pub fn run(mut args: impl Iterator<Item = OsString>) -> Result<PathBuf, String> {
    let (Some(out), None) = (args.next(), args.next()) else {
        return Err("usage: man OUT (the page's path, or a directory for passthroughfs.1)".into());
    };
    let mut path = PathBuf::from(out);
    let man = Man::new(command());
    if path.is_dir() {
        path.push(man.get_filename());
    }
    let page = page(&man).map_err(|e| format!("rendering the page: {e}"))?;
    std::fs::write(&path, page).map_err(|e| format!("writing {}: {e}", path.display()))?;
    Ok(path)
}

/// What NAME says after `passthroughfs -`: one line (whatis(1) and
/// apropos(1) show it), not the DESCRIPTION's paragraph.
pub const SUMMARY: &str = "serve a directory through FUSE, or to a virtual machine over virtio-fs";

/// The daemon's command as the page shows it: backtick quotes made double
/// quotes in the about text and every option's help.
pub fn command() -> clap::Command {
    let mut cmd = Args::command();
    if let Some(about) = cmd.get_about().map(|a| quotes(&a.to_string())) {
        cmd = cmd.about(about);
    }
    cmd.mut_args(|mut arg| {
        if let Some(help) = arg.get_help().map(|h| quotes(&h.to_string())) {
            arg = arg.help(help);
        }
        if let Some(help) = arg.get_long_help().map(|h| quotes(&h.to_string())) {
            arg = arg.long_help(help);
        }
        arg
    })
}

/// `text` with each `` `code` `` span quoted as "code".
fn quotes(text: &str) -> String {
    text.replace('`', "\"")
}

/// NAME: the program and [`SUMMARY`], on one line.
fn name_section(w: &mut dyn Write) -> io::Result<()> {
    let mut roff = Roff::new();
    roff.control("SH", ["NAME"]);
    roff.text([roman(format!("passthroughfs - {SUMMARY}"))]);
    roff.to_writer(w)
}

/// The whole page as roff source.
pub fn page(man: &Man) -> io::Result<Vec<u8>> {
    // Each part renders with roff's preamble (a string for the apostrophe):
    // the page keeps the title's.
    let preamble = Roff::new().render();
    let mut out = Vec::new();
    man.render_title(&mut out)?;
    let mut part = |render: &dyn Fn(&mut dyn Write) -> io::Result<()>| -> io::Result<()> {
        let mut buf = Vec::new();
        render(&mut buf)?;
        out.extend_from_slice(buf.strip_prefix(preamble.as_bytes()).unwrap_or(&buf));
        Ok(())
    };
    part(&|w| name_section(w))?;
    part(&|w| man.render_synopsis_section(w))?;
    part(&|w| description(w))?;
    part(&|w| {
        // The possible values' help comes from doc comments too.
        let mut buf = Vec::new();
        man.render_options_section(&mut buf)?;
        w.write_all(quotes(&String::from_utf8_lossy(&buf)).as_bytes())
    })?;
    part(&|w| mount_options().to_writer(w))?;
    part(&|w| signals(SIGNALS_HELP).to_writer(w))?;
    part(&|w| environment().to_writer(w))?;
    part(&|w| see_also().to_writer(w))?;
    part(&|w| man.render_version_section(w))?;
    Ok(out)
}

/// DESCRIPTION: the command's about text, and how the daemon ends.
fn description(w: &mut dyn Write) -> io::Result<()> {
    let about = command()
        .get_about()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let mut roff = Roff::new();
    roff.control("SH", ["DESCRIPTION"]);
    roff.text([roman(about)]);
    roff.control("PP", []);
    roff.text([
        roman("In the background it logs to syslog (or to the "),
        bold("--log-file"),
        roman(
            "; with nothing listening on /dev/log it says so when it starts). It serves until \
               the file system is unmounted (",
        ),
        bold("umount"),
        roman(" "),
        italic("MOUNTPOINT"),
        roman(" as root, "),
        bold("fusermount3 -u"),
        roman(" "),
        italic("MOUNTPOINT"),
        roman(" otherwise) or it gets one of the signals below."),
    ]);
    roff.control("PP", []);
    roff.text([
        roman("From mount(8) and fstab: "),
        bold("mount -t fuse.passthroughfs"),
        roman(" "),
        italic("SOURCE MOUNTPOINT"),
        roman(" "),
        bold("-o"),
        roman(" "),
        italic("OPTIONS"),
        roman(", or a line "),
        italic("SOURCE MOUNTPOINT"),
        roman(" fuse.passthroughfs "),
        italic("OPTIONS"),
        roman(
            " 0 0 in /etc/fstab, runs it through mount.fuse3 (installed in /usr/local/bin or \
               another directory of the default PATH, or as /sbin/mount.fuse.passthroughfs, \
               a link to the binary, which then takes mount(8)'s helper arguments).",
        ),
    ]);
    roff.to_writer(w)
}

/// SIGNALS from the `--help` text after the options: a heading line
/// (`Signals:`), then entries of a term indented by two spaces, two or
/// more spaces, and a description that may go on, further indented, on
/// the next lines. Text of another shape is kept as it is, unfilled.
fn signals(help: &str) -> Roff {
    let mut lines = help.lines().peekable();
    if lines
        .peek()
        .is_some_and(|l| !l.starts_with(' ') && l.trim_end().ends_with(':'))
    {
        lines.next();
    }
    let lines: Vec<&str> = lines.filter(|l| !l.trim().is_empty()).collect();
    let mut entries: Vec<(String, String)> = Vec::new();
    let mut well_formed = !lines.is_empty();
    for line in &lines {
        let is_term = line.starts_with("  ") && !line[2..].starts_with(' ');
        if is_term {
            match line[2..].split_once("  ") {
                Some((term, text)) => entries.push((term.trim().into(), text.trim().into())),
                None => well_formed = false,
            }
        } else if let (true, Some((_, text))) = (line.starts_with("   "), entries.last_mut()) {
            text.push(' ');
            text.push_str(line.trim());
        } else {
            well_formed = false;
        }
    }
    let mut roff = Roff::new();
    roff.control("SH", ["SIGNALS"]);
    if well_formed {
        for (term, text) in entries {
            roff.control("TP", []);
            roff.text([bold(term)]);
            roff.text([roman(text)]);
        }
    } else {
        roff.control("nf", []);
        for line in lines {
            roff.text([roman(line)]);
        }
        roff.control("fi", []);
    }
    roff
}

/// ENVIRONMENT: what the daemon reads from it.
fn environment() -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["ENVIRONMENT"]);
    let var = |roff: &mut Roff, name: &str, text: Vec<Inline>| {
        roff.control("TP", []);
        roff.text([bold(name)]);
        roff.text(text);
    };
    var(
        &mut roff,
        "RUST_LOG",
        vec![
            roman("The log level: "),
            bold("error"),
            roman(", "),
            bold("warn"),
            roman(", "),
            bold("info"),
            roman(" (the default, also when the value can't be parsed), "),
            bold("debug"),
            roman(" or "),
            bold("trace"),
            roman("; or tracing-subscriber filter directives, such as "),
            bold("info,fuse_server=debug"),
            roman(", for a level per module."),
        ],
    );
    var(
        &mut roff,
        "NO_COLOR",
        vec![roman(
            "Set to a non-empty value: the log has no ANSI colours. It has them only when \
             standard error is a terminal.",
        )],
    );
    var(
        &mut roff,
        "NOTIFY_SOCKET",
        vec![roman(
            "A Unix datagram socket (a path, or an abstract name after @) to tell a service \
             manager READY=1 (with MAINPID) once the mount is usable and STOPPING=1 when \
             unmounting: systemd's Type=notify.",
        )],
    );
    roff
}

/// MOUNT OPTIONS: the `-o` names (`passthroughfs::options`).
fn mount_options() -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["MOUNT OPTIONS"]);
    roff.text([roman(
        "Given with -o as a comma-separated list (a backslash escapes a comma), as mount(8), \
         fstab and mount.fuse3 pass them; a later option wins over an earlier one and over \
         the switches.",
    )]);
    for (term, text) in passthroughfs::options::help_entries() {
        roff.control("TP", []);
        roff.text([bold(term)]);
        roff.text([roman(text)]);
    }
    roff
}

/// SEE ALSO: the mount helpers.
fn see_also() -> Roff {
    let mut roff = Roff::new();
    roff.control("SH", ["SEE ALSO"]);
    roff.text([
        bold("fusermount3"),
        roman("(1), "),
        bold("mount.fuse3"),
        roman("(8), "),
        bold("mount"),
        roman("(8), "),
        bold("fstab"),
        roman("(5)"),
    ]);
    roff
}
