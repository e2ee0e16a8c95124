//! `put`, in its three steps: [`Engine::start_put`] allocates the id and
//! claims memory before the body is read, then exactly one of
//! [`Engine::put`] (the body arrived) or [`Engine::cancel_put`] (it did
//! not) follows. The connection keeps to that rule; nothing else creates a
//! job.

use super::job::Tags;
use super::*;
use crate::protocol::TagName;

impl Engine {
    /// Counts a put whose line parsed (reference §3.1 step 2).
    pub fn count_put(&mut self) {
        self.cmds.put += 1;
    }

    /// Marks the client a producer and allocates the job's id, before its
    /// body of `bytes` bytes is read; the id is used up even if the put then
    /// fails. `None` when the memory limit, or the memory the system gives,
    /// leaves no room for the job: the put is refused with `OUT_OF_MEMORY`
    /// before its body is read; so is every put once the id range is spent.
    /// The ticket is spent by [`Engine::put`] or [`Engine::cancel_put`].
    pub fn start_put(&mut self, c: ClientId, bytes: u32) -> Option<PutTicket> {
        if let Some(client) = self.clients.get_mut(&c) {
            if !client.producer {
                client.producer = true;
                self.producers += 1;
            }
        }
        if self.next_job_id == NO_ID_LEFT {
            // The id range is spent (reference §7.1): no job can be told
            // apart from the others any more, so none is taken.
            return None;
        }
        let cost = u64::from(bytes) + JOB_MEMORY_OVERHEAD;
        if self.over_memory_limit(cost) {
            return None;
        }
        // Room in every structure the job may ever enter, claimed now: once
        // the body is accepted, nothing about the job can fail to allocate,
        // then or later. Any job of a tube can come to be ready or delayed,
        // and any job reserved, so those heaps keep room for all of them
        // (room that is claimed but not written costs address space, not
        // memory), counting the puts whose bodies are still arriving.
        let used = self.clients.get(&c).map(|client| client.used)?;
        let coming = self.puts_in_flight + 1;
        let tube = self.tubes.get_mut(used);
        let in_tube = tube.job_count() + coming;
        let room = tube.ready.try_make_room_for(in_tube)
            && tube.delayed.try_make_room_for(in_tube)
            && self.reserved.try_make_room_for(self.jobs.len() + coming)
            && self.jobs.try_make_room(self.next_job_id);
        if !room {
            return None;
        }
        self.puts_in_flight += 1;
        self.job_memory += cost;
        let id = self.next_job_id;
        self.next_job_id = self.id_range.after(id);
        if self.next_job_id == NO_ID_LEFT {
            crate::log::problem(format_args!(
                "job ids spent: {} has no id after {id}; every later put is answered OUT_OF_MEMORY",
                self.id_range.flags()
            ));
        }
        Some(PutTicket { id, bytes })
    }

    /// Gives back the memory claimed by [`Engine::start_put`] for a body that
    /// never arrived intact. The id stays used up.
    pub fn cancel_put(&mut self, ticket: PutTicket) {
        self.puts_in_flight -= 1;
        self.release_job_memory(ticket.bytes as usize);
    }

    /// Whether `more` bytes would take what jobs bring past
    /// `--max-job-memory`: bodies and records, and what their tags keep
    /// in the indexes beside the job table (each unique key, concurrency
    /// key and group name once, and each job's entries).
    pub(super) fn over_memory_limit(&self, more: u64) -> bool {
        self.memory_limit.is_some_and(|limit| self.counted_memory() + more > limit)
    }

    /// What `--max-job-memory` counts now (reference §3.1a, "Memory").
    pub(super) fn counted_memory(&self) -> u64 {
        let tags = &self.tubes;
        let indexes = tags.keys.memory() + tags.limits.memory() + tags.con.memory() + tags.groups.memory();
        self.job_memory + indexes
    }

