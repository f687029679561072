//! Bounding the inode table ([`PassthroughConfig::max_nodes`]): a
//! [`Pruner`] offers the least recently used inodes to the kernel with
//! `FUSE_NOTIFY_PRUNE`; those the kernel drops come back as FORGET and
//! leave the store there (`lookup.rs`), as any other.

use super::*;
use fuse_server::{PruneSource, PruneStats, Pruner};

/// `config` with its default inode limit ([`PassthroughConfig::max_nodes`]
/// `None`) replaced by the one sized to this machine, once, when the file
/// system is made (before a sandbox may forbid asking).
pub(super) fn resolve_max_nodes(
    mut config: PassthroughConfig,
    inodes_hold_fds: bool,
) -> PassthroughConfig {
    if config.max_nodes.is_none() {
        config.max_nodes = Some(crate::config::default_max_nodes(inodes_hold_fds));
    }
    config
}

impl PassthroughFs {
    /// The inode limit in force (`None`: no limit): the configured one,
    /// or the default sized to the machine when the file system was made.
    pub fn max_nodes(&self) -> Option<usize> {
        self.cfg.max_nodes.filter(|&n| n != 0)
    }

    /// What the pruner did so far: its limit, rounds, inodes offered to
    /// the kernel, and why it is off where it is (`None`: no pruner runs,
    /// for want of a notifier, or no limit).
    pub fn prune_stats(&self) -> Option<PruneStats> {
        self.inodes.prune_stats()
    }

    /// Starts the pruner once a notifier is set and the protocol is known
    /// to have NOTIFY_PRUNE (or not yet known: the pruner checks before
    /// each round), stops it when the notifier goes. Called with the
    /// notifier (`restart`: a new one, so a new pruner) and again at INIT
    /// (keeping the one running), like the source watch.
    pub(super) fn start_pruner(&self, restart: bool) {
        let Some(limit) = self.max_nodes() else {
            return;
        };
        let Some(notifier) = lock(&self.notifier).clone() else {
            self.inodes.set_pruner(None);
            return;
        };
        let kernel_minor = self.kernel_minor.load(Ordering::Acquire);
        let minor = notifier
            .protocol_minor()
            .or((kernel_minor != 0).then_some(kernel_minor));
        if let Some(minor) = minor.filter(|&m| m < fuse_server::prune::PRUNE_MINOR) {
            tracing::info!(
                limit,
                "inode table not bounded: the kernel speaks FUSE protocol 7.{minor}, \
                 NOTIFY_PRUNE needs 7.45 (Linux 6.18+); inodes are kept until the kernel \
                 forgets them"
            );
            self.inodes.set_pruner(None);
            return;
        }
        if !restart && self.inodes.prune_stats().is_some() {
            return;
        }
        let store: Arc<dyn PruneSource> = self.inodes.clone();
        match Pruner::start(limit, Arc::downgrade(&store), Arc::downgrade(&notifier)) {
            Ok(p) => {
                tracing::info!(
                    limit,
                    "inode table bounded: past {limit} inodes the least recently used are \
                     offered to the kernel (NOTIFY_PRUNE)"
                );
                self.inodes.set_pruner(Some(p));
            }
            Err(e) => tracing::warn!("inode table not bounded: no pruner thread: {e}"),
        }
    }
}
