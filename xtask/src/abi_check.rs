//! `cargo xtask abi-check HEADER`: compares fuse-abi with a kernel `fuse.h`.
//!
//! 1. Runs fuse-abi's `abi-layout` example, which prints the crate's view of
//!    the protocol as lines (`struct fuse_attr size 88 align 8`,
//!    `struct fuse_attr ino offset 0 size 8`, `const FUSE_LOOKUP 1`).
//! 2. Generates a C program that includes the header and prints the same
//!    lines with `sizeof`, `_Alignof` and `offsetof`, one check per source
//!    line, and compiles it with `cc` (or `$CC`). A check that does not
//!    compile (a field or constant the header lacks) is reported and dropped,
//!    and the program is compiled again, so one missing field does not hide
//!    the rest.
//! 3. Runs it and compares line by line.
//! 4. Parses the header itself for structs, fields and constants that the
//!    crate does not have.
//!
//! Any difference is reported and makes the task fail.

use anyhow::{bail, Context};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Page size assumed for `FUSE_REMOVEMAPPING_MAX_ENTRY`, which the header
/// defines in terms of the kernel's `PAGE_SIZE`. The `abi-layout` example
/// prints the crate's value for a page of the same size.
const PAGE_SIZE: u32 = 4096;

/// Name of the generated C file, also used to find its lines in compiler errors.
const C_FILE: &str = "abi_check.c";

/// Runs the check.
pub fn run(header: &Path) -> anyhow::Result<()> {
    let header_text = fs::read_to_string(header)
        .with_context(|| format!("abi-check: cannot read header {}", header.display()))?;
    let root = crate::workspace_root();
    let checks = crate_checks(&root)?;
    let parsed = parse_header(&header_text);

    let mut report = Report::default();

    // Structs of the crate that the header does not define are reported once
    // and not compiled; so are their fields.
    let header_structs: BTreeSet<&str> = parsed.structs.iter().map(|s| s.name.as_str()).collect();
    let mut absent = BTreeMap::<String, usize>::new();
    let mut to_compile = Vec::new();
    for check in &checks {
        match check.struct_name() {
            Some(name) if !header_structs.contains(name) => {
                *absent.entry(name.to_owned()).or_default() += 1;
            }
            _ => to_compile.push(check),
        }
    }
    for (name, lines) in &absent {
        let fields = lines - 1;
        let plural = if fields == 1 { "" } else { "s" };
        report.difference(format!(
            "not in header: {name} (the crate has it, with {fields} field{plural})"
        ));
    }

    let dir = work_dir(&root)?;
    let include = dir.join("include").join("linux");
    fs::create_dir_all(&include)?;
    fs::copy(header, include.join("fuse.h"))
        .with_context(|| format!("copying {} to {}", header.display(), include.display()))?;

    let (compiled, failed) = compile(&dir, &to_compile)?;
    for (check, error) in &failed {
        report.difference(format!(
            "not in header: {} (crate: {}; C: {error})",
            check.key(),
            check.values()
        ));
    }

    let output = Command::new(dir.join("abi_check"))
        .output()
        .context("running the compiled C program")?;
    if !output.status.success() {
        bail!(
            "abi-check: the compiled C program failed: {}",
            output.status
        );
    }
    let c_lines: Vec<&str> = std::str::from_utf8(&output.stdout)?.lines().collect();
    if c_lines.len() != compiled.len() {
        bail!(
            "abi-check: the C program printed {} lines for {} checks",
            c_lines.len(),
            compiled.len()
        );
    }
    let mut version = (None, None);
    for (check, c_line) in compiled.iter().zip(&c_lines) {
        let c_check = Check::parse(c_line)
            .with_context(|| format!("abi-check: unexpected line from C: {c_line}"))?;
        if let Kind::Const { name } = &check.kind {
            match name.as_str() {
                "FUSE_KERNEL_VERSION" => version.0 = Some(c_check.values()),
                "FUSE_KERNEL_MINOR_VERSION" => version.1 = Some(c_check.values()),
                _ => {}
            }
        }
        if check.line == *c_line {
            report.matched(&check.kind);
        } else {
            report.difference(format!(
                "mismatch: {}: crate {}, header {}",
                check.key(),
                check.values(),
                c_check.values()
            ));
        }
    }

    // What the header has and the crate lacks.
    let crate_structs: BTreeSet<&str> = checks.iter().filter_map(Check::struct_name).collect();
    let crate_fields: BTreeSet<(&str, &str)> = checks
        .iter()
        .filter_map(|c| match &c.kind {
            Kind::Field {
                c_struct, field, ..
            } => Some((c_struct.as_str(), field.as_str())),
            _ => None,
        })
        .collect();
    let crate_consts: BTreeSet<&str> = checks
        .iter()
        .filter_map(|c| match &c.kind {
            Kind::Const { name } => Some(name.as_str()),
            _ => None,
        })
        .collect();
    for s in &parsed.structs {
        if !crate_structs.contains(s.name.as_str()) {
            report.difference(format!(
                "missing in crate: {} (header line {}, fields: {})",
                s.name,
                s.line,
                s.fields.join(", ")
            ));
            continue;
        }
        for field in &s.fields {
            if !crate_fields.contains(&(s.name.as_str(), field.as_str())) {
                report.difference(format!(
                    "missing in crate: {} field {field} (header line {})",
                    s.name, s.line
                ));
            }
        }
    }
    for (name, line) in &parsed.constants {
        if !crate_consts.contains(name.as_str()) {
            report.difference(format!(
                "missing in crate: constant {name} (header line {line})"
            ));
        }
    }

    let version = match version {
        (Some(major), Some(minor)) => format!("{major}.{minor}"),
        _ => "unknown version".to_owned(),
    };
    let file_name = header
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| header.display().to_string());
    fs::remove_dir_all(&dir).ok();

    if report.differences.is_empty() {
        println!(
            "abi-check: {} structs, {} fields, {} constants match {file_name} ({version})",
            report.structs, report.fields, report.constants
        );
        return Ok(());
    }
    println!(
        "abi-check: fuse-abi against {} ({version}):",
        header.display()
    );
    for d in &report.differences {
        println!("  {d}");
    }
    println!(
        "abi-check: {} difference{}; {} structs, {} fields, {} constants match {file_name} ({version})",
        report.differences.len(),
        if report.differences.len() == 1 { "" } else { "s" },
        report.structs,
        report.fields,
        report.constants
    );
    bail!(
        "abi-check: fuse-abi differs from {} in {} places",
        header.display(),
        report.differences.len()
    )
}

