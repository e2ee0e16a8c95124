//! When written records reach the disk: fsync policy and group commit.
//!
//! Records are written (handed to the OS) under the engine lock, in order.
//! Making them durable is slower, so it happens here, outside that lock: a
//! connection thread whose command wrote records calls
//! [`Durability::after_write`] before its reply leaves.
//!
//! - `-F`: never fsync; the OS writes back when it likes.
//! - `-f MS` (MS > 0): fsync at most every MS milliseconds, by whichever
//!   thread notices the interval has passed; nobody waits for it.
//! - `-f 0`: a reply leaves only after its records are fsynced. One thread
//!   fsyncs at a time; every thread whose records were written before that
//!   fsync began is released by it. Concurrent writers thus share one fsync
//!   (group commit) instead of queueing one each.

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::config::Fsync;

/// Shared by the binlog (which counts writes) and every connection thread.
#[derive(Debug)]
pub struct Durability {
    mode: Fsync,
    /// Records handed to the OS so far.
    written: AtomicU64,
    /// An fsync failed: nothing written since can be promised durable, and
    /// the binlog refuses further changes.
    failed: AtomicBool,
    state: Mutex<SyncState>,
    synced_cv: Condvar,
}

#[derive(Debug)]
struct SyncState {
    /// The file being written.
    file: Option<Arc<File>>,
    /// Every record up to this count is on disk.
    synced: u64,
    /// A thread is inside fsync.
    syncing: bool,
    last_sync: Instant,
}

impl Durability {
    pub fn new(mode: Fsync) -> Durability {
        Durability {
            mode,
            written: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            state: Mutex::new(SyncState { file: None, synced: 0, syncing: false, last_sync: Instant::now() }),
            synced_cv: Condvar::new(),
        }
    }

    /// The fsync policy.
    pub fn mode(&self) -> Fsync {
        self.mode
    }

    /// Records handed to the OS so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::SeqCst)
    }

    /// True once an fsync has failed.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }

    /// Records that durability can no longer be promised.
    pub(super) fn fail(&self) {
        self.failed.store(true, Ordering::SeqCst);
    }

    /// Counts one more record handed to the OS.
    pub(super) fn wrote_one(&self) {
        self.written.fetch_add(1, Ordering::SeqCst);
    }

    /// Switches to a new current file. Records in the old file must already
    /// be durable (the binlog fsyncs a file before leaving it).
    pub(super) fn set_file(&self, file: Arc<File>) {
        let mut state = self.lock();
        state.file = Some(file);
        state.synced = self.written();
    }

    /// Makes the first `seq` records as durable as the policy promises before
    /// the caller replies. False if that promise cannot be kept (an fsync
    /// failed): the caller must not report success.
    pub fn after_write(&self, seq: u64) -> bool {
        match self.mode {
            Fsync::Never => {}
            Fsync::Every(0) => self.sync_through(seq),
            Fsync::Every(ms) => {
                let state = self.lock();
                if !state.syncing && state.last_sync.elapsed() >= Duration::from_millis(u64::from(ms)) {
                    drop(self.sync_now(state));
                }
            }
        }
        !self.failed()
    }

    /// Fsyncs everything written so far (at shutdown).
    pub fn sync_all(&self) {
        self.sync_through(self.written());
    }

    /// Waits until record `seq` is on disk, fsyncing if nobody else is.
    fn sync_through(&self, seq: u64) {
        let mut state = self.lock();
        loop {
            if state.synced >= seq {
                return;
            }
            if !state.syncing {
                state = self.sync_now(state);
                continue;
            }
            state = self.synced_cv.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Runs one fsync without holding the lock, covering every record
    /// written before it started.
    fn sync_now<'a>(&'a self, mut state: MutexGuard<'a, SyncState>) -> MutexGuard<'a, SyncState> {
        let Some(file) = state.file.clone() else { return state };
        state.syncing = true;
        let target = self.written();
        drop(state);
        let result = file.sync_data();
        let mut state = self.lock();
        state.syncing = false;
        if let Err(e) = result {
            // Said loudly, and remembered: the waiters are let go rather than
            // left hanging, but told that their records are not safe.
            eprintln!("beanstalk: binlog: fsync failed, refusing further changes: {e}");
            self.fail();
        }
        state.synced = state.synced.max(target);
        state.last_sync = Instant::now();
        self.synced_cv.notify_all();
        state
    }

    fn lock(&self) -> MutexGuard<'_, SyncState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}
