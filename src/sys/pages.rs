//! Small blocks (a job's body, a record) in pages of their own size: the
//! part of the binary's allocator that makes freed memory go back to the
//! system as it is freed, with no pass over anything and no pause.
//!
//! A simpler server would leave small blocks to `malloc`. Its heap keeps
//! what is freed, though: giving the middle of the heap back takes
//! `malloc_trim`, which walks every free block under the lock that every
//! thread's `malloc` needs. After a queue of millions of jobs is deleted in
//! a random order, one such walk held an idle client up for 73 ms.
//! Here each block size has its own 64 KiB pages, and a page's memory goes
//! back to the system the moment its last block is freed: a few
//! microseconds at a time, spread over the deletes that emptied it, under
//! a lock that only that size's allocations share.
//!
//! Each page starts with a [`Page`] header; the rest is slots of one size.
//! A page with a free slot is on its size's list of pages with room. A
//! block's page is found from its address (pages are aligned to their
//! size), and its size class from the layout the caller passes back.

use std::ffi::c_int;
use std::ptr;
use std::sync::Mutex;

/// Bytes of a page, and its alignment.
const PAGE: usize = 64 * 1024;

/// Room the header takes at the start of a page (a multiple of 16, so
/// that every slot stays 16-byte aligned).
const HEADER: usize = 64;

/// The largest block served from pages; bigger ones go to `malloc` or a
/// mapping of their own.
pub const LARGEST: usize = 16 * 1024;

/// The size classes: 16-byte steps to 256, then four steps per doubling,
/// so that a block wastes at most a fifth of its slot.
const CLASSES: [usize; 36] = [
    16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 320, 384, 448, 512, 640, 768,
    896, 1024, 1280, 1536, 1792, 2048, 2560, 3072, 3584, 4096, 6144, 8192, 12288, 16384,
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
struct Page {
    /// Slots of the page in use.
    live: usize,
    /// The first free slot, or null.
    free: *mut FreeSlot,
    /// Offset of the first slot never used yet.
    unused: usize,
    /// Neighbours on the class's list of pages with room.
    prev: *mut Page,
    next: *mut Page,
}

/// A free slot: it holds the next free slot of its page.
struct FreeSlot {
    next: *mut FreeSlot,
}

/// One size class: the pages with a free slot, the first to fill next.
struct Class {
    with_room: *mut Page,
}

// SAFETY: a Class is only ever touched under its Mutex; the pages it points
// to belong to it alone.
unsafe impl Send for Class {}

static CLASS_STATE: [Mutex<Class>; CLASSES.len()] =
    [const { Mutex::new(Class { with_room: ptr::null_mut() }) }; CLASSES.len()];

const PROT_READ: c_int = 1;
const PROT_WRITE: c_int = 2;
const MAP_PRIVATE: c_int = 2;
const MAP_ANONYMOUS: c_int = 0x20;
/// What `mmap` and `mremap` return on failure.
pub(super) const MAP_FAILED: *mut u8 = !0 as *mut u8;

extern "C" {
    fn mmap(addr: *mut u8, len: usize, prot: c_int, flags: c_int, fd: c_int, offset: i64) -> *mut u8;
    fn munmap(addr: *mut u8, len: usize) -> c_int;
    fn madvise(addr: *mut u8, len: usize, advice: c_int) -> c_int;
}

/// A new mapping of `size` bytes, or null: a region of pages here, and a
/// big block of its own for `memory.rs`. Kept out of line: allocation
/// calls are everywhere, and only the allocator's test of the size belongs
/// in each of them.
#[inline(never)]
pub(super) fn map_block(size: usize) -> *mut u8 {
    // SAFETY: a new anonymous private mapping: no pointer is read, and the
    // kernel picks an address that nothing else uses.
    let block = unsafe {
        mmap(std::ptr::null_mut(), size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
    };
    if block == MAP_FAILED {
        std::ptr::null_mut()
    } else {
        block
    }
}

/// Releases a mapping of `size` bytes made by [`map_block`].
///
/// # Safety
/// `block` is such a mapping, and nothing uses it any more.
#[inline(never)]
pub(super) unsafe fn unmap_block(block: *mut u8, size: usize) {
    // SAFETY: the caller's promise.
    unsafe { munmap(block, size) };
}

/// Pages are carved from regions of this many pages, mapped at once and
/// never unmapped.
const REGION_PAGES: usize = 64;

/// Empty pages whose addresses are kept in [`Spare`]'s array; past it
/// they go on a list threaded through the pages themselves.
const SPARE_MAX: usize = 16 * 1024;

/// Where new pages come from: empty pages, whose memory went back to the
/// system but whose addresses are kept, and the rest of the last region.
///
/// An empty page's memory goes back with `madvise(MADV_DONTNEED)`, not
/// `munmap`: the kernel keeps one map for a whole region however scattered
/// its empty pages are, where unmapping them one by one could split a
/// region into thousands of maps and run into `vm.max_map_count`, which
/// thread stacks need too (see `host.rs`).
struct Spare {
    pages: [usize; SPARE_MAX],
    len: usize,
    /// The first of the empty pages past the array's [`SPARE_MAX`], each
    /// holding the next one's address in its first word (which takes one
    /// small page of memory each: 1/16 of what they give back), or 0.
    overflow: usize,
    /// The next never-used page of the last region, and its end.
    next: usize,
    end: usize,
}

static SPARE: Mutex<Spare> =
    Mutex::new(Spare { pages: [0; SPARE_MAX], len: 0, overflow: 0, next: 0, end: 0 });

const MADV_DONTNEED: c_int = 4;

/// A new page aligned to [`PAGE`], its header set up; null if memory
/// cannot be had.
fn new_page() -> *mut Page {
    let start = {
        let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len > 0 {
            spare.len -= 1;
            spare.pages[spare.len]
        } else if spare.overflow != 0 {
            let page = spare.overflow;
            // SAFETY: an empty page on the overflow list, which holds the
            // next one's address in its first word; the lock is held.
            spare.overflow = unsafe { (page as *const usize).read() };
            page
        } else {
            if spare.next == spare.end {
                let region = new_region();
                if region == 0 {
                    return ptr::null_mut();
                }
                (spare.next, spare.end) = (region, region + REGION_PAGES * PAGE);
            }
            spare.next += PAGE;
            spare.next - PAGE
        }
    };
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
        })
    };
    page
}

