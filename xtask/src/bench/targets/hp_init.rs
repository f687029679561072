//! libfuse master's INIT status (`FUSE_INIT_STATUS`): parsing what
//! passthrough_hp logged of its INIT negotiation and telling whether it
//! runs in the mode asked for. Apart because it concerns one peer only and
//! is pure text, tested on a captured log.

use super::HpMode;

/// The environment variable that makes libfuse (master) log its INIT
/// negotiation: one `FUSE_INIT: FUSE_CAP_…` line per capability, then
/// `FUSE_INIT: io_uring=on` (or `io_uring=off:<why>`) and the scalars.
pub(super) const HP_INIT_STATUS: &str = "FUSE_INIT_STATUS";

/// What libfuse (master) logged of its INIT negotiation with
/// `FUSE_INIT_STATUS` set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct HpInit {
    /// Whether there was any `FUSE_INIT:` line.
    pub logged: bool,
    /// The capabilities negotiated (`FUSE_CAP_…`).
    pub caps: Vec<String>,
    /// `on`, or `off:<why>`.
    pub io_uring: Option<String>,
    /// `key=value` scalars other than io_uring, in log order.
    pub scalars: Vec<(String, String)>,
    /// libfuse's own line when the ring failed to start.
    pub uring_failure: Option<String>,
}

impl HpInit {
    /// Reads the status lines out of a daemon's log.
    pub(super) fn parse(log: &str) -> HpInit {
        let mut init = HpInit::default();
        for line in log.lines() {
            let line = line.trim();
            if line.starts_with("fuse: failed to start io-uring") {
                init.uring_failure = Some(line.to_string());
            }
            let Some(rest) = line.strip_prefix("FUSE_INIT: ") else {
                continue;
            };
            init.logged = true;
            let rest = rest.trim();
            match rest.split_once('=') {
                Some(("io_uring", v)) => init.io_uring = Some(v.to_string()),
                Some((k, v)) => init.scalars.push((k.to_string(), v.to_string())),
                None => init.caps.push(rest.to_string()),
            }
        }
        init
    }

    fn cap(&self, name: &str) -> bool {
        self.caps.iter().any(|c| c == name)
    }

