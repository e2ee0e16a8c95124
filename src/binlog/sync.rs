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
//!
//! Nothing that waits for the disk runs under the engine's lock, so no
//! client waits on another's fsync: a file the log leaves for a new one is
//! synced here, with the next fsync (as is the directory, for the new
//! file's name); and a file the log no longer needs is removed here, once
//! the records that made it unneeded are synced, in the order the log let
//! the files go. That order is what keeps a crash harmless: a file is only
//! ever removed after every older file whose records it supersedes, so
//! whatever files a crash leaves behind replay to the same jobs.

use std::collections::VecDeque;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use crate::config::Fsync;

/// Shared by the binlog (which counts writes) and every connection thread.
mod removal;
use removal::Removal;

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
    /// The binlog directory, once the log is open.
    dir: OnceLock<PathBuf>,
    /// Files the log no longer needs, oldest decision first. Only
    /// [`Durability::remove_unneeded`] takes from it, one thread at a time
    /// (`removing`), doing its I/O with this lock let go, so that queueing
    /// a file under the engine's lock never waits for the disk.
    removals: Mutex<VecDeque<Removal>>,
    removing: Mutex<()>,
    /// The log failed (a write, or memory for its books): nothing is
    /// removed any more, since what was let go may not be on disk.
    removals_halted: AtomicBool,
    /// Under `-f 0`, told after each of the syncer's fsyncs.
    on_synced: OnceLock<Tell>,
}

/// What [`Durability::on_synced`] calls.
struct Tell(Box<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for Tell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tell")
    }
}

