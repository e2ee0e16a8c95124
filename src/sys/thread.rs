//! A connection's thread, started so that failing to start it is an error,
//! never an abort.
//!
//! std's `thread::Builder::spawn` returns an error when `pthread_create`
//! fails, but the new thread then maps a signal stack of its own (for its
//! stack-overflow message) and panics if that mapping fails, which with
//! `panic = "abort"` ends the whole server, every job in memory with it.
//! With the address space full, that is what a burst of new connections
//! did. Here the thread is made by `pthread_create` alone: its stack is the
//! only memory it needs, `pthread_create` maps it before the thread exists
//! and says so when it cannot, and the closure's box is claimed fallibly
//! first. Nothing else is mapped for the thread; an overflow of its stack
//! hits the guard page and ends the process, as std's would.
//!
//! The thread is detached: nobody joins a connection's thread (the server
//! waits for connections to close, not for threads to end).

use std::ffi::{c_int, c_void};

use super::memory::try_box;

/// glibc's `pthread_attr_t`: 56 bytes on x86-64, 64 on aarch64; this is
/// room and alignment for either.
#[repr(C, align(8))]
struct PthreadAttr([u8; 64]);

const PTHREAD_CREATE_DETACHED: c_int = 1;

extern "C" {
    fn pthread_attr_init(attr: *mut PthreadAttr) -> c_int;
    fn pthread_attr_setstacksize(attr: *mut PthreadAttr, size: usize) -> c_int;
    fn pthread_attr_setdetachstate(attr: *mut PthreadAttr, state: c_int) -> c_int;
    fn pthread_attr_destroy(attr: *mut PthreadAttr) -> c_int;
    fn pthread_create(
        thread: *mut u64,
        attr: *const PthreadAttr,
        start: extern "C" fn(*mut c_void) -> *mut c_void,
        arg: *mut c_void,
    ) -> c_int;
}

/// Runs `run` on a new detached thread with a stack of `stack_size` bytes.
/// If the thread cannot be started (no memory for the closure, no memory
/// or address space for the stack, a thread limit), `run` comes back
/// unrun: the caller still owns everything it holds.
pub fn spawn<F: FnOnce() + Send + 'static>(stack_size: usize, run: F) -> Result<(), F> {
    let run = try_box(run)?;
    let arg = Box::into_raw(run) as *mut c_void;
    let mut attr = PthreadAttr([0; 64]);
    let mut thread = 0u64;
    // SAFETY: `attr` is room for a `pthread_attr_t`, initialised before it
    // is used and destroyed after; `start::<F>` is given `arg`, a box of
    // `F` that it alone owns once the thread exists. If `pthread_create`
    // fails no thread exists, and the box is taken back here exactly once.
    unsafe {
        let mut rc = pthread_attr_init(&mut attr);
        if rc == 0 {
            rc = pthread_attr_setstacksize(&mut attr, stack_size);
            if rc == 0 {
                rc = pthread_attr_setdetachstate(&mut attr, PTHREAD_CREATE_DETACHED);
            }
            if rc == 0 {
                rc = pthread_create(&mut thread, &attr, start::<F>, arg);
            }
            pthread_attr_destroy(&mut attr);
        }
        if rc != 0 {
            return Err(*Box::from_raw(arg as *mut F));
        }
    }
    Ok(())
}

/// The new thread's first function: takes its closure and runs it.
extern "C" fn start<F: FnOnce()>(arg: *mut c_void) -> *mut c_void {
    // SAFETY: `arg` is the box `spawn` gave up to this thread alone.
    let run = unsafe { Box::from_raw(arg as *mut F) };
    run();
    std::ptr::null_mut()
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    #[test]
    fn a_thread_runs_its_closure_and_a_refused_one_comes_back() {
        let (tx, rx) = mpsc::channel();
        assert!(super::spawn(64 * 1024, move || tx.send(7).unwrap()).is_ok());
        assert_eq!(rx.recv().unwrap(), 7);
        // A stack larger than the address space cannot be mapped: the
        // closure, and what it holds, comes back.
        let held = String::from("still mine");
        let back = super::spawn(usize::MAX / 2, move || drop(held)).expect_err("refused");
        back();
    }
}
