//! Where pages come from: 1 MiB regions of 16 KiB pages, each region
//! unmapped whole when all its pages are free (but for one spare), the
//! free pages of a region that other pages keep alive unmapped one by one
//! while the maps that splits allow last, and a few warm pages kept with
//! their memory for the next class that needs one. The one place in
//! the allocator that maps and unmaps memory ([`map_block`] serves
//! `memory.rs`'s big blocks too, which only resizes them itself) and
//! gives pages' memory back.
//!
//! It hands out and takes back empty pages, and must not look inside them:
//! what a page holds (its header, its slots, its class) is `pages.rs`'s.

use std::ffi::{c_int, c_long};
use std::ptr;
use std::sync::Mutex;

/// Bytes of a page, and its alignment: the unit handed out here and
/// filled with slots by `pages.rs`. 16 KiB rather than 64: one live block
/// keeps its whole page, so the smaller the page, the more of what a few
/// long-lived blocks are spread over comes free, and in longer runs. With
/// one 1000-byte job in 256 left of a full 256 MiB address space, the runs
/// between kept pages hold two 100 KB jobs each rather than one: 1,375
/// such jobs fit afterwards instead of 966 (beanstalkd: 1,500).
pub(super) const PAGE: usize = 16 * 1024;

pub(super) const PROT_READ: c_int = 1;
pub(super) const PROT_WRITE: c_int = 2;
pub(super) const MAP_PRIVATE: c_int = 2;
pub(super) const MAP_ANONYMOUS: c_int = 0x20;
/// What `mmap` and `mremap` return on failure.
pub(super) const MAP_FAILED: *mut u8 = !0 as *mut u8;

extern "C" {
    // `offset` is glibc's `off_t` without `_FILE_OFFSET_BITS=64`: a `long`,
    // 32 bits on 32-bit targets (`i64` there would misplace the argument).
    pub(super) fn mmap(
        addr: *mut u8,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        offset: c_long,
    ) -> *mut u8;
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
pub(super) const REGION_PAGES: usize = 64;

/// Bytes of a region, and its alignment.
pub(super) const REGION: usize = REGION_PAGES * PAGE;

/// A region's first page holds its [`Region`] header (only the first 4 KiB
/// of it is ever written); the other pages serve classes.
const FIRST_PAGE: usize = 1;

/// The `free` mask of a region none of whose pages is in use.
pub(super) const ALL_FREE: u64 = !0 << FIRST_PAGE;

/// Empty pages kept with their memory, for the next page a class asks for:
/// a class that frees its last block and takes one again (a queue that
/// empties and fills) reuses a page without a fault or a system call.
const WARM_PAGES: usize = 8;

/// A region's header, at its start.
pub(super) struct Region {
    /// Pages free to hand out: bit `n` for page `n`. Their memory has gone
    /// back to the system (or was never touched).
    pub(super) free: u64,
    /// Free pages whose address space went back too (a hole): mapped again
    /// when handed out.
    pub(super) unmapped: u64,
    /// Pages that were holes and that another mapping has since taken: not
    /// ours, never handed out, never unmapped by us.
    pub(super) lost: u64,
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
/// burst). A free page of a region that other pages keep alive is
/// unmapped alone, a hole, while the maps its split adds stay within
/// [`HOLE_MAPS`](super::holes::HOLE_MAPS): past that it only gives its memory back. So freed memory
/// is address space again for anything, a big block, a thread's stack, a
/// connection's buffers, not only for small blocks, even when a few live
/// blocks are spread over every region. The budget matters because holes
/// split the kernel's maps, and `vm.max_map_count` bounds them for thread
/// stacks too (see `host.rs`).
pub(super) struct Pool {
    /// Regions with a free page, the most recently freed first.
    with_free: *mut Region,
    /// Empty pages that kept their memory, the oldest first.
    warm: [usize; WARM_PAGES],
    warm_len: usize,
    /// A region with every page free, kept rather than unmapped; 0 if none.
    spare: usize,
    /// Maps the holes add now: at most [`HOLE_MAPS`](super::holes::HOLE_MAPS).
    pub(super) hole_maps: u64,
}

// SAFETY: the Pool is only ever touched under its Mutex; the regions it
// points to belong to it alone.
unsafe impl Send for Pool {}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    with_free: ptr::null_mut(),
    warm: [0; WARM_PAGES],
    warm_len: 0,
    spare: 0,
    hole_maps: 0,
});