/// A new region of [`REGION_PAGES`] pages aligned to [`PAGE`]; 0 if it
/// cannot be mapped.
fn new_region() -> usize {
    let size = REGION_PAGES * PAGE;
    // One page more, then the unaligned ends cut off.
    let raw = map_block(size + PAGE);
    if raw.is_null() {
        return 0;
    }
    let start = (raw as usize).next_multiple_of(PAGE);
    let (head, tail) = (start - raw as usize, raw as usize + size + PAGE - (start + size));
    // SAFETY: both ranges lie in the mapping just made, outside the region
    // kept; unmapping them leaves the region alone. A failure leaves them
    // mapped and unused, which is harmless.
    unsafe {
        if head > 0 {
            unmap_block(raw, head);
        }
        if tail > 0 {
            unmap_block((start + size) as *mut u8, tail);
        }
    }
    start
}

/// Gives an empty page's memory back to the system and keeps its address
/// for the next page.
///
/// # Safety
/// `page` is an empty page that no class holds any more.
unsafe fn release_page(page: *mut Page) {
    // SAFETY: the page is mapped and nothing uses it; after this it reads
    // as zeros and takes no memory until it is written again.
    unsafe { madvise(page as *mut u8, PAGE, MADV_DONTNEED) };
    let mut spare = SPARE.lock().unwrap_or_else(|e| e.into_inner());
    if spare.len < SPARE_MAX {
        let at = spare.len;
        spare.pages[at] = page as usize;
        spare.len += 1;
    } else {
        // Never unmapped: one page unmapped in the middle of a region
        // splits its map in two.
        // SAFETY: the page is mapped, writable and ours; the lock is held.
        unsafe { (page as *mut usize).write(spare.overflow) };
        spare.overflow = page as usize;
    }
}

/// Puts `page` at the front of `class`'s list of pages with room.
///
/// # Safety
/// `page` is a live page of this class, not on the list; the class's lock
/// is held.
unsafe fn link(class: &mut Class, page: *mut Page) {
    // SAFETY: the caller's promise; `with_room`, if any, is a live page.
    unsafe {
        (*page).prev = ptr::null_mut();
        (*page).next = class.with_room;
        if !class.with_room.is_null() {
            (*class.with_room).prev = page;
        }
    }
    class.with_room = page;
}

/// Takes `page` off `class`'s list of pages with room.
///
/// # Safety
/// `page` is on that list; the class's lock is held.
unsafe fn unlink(class: &mut Class, page: *mut Page) {
    // SAFETY: the caller's promise; its neighbours are live pages.
    unsafe {
        let (prev, next) = ((*page).prev, (*page).next);
        if prev.is_null() {
            class.with_room = next;
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
        let page = new_page();
        if page.is_null() {
            return ptr::null_mut();
        }
        // SAFETY: a new page of this class; the lock is held.
        unsafe { link(&mut class, page) };
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
            unlink(&mut class, page);
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
        if (*page).live == 0 {
            // Empty: its memory back to the system, unless it is the
            // class's only page with room (a class that frees and takes one block over
            // and over would map and unmap a page each time).
            let only = class.with_room == page && (*page).next.is_null();
            if !only {
                if !was_full {
                    unlink(&mut class, page);
                }
                release_page(page);
            }
        } else if was_full {
            link(&mut class, page);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_has_a_class_that_fits_it() {
        for size in 1..=LARGEST {
            let c = class_of(size);
            assert!(CLASSES[c] >= size, "{size}");
            assert!(c == 0 || CLASSES[c - 1] < size, "{size}");
            assert!(CLASSES[c].is_multiple_of(16));
        }
    }

    #[test]
    fn blocks_are_distinct_aligned_and_pages_go_back_when_empty() {
        // A class no other test or thread uses much: 12288 bytes, five a page.
        let size = 12_000;
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
        assert_eq!(pages.len(), 8, "five blocks a page");
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
