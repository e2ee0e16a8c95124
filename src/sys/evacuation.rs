//! Emptying the pages that a few live blocks pin, so that what was freed
//! around them serves any later need: a thread's stack, a big job, a
//! connection's buffers, all of which want whole pages.
//!
//! A page goes back to the system only when its last block is freed. Keep
//! one job in two, or in sixteen, of a queue that filled the address space,
//! and no page comes free: half the memory is free, in slots of one size,
//! usable by blocks of that size alone. So when memory runs short (a
//! connection's buffers cannot be had), the server asks [`evacuate`]
//! to choose, in each size class, pages from the highest address down
//! whose blocks fit in the free slots of the class's other pages. The
//! chosen pages leave the list of pages with room, so no new block lands
//! in them (unless no other page can be had at all), and the engine
//! copies every job body that [`Evacuation::holds`] into a new block,
//! which comes from another page; a page whose last block goes is given
//! back like any empty page. When the [`Evacuation`] is dropped, the pages
//! still holding blocks (a connection's buffer, which only its owner
//! could move) rejoin their list.
//!
//! The chosen pages are kept as their addresses, sorted, so that asking
//! about a block reads nothing at its address: a block from another
//! allocator (a test's, or an embedder's who kept their own) is simply not
//! held, and a server not using this allocator chooses nothing.
//!
//! It must not move anything itself: what owns a block decides whether it
//! moves.

use std::sync::{Mutex, MutexGuard, TryLockError};

use super::pages::{link, unlink, Page, CLASSES, CLASS_STATE, HEADER};
use super::regions::PAGE;

/// The most pages one evacuation empties (64 MiB of them): their
/// addresses are kept in a fixed table, so that choosing allocates nothing
/// when memory is short. Its 64 KiB are address space the process holds
/// from the start, so it is kept small; a bigger mess takes more rounds.
const MOST_PAGES: usize = 4096;

/// The pages chosen: `(address, 0)` pairs, sorted (pairs, as the engine
/// sorts, so that the binary holds one sort); while choosing, a class's
/// candidates follow them.
struct Chosen {
    pages: [(u64, u64); MOST_PAGES],
    len: usize,
    /// Some class had more pages with room than the table could weigh.
    cut: bool,
}

static CHOSEN: Mutex<Chosen> = Mutex::new(Chosen { pages: [(0, 0); MOST_PAGES], len: 0, cut: false });

/// Pages being emptied; see the module documentation. Dropping it ends
/// the evacuation.
pub struct Evacuation {
    chosen: MutexGuard<'static, Chosen>,
}

/// Chooses the pages worth emptying; `None` if there are none (or another
/// evacuation is under way).
pub fn evacuate() -> Option<Evacuation> {
    let mut chosen = match CHOSEN.try_lock() {
        Ok(chosen) => chosen,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return None,
    };
    (chosen.len, chosen.cut) = (0, false);
    for c in 0..CLASSES.len() {
        choose(c, &mut chosen);
    }
    let len = chosen.len;
    chosen.pages[..len].sort_unstable();
    let evacuation = Evacuation { chosen };
    (len > 0).then_some(evacuation)
}

impl Evacuation {
    /// Whether `block` lies in a page being emptied: a block to move.
    pub fn holds(&self, block: &[u8]) -> bool {
        let page = block.as_ptr() as u64 & !(PAGE as u64 - 1);
        self.chosen.pages[..self.chosen.len].binary_search(&(page, 0)).is_ok()
    }

    /// How many pages are being emptied.
    pub fn pages(&self) -> usize {
        self.chosen.len
    }

    /// Whether the choice ran out of table: more pages may be worth
    /// emptying once these are.
    pub fn is_full(&self) -> bool {
        self.chosen.cut
    }
}

impl Drop for Evacuation {
    fn drop(&mut self) {
        for state in &CLASS_STATE {
            let mut class = state.lock().unwrap_or_else(|e| e.into_inner());
            while !class.evacuating.is_null() {
                let page = class.evacuating;
                // SAFETY: `page` heads this class's list of pages being
                // emptied, so it is a live page of the class, with room
                // (nothing was allocated in it), and the lock is held.
                unsafe {
                    unlink(&mut class.evacuating, page);
                    (*page).evacuating = false;
                    link(&mut class.with_room, page);
                }
            }
        }
    }
}