const MADV_DONTNEED: c_int = 4;

pub(super) fn region_of(page: usize) -> *mut Region {
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
            // A page still mapped first: a hole costs a system call.
            let mapped = (*region).free & !(*region).unmapped;
            let n = if mapped != 0 { mapped } else { (*region).free }.trailing_zeros() as usize;
            let page = region as usize + n * PAGE;
            if (*region).unmapped >> n & 1 == 1 && !self.fill(region, n) {
                if (*region).lost >> n & 1 == 1 {
                    return self.take();
                }
                return 0;
            }
            if (*region).free | (*region).lost == ALL_FREE && self.spare == region as usize {
                self.spare = 0;
            }
            (*region).free &= !(1 << n);
            if (*region).free == 0 {
                self.unlink(region);
            }
            page
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
        let free_here = unsafe { ((*region).free | (*region).lost).count_ones() } as usize;
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
            if (*region).free == 0 {
                self.link(region);
            }
            let n = page_number(page);
            (*region).free |= 1 << n;
            if (*region).free | (*region).lost != ALL_FREE {
                // Other pages keep the region: this one's address space
                // goes back alone if the maps allow a hole.
                if !self.punch(region, n) {
                    madvise(page as *mut u8, PAGE, MADV_DONTNEED);
                }
                return;
            }
            madvise(page as *mut u8, PAGE, MADV_DONTNEED);
            if self.spare == 0 {
                self.spare = region as usize;
                return;
            }
            self.unlink(region);
            if !self.unmap_region(region) {
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
    pub(super) unsafe fn link(&mut self, region: *mut Region) {
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
    pub(super) unsafe fn unlink(&mut self, region: *mut Region) {
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

/// An empty page, [`PAGE`] bytes aligned to its size, mapped, writable
/// and ours alone: a warm one, else a free one of a region, else one of a
/// new region; 0 if memory cannot be had.
pub(super) fn take_page() -> usize {
    POOL.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// Takes back an empty page that no class holds any more.
///
/// # Safety
/// `page` is an empty page that no class holds any more.
pub(super) unsafe fn release_page(page: usize) {
    // SAFETY: the caller's promise.
    unsafe { POOL.lock().unwrap_or_else(|e| e.into_inner()).give(page) };
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
        region.write(Region {
            free: ALL_FREE,
            unmapped: 0,
            lost: 0,
            prev: ptr::null_mut(),
            next: ptr::null_mut(),
        });
        region
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::pages::{alloc, dealloc};

    #[test]
    fn every_page_of_many_regions_is_mapped_and_regions_go_when_empty() {
        let _alone = super::super::pages::tests::ALONE.lock().unwrap_or_else(|e| e.into_inner());
        // 4080-byte blocks (a class no other test uses), four a page:
        // 1,000 fill more than two regions.
        let size = 4_000;
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

    #[test]
    fn a_region_kept_by_one_block_gives_its_free_pages_back_and_maps_them_again() {
        let _alone = super::super::pages::tests::ALONE.lock().unwrap_or_else(|e| e.into_inner());
        // 5440-byte blocks, three a page.
        let size = 5_000;
        let write_all = |blocks: &[*mut u8]| {
            for &b in blocks {
                assert!(!b.is_null());
                // SAFETY: each block is `size` bytes and ours; a hole
                // handed out unmapped would fault here.
                unsafe { b.write_bytes(2, size) };
            }
        };
        let blocks: Vec<*mut u8> = (0..1000).map(|_| alloc(size)).collect();
        write_all(&blocks);
        // One block kept a region: the rest of each region becomes holes.
        let mut kept = std::collections::BTreeMap::new();
        for &b in &blocks {
            if kept.entry(b as usize & !(REGION - 1)).or_insert(b) != &b {
                // SAFETY: allocated above with this size, used no more.
                unsafe { dealloc(b, size) };
            }
        }
        assert!(POOL.lock().unwrap().hole_maps > 0, "no page was given back");
        // The holes serve the next blocks, mapped again.
        let again: Vec<*mut u8> = (0..1000).map(|_| alloc(size)).collect();
        write_all(&again);
        for &b in again.iter().chain(kept.values()) {
            // SAFETY: allocated above with this size, used no more.
            unsafe { dealloc(b, size) };
        }
    }
}
