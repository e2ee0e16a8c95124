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

use std::ffi::{c_int, c_long};
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
    // `offset` is glibc's `off_t` without `_FILE_OFFSET_BITS=64`: a `long`,
    // 32 bits on 32-bit targets (`i64` there would misplace the argument).
    fn mmap(addr: *mut u8, len: usize, prot: c_int, flags: c_int, fd: c_int, offset: c_long) -> *mut u8;
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
pub(super) unsafe fn unmap_block(block: *mut u8, size: usize) -> c_int {
    // SAFETY: the caller's promise.
    unsafe { munmap(block, size) }
}

/// Pages are carved from regions of this many pages, aligned to their
/// size, so that a page's region is found from its address.
const REGION_PAGES: usize = 64;

/// Bytes of a region, and its alignment.
const REGION: usize = REGION_PAGES * PAGE;

/// A region's first page holds its [`Region`] header (only the first 4 KiB
/// of it is ever written); the other pages serve classes.
const FIRST_PAGE: usize = 1;

/// The `free` mask of a region none of whose pages is in use.
const ALL_FREE: u64 = !0 << FIRST_PAGE;

/// Empty pages kept with their memory, for the next page a class asks for:
/// a class that frees its last block and takes one again (a queue that
/// empties and fills) reuses a page without a fault or a system call.
const WARM_PAGES: usize = 8;

/// A region's header, at its start.
struct Region {
    /// Pages free to hand out: bit `n` for page `n`. Their memory has gone
    /// back to the system (or was never touched).
    free: u64,
    /// Neighbours on the list of regions with a free page.
    prev: *mut Region,
    next: *mut Region,
}

/// Where new pages come from, and where empty ones go.
///
/// An empty page first joins the few warm pages that keep their memory.
/// The oldest warm page past [`WARM_PAGES`] gives its memory back with
/// `madvise(MADV_DONTNEED)` and goes back to its region, free. A region all
/// of whose pages are free is unmapped (but for one, kept for the next
/// burst): so freed memory is address space again for anything, a big
/// block, a thread's stack, a connection's buffers, not only for small
/// blocks. A region is only ever unmapped whole: unmapping pages one by one
/// could split the kernel's maps past `vm.max_map_count`, which thread
/// stacks need too (see `host.rs`).
struct Pool {
    /// Regions with a free page, the most recently freed first.
    with_free: *mut Region,
    /// Empty pages that kept their memory, the oldest first.
    warm: [usize; WARM_PAGES],
    warm_len: usize,
    /// A region with every page free, kept rather than unmapped; 0 if none.
    spare: usize,
}

// SAFETY: the Pool is only ever touched under its Mutex; the regions it
// points to belong to it alone.
unsafe impl Send for Pool {}

static POOL: Mutex<Pool> =
    Mutex::new(Pool { with_free: ptr::null_mut(), warm: [0; WARM_PAGES], warm_len: 0, spare: 0 });

const MADV_DONTNEED: c_int = 4;

fn region_of(page: usize) -> *mut Region {
    (page & !(REGION - 1)) as *mut Region
}

fn page_number(page: usize) -> usize {
    (page & (REGION - 1)) / PAGE
}

impl Pool {
    /// An empty page: a warm one, else a free one of a region, else one of
    /// a new region; 0 if memory cannot be had.
    fn take(&mut self) -> usize {
        if self.warm_len > 0 {
            self.warm_len -= 1;
            return self.warm[self.warm_len];
        }
        if self.with_free.is_null() {
            let region = new_region();
            if region.is_null() {
                return 0;
            }
            // SAFETY: a new region, ours alone.
            unsafe { self.link(region) };
        }
        let region = self.with_free;
        // SAFETY: a live region on the list, so with a free page; the
        // pool's lock is held.
        unsafe {
            let n = (*region).free.trailing_zeros() as usize;
            if (*region).free == ALL_FREE && self.spare == region as usize {
                self.spare = 0;
            }
            (*region).free &= !(1 << n);
            if (*region).free == 0 {
                self.unlink(region);
            }
            region as usize + n * PAGE
        }
    }

    /// Takes back an empty page (its memory still held).
    ///
    /// # Safety
    /// `page` came from [`Pool::take`] and nothing uses it any more.
    unsafe fn give(&mut self, page: usize) {
        let region = region_of(page);
        let warm_here = self.warm[..self.warm_len].iter().filter(|&&p| region_of(p) == region).count();
        // SAFETY: the page's region is live, and the lock is held.
        let free_here = unsafe { (*region).free.count_ones() } as usize;
        if free_here + warm_here + 1 == REGION_PAGES - FIRST_PAGE {
            // The region's last page in use: it and its warm pages go
            // back, so that no warm page keeps a region alive.
            let mut kept = 0;
            for n in 0..self.warm_len {
                let warm = self.warm[n];
                if region_of(warm) == region {
                    // SAFETY: a warm page is empty and ours.
                    unsafe { self.free(warm) };
                } else {
                    self.warm[kept] = warm;
                    kept += 1;
                }
            }
            self.warm_len = kept;
            // SAFETY: the caller's promise.
            unsafe { self.free(page) };
            return;
        }
        if self.warm_len == WARM_PAGES {
            let oldest = self.warm[0];
            self.warm.copy_within(1.., 0);
            self.warm_len -= 1;
            // SAFETY: a warm page is empty and ours.
            unsafe { self.free(oldest) };
        }
        self.warm[self.warm_len] = page;
        self.warm_len += 1;
    }

