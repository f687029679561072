//! The fanotify record side of the watch: how fanotify names an object
//! ([`Fid`]) and the events read from the group, parsed from the bytes
//! `read(2)` returns. Apart because it is pure parsing of data from the
//! kernel, tested without a group.

use super::{DATA_MASK, FILE_MASK, MASK};
use std::os::fd::{FromRawFd, OwnedFd};

/// How fanotify names a directory: its file system's id and its file
/// handle as `name_to_handle_at(AT_HANDLE_FID)` encodes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Fid {
    pub(super) fsid: [i32; 2],
    pub(super) kind: i32,
    pub(super) bytes: Box<[u8]>,
}

impl Fid {
    /// A 64-bit digest of the id, what [`Marked`](super::Marked) keeps: SipHash with
    /// fixed keys (the same object gets the same digest whenever it is
    /// seen; a collision costs an invalidation too many, see [`Marked`](super::Marked)).
    pub(super) fn digest(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::hash::DefaultHasher::new();
        self.hash(&mut h);
        h.finish()
    }
}

/// One event, as far as the watcher cares.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Event {
    /// Events were lost.
    Overflow,
    /// `name` in the directory `dir` changed.
    Name { dir: Fid, name: Vec<u8> },
    /// Another process changed the file `file`: its data too if `data`.
    Changed { file: Fid, data: bool },
}