/// Chooses pages of class `c`, from the highest address down, while their
/// blocks fit in the free slots of the pages left. By address rather than
/// emptiest first, so that the pages emptied lie side by side: a run of
/// free pages goes back to the system as one hole, or a whole region,
/// where as many scattered ones would each take one of the kernel's maps,
/// which are counted (`holes.rs`).
fn choose(c: usize, chosen: &mut Chosen) {
    let slots = (PAGE - HEADER) / CLASSES[c];
    let mut class = CLASS_STATE[c].lock().unwrap_or_else(|e| e.into_inner());
    // The class's pages with room, as (highest address first, blocks),
    // after those chosen from other classes.
    let first = chosen.len;
    let mut room = 0;
    let mut page = class.with_room;
    while !page.is_null() && chosen.len < MOST_PAGES {
        // SAFETY: every page on the list is a live page of this class, and
        // the lock is held.
        let live = unsafe { (*page).live }.min(slots);
        chosen.pages[chosen.len] = (u64::MAX - page as u64, live as u64);
        chosen.len += 1;
        room += slots - live;
        page = unsafe { (*page).next };
    }
    chosen.cut |= !page.is_null();
    let candidates = &mut chosen.pages[first..chosen.len];
    candidates.sort_unstable();
    // The pages taken gather at the front, in order.
    let (mut moving, mut taken) = (0, 0);
    for at in 0..candidates.len() {
        let live = candidates[at].1 as usize;
        // A page whose blocks do not fit is passed over: a lower, emptier
        // one may.
        if moving + live <= room - (slots - live) {
            (moving, room) = (moving + live, room - (slots - live));
            candidates[taken] = candidates[at];
            taken += 1;
        }
    }
    for entry in &mut candidates[..taken] {
        let page = (u64::MAX - entry.0) as *mut Page;
        // SAFETY: `page` was on this class's list of pages with room a
        // moment ago, under the lock still held: it is there still.
        unsafe {
            unlink(&mut class.with_room, page);
            (*page).evacuating = true;
            link(&mut class.evacuating, page);
        }
        *entry = (page as u64, 0);
    }
    chosen.len = first + taken;
}

#[cfg(test)]
mod tests {
    use super::super::pages::{alloc, dealloc};
    use super::*;

    #[test]
    fn a_page_of_a_few_blocks_is_emptied_into_the_others_and_goes() {
        let _alone = super::super::pages::tests::ALONE.lock().unwrap_or_else(|e| e.into_inner());
        // A class no other test uses: 2,560 bytes, six a page.
        let size = 2_500;
        let blocks: Vec<*mut u8> = (0..60).map(|_| alloc(size)).collect();
        assert!(blocks.iter().all(|b| !b.is_null()));
        // Keep one block in six: ten pages with one block each.
        let mut kept = Vec::new();
        for (n, &b) in blocks.iter().enumerate() {
            if n % 6 == 0 {
                kept.push(b);
            } else {
                // SAFETY: allocated above with this size, used no more.
                unsafe { dealloc(b, size) };
            }
        }
        let evacuation = evacuate().expect("pages worth emptying");
        let held: Vec<*mut u8> = (kept.iter().copied())
            .filter(|&b| {
                // SAFETY: a live block of `size` bytes.
                evacuation.holds(unsafe { std::slice::from_raw_parts(b, size) })
            })
            .collect();
        // Ten blocks in ten pages of six slots: pages go while their blocks
        // fit the others' free slots, so all but two.
        assert!(held.len() >= 8, "{} of {} chosen", held.len(), kept.len());
        for &b in &held {
            let moved = alloc(size);
            assert!(!moved.is_null());
            // SAFETY: `moved` is a fresh block of `size` bytes; `b` is used
            // no more.
            unsafe {
                assert!(
                    !evacuation.holds(std::slice::from_raw_parts(moved, size)),
                    "chosen pages take no block"
                );
                dealloc(b, size);
            }
            kept.push(moved);
        }
        assert!(!evacuation.holds(&[1u8][..]), "another allocator's block is never held");
        drop(evacuation);
        kept.retain(|b| !held.contains(b));
        let pages = |blocks: &[*mut u8]| {
            let mut pages: Vec<usize> = blocks.iter().map(|&b| b as usize & !(PAGE - 1)).collect();
            pages.sort_unstable();
            pages.dedup();
            pages.len()
        };
        assert!(pages(&kept) <= 2, "ten blocks in {} pages of six", pages(&kept));
        for b in kept {
            // SAFETY: allocated above with this size, used no more.
            unsafe { dealloc(b, size) };
        }
    }
}