/// Counts and differences found so far.
#[derive(Default)]
struct Report {
    structs: usize,
    fields: usize,
    constants: usize,
    differences: Vec<String>,
}

impl Report {
    fn matched(&mut self, kind: &Kind) {
        match kind {
            Kind::Struct { .. } => self.structs += 1,
            Kind::Field { .. } => self.fields += 1,
            Kind::Const { .. } => self.constants += 1,
        }
    }

    fn difference(&mut self, text: String) {
        self.differences.push(text);
    }
}

/// One line of the crate's table.
#[derive(Debug, Clone)]
struct Check {
    kind: Kind,
    /// The line as printed.
    line: String,
}

#[derive(Debug, Clone)]
enum Kind {
    /// `struct fuse_attr size 88 align 8`
    Struct { c_struct: String },
    /// `struct fuse_attr ino offset 0 size 8`; size 0 is a flexible array.
    Field {
        c_struct: String,
        field: String,
        flexible: bool,
    },
    /// `const FUSE_LOOKUP 1`
    Const { name: String },
}

impl Check {
    /// Parses a line of the table; `None` if it is not one.
    fn parse(line: &str) -> Option<Self> {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let kind = match tokens.as_slice() {
            ["struct", name, "size", _, "align", _] => Kind::Struct {
                c_struct: format!("struct {name}"),
            },
            ["struct", name, field, "offset", _, "size", size] => Kind::Field {
                c_struct: format!("struct {name}"),
                field: (*field).to_owned(),
                flexible: *size == "0",
            },
            ["const", name, _] => Kind::Const {
                name: (*name).to_owned(),
            },
            _ => return None,
        };
        Some(Self {
            kind,
            line: tokens.join(" "),
        })
    }

    /// The C struct the line is about, if any.
    fn struct_name(&self) -> Option<&str> {
        match &self.kind {
            Kind::Struct { c_struct } | Kind::Field { c_struct, .. } => Some(c_struct),
            Kind::Const { .. } => None,
        }
    }

    /// What the line is about, e.g. `struct fuse_attr ino`.
    fn key(&self) -> String {
        match &self.kind {
            Kind::Struct { c_struct } => c_struct.clone(),
            Kind::Field {
                c_struct, field, ..
            } => format!("{c_struct} {field}"),
            Kind::Const { name } => format!("const {name}"),
        }
    }