/// Reads the events in `buf` (whole events, as `read(2)` returns them)
/// into `out`, skipping any it can't read, and the file changes of process
/// `own_pid`; returns whether there were file changes (skipped or not).
pub(super) fn parse_events(buf: &[u8], own_pid: i32, out: &mut Vec<Event>) -> bool {
    let mut file_events = false;
    const META: usize = size_of::<libc::fanotify_event_metadata>();
    let mut at = 0;
    while buf.len() - at >= META {
        let ev = &buf[at..];
        let event_len = u32::from_ne_bytes(ev[0..4].try_into().unwrap()) as usize;
        let metadata_len = u16::from_ne_bytes(ev[6..8].try_into().unwrap()) as usize;
        if event_len < META
            || event_len > ev.len()
            || metadata_len < META
            || metadata_len > event_len
        {
            tracing::warn!(
                event_len,
                "source watch: malformed event; rest of the batch skipped"
            );
            return file_events;
        }
        let mask = u64::from_ne_bytes(ev[8..16].try_into().unwrap());
        let fd = i32::from_ne_bytes(ev[16..20].try_into().unwrap());
        let pid = i32::from_ne_bytes(ev[20..24].try_into().unwrap());
        at += event_len;
        if fd >= 0 {
            // Not asked for (no FAN_REPORT_FID group gets one), but never
            // leak it.
            // SAFETY: a descriptor the kernel just gave us.
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        if mask & libc::FAN_Q_OVERFLOW != 0 {
            out.push(Event::Overflow);
            continue;
        }
        // A name event (on a watched directory) comes with the directory's
        // handle and the name; a file event (on a watched file) with the
        // file's own handle (and its directory's and name, not needed).
        let names = mask & MASK & !libc::FAN_ONDIR != 0;
        let file_event = mask & FILE_MASK != 0 && mask & libc::FAN_ONDIR == 0;
        file_events |= file_event;
        let file = file_event && pid != own_pid;
        let mut info = &ev[metadata_len..event_len];
        while info.len() >= 4 {
            let info_type = info[0];
            let len = u16::from_ne_bytes(info[2..4].try_into().unwrap()) as usize;
            if len < 4 || len > info.len() {
                break;
            }
            match info_type {
                libc::FAN_EVENT_INFO_TYPE_DFID_NAME if names => {
                    if let Some(e) = parse_dfid_name(&info[4..len]) {
                        out.push(e);
                    }
                }
                libc::FAN_EVENT_INFO_TYPE_FID if file => {
                    if let Some((file, _)) = parse_fid(&info[4..len]) {
                        out.push(Event::Changed {
                            file,
                            data: mask & DATA_MASK != 0,
                        });
                    }
                }
                _ => {}
            }
            info = &info[len..];
        }
    }
    file_events
}

/// A record's fsid and `struct file_handle` (after the record's header),
/// and what follows them.
fn parse_fid(rec: &[u8]) -> Option<(Fid, &[u8])> {
    let fsid = [
        i32::from_ne_bytes(rec.get(0..4)?.try_into().ok()?),
        i32::from_ne_bytes(rec.get(4..8)?.try_into().ok()?),
    ];
    let handle_bytes = u32::from_ne_bytes(rec.get(8..12)?.try_into().ok()?) as usize;
    let kind = i32::from_ne_bytes(rec.get(12..16)?.try_into().ok()?);
    let end = 16usize.checked_add(handle_bytes)?;
    let bytes = rec.get(16..end)?;
    Some((
        Fid {
            fsid,
            kind,
            bytes: bytes.into(),
        },
        &rec[end..],
    ))
}

/// A `DFID_NAME` record after its header: fsid, `struct file_handle`,
/// then the name, NUL-terminated.
fn parse_dfid_name(rec: &[u8]) -> Option<Event> {
    let (dir, rest) = parse_fid(rec)?;
    let name = &rest[..rest.iter().position(|&b| b == 0)?];
    if name.is_empty() || name == b"." {
        return None;
    }
    Some(Event::Name {
        dir,
        name: name.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One event as the kernel lays it out: metadata, then a DFID_NAME
    /// record, padded to 8 bytes.
    fn event(mask: u64, pid: i32, fsid: [i32; 2], handle: &[u8], name: &[u8]) -> Vec<u8> {
        let mut rec = Vec::new();
        rec.extend_from_slice(&fsid[0].to_ne_bytes());
        rec.extend_from_slice(&fsid[1].to_ne_bytes());
        rec.extend_from_slice(&(handle.len() as u32).to_ne_bytes());
        rec.extend_from_slice(&1i32.to_ne_bytes());
        rec.extend_from_slice(handle);
        rec.extend_from_slice(name);
        rec.push(0);
        while (rec.len() + 4) % 8 != 0 {
            rec.push(0);
        }
        let mut info = vec![libc::FAN_EVENT_INFO_TYPE_DFID_NAME, 0];
        info.extend_from_slice(&((rec.len() + 4) as u16).to_ne_bytes());
        info.extend_from_slice(&rec);
        let meta = size_of::<libc::fanotify_event_metadata>();
        let mut ev = Vec::new();
        ev.extend_from_slice(&((meta + info.len()) as u32).to_ne_bytes());
        ev.push(libc::FANOTIFY_METADATA_VERSION);
        ev.push(0);
        ev.extend_from_slice(&(meta as u16).to_ne_bytes());
        ev.extend_from_slice(&mask.to_ne_bytes());
        ev.extend_from_slice(&libc::FAN_NOFD.to_ne_bytes());
        ev.extend_from_slice(&pid.to_ne_bytes());
        ev.extend_from_slice(&info);
        ev
    }

    #[test]
    fn names_come_out() {
        let mut buf = event(libc::FAN_DELETE, 42, [1, 2], b"\x0a\x0b\x0c\x0d", b"gone");
        buf.extend(event(libc::FAN_MOVED_TO, 7, [1, 2], b"\x0a\x0b", b"mine"));
        buf.extend(event(
            libc::FAN_MOVED_FROM | libc::FAN_ONDIR,
            0,
            [1, 2],
            b"\x01",
            b"dir",
        ));
        let mut out = Vec::new();
        parse_events(&buf, 0, &mut out);
        let named = |handle: &[u8], name: &[u8]| Event::Name {
            dir: Fid {
                fsid: [1, 2],
                kind: 1,
                bytes: handle.into(),
            },
            name: name.to_vec(),
        };
        assert_eq!(
            out,
            vec![
                named(b"\x0a\x0b\x0c\x0d", b"gone"),
                named(b"\x0a\x0b", b"mine"),
                named(b"\x01", b"dir"),
            ]
        );
    }

    /// A file event as a `FAN_REPORT_DFID_NAME | FAN_REPORT_FID` group
    /// gets it: a DFID_NAME record of the file's directory, then a FID
    /// record of the file.
    fn file_event(mask: u64, pid: i32, dir: &[u8], name: &[u8], file: &[u8]) -> Vec<u8> {
        let mut ev = event(mask, pid, [1, 2], dir, name);
        let mut rec = Vec::new();
        rec.extend_from_slice(&1i32.to_ne_bytes());
        rec.extend_from_slice(&2i32.to_ne_bytes());
        rec.extend_from_slice(&(file.len() as u32).to_ne_bytes());
        rec.extend_from_slice(&1i32.to_ne_bytes());
        rec.extend_from_slice(file);
        while (rec.len() + 4) % 8 != 0 {
            rec.push(0);
        }
        ev.push(libc::FAN_EVENT_INFO_TYPE_FID);
        ev.push(0);
        ev.extend_from_slice(&((rec.len() + 4) as u16).to_ne_bytes());
        ev.extend_from_slice(&rec);
        let len = ev.len() as u32;
        ev[0..4].copy_from_slice(&len.to_ne_bytes());
        ev
    }

    #[test]
    fn file_changes_come_out_by_the_file_not_its_name() {
        let mut buf = file_event(libc::FAN_MODIFY, 42, b"\x0d", b"f", b"\x0f\x0f");
        buf.extend(file_event(libc::FAN_ATTRIB, 42, b"\x0d", b"g", b"\x0a"));
        // The daemon's own change: not passed on.
        buf.extend(file_event(libc::FAN_CLOSE_WRITE, 9, b"\x0d", b"h", b"\x0b"));
        buf.extend(file_event(
            libc::FAN_CLOSE_WRITE,
            43,
            b"\x0d",
            b"h",
            b"\x0b",
        ));
        let mut out = Vec::new();
        parse_events(&buf, 9, &mut out);
        let file = |handle: &[u8], data| Event::Changed {
            file: Fid {
                fsid: [1, 2],
                kind: 1,
                bytes: handle.into(),
            },
            data,
        };
        assert_eq!(
            out,
            vec![
                file(b"\x0f\x0f", true),
                file(b"\x0a", false),
                file(b"\x0b", true)
            ]
        );
    }

    #[test]
    fn overflow_and_garbage() {
        let meta = size_of::<libc::fanotify_event_metadata>();
        let mut ov = vec![0u8; meta];
        ov[0..4].copy_from_slice(&(meta as u32).to_ne_bytes());
        ov[6..8].copy_from_slice(&(meta as u16).to_ne_bytes());
        ov[8..16].copy_from_slice(&libc::FAN_Q_OVERFLOW.to_ne_bytes());
        ov[16..20].copy_from_slice(&libc::FAN_NOFD.to_ne_bytes());
        let mut out = Vec::new();
        parse_events(&ov, 0, &mut out);
        assert_eq!(out, vec![Event::Overflow]);
        // Truncated, zero-length and oversized events end the batch
        // without a panic.
        for bad in [&ov[..10], &[0u8; 24][..], &[0xffu8; 64][..]] {
            out.clear();
            parse_events(bad, 0, &mut out);
            assert!(out.is_empty());
        }
        // A record whose handle runs past its end is dropped.
        let mut ev = event(libc::FAN_DELETE, 3, [0, 0], b"\x01\x02", b"x");
        let at = meta + 4 + 8;
        ev[at..at + 4].copy_from_slice(&1000u32.to_ne_bytes());
        out.clear();
        parse_events(&ev, 0, &mut out);
        assert!(out.is_empty());
    }
}
