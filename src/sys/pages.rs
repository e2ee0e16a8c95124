//! Small blocks (a job's body, a record) in pages of their own size: the
//! part of the binary's allocator that makes freed memory go back to the
//! system as it is freed, with no pass over anything and no pause.
//!
//! A simpler server would leave small blocks to `malloc`. Its heap keeps
//! what is freed, though: giving the middle of the heap back takes
//! `malloc_trim`, which walks every free block under the lock that every
//! thread's `malloc` needs. After a queue of millions of jobs is deleted in
//! a random order, one such walk held an idle client up for 73 ms.
//! Here each block size has its own 16 KiB pages, and a page's memory goes
//! back to the system the moment its last block is freed: a few
//! microseconds at a time, spread over the deletes that emptied it, under
//! a lock that only that size's allocations share.
//!
//! Each page starts with a [`Page`] header; the rest is slots of one size.
//! A page with a free slot is on its size's list of pages with room. A
//! block's page is found from its address (pages are aligned to their
//! size), and its size class from the layout the caller passes back.
//!
//! Empty pages come from `regions.rs` and go back to it; this file never
//! maps, unmaps or gives back memory itself.

use std::ptr;
use std::sync::Mutex;

use super::regions::{self, PAGE};

/// Room the header takes at the start of a page (a multiple of 16, so
/// that every slot stays 16-byte aligned).
pub(super) const HEADER: usize = 64;

/// The largest block served from pages, two to a page; bigger ones go to
/// `malloc` or a mapping of their own.
pub const LARGEST: usize = (PAGE - HEADER) / 2;

/// The size classes: 16-byte steps to 256, then four steps per doubling
/// to 3584, so that a block wastes at most a fifth of its slot; past that,
/// the largest slots of which four, three and two fit a page (a block of
/// 3.5 to 8 KiB takes a quarter, a third or half of a page, whatever its
/// slot).
pub(super) const CLASSES: [usize; 34] = [
    16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 320, 384, 448, 512, 640, 768,
    896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4080, 5440, LARGEST,
];

/// The class of a block of `size` bytes (1 to [`LARGEST`]).
fn class_of(size: usize) -> usize {
    CLASSES.partition_point(|&slot| slot < size)
}

/// Whether blocks of these two sizes share a slot size.
pub fn same_class(a: usize, b: usize) -> bool {
    class_of(a) == class_of(b)
}

/// A page's header. Free slots are a list threaded through the slots
/// themselves; slots never used yet are taken from `unused` onward.
pub(super) struct Page {
    /// Slots of the page in use.
    pub(super) live: usize,
    /// The first free slot, or null.
    free: *mut FreeSlot,
    /// Offset of the first slot never used yet.
    unused: usize,
    /// Neighbours on the class's list of pages with room, or, while it
    /// is being emptied, on its list of such pages.
    prev: *mut Page,
    pub(super) next: *mut Page,
    /// Being emptied (`evacuation.rs`): no new block goes into it.
    pub(super) evacuating: bool,
}

// The header fits the room kept for it.
const _: () = assert!(std::mem::size_of::<Page>() <= HEADER);

/// A free slot: it holds the next free slot of its page.
struct FreeSlot {
    next: *mut FreeSlot,
}

/// One size class: the pages with a free slot, the first to fill next,
/// and those being emptied (`evacuation.rs`), which are off that list.
pub(super) struct Class {
    pub(super) with_room: *mut Page,
    pub(super) evacuating: *mut Page,
}

// SAFETY: a Class is only ever touched under its Mutex; the pages it points
// to belong to it alone.
unsafe impl Send for Class {}

pub(super) static CLASS_STATE: [Mutex<Class>; CLASSES.len()] =
    [const { Mutex::new(Class { with_room: ptr::null_mut(), evacuating: ptr::null_mut() }) }; CLASSES.len()];

/// A new page aligned to [`PAGE`], its header set up; null if memory
/// cannot be had.
fn new_page() -> *mut Page {
    let start = regions::take_page();
    if start == 0 {
        return ptr::null_mut();
    }
    let page = start as *mut Page;
    // SAFETY: the page is mapped, writable, aligned, and ours alone: a
    // fresh one, or an empty one handed back by `release_page`.
    unsafe {
        page.write(Page {
            live: 0,
            free: ptr::null_mut(),
            unused: HEADER,
            prev: ptr::null_mut(),
            next: ptr::null_mut(),
            evacuating: false,
        })
    };
    page
}

/// Puts `page` at the front of `list`, one of a class's lists.
///
/// # Safety
/// `page` is a live page of this class, on no list; the class's lock is
/// held.
pub(super) unsafe fn link(list: &mut *mut Page, page: *mut Page) {
    // SAFETY: the caller's promise; the list's head, if any, is a live page.
    unsafe {
        (*page).prev = ptr::null_mut();
        (*page).next = *list;
        if !list.is_null() {
            (**list).prev = page;
        }
    }
    *list = page;
}

/// Takes `page` off `list`.
///
/// # Safety
/// `page` is on that list; the class's lock is held.
pub(super) unsafe fn unlink(list: &mut *mut Page, page: *mut Page) {
    // SAFETY: the caller's promise; its neighbours are live pages.
    unsafe {
        let (prev, next) = ((*page).prev, (*page).next);
        if prev.is_null() {
            *list = next;
        } else {
            (*prev).next = next;
        }
        if !next.is_null() {
            (*next).prev = prev;
        }
    }
}