#[derive(Debug)]
struct SyncState {
    /// The file being written.
    file: Option<Arc<File>>,
    /// Files left for a newer one, synced with the next fsync, then let go:
    /// an fsync syncs the first ones as it finds them and drains those
    /// after, so the room claimed for later ones stays (no take, no swap).
    retired: Vec<Arc<File>>,
    /// A file was made since the directory was last synced.
    dir_changed: bool,
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
                retired: Vec::new(),
                dir_changed: false,
                synced: 0,
                syncing: false,
                last_sync: Instant::now(),
                syncer_idle: false,
                stopping: false,
            }),
            synced_cv: Condvar::new(),
            syncer_cv: Condvar::new(),
            dir: OnceLock::new(),
            removals: Mutex::new(VecDeque::new()),
            removing: Mutex::new(()),
            removals_halted: AtomicBool::new(false),
            on_synced: OnceLock::new(),
        }
    }

    /// The directory whose files [`Durability::remove_unneeded`] removes.
    pub(super) fn set_dir(&self, dir: PathBuf) {
        let _ = self.dir.set(dir);
    }

    /// Starts the syncer thread of `-f MS` (MS > 0); with any other policy
    /// there is none. It runs until [`Durability::stop`].
    pub fn start_syncer(this: &Arc<Durability>) -> std::io::Result<()> {
        match this.mode {
            Fsync::Every(ms) if ms > 0 => Durability::spawn_syncer(this, ms),
            _ => Ok(()),
        }
    }

    /// Starts the syncer thread of `-f 0` for the server's event loops:
    /// it fsyncs as soon as it is asked ([`Durability::ask_sync`]), for
    /// every record written by then, whoever wrote it (group commit across
    /// the loops), and then says so ([`Durability::on_synced`]). Without
    /// it (an embedder's engine, the tests' logs), a reply's wait is
    /// [`Durability::after_write`]'s, on the caller's thread.
    pub fn start_group_syncer(this: &Arc<Durability>) -> std::io::Result<()> {
        match this.mode {
            Fsync::Every(0) => Durability::spawn_syncer(this, 0),
            _ => Ok(()),
        }
    }

    fn spawn_syncer(this: &Arc<Durability>, ms: u32) -> std::io::Result<()> {
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
            drop(state);
            if self.mode == Fsync::Every(0) {
                if let Some(Tell(tell)) = self.on_synced.get() {
                    tell();
                }
            }
            self.remove_unneeded();
            state = self.lock();
        }
    }

    /// Who to tell, under `-f 0`, that an fsync has ended: the event
    /// loops, whose connections wait for it (`conn`'s `on_disk`).
    pub fn on_synced(&self, tell: Box<dyn Fn() + Send + Sync>) {
        let _ = self.on_synced.set(Tell(tell));
    }

    /// Asks the syncer to fsync the first `seq` records, without waiting
    /// for it: the caller learns it is done from [`Durability::on_synced`]
    /// and [`Durability::synced`].
    pub fn ask_sync(&self, seq: u64) {
        let mut state = self.lock();
        if state.syncer_idle && state.synced < seq {
            state.syncer_idle = false;
            self.syncer_cv.notify_one();
        }
    }

    /// Every record up to this count is on disk (or the log has failed:
    /// see [`Durability::failed`]).
    pub fn synced(&self) -> u64 {
        self.lock().synced
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
        self.wrote(1);
    }

    /// Counts `records` more records handed to the OS.
    pub(super) fn wrote(&self, records: u64) {
        self.written.fetch_add(records, Ordering::SeqCst);
    }

    /// Claims, under the engine's lock, what a new file will need here:
    /// room to keep the file it replaces until synced, and room in the
    /// removals for every file there is (`files`). False: no memory.
    pub(super) fn claim_file_room(&self, files: usize) -> bool {
        let kept = self.lock().retired.try_reserve(1).is_ok();
        // Beside those still waiting for their fsync.
        kept && self.removals().try_reserve(files).is_ok()
    }

    /// Switches to a new current file. The one it replaces, and the new
    /// name in the directory, are synced with the next fsync: nothing here
    /// waits for the disk.
    pub(super) fn switch_file(&self, file: Arc<File>) {
        let mut state = self.lock();
        if let Some(old) = state.file.replace(file) {
            if self.mode != Fsync::Never && state.retired.len() < state.retired.capacity() {
                state.retired.push(old);
            } else if self.mode != Fsync::Never {
                // No room (it is always claimed): sync it now, holding the
                // state, so that no fsync can count its records meanwhile.
                if super::faults::io_point().and_then(|()| old.sync_data()).is_err() {
                    self.fail();
                }
            }
        }
        state.dir_changed = true;
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
        self.remove_unneeded();
        !self.failed()
    }

    /// Fsyncs everything written so far, and removes what that lets go
    /// (at start-up and shutdown).
    pub fn sync_all(&self) {
        if self.mode != Fsync::Never {
            self.sync_through(self.written());
        }
        self.remove_unneeded();
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
        // The files left since the last fsync, then the current one, then
        // the directory if a file was made.
        // The files left so far, then the current one, then the directory
        // if a file was made. `syncing` keeps every other fsync out, so the
        // first `left` retired files stay put while this one runs unlocked.
        let left = state.retired.len();
        let dir_changed = std::mem::take(&mut state.dir_changed);
        drop(state);
        let retired = |n: usize| self.lock().retired.get(n).cloned();
        let result = (0..left)
            .filter_map(retired)
            .chain(std::iter::once(file))
            .try_for_each(|file| super::faults::io_point().and_then(|()| file.sync_data()))
            .and_then(|()| match self.dir.get().filter(|_| dir_changed) {
                Some(dir) => super::sync_dir(dir),
                None => Ok(()),
            });
        self.fsyncs.fetch_add(1, Ordering::Relaxed);
        let mut state = self.lock();
        state.syncing = false;
        state.retired.drain(..left);
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
        durability.switch_file(file);
        Durability::start_syncer(&durability).unwrap();
        durability.wrote_one();
        assert!(durability.after_write(1));
        // A hang guard only: a loaded machine may be slow to run the syncer.
        let deadline = Instant::now() + Duration::from_secs(300);
        while durability.lock().synced < 1 {
            assert!(Instant::now() < deadline, "never synced");
            thread::sleep(Duration::from_millis(5));
        }
        durability.stop();
        let _ = std::fs::remove_file(path);
    }

    /// Files go in the order they were let go, and one that cannot be
    /// removed holds back every later one: a newer file never leaves the
    /// disk before an older one whose records it supersedes.
    #[test]
    fn a_file_that_cannot_go_holds_back_the_later_ones() {
        let dir = std::env::temp_dir().join(format!("beanstalk-removals-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = |n: u32| super::super::dir::our_path(&dir, n);
        // beanstalk.1 is a directory: removing it as a file fails.
        std::fs::create_dir_all(path(1)).unwrap();
        std::fs::write(path(2), b"").unwrap();
        let durability = Durability::new(Fsync::Never);
        durability.set_dir(dir.clone());
        assert!(durability.claim_file_room(2));
        assert!(durability.queue_removal(1, false) && durability.queue_removal(2, false));
        durability.remove_unneeded();
        assert!(path(2).exists(), "beanstalk.2 went before beanstalk.1");
        assert_eq!(durability.removals_pending(), 2);
        std::fs::remove_dir(path(1)).unwrap();
        std::fs::write(path(1), b"").unwrap();
        durability.remove_unneeded();
        assert!(!path(1).exists() && !path(2).exists());
        assert_eq!(durability.removals_pending(), 0);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// After the log fails (a write, its books' memory) or an fsync fails,
    /// nothing is removed: what made a file unneeded may not be on disk.
    #[test]
    fn a_failed_log_or_fsync_removes_nothing() {
        for (mode, how) in [(Fsync::Never, "halted"), (Fsync::Every(0), "fsync failed")] {
            let dir =
                std::env::temp_dir().join(format!("beanstalk-halt-{}-{}", std::process::id(), how.len()));
            std::fs::create_dir_all(&dir).unwrap();
            let path = super::super::dir::our_path(&dir, 1);
            std::fs::write(&path, b"").unwrap();
            let durability = Durability::new(mode);
            durability.set_dir(dir.clone());
            assert!(durability.claim_file_room(1) && durability.queue_removal(1, false));
            if mode == Fsync::Never {
                durability.halt_removals();
            } else {
                durability.fail();
            }
            durability.remove_unneeded();
            assert!(path.exists(), "{how}: removed all the same");
            std::fs::remove_dir_all(&dir).unwrap();
        }
    }
}
