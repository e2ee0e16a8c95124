//! The file being written: starting one (preallocated, sized to the
//! claims it must carry, its header and the next id written, and synced
//! unless fsync is off, before it becomes current), keeping room in it,
//! and appending records.
//!
//! It writes the bytes it is given and keeps the books of space; it must
//! not choose what a record says (`writing.rs`) or decide when a file may
//! go (`files.rs`, which `start_file` asks once the old file is left).

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::Arc;

use super::files::FileInfo;
use super::record::{self, DELETE_LEN, HEADER_LEN};
use super::{faults, Binlog, BLOCK};

/// `errno` for a full disk.
const ENOSPC: i32 = 28;

impl Binlog {
    /// Creates file `n`, big enough for the claimed deletes plus `need`,
    /// writes its header and the next id, and makes it current. On failure
    /// nothing has changed: a half-made file is removed again.
    pub(super) fn start_file(&mut self, n: u32, need: u64) -> io::Result<()> {
        // The file left is synced with the next fsync, outside the
        // engine's lock (`sync.rs`), as is the new file's name.
        let leaving = self.files.get(&self.current).map(|old| old.used);
        let opening = HEADER_LEN as u64 + DELETE_LEN as u64;
        // `-s` bytes, unless the claimed deletes would leave less than half
        // of that for records: then room for the claims and a whole file's
        // worth beyond them. Sized to the claims alone, a file would take one
        // record before the next was needed, and with many live jobs (whose
        // claims outgrow `-s`) every write would start a file.
        let fitted = (self.claimed + need + opening).div_ceil(BLOCK) * BLOCK;
        let mut size = self.file_size.max(fitted);
        if size - self.claimed - opening < self.file_size / 2 {
            size = (self.claimed + need.max(self.file_size) + opening).div_ceil(BLOCK) * BLOCK;
        }
        // Claim, then change: the memory a new file's books need, first.
        let files = self.files.len() + 1;
        let mut opening_bytes = Vec::new();
        let claimed = self.files.try_make_room()
            && self.unneeded.try_reserve(files.saturating_sub(self.unneeded.len())).is_ok()
            && opening_bytes.try_reserve(opening as usize + 32).is_ok()
            && self.durability.claim_file_room(files);
        let Some(path) = super::dir::try_our_path(&self.dir, n).filter(|_| claimed) else {
            return Err(io::Error::from(io::ErrorKind::OutOfMemory));
        };
        opening_bytes.extend_from_slice(&record::header());
        record::encode_next_id(&mut opening_bytes, self.next_id);
        // `create_new` never follows a symbolic link out of the directory.
        faults::io_point()?;
        let file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path)?;
        // A disk too full for a whole file may still take what this write
        // needs: a smaller file, rather than no change at all.
        let preallocated =
            faults::io_point().and_then(|()| crate::sys::preallocate(&file, size)).or_else(|e| {
                if e.raw_os_error() == Some(ENOSPC) && fitted < size {
                    size = fitted;
                    crate::sys::preallocate(&file, size)
                } else {
                    Err(e)
                }
            });
        let made = preallocated
            .and_then(|()| faults::io_point())
            .and_then(|()| file.write_all_at(&opening_bytes, 0));
        if let Err(e) = made {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        if let Some(used) = leaving {
            // Give back the preallocated space the old file did not use.
            let _ = self.writer.set_len(used);
        }
        // The spare `Arc` takes the new file, with no allocation (see
        // `spare_writer`). Only the syncer can hold the spare, the file
        // before last waiting for its fsync: that fsync is made now, which
        // lets it go, rather than allocate under a command's claim. (Should
        // it still be held, a new one, once in a long while.)
        if Arc::get_mut(&mut self.spare_writer).is_none() {
            self.durability.sync_all();
        }
        match Arc::get_mut(&mut self.spare_writer) {
            Some(slot) => *slot = file,
            None => self.spare_writer = Arc::new(file),
        }
        let previous = std::mem::replace(&mut self.current, n);
        std::mem::swap(&mut self.writer, &mut self.spare_writer);
        self.durability.switch_file(Arc::clone(&self.writer));
        // The old file's descriptor goes once it is synced too (the
        // durability thread holds it till then), so that its disk space can
        // when the file is deleted; the spare holds the current one.
        if let (Some(old), Ok(current)) = (Arc::get_mut(&mut self.spare_writer), self.writer.try_clone()) {
            *old = current;
        }
        self.files.insert(n, FileInfo { used: opening_bytes.len() as u64, ..FileInfo::default() });
        self.disk_bytes += opening_bytes.len() as u64;
        self.free = size - opening_bytes.len() as u64;
        self.collect_unneeded(&[previous]);
        Ok(())
    }

    /// Room kept free at the end of the current file for work that must
    /// go on when the disk is full. A put leaves all of it; a rewrite by
    /// compaction may use half; a change to a job already logged (a
    /// release, a bury: existing jobs stay workable) may use it all. When
    /// no new file can be made, compaction still has room to rewrite an old
    /// file's few live jobs, that file goes, and its space lets new files
    /// be made again: a full disk recovers once deletes leave little live
    /// data.
    pub(super) fn compaction_reserve(&self) -> u64 {
        self.file_size / 8
    }

    /// Makes sure `need` unclaimed bytes are free in the current file, and
    /// `keep` more besides, starting a new file if necessary.
    pub(super) fn make_room(&mut self, need: u64, keep: u64) -> bool {
        if self.failed || self.durability.failed() {
            return false;
        }
        let reserve = keep;
        // A record that keeps a body must start where 32 bits can say
        // (`engine/body.rs`): a file goes no further with bodies to keep.
        let used = self.files.get(&self.current).map_or(0, |info| info.used);
        let placeable = self.keeping.above.is_none() || used + need <= u64::from(u32::MAX);
        if self.free.saturating_sub(self.claimed) >= need + reserve && placeable {
            return true;
        }
        let Some(next) = self.current.checked_add(1) else {
            crate::log::problem(format_args!("binlog: file numbers exhausted; restart to renumber them"));
            return false;
        };
        // On a full disk, the files already let go must leave it first:
        // here, under the lock, the one time a command waits for that.
        let started = self.start_file(next, need + reserve).or_else(|e| {
            if e.raw_os_error() != Some(ENOSPC) || self.durability.removals_pending() == 0 {
                return Err(e);
            }
            self.durability.sync_all();
            self.start_file(next, need + reserve)
        });
        match started {
            Ok(()) => true,
            Err(e) => {
                crate::log::problem(format_args!("binlog: cannot start a new file: {e}"));
                false
            }
        }
    }

    /// Appends the encoded record in `scratch` to the current file.
    pub(super) fn append(&mut self) -> io::Result<u64> {
        if self.gathering {
            return self.gather();
        }
        let len = self.scratch.len() as u64;
        let Some(info) = self.files.get_mut(&self.current) else {
            return Err(io::Error::other("no current file"));
        };
        let at = info.used;
        let written = faults::io_point().and_then(|()| self.writer.write_all_at(&self.scratch, at));
        if self.scratch.capacity() > 1 << 20 {
            // Do not keep a huge body's worth of buffer for the process's life.
            self.scratch = Vec::new();
        }
        if let Err(e) = written {
            self.failed = true;
            self.durability.halt_removals();
            self.write_failures += 1;
            crate::log::problem(format_args!("binlog: write failed, refusing further changes: {e}"));
            return Err(e);
        }
        info.used += len;
        self.free = self.free.saturating_sub(len);
        self.disk_bytes += len;
        self.records_written += 1;
        self.durability.wrote_one();
        Ok(len)
    }
}