    /// Gives an empty page's memory back and returns it to its region,
    /// which goes too if all its pages are then free.
    ///
    /// # Safety
    /// `page` is an empty page that nothing uses, not warm.
    unsafe fn free(&mut self, page: usize) {
        let region = region_of(page);
        // SAFETY: the page is mapped and nothing uses it; after this it
        // reads as zeros and takes no memory until written again. Its
        // region is live (it holds this page), and the lock is held.
        unsafe {
            madvise(page as *mut u8, PAGE, MADV_DONTNEED);
            if (*region).free == 0 {
                self.link(region);
            }
            (*region).free |= 1 << page_number(page);
            if (*region).free != ALL_FREE {
                return;
            }
            if self.spare == 0 {
                self.spare = region as usize;
                return;
            }
            self.unlink(region);
            if unmap_block(region as *mut u8, REGION) != 0 {
                // Unmapping can fail (with ENOMEM, past `vm.max_map_count`):
                // the region stays, free, for the next pages.
                self.link(region);
            }
        }
    }

    /// Puts `region` at the front of the list of regions with a free page.
    ///
    /// # Safety
    /// `region` is live and not on the list; the lock is held.
    unsafe fn link(&mut self, region: *mut Region) {
        // SAFETY: the caller's promise; `with_free`, if any, is live.
        unsafe {
            (*region).prev = ptr::null_mut();
            (*region).next = self.with_free;
            if !self.with_free.is_null() {
                (*self.with_free).prev = region;
            }
        }
        self.with_free = region;
    }

    /// Takes `region` off the list of regions with a free page.
    ///
    /// # Safety
    /// `region` is on that list; the lock is held.
    unsafe fn unlink(&mut self, region: *mut Region) {
        // SAFETY: the caller's promise; its neighbours are live regions.
        unsafe {
            let (prev, next) = ((*region).prev, (*region).next);
            if prev.is_null() {
                self.with_free = next;
            } else {
                (*prev).next = next;
            }
            if !next.is_null() {
                (*next).prev = prev;
            }
        }
    }
}

/// A new page aligned to [`PAGE`], its header set up; null if memory
/// cannot be had.
fn new_page() -> *mut Page {
    let start = POOL.lock().unwrap_or_else(|e| e.into_inner()).take();
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
        })
    };
    page
}

/// A new region aligned to [`REGION`], every page free; null if it cannot
/// be mapped.
fn new_region() -> *mut Region {
    // Twice the size, then the unaligned ends cut off (a mapping is only
    // aligned to the system's 4 KiB pages).
    let raw = map_block(2 * REGION);
    if raw.is_null() {
        return ptr::null_mut();
    }
    let start = (raw as usize).next_multiple_of(REGION);
    let (head, tail) = (start - raw as usize, raw as usize + 2 * REGION - (start + REGION));
    // SAFETY: both ranges lie in the mapping just made, outside the region
    // kept; unmapping them leaves the region alone. A failure leaves them
    // mapped and unused, which is harmless. The region is then mapped,
    // writable and ours.
    unsafe {
        if head > 0 {
            unmap_block(raw, head);
        }
        if tail > 0 {
            unmap_block((start + REGION) as *mut u8, tail);
        }
        let region = start as *mut Region;
        region.write(Region { free: ALL_FREE, prev: ptr::null_mut(), next: ptr::null_mut() });
        region
    }
}

/// Takes back an empty page that no class holds any more.
///
/// # Safety
/// `page` is an empty page that no class holds any more.
unsafe fn release_page(page: *mut Page) {
    // SAFETY: the caller's promise.
    unsafe { POOL.lock().unwrap_or_else(|e| e.into_inner()).give(page as usize) };
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
            // Empty: back to the pool, which keeps a few empty pages warm
            // for the next class that needs one.
            if !was_full {
                unlink(&mut class, page);
            }
            release_page(page);
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

    #[test]
    fn every_page_of_many_regions_is_mapped_and_regions_go_when_empty() {
        // 8192-byte blocks (a class no other test uses), seven a page:
        // 1,000 fill more than two regions.
        let size = 8_000;
        let blocks: Vec<*mut u8> = (0..1000).map(|_| alloc(size)).collect();
        for &b in &blocks {
            assert!(!b.is_null());
            // SAFETY: each block is `size` bytes and ours; writing all of
            // it finds a page outside its region's mapping.
            unsafe { b.write_bytes(1, size) };
        }
        let regions: std::collections::BTreeSet<usize> =
            blocks.iter().map(|&b| b as usize & !(REGION - 1)).collect();
        assert!(regions.len() >= 3, "{} regions", regions.len());
        for &b in &blocks {
            // SAFETY: allocated above with this size, used no more.
            unsafe { dealloc(b, size) };
        }
    }
}
