//! Questions that change no job: `peek*`, `stats-job`, `stats-tube`,
//! `stats`, the `list-*` commands, and the small queries other commands
//! share (which tube a client uses, whether a job is reserved by it). Only
//! the `cmd-*` counters move.

use super::*;

impl Engine {
    /// `peek <id>`: any job, any state.
    pub fn peek(&mut self, id: JobId) -> Reply<'_> {
        self.cmds.peek += 1;
        self.found(Some(id))
    }

    /// `peek-ready`: the next job a reserve on the used tube would get
    /// (pause ignored).
    pub fn peek_ready(&mut self, c: ClientId) -> Reply<'_> {
        self.cmds.peek_ready += 1;
        let id = self.used_tube(c).and_then(|t| self.tubes.get(t).ready.peek()).map(|(_, id)| id);
        self.found(id)
    }

    /// `peek-delayed`: the used tube's delayed job that is due soonest.
    pub fn peek_delayed(&mut self, c: ClientId) -> Reply<'_> {
        self.cmds.peek_delayed += 1;
        let id = self.used_tube(c).and_then(|t| self.tubes.get(t).delayed.peek()).map(|(_, id)| id);
        self.found(id)
    }

    /// `peek-buried`: the used tube's oldest buried job.
    pub fn peek_buried(&mut self, c: ClientId) -> Reply<'_> {
        self.cmds.peek_buried += 1;
        let id = self.used_tube(c).and_then(|t| self.tubes.get(t).buried.front());
        self.found(id)
    }

    /// `peek-reserved` (tuber's, reference §3.27): the used tube's reserved
    /// job with the lowest id, whoever holds it. Nothing indexes reserved
    /// jobs by tube (a second heap slot would cost every job 8 bytes), so
    /// when the tube has any, this is one pass over the server's reserved
    /// jobs (tuber walks every job); a tube with none answers at once.
    pub fn peek_reserved(&mut self, c: ClientId) -> Reply<'_> {
        let id = self.used_tube(c).filter(|&t| self.tubes.get(t).reserved > 0).and_then(|t| {
            let in_tube = |id: &JobId| self.jobs.get(id).is_some_and(|job| job.tube == t);
            self.reserved.iter().map(|(_, id)| id).filter(in_tube).min()
        });
        self.found(id)
    }

    /// `stats-job <id>`.
    pub fn stats_job(&mut self, id: JobId, now: Time) -> Reply<'_> {
        self.cmds.stats_job += 1;
        match self.job_stats(id, now) {
            Some(stats) => stats.to_yaml().map_or(Reply::OutOfMemory, Reply::Ok),
            None => Reply::NotFound,
        }
    }

    /// Job `id`'s `stats-job` figures at `now`, if it exists.
    pub(super) fn job_stats(&self, id: JobId, now: Time) -> Option<JobStats<'_>> {
        let job = self.jobs.get(&id)?;
        let time_left = match job.state {
            State::Reserved | State::Delayed => job.deadline.secs_since(now),
            // A held job has no due time: tuber shows 0.
            State::Ready | State::Buried | State::Held => 0,
        };
        let stats = JobStats {
            id,
            tube: &self.tubes.get(job.tube).name,
            state: job.state.name(),
            pri: job.pri,
            age: now.secs_since(job.created),
            delay: job.delay,
            ttr: job.ttr,
            time_left,
            file: u64::from(job.file),
            counters: job.counters,
            tuber: job.tags.tuber().then(|| crate::stats::TuberFields {
                key: self.tubes.keys.logged(id).map(|key| (key.key, key.cooldown)),
                con: self.tubes.con.of(id),
                groups: self.tubes.groups.of(id),
            }),
            max_reserves: (job.tags.limited() || job.tags.buried_by_limit()).then(|| self.retry_limit(id)),
            buried_by_limit: job.tags.buried_by_limit(),
        };
        Some(stats)
    }

    /// `stats-tube <tube>`.
    pub fn stats_tube(&mut self, name: &TubeName, now: Time) -> Reply<'_> {
        self.cmds.stats_tube += 1;
        let Some(t) = self.tubes.find(name) else {
            return Reply::NotFound;
        };
        self.tube_stats(t, now).to_yaml().map_or(Reply::OutOfMemory, Reply::Ok)
    }

    /// Tube `t`'s figures at `now`, for `stats-tube` and `--metrics`.
    pub(super) fn tube_stats(&self, t: TubeId, now: Time) -> TubeStats {
        let tube = self.tubes.get(t);
        TubeStats {
            name: tube.name.clone(),
            jobs: JobCounts {
                urgent: tube.urgent,
                ready: tube.ready.len(),
                reserved: tube.reserved,
                delayed: tube.delayed.len(),
                buried: tube.buried.len(),
                buried_by_limit: tube.buried_by_limit,
            },
            total_jobs: tube.total_jobs,
            using: tube.using,
            watching: tube.watching,
            waiting: tube.waiting.len(),
            cmd_delete: tube.cmd_delete,
            cmd_pause_tube: tube.cmd_pause_tube,
            pause: tube.pause.map_or(0, |p| p.secs),
            pause_time_left: tube.pause.map_or(0, |p| p.until.secs_since(now)),
        }
    }

    /// `stats`: the engine's part of the server stats (the caller adds the
    /// process's own figures).
    pub fn server_stats(&mut self) -> ServerStats {
        self.cmds.stats += 1;
        self.figures()
    }

    /// The engine's part of the server stats, as they stand.
    pub(super) fn figures(&self) -> ServerStats {
        ServerStats {
            jobs: self.job_counts,
            cmds: self.cmds,
            job_timeouts: self.job_timeouts,
            total_jobs: self.total_jobs,
            max_job_size: self.max_job_size,
            current_tubes: self.tubes.len(),
            current_connections: self.clients.len(),
            producers: self.producers,
            workers: self.workers,
            waiting: self.waiting_clients,
            total_connections: self.total_connections,
            draining: self.draining,
            job_memory: self.counted_memory(),
            bodies_in_log: self.bodies.bytes,
            body_read_failures: self.bodies.read_failures,
        }
    }

    /// `list-tubes`.
    pub fn list_tubes(&mut self) -> Reply<'_> {
        self.cmds.list_tubes += 1;
        let names = self.tubes.ids().iter().map(|&t| self.tubes.get(t).name.as_str());
        crate::stats::list_yaml(names).map_or(Reply::OutOfMemory, Reply::Ok)
    }

    /// `list-tube-used`.
    pub fn list_tube_used(&mut self, c: ClientId) -> Reply<'_> {
        self.cmds.list_tube_used += 1;
        match self.used_tube(c) {
            Some(t) => Reply::Using(&self.tubes.get(t).name),
            None => Reply::InternalError,
        }
    }

    /// `list-tubes-watched`.
    pub fn list_tubes_watched(&mut self, c: ClientId) -> Reply<'_> {
        self.cmds.list_tubes_watched += 1;
        let Some(client) = self.clients.get(&c) else {
            return Reply::InternalError;
        };
        let names = client.watched.iter().map(|&t| self.tubes.get(t).name.as_str());
        crate::stats::list_yaml(names).map_or(Reply::OutOfMemory, Reply::Ok)
    }

    pub(super) fn used_tube(&self, c: ClientId) -> Option<TubeId> {
        self.clients.get(&c).map(|client| client.used)
    }

    pub(super) fn is_reserved_by(&self, id: JobId, c: ClientId) -> bool {
        self.jobs.get(&id).is_some_and(|job| job.state == State::Reserved && job.reserved_by == c)
    }

    pub(super) fn found(&self, id: Option<JobId>) -> Reply<'_> {
        match id.and_then(|id| Some((id, self.jobs.get(&id)?))) {
            Some((id, job)) => Reply::Found(id, job.body.data()),
            None => Reply::NotFound,
        }
    }
}
