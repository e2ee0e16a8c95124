//! When written records reach the disk: fsync policy and group commit.
//!
//! Records are written (handed to the OS) under the engine lock, in order.
//! Making them durable is slower, so it happens here, outside that lock: a
//! connection thread whose command wrote records calls
//! [`Durability::after_write`] before its reply leaves.
//!
//! - `-F`: never fsync; the OS writes back when it likes.
//! - `-f MS` (MS > 0): a record is fsynced at most MS milliseconds (plus
//!   the fsync itself) after it was written, by a syncer thread of its own;
//!   nobody waits for it. The thread sleeps while everything written is
//!   synced, so a quiet server does no work, and a put acknowledged just
//!   before a quiet spell still reaches the disk within MS ms (beanstalkd
//!   only fsyncs on the next write).
//! - `-f 0`: a reply leaves only after its records are fsynced. One thread
//!   fsyncs at a time; every thread whose records were written before that
//!   fsync began is released by it. Concurrent writers thus share one fsync
//!   (group commit) instead of queueing one each.

use std::fs::File;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
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
    /// fsyncs run, and fsyncs failed (for `--metrics`).
    fsyncs: AtomicU64,
    failures: AtomicU64,
    state: Mutex<SyncState>,
    synced_cv: Condvar,
    /// Wakes the `-f MS` syncer thread.
    syncer_cv: Condvar,
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
    /// The syncer thread sleeps until it is woken: it must be woken when
    /// something is written.
    syncer_idle: bool,
    /// The syncer thread must end.
    stopping: bool,
}

impl Durability {
    pub fn new(mode: Fsync) -> Durability {
        Durability {
            mode,
            written: AtomicU64::new(0),
            failed: AtomicBool::new(false),
            fsyncs: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            state: Mutex::new(SyncState {
                file: None,
                synced: 0,
                syncing: false,
                last_sync: Instant::now(),
                syncer_idle: false,
                stopping: false,
            }),
            synced_cv: Condvar::new(),
            syncer_cv: Condvar::new(),
        }
    }

    /// Starts the syncer thread of `-f MS` (MS > 0); with any other policy
    /// there is none. It runs until [`Durability::stop`].
    pub fn start_syncer(this: &Arc<Durability>) -> std::io::Result<()> {
        let Fsync::Every(ms) = this.mode else { return Ok(()) };
        if ms == 0 {
            return Ok(());
        }
        let durability = Arc::clone(this);
        let interval = Duration::from_millis(u64::from(ms));
        thread::Builder::new()
            .name("beanstalk-fsync".into())
            .spawn(move || durability.run_syncer(interval))?;
        Ok(())
    }

    /// Ends the syncer thread, if there is one.
    pub fn stop(&self) {
        self.lock().stopping = true;
        self.syncer_cv.notify_all();
    }

    fn run_syncer(&self, interval: Duration) {
        let mut state = self.lock();
        while !state.stopping {
            if state.synced >= self.written() || state.syncing {
                state.syncer_idle = true;
                state = self.syncer_cv.wait(state).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            let due = state.last_sync + interval;
            let now = Instant::now();
            if now < due {
                state =
                    self.syncer_cv.wait_timeout(state, due - now).map_or_else(|e| e.into_inner().0, |r| r.0);
                continue;
            }
            state = self.sync_now(state);
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
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.failed.store(true, Ordering::SeqCst);
    }

    /// fsyncs run so far by group commit.
    pub fn fsyncs(&self) -> u64 {
        self.fsyncs.load(Ordering::Relaxed)
    }

    /// fsyncs that failed.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
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
            Fsync::Every(_) => {
                let mut state = self.lock();
                if state.syncer_idle && state.synced < seq {
                    state.syncer_idle = false;
                    self.syncer_cv.notify_one();
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
        let result = super::faults::io_point().and_then(|()| file.sync_data());
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        state.syncing = false;
        if let Err(e) = result {
            // Said loudly, and remembered: the waiters are let go rather than
            // left hanging, but told that their records are not safe.
            crate::log::problem(format_args!("binlog: fsync failed, refusing further changes: {e}"));
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

#[cfg(test)]
mod tests {
    use super::*;

    /// With `-f MS`, a write is fsynced within about MS ms even if no other
    /// write follows it (beanstalkd waits for the next write).
    #[test]
    fn a_lone_write_is_synced_without_another_write() {
        let path = std::env::temp_dir().join(format!("beanstalk-sync-{}", std::process::id()));
        let file = Arc::new(File::create(&path).unwrap());
        let durability = Arc::new(Durability::new(Fsync::Every(20)));
        durability.set_file(file);
        Durability::start_syncer(&durability).unwrap();
        durability.wrote_one();
        assert!(durability.after_write(1));
        let deadline = Instant::now() + Duration::from_secs(10);
        while durability.lock().synced < 1 {
            assert!(Instant::now() < deadline, "never synced");
            thread::sleep(Duration::from_millis(5));
        }
        durability.stop();
        let _ = std::fs::remove_file(path);
    }
}
