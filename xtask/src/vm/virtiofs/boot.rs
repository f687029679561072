//! The virtio-fs boots: qemu with the guest's memory shared and a
//! `vhost-user-fs-pci` device per daemon socket, the console followed
//! until qemu exits, the daemon killed under the guest's load, and boots
//! tried again when TCG leaves the guest kernel hung. Apart from
//! `vm/boot.rs`, which boots the test guest without devices or daemons;
//! the console parsing ([`VmRun`]) is shared.

use super::*;

/// Seconds of guest load before the host kills the daemon.
const LOAD_SECS: u64 = 3;
/// Seconds qemu gets to exit once the guest powered off (or the host
/// gave up waiting for it).
const EXIT_SECS: u64 = 60;

/// Seconds qemu gets to exit on its own once the guest powered off after
/// the daemon was killed (it then waits for the dead backend: see
/// [`boot_virtiofs`]).
const KILLED_EXIT_SECS: u64 = 15;

/// Seconds the guest gets to reach `/init` (it takes about 3 under TCG).
const BOOT_SECS: u64 = 90;
/// Boots tried while the guest doesn't reach `/init`.
const BOOT_ATTEMPTS: u32 = 3;

/// [`boot_once`], again (at most [`BOOT_ATTEMPTS`] times in all) while
/// the guest doesn't boot: TCG now and then leaves the guest kernel hung
/// or crashed early in its boot (before `/init`, so before any request),
/// which says nothing about the transport. The daemon takes the next
/// connection as it would after any VM.
pub(super) fn boot_virtiofs(
    args: &VmArgs,
    image: (&Path, &Path),
    devices: &[(&Path, &str)],
    phase: &str,
    extra_append: &str,
    log: &Path,
    mut kill: Option<&mut Daemon>,
) -> Result<(VmRun, Vec<String>)> {
    let mut all_notes = Vec::new();
    for attempt in 1..=BOOT_ATTEMPTS {
        let (vm, notes) = boot_once(
            args,
            image,
            devices,
            phase,
            extra_append,
            log,
            kill.as_deref_mut(),
        )?;
        all_notes.extend(notes);
        if vm.booted.is_some() || attempt == BOOT_ATTEMPTS {
            return Ok((vm, all_notes));
        }
        let kept = log.with_extension(format!("boot-{attempt}.log"));
        let _ = fs::rename(log, &kept);
        let note = format!(
            "{phase}: the guest didn't boot (attempt {attempt} of {BOOT_ATTEMPTS}; its \
             console is in {}); booting again",
            kept.display()
        );
        println!("test-in-vm: {note}");
        all_notes.push(note);
    }
    bail!("{phase}: no boot attempt left")
}

/// [`boot_once`] with daemons that serve one VM each (virtiofsd, ours
/// with `--once`): `start` starts them (again) before every boot, since
/// a boot that failed ended their connection. Boots again while the guest
/// doesn't reach `/init`, as [`boot_virtiofs`]; returns the last boot and
/// its daemons.
pub(super) fn boot_with_fresh_daemons(
    args: &VmArgs,
    image: (&Path, &Path),
    devices: &[(&Path, &str)],
    (phase, extra_append): (&str, &str),
    log: &Path,
    start: &mut dyn FnMut() -> Result<Vec<Daemon>>,
) -> Result<(VmRun, Vec<Daemon>)> {
    for attempt in 1..=BOOT_ATTEMPTS {
        let daemons = start()?;
        let (vm, _) = boot_once(args, image, devices, phase, extra_append, log, None)?;
        if vm.booted.is_some() || attempt == BOOT_ATTEMPTS {
            return Ok((vm, daemons));
        }
        let kept = log.with_extension(format!("boot-{attempt}.log"));
        let _ = fs::rename(log, &kept);
        println!(
            "test-in-vm: {phase}: the guest didn't boot (attempt {attempt} of {BOOT_ATTEMPTS}; \
             its console is in {}); booting again with fresh daemons",
            kept.display()
        );
    }
    bail!("{phase}: no boot attempt left")
}

