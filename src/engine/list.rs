//! An intrusive doubly linked list of jobs, threaded through the jobs
//! themselves: O(1) append, O(1) removal from anywhere, O(1) front.
//!
//! Two lists use it: each tube's buried jobs (a FIFO: bury appends, kick takes
//! the front, delete and kick-job unlink from the middle) and each client's
//! reserved jobs (in the order they were reserved, which is the order they go
//! back to ready when the client disconnects). A job is never buried and
//! reserved at once, so one pair of links per job serves both.

use super::job::Links;
use super::table::JobTable;
use crate::ids::JobId;

/// The ends of one list.
#[derive(Debug, Default)]
pub struct List {
    head: JobId,
    tail: JobId,
    len: usize,
}

impl List {
    /// Number of jobs in the list.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The job at the back, the last added.
    pub fn back(&self) -> Option<JobId> {
        (self.tail != 0).then_some(self.tail)
    }

    /// True when the list holds no job.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The oldest job, if any.
    pub fn front(&self) -> Option<JobId> {
        (self.head != 0).then_some(self.head)
    }

    /// Appends `id`, whose links must not be in use.
    pub fn push_back(&mut self, jobs: &mut JobTable, id: JobId) {
        let old_tail = self.tail;
        if let Some(job) = jobs.get_mut(&id) {
            job.links = Links { prev: old_tail, next: 0 };
        }
        match jobs.get_mut(&old_tail) {
            Some(tail) => tail.links.next = id,
            None => self.head = id,
        }
        self.tail = id;
        self.len += 1;
    }

    /// Unlinks `id`, which must be in this list.
    pub fn remove(&mut self, jobs: &mut JobTable, id: JobId) {
        let Some(job) = jobs.get_mut(&id) else { return };
        let Links { prev, next } = std::mem::take(&mut job.links);
        match jobs.get_mut(&prev) {
            Some(p) => p.links.next = next,
            None => self.head = next,
        }
        match jobs.get_mut(&next) {
            Some(n) => n.links.prev = prev,
            None => self.tail = prev,
        }
        self.len -= 1;
    }

    /// The ids from oldest to newest.
    pub fn ids<'a>(&self, jobs: &'a JobTable) -> impl Iterator<Item = JobId> + 'a {
        let mut cursor = self.head;
        std::iter::from_fn(move || {
            let id = cursor;
            cursor = jobs.get(&id)?.links.next;
            Some(id)
        })
    }
}