    /// Gives back what [`Engine::start_put`] took for a put that stores
    /// nothing: its memory, and its id, if no other put took one since.
    pub(super) fn give_back(&mut self, ticket: &PutTicket) {
        self.release_job_memory(ticket.bytes as usize);
        if ticket.id.checked_add(self.id_range.step) == Some(self.next_job_id) {
            self.next_job_id = ticket.id;
        }
    }

    /// Gives back the memory a job of `body_len` bytes was counted for: its
    /// put failed, or it was deleted.
    pub(super) fn release_job_memory(&mut self, body_len: usize) {
        let cost = body_len as u64 + JOB_MEMORY_OVERHEAD;
        self.job_memory = self.job_memory.saturating_sub(cost);
    }

    /// Inserts a job whose body arrived intact into the client's used tube.
    pub fn put(&mut self, c: ClientId, new: NewJob, now: Time) -> Reply<'_> {
        // The ticket is spent: the job is filed now, or never.
        self.puts_in_flight -= 1;
        if self.draining {
            self.release_job_memory(new.ticket.bytes as usize);
            return Reply::Draining;
        }
        let Some(client) = self.clients.get(&c) else {
            return Reply::InternalError;
        };
        let tube = client.used;
        // Most puts have no tags, and look at none of what tags need.
        let id = new.ticket.id;
        let tags = if new.tags.is_empty() {
            Tags::default()
        } else {
            match self.file_put_tags(tube, &new, now) {
                Ok(tags) => tags,
                Err(answer) => return answer,
            }
        };
        let job = Job {
            tube,
            pri: new.pri,
            delay: new.delay,
            ttr: new.ttr.max(1),
            // What it is about to become, so that its log record says so:
            // held, a restart holds it again (reference §3.1d).
            state: if new.delay > 0 {
                State::Delayed
            } else if tags.after() && self.tubes.groups.waits(id) {
                State::Held
            } else {
                State::Ready
            },
            counters: Counters::default(),
            created: new.created,
            deadline: now.plus_secs(new.delay),
            reserved_by: ClientId::default(),
            heap_index: 0,
            links: Default::default(),
            work_started: Default::default(),
            file: 0,
            body: Body::InMemory(new.body),
            tags,
        };
        let claimed = self.journal_has_room(&mut |journal, _, tubes| {
            let now = Some(journal::Picture::of(&job).logged(id, tubes, job.body.logged()));
            journal.claim(&Change { was: None, now })
        });
        if !claimed {
            // No disk space: the id stays used up, the job is forgotten.
            self.tubes.keys.forget(id);
            self.tubes.limits.forget(id);
            self.tubes.con.forget(id);
            self.tubes.groups.forget(id);
            self.release_job_memory(job.body.in_memory());
            return Reply::OutOfMemory;
        }
        self.jobs.insert(id, job);
        // Logged before it is queued: if the write fails, no client can have
        // seen the job, and it is forgotten as if never put.
        if !self.journal_record(id, None) {
            if let Some(job) = self.jobs.remove(&id) {
                self.release_job_memory(job.body.in_memory());
            }
            self.tubes.keys.forget(id);
            self.tubes.limits.forget(id);
            self.tubes.con.forget(id);
            self.tubes.groups.forget(id);
            return Reply::InternalError;
        }
        self.total_jobs += 1;
        self.tubes.get_mut(tube).total_jobs += 1;
        if new.delay > 0 {
            self.make_delayed(id, now.plus_secs(new.delay));
        } else {
            self.make_ready_or_held(id, now);
        }
        // Handed over to a waiting worker (from memory) by now: its body
        // may stay in the log alone (`body.rs`).
        if let Some((kept, file, place)) = self.bodies.put.take() {
            if kept == id && self.jobs.get(&id).is_some_and(|job| job.file == file) {
                self.keep_body_in_log(id, place);
            }
        }
        self.compact();
        // A key whose limit this put raised may let a held-back job go to
        // a worker blocked in another tube.
        self.serve_freed(now);
        Reply::Inserted(id)
    }

    /// Claims what job `new.ticket.id`'s tags need, then files them in the
    /// tables beside the job table (before the log is told, so that its
    /// record holds them): its retry limit, concurrency key, groups and
    /// unique key. The job's tags, or the put's answer, nothing filed: out
    /// of memory, or a unique key that names a job already. Its own frame,
    /// never inlined: every loop runs `put`, most without
    /// tags, and need not touch the stack their claims take.
    #[inline(never)]
    fn file_put_tags(&mut self, tube: TubeId, new: &NewJob, now: Time) -> Result<Tags, Reply<'static>> {
        let limit = new.tags.limit;
        let out_of_memory = |e: &mut Engine| {
            e.release_job_memory(new.ticket.bytes as usize);
            Reply::OutOfMemory
        };
        let (group, after) = (new.tags.name(TagName::Group), new.tags.name(TagName::After));
        // What the tags add to the memory the cap counts, a unique key's
        // aside: `check_key` adds that, if the key is new (a key that
        // names a job stores nothing, and is answered whatever the cap).
        let limit_memory = if limit.is_some() { TAG_ENTRY_MEMORY } else { 0 };
        let con_memory = new.tags.con_name().map_or(0, |(name, _)| self.tubes.con.memory_of(name));
        let group_memory = match (group, after) {
            (None, None) => 0,
            _ => self.tubes.groups.memory_of(group, after),
        };
        let tags_memory = limit_memory + con_memory + group_memory;
        if new.tags.name(TagName::Key).is_none() && self.over_memory_limit(tags_memory) {
            // As a put refused before its body: no id used up.
            self.give_back(&new.ticket);
            return Err(Reply::OutOfMemory);
        }
        if limit.is_some() && !self.tubes.limits.try_make_room() {
            return Err(out_of_memory(self));
        }
        let con = match new.tags.con_name() {
            Some((name, _)) => match self.tubes.con.claim(name) {
                Some(claim) => Some(claim),
                None => return Err(out_of_memory(self)),
            },
            None => None,
        };
        let groups = match (group, after) {
            (None, None) => None,
            _ => match self.tubes.groups.claim(group, after) {
                Some(claim) => Some(claim),
                None => return Err(out_of_memory(self)),
            },
        };
        // A put with a unique key that names a job stores nothing
        // (`keyed.rs`); a new key's memory is claimed here.
        let key = self.check_tagged_key(tube, new, tags_memory, now)?;
        let id = new.ticket.id;
        let tags = Tags::of(key.is_some(), limit.is_some())
            .with_con(con.is_some())
            .with_groups(group.is_some(), after.is_some());
        if let Some((claim, cooldown)) = key {
            self.tubes.keys.insert(id, claim, cooldown);
        }
        if let Some(reserves) = limit {
            self.tubes.limits.insert(id, reserves);
        }
        if let (Some(claim), Some((name, limit))) = (con, new.tags.con_name()) {
            self.tubes.con.insert(id, name, limit, claim);
        }
        if let Some(claim) = groups {
            self.tubes.groups.insert(id, group, after, claim);
        }
        Ok(tags)
    }

    /// [`Engine::check_key`] for a put's unique key, if it names one, its
    /// other tags taking `tags_memory` more, and the key's cooldown. Its own frame, never inlined: the key it
    /// unpacks is 200 bytes of name, and every loop runs
    /// `put`, most of them without a key, so they need not touch the
    /// stack it takes.
    #[inline(never)]
    fn check_tagged_key(
        &mut self,
        tube: TubeId,
        new: &NewJob,
        tags_memory: u64,
        now: Time,
    ) -> Result<Option<(super::unique::KeyClaim, u32)>, Reply<'static>> {
        let Some(key) = new.tags.key() else {
            return Ok(None);
        };
        let claim = self.check_key(tube, &key, &new.ticket, new.pri, tags_memory, now)?;
        Ok(Some((claim, key.cooldown)))
    }
}
