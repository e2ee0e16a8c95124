//! The live jobs of a directory being read, found by id and kept compact
//! ([`LiveJobs`]), so that the offline reader holds a big log in memory.
//!
//! It stores and finds; it must not decide which jobs are live or what
//! they hold (the records do, applied in `read.rs`).

use super::Job;
use crate::engine::IdMap;
use crate::ids::JobId;

/// The live jobs, in one vector found by id through a map of indices:
/// about half the memory of a map of jobs, and sorted in place at the end
/// rather than copied, so a million jobs fit in a few hundred bytes each.
#[derive(Default)]
pub(super) struct LiveJobs {
    list: Vec<Job>,
    at: IdMap<u32>,
}

impl LiveJobs {
    pub(super) fn get(&self, id: &JobId) -> Option<&Job> {
        self.list.get(*self.at.get(id)? as usize)
    }

    pub(super) fn get_mut(&mut self, id: &JobId) -> Option<&mut Job> {
        self.list.get_mut(*self.at.get(id)? as usize)
    }

    pub(super) fn insert(&mut self, id: JobId, job: Job) {
        match self.at.get(&id) {
            Some(&i) => self.list[i as usize] = job,
            None => {
                self.at.insert(id, self.list.len() as u32);
                self.list.push(job);
            }
        }
    }

    pub(super) fn remove(&mut self, id: &JobId) {
        let Some(i) = self.at.remove(id) else { return };
        self.list.swap_remove(i as usize);
        if let Some(moved) = self.list.get(i as usize) {
            self.at.insert(moved.id, i);
        }
    }

    /// Every job, by id, with the index let go first.
    pub(super) fn into_sorted(self) -> Vec<Job> {
        let LiveJobs { mut list, at } = self;
        drop(at);
        list.sort_unstable_by_key(|j| j.id);
        list
    }
}