    fn scalar(&self, key: &str) -> Option<&str> {
        self.scalars
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Whether passthrough_hp runs in `mode`, from its INIT status: the start
/// line to record (`None` when it logged none), or why the mode is not
/// available. `--nopassthrough` still negotiates `FUSE_PASSTHROUGH` (it
/// just never opens a backing file), so kernel passthrough is on only in
/// the kpt mode; io_uring silently falls back to /dev/fuse when the ring
/// can't start, which this turns into "not available".
pub(super) fn hp_mode_check(mode: HpMode, init: &HpInit) -> Result<Option<String>, String> {
    if !init.logged {
        return match mode {
            HpMode::Dev => Ok(None),
            _ => Err(format!(
                "it logged no INIT status ({HP_INIT_STATUS}=1; a libfuse older than master?), so \
                 whether it runs in the {} mode can't be told",
                mode.name()
            )),
        };
    }
    let uring = init.io_uring.as_deref().unwrap_or("unknown");
    let kpt = mode == HpMode::Kpt && init.cap("FUSE_CAP_PASSTHROUGH");
    match mode {
        HpMode::Uring if uring != "on" => {
            return Err(format!(
                "FUSE over io_uring did not start (io_uring={uring}{}); it would serve /dev/fuse",
                init.uring_failure
                    .as_deref()
                    .map_or(String::new(), |l| format!("; {l}"))
            ))
        }
        HpMode::Kpt if !kpt => {
            return Err(
                "the kernel did not grant FUSE_PASSTHROUGH; it would serve READ and WRITE itself"
                    .into(),
            )
        }
        HpMode::Dev if uring == "on" => {
            return Err("it turned FUSE over io_uring on without being asked to".into())
        }
        _ => {}
    }
    let onoff = |b: bool| if b { "on" } else { "off" };
    let mut line = format!(
        "LIBFUSE-HP INIT mode={} io_uring={} kernel_passthrough={} writeback_cache={} \
         readdirplus={} splice={}",
        mode.name(),
        if uring == "on" { "on" } else { "off" },
        onoff(kpt),
        onoff(init.cap("FUSE_CAP_WRITEBACK_CACHE")),
        onoff(init.cap("FUSE_CAP_READDIRPLUS")),
        onoff(init.cap("FUSE_CAP_SPLICE_READ")),
    );
    if let (Some(major), Some(minor)) = (init.scalar("proto_major"), init.scalar("proto_minor")) {
        line.push_str(&format!(" proto={major}.{minor}"));
    }
    for key in ["max_write", "max_readahead"] {
        if let Some(v) = init.scalar(key) {
            line.push_str(&format!(" {key}={v}"));
        }
    }
    Ok(Some(line))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As libfuse master logs it with FUSE_INIT_STATUS=1 (trimmed).
    const HP_LOG: &str = "FUSE_INIT: FUSE_CAP_ASYNC_READ\n\
                          FUSE_INIT: FUSE_CAP_SPLICE_READ\n\
                          FUSE_INIT: FUSE_CAP_READDIRPLUS\n\
                          FUSE_INIT: FUSE_CAP_WRITEBACK_CACHE\n\
                          FUSE_INIT: FUSE_CAP_PASSTHROUGH\n\
                          FUSE_INIT: FUSE_CAP_OVER_IO_URING\n\
                          FUSE_INIT: io_uring=on\n\
                          FUSE_INIT: proto_major=7\n\
                          FUSE_INIT: proto_minor=45\n\
                          FUSE_INIT: max_readahead=131072\n\
                          FUSE_INIT: max_write=4194304\n\
                          FUSE_INIT: max_background=0\n";

    #[test]
    fn hp_modes_are_checked() {
        let on = HpInit::parse(HP_LOG);
        assert!(on.logged);
        assert_eq!(on.io_uring.as_deref(), Some("on"));
        assert_eq!(
            hp_mode_check(HpMode::Uring, &on).unwrap().unwrap(),
            "LIBFUSE-HP INIT mode=uring io_uring=on kernel_passthrough=off writeback_cache=on \
             readdirplus=on splice=on proto=7.45 max_write=4194304 max_readahead=131072"
        );
        let failed = HP_LOG
            .replace("FUSE_INIT: FUSE_CAP_OVER_IO_URING\n", "")
            .replace(
                "io_uring=on",
                "io_uring=off:start_failed:Operation not permitted",
            )
            + "fuse: failed to start io-uring: Operation not permitted\n";
        let off = HpInit::parse(&failed);
        let why = hp_mode_check(HpMode::Uring, &off).unwrap_err();
        assert!(why.contains("io_uring=off:start_failed"), "{why}");
        assert!(why.contains("failed to start io-uring"), "{why}");
        assert!(hp_mode_check(HpMode::Dev, &off)
            .unwrap()
            .unwrap()
            .contains("mode=dev io_uring=off kernel_passthrough=off"));
        assert!(hp_mode_check(HpMode::Dev, &on).is_err());
        assert!(hp_mode_check(HpMode::Kpt, &off)
            .unwrap()
            .unwrap()
            .contains("kernel_passthrough=on"));
        let no_kpt = HpInit::parse(&failed.replace("FUSE_INIT: FUSE_CAP_PASSTHROUGH\n", ""));
        assert!(hp_mode_check(HpMode::Kpt, &no_kpt).is_err());
        let silent = HpInit::parse("some other line\n");
        assert!(!silent.logged);
        assert_eq!(hp_mode_check(HpMode::Dev, &silent), Ok(None));
        assert!(hp_mode_check(HpMode::Uring, &silent).is_err());
    }
}
