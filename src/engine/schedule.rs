//! Time-driven work: TTRs running out, delayed jobs maturing, pauses
//! ending ([`Engine::tick`], run by the timer thread, and
//! [`Engine::catch_up`], run before every command), and `pause-tube`. Only
//! tubes that wait on time are visited, through the tubes' timetable.

use super::*;

impl Engine {
    /// `pause-tube <tube> <delay>`. `tube` is `None` for a name the parser
    /// found illegal after the command was already counted.
    pub fn pause_tube(&mut self, tube: Option<&TubeName>, delay: u32, now: Time) -> Reply<'_> {
        self.cmds.pause_tube += 1;
        let Some(name) = tube else {
            return Reply::BadFormat;
        };
        let Some(t) = self.tubes.find(name) else {
            return Reply::NotFound;
        };
        let tube = self.tubes.get_mut(t);
        tube.cmd_pause_tube += 1;
        if delay == 0 {
            // beanstalkd stores 0 as a 1 ns pause: it ends at once.
            tube.pause = None;
            self.tubes.reschedule(t);
            self.serve_waiters(t, now);
        } else {
            let until = now.plus_secs(delay);
            tube.pause = Some(Pause { secs: delay, until });
            self.tubes.reschedule(t);
            self.schedule(until);
        }
        Reply::Paused
    }

    /// Brings the engine up to `now`: runs whatever fell due that the timer
    /// thread has not got to yet (it may be waiting for the lock). O(1) when
    /// nothing is due. Every command is answered after this, as beanstalkd
    /// runs its timers before each event, so no command ever sees a
    /// reservation whose TTR has run out, or a delay that has ended, as if
    /// it had not.
    pub fn catch_up(&mut self, now: Time) {
        if self.next_due().is_some_and(|due| due <= now) {
            self.tick(now);
        }
    }

    /// Runs everything due at `now`: TTRs that ran out, delayed jobs that
    /// matured, pauses that ended. Returns when something is next due.
    pub fn tick(&mut self, now: Time) -> Option<Time> {
        while let Some((deadline, id)) = self.reserved.peek() {
            if deadline > now {
                break;
            }
            let holder = self.jobs.get(&id).map_or(ClientId::default(), |job| job.reserved_by);
            // A job its retry limit buries ends its work `buried`.
            let spent = self.tries_spent(id);
            self.end_work(
                id,
                if spent { metering::WorkEnd::Buried } else { metering::WorkEnd::TimedOut },
                now,
            );
            self.unlink(id);
            if let Some(job) = self.jobs.get_mut(&id) {
                job.counters.timeouts = job.counters.timeouts.wrapping_add(1);
            }
            self.job_timeouts += 1;
            self.withdraw_handoff(holder, id, now);
            if !(spent && self.bury_spent(id, now, "its TTR ran out")) {
                self.make_ready(id, now);
            }
        }
        self.serve_freed(now);
        // Only tubes with something due are visited: a tube waiting on
        // nothing, or on something later, costs nothing here.
        let due = self.tubes.take_due(now);
        for &(_, t) in &due {
            let t = t as TubeId;
            while let Some((due, id)) = self.tubes.get(t).delayed.peek() {
                if due > now {
                    break;
                }
                self.unlink(id);
                // Held instead if it waits for a group with a member.
                self.make_ready_or_held(id, now);
            }
            let tube = self.tubes.get_mut(t);
            if tube.pause.is_some_and(|p| p.until <= now) {
                tube.pause = None;
                self.tubes.reschedule(t);
                self.serve_waiters(t, now);
            }
        }
        self.tubes.return_due(due);
        self.end_cooldowns(now);
        self.timer_due = self.next_due();
        self.timer_due
    }

    /// The earliest time at which [`Engine::tick`] has work to do.
    pub fn next_due(&self) -> Option<Time> {
        let reservation_ends = self.reserved.peek().map(|(at, _)| at);
        let cooldown_ends = self.tubes.keys.next_end();
        // Held jobs still to be let go, a piece a tick (`groups.rs`).
        let letting_go = self.letting_go().then_some(Time::ZERO);
        let soonest = reservation_ends.into_iter().chain(self.tubes.next_event()).chain(cooldown_ends);
        soonest.chain(letting_go).min()
    }

    /// Asks the timer thread to wake by `at` if it planned to sleep longer.
    pub(super) fn schedule(&mut self, at: Time) {
        if self.timer_due.is_none_or(|due| at < due) {
            self.timer_due = Some(at);
            if let Some(timer) = &self.timer {
                timer.notify_one();
            }
        }
    }
}