/// A block of `size` bytes (1 to [`LARGEST`]), 16-byte aligned; null if
/// memory cannot be had.
pub fn alloc(size: usize) -> *mut u8 {
    let c = class_of(size);
    let slot = CLASSES[c];
    let mut class = CLASS_STATE[c].lock().unwrap_or_else(|e| e.into_inner());
    if class.with_room.is_null() {
        let mut page = new_page();
        if page.is_null() {
            // No page to be had: rather than fail, take back a page being
            // emptied (`evacuation.rs`), whose free slots are as good as
            // any when memory is this short.
            page = class.evacuating;
            if page.is_null() {
                return ptr::null_mut();
            }
            // SAFETY: the head of this class's list of pages being
            // emptied is a live page of the class with room; the lock is
            // held.
            unsafe {
                unlink(&mut class.evacuating, page);
                (*page).evacuating = false;
            }
        }
        // SAFETY: a page of this class on no list; the lock is held.
        unsafe { link(&mut class.with_room, page) };
    }
    let page = class.with_room;
    // SAFETY: `page` is a live page of this class with a free slot (it is
    // on the list), and the lock is held, so nothing else touches it.
    unsafe {
        let block = if (*page).free.is_null() {
            let block = (page as *mut u8).add((*page).unused);
            (*page).unused += slot;
            block
        } else {
            let free = (*page).free;
            (*page).free = (*free).next;
            free as *mut u8
        };
        (*page).live += 1;
        if (*page).free.is_null() && (*page).unused + slot > PAGE {
            unlink(&mut class.with_room, page);
        }
        block
    }
}

/// Frees a block of `size` bytes that [`alloc`] returned; gives its page's
/// memory back
/// if it was the page's last.
///
/// # Safety
/// `block` came from [`alloc`] with this `size` (so the same class), and
/// nothing uses it any more.
pub unsafe fn dealloc(block: *mut u8, size: usize) {
    let c = class_of(size);
    let slot = CLASSES[c];
    let page = (block as usize & !(PAGE - 1)) as *mut Page;
    let mut class = CLASS_STATE[c].lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: the block's page is a live page of this class (the caller's
    // promise), and the lock is held.
    unsafe {
        let was_full = (*page).free.is_null() && (*page).unused + slot > PAGE;
        let free = block as *mut FreeSlot;
        free.write(FreeSlot { next: (*page).free });
        (*page).free = free;
        (*page).live -= 1;
        if (*page).evacuating {
            // Being emptied: off the list of pages with room until it is.
            if (*page).live == 0 {
                unlink(&mut class.evacuating, page);
                regions::release_page(page as usize);
            }
        } else if (*page).live == 0 {
            // Empty: back to the pool, which keeps a few empty pages warm
            // for the next class that needs one.
            if !was_full {
                unlink(&mut class.with_room, page);
            }
            regions::release_page(page as usize);
        } else if was_full {
            link(&mut class.with_room, page);
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// Held by the tests that watch whole pages, since choosing pages to
    /// empty (`evacuation.rs`) looks at every class.
    pub static ALONE: Mutex<()> = Mutex::new(());

    #[test]
    fn every_size_has_a_class_that_fits_it() {
        for size in 1..=LARGEST {
            let c = class_of(size);
            assert!(CLASSES[c] >= size, "{size}");
            assert!(c == 0 || CLASSES[c - 1] < size, "{size}");
            assert!(CLASSES[c].is_multiple_of(16));
            assert!((PAGE - HEADER) / CLASSES[c] >= 2, "{size}");
        }
    }

    #[test]
    fn blocks_are_distinct_aligned_and_pages_go_back_when_empty() {
        let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
        // A class no other test or thread uses much: 8160 bytes, two a page.
        let size = 6_000;
        let blocks: Vec<*mut u8> = (0..40).map(|_| alloc(size)).collect();
        for (n, &b) in blocks.iter().enumerate() {
            assert!(!b.is_null() && (b as usize).is_multiple_of(16));
            // SAFETY: each block is `size` bytes and ours.
            unsafe { b.write_bytes(n as u8, size) };
        }
        for (n, &b) in blocks.iter().enumerate() {
            // SAFETY: as above; no two blocks overlap, so each kept its fill.
            unsafe {
                assert!(std::slice::from_raw_parts(b, size).iter().all(|&x| x == n as u8));
            }
        }
        let mut pages: Vec<usize> = blocks.iter().map(|&b| b as usize & !(PAGE - 1)).collect();
        pages.dedup();
        assert_eq!(pages.len(), 20, "two blocks a page");
        for &b in &blocks {
            // SAFETY: allocated above with this size, used no more.
            unsafe { dealloc(b, size) };
        }
        // The emptied pages gave their memory back and keep their
        // addresses for reuse (one stays with the class): a fresh block
        // comes from that page.
        let again = alloc(size);
        assert!(pages.contains(&(again as usize & !(PAGE - 1))));
        // SAFETY: as above.
        unsafe { dealloc(again, size) };
    }
}