    /// The values of the line, e.g. `offset 0 size 8`.
    fn values(&self) -> String {
        let skip = match self.kind {
            Kind::Struct { .. } | Kind::Const { .. } => 2,
            Kind::Field { .. } => 3,
        };
        self.line
            .split(' ')
            .skip(skip)
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// One line of C that prints this check's line as the header sees it.
    fn c_statement(&self) -> String {
        match &self.kind {
            Kind::Struct { c_struct } => format!(
                r#"printf("{c_struct} size %zu align %zu\n", sizeof({c_struct}), _Alignof({c_struct}));"#
            ),
            Kind::Field {
                c_struct,
                field,
                flexible: true,
            } => format!(
                r#"printf("{c_struct} {field} offset %zu size 0\n", offsetof({c_struct}, {field}));"#
            ),
            Kind::Field {
                c_struct, field, ..
            } => format!(
                r#"printf("{c_struct} {field} offset %zu size %zu\n", offsetof({c_struct}, {field}), sizeof((({c_struct} *)0)->{field}));"#
            ),
            // The value as a bit pattern of the expression's own width, so
            // that `(1 << 31)` (an int, negative) reads as bit 31 and not as
            // a sign-extended 64-bit value.
            Kind::Const { name } => format!(
                r#"printf("const {name} %llu\n", (unsigned long long)({name}) & (~0ULL >> (64 - 8 * sizeof({name}))));"#
            ),
        }
    }
}

/// Runs the `abi-layout` example and parses its output.
fn crate_checks(root: &Path) -> anyhow::Result<Vec<Check>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let output = Command::new(cargo)
        .args(["run", "-q", "-p", "fusewire-abi", "--example", "abi-layout"])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .context("running `cargo run -p fusewire-abi --example abi-layout`")?;
    if !output.status.success() {
        bail!(
            "abi-check: `cargo run -p fusewire-abi --example abi-layout` failed: {}",
            output.status
        );
    }
    let text = String::from_utf8(output.stdout)?;
    let mut checks = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let check = Check::parse(line)
            .with_context(|| format!("abi-check: unexpected line from abi-layout: {line}"))?;
        checks.push(check);
    }
    if checks.is_empty() {
        bail!("abi-check: abi-layout printed nothing");
    }
    Ok(checks)
}