/// Boots the guest in `phase` with a virtio-fs device per `(socket, tag)`
/// and follows its
/// console until qemu exits. With `kill`, the daemon is killed
/// [`LOAD_SECS`] after the guest said its load started; the notes say
/// what became of qemu then.
///
/// qemu (7.2) doesn't exit on its own when the guest powers off after the
/// backend died: stopping the device asks the backend for the queues'
/// state and waits for the answer on the closed socket. It still answers
/// SIGTERM (and exits 0): the host isn't hung. A qemu that doesn't end
/// then either is a failure.
fn boot_once(
    args: &VmArgs,
    (vmlinuz, initrd): (&Path, &Path),
    devices: &[(&Path, &str)],
    phase: &str,
    extra_append: &str,
    log: &Path,
    mut kill: Option<&mut Daemon>,
) -> Result<(VmRun, Vec<String>)> {
    // tsc=reliable: see `BASE_APPEND`.
    let append =
        format!("console=ttyS0 panic=-1 quiet tsc=reliable xtask.phase={phase} {extra_append}");
    let mut cmd = qemu_command(args, vmlinuz, initrd, &append);
    // The kill phase reboots the guest once (a new session on the same
    // connection); elsewhere a reboot ends the run (a panic, with
    // `panic=-1`).
    cmd.args(if phase == "kill" {
        &[][..]
    } else {
        &["-no-reboot"][..]
    })
    .args([
        "-object",
        &format!("memory-backend-memfd,id=mem,size={}M,share=on", args.memory),
        "-numa",
        "node,memdev=mem",
    ]);
    for (i, (socket, tag)) in devices.iter().enumerate() {
        cmd.arg("-chardev")
            .arg(format!("socket,id=vfs{i},path={}", utf8(socket)?))
            .arg("-device")
            .arg(format!(
                "vhost-user-fs-pci,chardev=vfs{i},tag={tag},queue-size=1024"
            ));
    }
    let line = display(&cmd);
    println!("$ {line}");
    let (mut qemu, rx, mut log_file, mut vm) = spawn_qemu(&mut cmd, &line, log)?;
    let deadline = Instant::now() + Duration::from_secs(args.timeout);
    let boot_deadline = Instant::now() + Duration::from_secs(BOOT_SECS);
    let mut kill_at: Option<Instant> = None;
    let mut killed_daemon = false;
    let mut notes = Vec::new();
    let mut exit_by: Option<Instant> = None;
    let mut open_streams = 2;
    while open_streams > 0 {
        let now = Instant::now();
        if let (Some(at), Some(daemon)) = (kill_at, kill.as_deref_mut()) {
            if now >= at {
                println!("test-in-vm: killing the daemon (SIGKILL) under the guest's load");
                if let Ok(Some(status)) = daemon.0.try_wait() {
                    println!("test-in-vm: the daemon had exited already ({status})");
                }
                let _ = daemon.0.kill();
                let _ = daemon.0.wait();
                killed_daemon = true;
                kill_at = None;
                exit_by = Some(now + Duration::from_secs(args.timeout.min(120)));
            }
        }
        // Until the guest says it booted, the boot's own deadline.
        let boot_by = vm.booted.is_none().then_some(boot_deadline);
        let until = [Some(deadline), kill_at, exit_by, boot_by]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(deadline);
        match rx.recv_timeout(until.saturating_duration_since(now)) {
            Ok(Event::Line(l)) => {
                let _ = writeln!(log_file, "{l}");
                if !args.quiet || l.contains("XTASK-") || l.contains("FAIL") {
                    println!("vm| {l}");
                }
                if l.contains("XTASK-VIRTIOFS-LOADING") && kill.is_some() {
                    kill_at = Some(Instant::now() + Duration::from_secs(LOAD_SECS));
                }
                if l.contains("XTASK-VM-DONE") {
                    let secs = if killed_daemon {
                        KILLED_EXIT_SECS
                    } else {
                        EXIT_SECS
                    };
                    exit_by = Some(Instant::now() + Duration::from_secs(secs));
                }
                vm.line(&l);
                vm.console.push(l);
            }
            Ok(Event::Eof) => open_streams -= 1,
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                if exit_by.is_some_and(|t| now >= t) {
                    let msg = if vm.done.is_some() {
                        format!(
                            "qemu didn't exit within {} s of the guest's power-off",
                            if killed_daemon {
                                KILLED_EXIT_SECS
                            } else {
                                EXIT_SECS
                            }
                        )
                    } else {
                        "the guest didn't power off after the daemon was killed".to_string()
                    };
                    println!("test-in-vm: {msg}");
                    println!("{}", threads_of(qemu.0.id()));
                    let ended = terminate(&mut qemu.0);
                    println!("test-in-vm: SIGTERM to qemu: {ended}");
                    match (
                        killed_daemon,
                        vm.done.is_some(),
                        ended.starts_with("exited"),
                    ) {
                        // The backend is gone: qemu's vhost-user-fs
                        // device waits for its answer at power-off. The
                        // host isn't hung as long as qemu ends on SIGTERM.
                        (true, true, true) => notes.push(format!(
                            "{msg}: qemu's vhost-user-fs waits for the dead backend at \
                             power-off; it ended on SIGTERM"
                        )),
                        _ => vm.killed = Some(format!("{phase}: {msg} (SIGTERM: {ended})")),
                    }
                    let _ = qemu.0.kill();
                    break;
                }
                if vm.booted.is_none() && now >= boot_deadline {
                    let msg =
                        format!("{phase}: the guest didn't boot in {BOOT_SECS} s; qemu killed");
                    println!("test-in-vm: {msg}");
                    // Where qemu waits says whether it is the guest or
                    // the device (a vhost-user reply that never came).
                    println!("{}", threads_of(qemu.0.id()));
                    vm.killed = Some(msg);
                    let _ = qemu.0.kill();
                    break;
                }
                if now >= deadline {
                    let msg = format!("{phase}: timed out after {} s; qemu killed", args.timeout);
                    qemu.give_up(&mut vm, msg);
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = qemu.reap(&mut vm)?;
    println!("qemu: {status}");
    Ok((vm, notes))
}

/// The state and kernel wait channel of each thread of process `pid`.
fn threads_of(pid: u32) -> String {
    let mut out = format!("threads of {pid}:");
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return out + " (gone)";
    };
    for t in tasks.flatten() {
        let p = t.path();
        let read = |f: &str| fs::read_to_string(p.join(f)).unwrap_or_default();
        let stat = read("stat");
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next().map(str::to_string))
            .unwrap_or_default();
        let _ = write!(
            out,
            "\n  {} {} {state} wchan={}",
            t.file_name().to_string_lossy(),
            read("comm").trim(),
            read("wchan")
        );
    }
    out
}

/// Sends SIGTERM and waits up to 15 s: what became of the process.
fn terminate(child: &mut Child) -> String {
    // SAFETY: kill(2) on our own child's pid, which it still is: it has
    // not been waited for.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    match wait_for_exit(child, Duration::from_secs(15)) {
        Some(status) => format!("exited ({status})"),
        None => "still running after 15 s".to_string(),
    }
}
