//! Moving job bodies to new blocks, when the allocator asks: how the
//! server empties the pages that a few live jobs pin (`sys/evacuation.rs`
//! says why and chooses the pages). The engine decides nothing here but
//! that a body whose copy cannot be had stays where it is; no job, queue
//! or reply changes, and nothing is logged, since only addresses change.

use super::Engine;

impl Engine {
    /// Copies the job bodies for which `moves` says yes into new blocks,
    /// and frees the old ones, from slab slot `from` on, until `most` have
    /// moved or sixteen times as many were looked at: how many moved, and
    /// the slot to go on from, if any are left. So the caller holds the
    /// lock for a bounded time (freeing the last block of a page is a
    /// system call). Each copy is claimed on its own: one that cannot be
    /// had leaves that body where it was.
    pub fn move_bodies(
        &mut self,
        from: usize,
        most: usize,
        moves: &dyn Fn(&[u8]) -> bool,
    ) -> (usize, Option<usize>) {
        let (mut moved, mut seen) = (0, 0);
        for (slot, body) in self.jobs.bodies_from(from) {
            if moved == most || seen / 16 == most {
                return (moved, Some(slot));
            }
            seen += 1;
            if moves(body) {
                let mut copy = Vec::new();
                if copy.try_reserve_exact(body.len()).is_ok() {
                    copy.extend_from_slice(body);
                    *body = copy.into_boxed_slice();
                    moved += 1;
                }
            }
        }
        (moved, None)
    }
}

#[cfg(test)]
mod tests {
    use super::super::proofs::tests::{client, engine, put};
    use crate::time::Time;

    fn body_of(e: &crate::engine::Engine, id: crate::engine::JobId) -> &[u8] {
        e.jobs[&id].body.bytes().unwrap()
    }

    #[test]
    fn the_bodies_asked_for_move_and_keep_their_bytes() {
        let mut e = engine();
        let c = client(&mut e);
        let ids: Vec<_> = (0..5).map(|_| put(&mut e, c, 0, 0, 60, Time::ZERO)).collect();
        let before: Vec<_> =
            ids.iter().map(|id| (body_of(&e, *id).to_vec(), body_of(&e, *id).as_ptr())).collect();
        let first = before[0].1;
        assert_eq!(e.move_bodies(0, 2, &|body| body.as_ptr() != first), (2, Some(3)), "two, then stop");
        assert_eq!(e.move_bodies(3, 2, &|body| body.as_ptr() != first), (2, None), "and on to the end");
        for (id, (bytes, at)) in ids.iter().zip(&before) {
            assert_eq!(body_of(&e, *id), &bytes[..], "the same bytes");
            assert_eq!(body_of(&e, *id).as_ptr() == *at, *at == first, "moved unless kept");
        }
    }
}