/// A fresh directory for the C program under the workspace's target directory.
fn work_dir(root: &Path) -> anyhow::Result<PathBuf> {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let dir = target
        .join("abi-check")
        .join(format!("run-{}", std::process::id()));
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Generates, compiles and links the C program, dropping checks that do not
/// compile. Returns the checks in the program, in output order, and the
/// dropped ones with the compiler's first error about each.
#[allow(clippy::type_complexity)]
fn compile<'a>(
    dir: &Path,
    checks: &[&'a Check],
) -> anyhow::Result<(Vec<&'a Check>, Vec<(&'a Check, String)>)> {
    let cc = std::env::var_os("CC").unwrap_or_else(|| OsString::from("cc"));
    let mut kept: Vec<&Check> = checks.to_vec();
    let mut failed = Vec::new();
    // Each round drops every check the compiler complained about; a second
    // round should then succeed, the rest is slack.
    for _round in 0..5 {
        let (source, first_line) = c_program(&kept);
        fs::write(dir.join(C_FILE), &source)?;
        let output = Command::new(&cc)
            .args([
                "-std=gnu11",
                "-w",
                "-I",
                "include",
                "-o",
                "abi_check",
                C_FILE,
            ])
            .current_dir(dir)
            .output()
            .with_context(|| format!("running the C compiler {cc:?}"))?;
        if output.status.success() {
            return Ok((kept, failed));
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        let bad = error_lines(&stderr);
        let mut dropped = BTreeSet::new();
        for (line, message) in &bad {
            let Some(index) = line.checked_sub(first_line) else {
                continue;
            };
            if index < kept.len() && dropped.insert(index) {
                failed.push((kept[index], message.clone()));
            }
        }
        if dropped.is_empty() {
            bail!(
                "abi-check: the C program ({}) does not compile, and not because of one check:\n{stderr}",
                dir.join(C_FILE).display()
            );
        }
        kept = kept
            .into_iter()
            .enumerate()
            .filter(|(i, _)| !dropped.contains(i))
            .map(|(_, c)| c)
            .collect();
    }
    bail!(
        "abi-check: the C program ({}) still does not compile after dropping failing checks",
        dir.join(C_FILE).display()
    )
}

/// The C program, and the source line number (1-based) of its first check;
/// check `i` is on line `first + i`.
fn c_program(checks: &[&Check]) -> (String, usize) {
    let mut s = String::new();
    s.push_str("#include <stddef.h>\n");
    s.push_str("#include <stdio.h>\n");
    s.push_str("#include <linux/ioctl.h>\n");
    // FUSE_REMOVEMAPPING_MAX_ENTRY is defined with the kernel's PAGE_SIZE.
    let _ = writeln!(
        s,
        "#ifndef PAGE_SIZE\n#define PAGE_SIZE {PAGE_SIZE}\n#endif"
    );
    s.push_str("#include <linux/fuse.h>\n");
    s.push_str("int main(void)\n{\n");
    let first = s.lines().count() + 1;
    for check in checks {
        s.push_str(&check.c_statement());
        s.push('\n');
    }
    s.push_str("return 0;\n}\n");
    (s, first)
}

/// `(line, message)` of each error the compiler reports in the generated file
/// (directly, or through a macro expanded there).
fn error_lines(stderr: &str) -> Vec<(usize, String)> {
    let prefix = format!("{C_FILE}:");
    let mut out = Vec::new();
    let mut pending: Option<String> = None;
    for line in stderr.lines() {
        let Some(rest) = line.find(&prefix).map(|i| &line[i + prefix.len()..]) else {
            // An error inside another file (e.g. stddef.h's offsetof): the
            // expansion notes that follow name our line.
            if let Some(i) = line.find(": error: ") {
                pending = Some(line[i + 2..].to_owned());
            }
            continue;
        };
        let mut parts = rest.splitn(3, ':');
        let (Some(num), Some(_col), Some(msg)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        let Ok(num) = num.parse::<usize>() else {
            continue;
        };
        let msg = msg.trim();
        if msg.starts_with("error:") {
            out.push((num, msg.to_owned()));
            pending = None;
        } else if msg.starts_with("note: in expansion of macro") {
            if let Some(error) = pending.take() {
                out.push((num, error));
            }
        }
    }
    out
}

/// The header's structs and constants, as far as a simple parser sees them.
struct ParsedHeader {
    structs: Vec<HeaderStruct>,
    /// Object-like `#define`s and enumerators named `FUSE_*`, `CUSE_*`,
    /// `FOPEN_*`, `FATTR_*`, with their line numbers.
    constants: Vec<(String, usize)>,
}

struct HeaderStruct {
    /// `struct fuse_attr`.
    name: String,
    /// 1-based line of the definition.
    line: usize,
    /// Field designators: `ino`, and for a named inner struct or union both
    /// `bufpool` and `bufpool.uaddr`; members of anonymous ones unprefixed.
    fields: Vec<String>,
}

fn parse_header(text: &str) -> ParsedHeader {
    let text = strip_comments(text);
    let mut structs = Vec::new();
    let mut constants = Vec::new();
    let line_starts: Vec<usize> = std::iter::once(0)
        .chain(text.match_indices('\n').map(|(i, _)| i + 1))
        .collect();
    for (index, &start) in line_starts.iter().enumerate() {
        let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
        let line = text[start..end].trim_end();
        if (line.starts_with("struct fuse_") || line.starts_with("struct cuse_"))
            && line.ends_with('{')
        {
            let name = line.trim_end_matches('{').trim().to_owned();
            let body_start = end.min(start + line.len());
            if let Some(body) = braced_body(&text[body_start - 1..]) {
                structs.push(HeaderStruct {
                    name,
                    line: index + 1,
                    fields: fields(body, ""),
                });
            }
        } else if let Some(rest) = line.strip_prefix("#define") {
            let rest = rest.trim_start();
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let function_like = rest[name.len()..].starts_with('(');
            if is_protocol_name(&name) && !function_like {
                constants.push((name, index + 1));
            }
        } else if line.starts_with("enum ") && line.ends_with('{') {
            let body_start = start + line.len();
            if let Some(body) = braced_body(&text[body_start - 1..]) {
                let mut offset = body_start;
                for item in body.split(',') {
                    let name = item.split('=').next().unwrap_or("").trim();
                    if is_protocol_name(name) {
                        let pos = offset + item.find(name).unwrap_or(0);
                        let line = line_starts.partition_point(|&s| s <= pos);
                        constants.push((name.to_owned(), line));
                    }
                    offset += item.len() + 1;
                }
            }
        }
    }
    ParsedHeader { structs, constants }
}

fn is_protocol_name(name: &str) -> bool {
    ["FUSE_", "CUSE_", "FOPEN_", "FATTR_"]
        .iter()
        .any(|p| name.starts_with(p))
}

/// Replaces comments with spaces, keeping line breaks (and so line numbers).
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
                out.push(' ');
            }
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// The text between a `{` at the start of `text` and its matching `}`.
fn braced_body(text: &str) -> Option<&str> {
    let open = text.find('{')?;
    let mut depth = 0usize;
    for (i, c) in text[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[open + 1..open + i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// Field designators of a struct or union body.
fn fields(body: &str, prefix: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in body.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ';' if depth == 0 => {
                declaration(&body[start..i], prefix, &mut out);
                start = i + 1;
            }
            _ => {}
        }
    }
    out
}

/// The names one declaration of a struct body declares.
fn declaration(decl: &str, prefix: &str, out: &mut Vec<String>) {
    let decl = decl.trim();
    if decl.is_empty() {
        return;
    }
    if let (Some(open), Some(close)) = (decl.find('{'), decl.rfind('}')) {
        let inner = &decl[open + 1..close];
        let name = decl[close + 1..].trim();
        if name.is_empty() {
            out.extend(fields(inner, prefix));
        } else {
            let name = last_identifier(name);
            out.push(format!("{prefix}{name}"));
            out.extend(fields(inner, &format!("{prefix}{name}.")));
        }
        return;
    }
    for declarator in decl.split(',') {
        let name = last_identifier(declarator);
        if !name.is_empty() {
            out.push(format!("{prefix}{name}"));
        }
    }
}

/// The declared name in `uint32_t spare[6]`, `char *name` and the like.
fn last_identifier(declarator: &str) -> &str {
    let without_array = declarator.split('[').next().unwrap_or("");
    let without_bits = without_array.split(':').next().unwrap_or("").trim_end();
    let start = without_bits
        .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |i| i + 1);
    &without_bits[start..]
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "
#define FUSE_A (1 << 0) /* a */
#define FUSE_F(x) (x)
enum fuse_e {
\tFUSE_X = 1, // x
\tCUSE_Y,
};
struct fuse_s {
\tuint64_t\ta; /* multi
\t\t\t   line */
\tuint32_t\tb[6];
\tchar name[];
};
/* struct fuse_commented { */
struct fuse_u {
\tunion {
\t\tstruct {
\t\t\tuint64_t uaddr;
\t\t} bufpool;
\t\tuint16_t idx;
\t};
};
";

    #[test]
    fn parses_structs_fields_and_constants() {
        let parsed = parse_header(HEADER);
        let names: Vec<_> = parsed.structs.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["struct fuse_s", "struct fuse_u"]);
        assert_eq!(parsed.structs[0].fields, ["a", "b", "name"]);
        assert_eq!(parsed.structs[0].line, 8);
        assert_eq!(
            parsed.structs[1].fields,
            ["bufpool", "bufpool.uaddr", "idx"]
        );
        assert_eq!(
            parsed.constants,
            [
                ("FUSE_A".to_owned(), 2),
                ("FUSE_X".to_owned(), 5),
                ("CUSE_Y".to_owned(), 6)
            ]
        );
    }

    #[test]
    fn parses_table_lines() {
        let c = Check::parse("struct fuse_attr size offset 8 size 8").unwrap();
        assert_eq!(c.key(), "struct fuse_attr size");
        assert_eq!(c.values(), "offset 8 size 8");
        let c = Check::parse("struct fuse_attr size 88 align 8").unwrap();
        assert_eq!(c.key(), "struct fuse_attr");
        assert_eq!(c.values(), "size 88 align 8");
        let c = Check::parse("const FUSE_LOOKUP 1").unwrap();
        assert_eq!(c.key(), "const FUSE_LOOKUP");
        assert!(Check::parse("# UringBufpool size 16 align 8").is_none());
    }

    #[test]
    fn finds_error_lines() {
        let stderr = "abi_check.c: In function 'main':\n\
            abi_check.c:12:60: error: 'struct fuse_init_out' has no member named 'x'\n\
            /usr/lib/gcc/stddef.h:406:40: error: 'struct fuse_y' has no member named 'z'\n\
            abi_check.c:14:5: note: in expansion of macro 'offsetof'\n";
        assert_eq!(
            error_lines(stderr),
            [
                (
                    12,
                    "error: 'struct fuse_init_out' has no member named 'x'".to_owned()
                ),
                (
                    14,
                    "error: 'struct fuse_y' has no member named 'z'".to_owned()
                )
            ]
        );
    }
}
