//! The inode store as the source watch's way to the files it watches by
//! inode number ([`crate::watch::FileNodes`]): a file event's handle
//! carries the inode number, which the store has every node by already,
//! so a watched file costs the watch no table entry of its own.

use super::store::{find, ino_hash};
use super::InodeStore;
use crate::sys;
use crate::watch::{FileNodes, ObjectId};

impl FileNodes for InodeStore {
    fn watched_by_number(&self, dev: u64, handle: &sys::FileHandle, each: &mut dyn FnMut(u64)) {
        let Some((ino, _)) = sys::handle_number(handle.kind(), handle.bytes()) else {
            return;
        };
        let maps = self.read();
        // The newest node of each identity with that number (one per
        // mount the file is seen through); an older one holds a file gone
        // before (its handle differs).
        for &(number, nodeid) in maps.by_key.iter_hash(ino_hash(ino)) {
            if number != ino {
                continue;
            }
            let shard = self.shard(nodeid);
            let Some(inode) = find(&shard, nodeid) else {
                continue;
            };
            let same_file = inode.file.file_handle() == Some(handle);
            if inode.key.dev() == dev && same_file && inode.file_watch.by_number() {
                each(nodeid);
            }
        }
    }

    fn all_watched_by_number(&self, each: &mut dyn FnMut(u64, ObjectId<'_>)) {
        for shard in self.by_id.iter() {
            let shard = shard.read().unwrap_or_else(|e| e.into_inner());
            for inode in shard.iter() {
                if inode.file_watch.by_number() {
                    each(inode.nodeid, inode.watch_id());
                }
            }
        }
    }
}
