//! Memory: the binary's allocator (small blocks in pages of their size,
//! `pages.rs`, carved from `regions.rs`; big ones as mappings of their
//! own; `malloc` in between),
//! and the two settings of glibc's that keep memory following what is
//! alive now (one arena, no fast bins). Part
//! of `sys`, the one place allowed `unsafe`; what the rest of the server
//! decides about memory (when a connection goes idle) lives in `conn/buffers.rs`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_int;

use super::pages;
use super::regions::{map_block, unmap_block, MAP_FAILED};

#[cfg(target_env = "gnu")]
extern "C" {
    fn mallopt(param: c_int, value: c_int) -> c_int;
}

#[cfg(target_env = "gnu")]
const M_MXFAST: c_int = 1;
#[cfg(target_env = "gnu")]
const M_ARENA_MAX: c_int = -8;

/// Sets up glibc's allocator for a server of a few threads (chosen when
/// each connection had a thread of its own):
///
/// - **One arena.** By default glibc gives threads up to eight arenas a
///   core, each starting with a heap of its own that is never given back:
///   with a thread a connection, 50 idle connections cost 19 KiB each
///   instead of 10. The engine's lock serializes the work anyway, and a
///   busy connection keeps its buffers from one command to the next (see
///   `conn/buffers.rs`), so what it allocates (a job's body, a reply) is small and
///   mostly served from the thread's malloc cache without the arena's
///   lock: one arena costs no throughput. Left alone if the operator set
///   `MALLOC_ARENA_MAX`.
/// - **No fast bins.** Freed blocks then merge with their free neighbours
///   at once, and memory at the top of the heap goes back to the system by
///   `free` itself. With fast bins, freed blocks wait unmerged until some
///   larger allocation merges them all at once, under the arena's one
///   lock. Left alone if the operator set `GLIBC_TUNABLES` (where
///   `glibc.malloc.mxfast` lives).
///
/// (Since small blocks live in [`super::pages`] and big ones are mappings,
/// `malloc` serves only blocks of 8 KiB to 64 KiB, small ones aligned to more
/// than 16 bytes, and glibc's own.)
///
/// A no-op with other C libraries.
pub fn tune_malloc() {
    #[cfg(target_env = "gnu")]
    {
        if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
            // SAFETY: mallopt takes no pointers; it sets one of the
            // allocator's parameters, under the allocator's lock.
            unsafe {
                mallopt(M_ARENA_MAX, 1);
            }
        }
        if std::env::var_os("GLIBC_TUNABLES").is_none() {
            // SAFETY: as above.
            unsafe {
                mallopt(M_MXFAST, 0);
            }
        }
    }
}

/// `Box::new` that returns `value` back, instead of aborting, if its
/// memory cannot be had (std has no stable `Box::try_new`).
pub fn try_box<T>(value: T) -> Result<Box<T>, T> {
    let layout = Layout::new::<T>();
    if layout.size() == 0 {
        return Ok(Box::new(value));
    }
    // SAFETY: a layout of non-zero size, as `alloc` asks.
    let block = unsafe { std::alloc::alloc(layout) } as *mut T;
    if block.is_null() {
        return Err(value);
    }
    // SAFETY: `block` is a fresh allocation of `T`'s layout from the global
    // allocator, which is what `Box::from_raw` takes ownership of; it is
    // written before the box is made.
    unsafe {
        block.write(value);
        Ok(Box::from_raw(block))
    }
}

/// The block size from which [`Allocator`] gives every block a mapping of
/// its own.
pub const OWN_MAPPING_AT: usize = 64 * 1024;

/// The server binary's allocator, by a block's size: up to 8,160 bytes
/// (half a page), a slot in a page of its size ([`super::pages`]); from 64 KiB
/// (`OWN_MAPPING_AT`), a mapping of its own (`mmap`), always; in between,
/// the C library's `malloc`. Only the pages written take memory, and freeing the
/// block gives them back to the system at once, whatever the heap around it
/// looks like. glibc maps big blocks too, but not always: it serves them
/// from the top of its heap when that has room, and stops mapping them
/// once one has been freed. Then a connection's buffers, freed as it goes
/// idle, leave holes among the small records of other connections that
/// the heap can never give back (measured: 4 KiB a connection), and the
/// job table's chunks (see `engine/table.rs`) stay after a drain.
///
/// A block that cannot be mapped is an allocation failure, as it would be
/// for `malloc`: the default connection limit leaves room for every
/// connection's buffers among the process's maps (see `host.rs`). A
/// `munmap` that fails (it can, with `ENOMEM`, when unmapping would split a
/// mapping past `vm.max_map_count`) leaves the pages mapped: leaked, never
/// reused.
pub struct Allocator;

/// Whether blocks of `layout` are mappings. The same answer for a block's
/// allocation and its release, which is what tells `dealloc` which of the
/// three to call.
fn is_mapped(layout: Layout) -> bool {
    layout.size() >= OWN_MAPPING_AT && layout.align() <= 4096
}

/// Whether blocks of `layout` live in pages of their size (`pages.rs`).
fn is_small(layout: Layout) -> bool {
    layout.size() <= pages::LARGEST && layout.align() <= 16
}

const MREMAP_MAYMOVE: c_int = 1;

extern "C" {
    fn mremap(old: *mut u8, old_len: usize, new_len: usize, flags: c_int, ...) -> *mut u8;
}

/// `realloc` by moving: a new block from the allocator, the old one copied
/// up to the smaller size, then released with the layout it had.
///
/// # Safety
/// As `GlobalAlloc::realloc`.
unsafe fn move_block(block: *mut u8, layout: Layout, new_layout: Layout) -> *mut u8 {
    // SAFETY: the caller's contract; the two blocks do not overlap.
    unsafe {
        let new = Allocator.alloc(new_layout);
        if !new.is_null() {
            std::ptr::copy_nonoverlapping(block, new, layout.size().min(new_layout.size()));
            Allocator.dealloc(block, layout);
        }
        new
    }
}

/// `realloc` for a block that is or becomes small: a block that stays in
/// its size class stays where it is.
///
/// # Safety
/// As `GlobalAlloc::realloc`, with `is_small` true for `layout` or for
/// `new_layout`.
#[inline(never)]
unsafe fn realloc_small(block: *mut u8, layout: Layout, new_layout: Layout) -> *mut u8 {
    if is_small(layout) && is_small(new_layout) && pages::same_class(layout.size(), new_layout.size()) {
        return block;
    }
    // SAFETY: the caller's contract.
    unsafe { move_block(block, layout, new_layout) }
}

/// `realloc` for a block that is or becomes a mapping.
///
/// # Safety
/// As `GlobalAlloc::realloc`, with `is_mapped` true for `layout` or for
/// `new_layout`.
#[inline(never)]
unsafe fn realloc_mapped(block: *mut u8, layout: Layout, new_layout: Layout) -> *mut u8 {
    if is_mapped(layout) && is_mapped(new_layout) {
        // SAFETY: `block` is a mapping of `layout.size()` bytes; the kernel
        // moves or grows it, keeping its contents, and the old address is
        // no longer valid, as `realloc` says.
        let moved = unsafe { mremap(block, layout.size(), new_layout.size(), MREMAP_MAYMOVE) };
        if moved != MAP_FAILED {
            return moved;
        }
        // A mapping shrinks in place, so shrinking never fails: if the
        // kernel cannot trim it (past `vm.max_map_count`), the block stays
        // as it was, big enough, and its tail is leaked when it is freed.
        // Callers rely on this (`Heap::fit` shrinks under the engine's lock).
        return if new_layout.size() <= layout.size() { block } else { std::ptr::null_mut() };
    }
    // SAFETY: the caller's contract.
    unsafe { move_block(block, layout, new_layout) }
}

// The methods are kept out of line: allocation and release happen in
// thousands of places, and each would otherwise carry the test of the size
// (10 KB of the static binary).
//
// SAFETY: every method returns either null or a block of at least the
// layout's size and alignment that nothing else uses (a fresh private
// mapping, page-aligned, which covers any alignment up to 4096, or the C
// library's block), and releases exactly what the matching method
// returned: `is_mapped` of the layout, which the caller passes back
// unchanged, says whether that was a mapping.
unsafe impl GlobalAlloc for Allocator {
    #[inline(never)]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if is_small(layout) {
            pages::alloc(layout.size())
        } else if is_mapped(layout) {
            map_block(layout.size())
        } else {
            // SAFETY: the caller's contract is System's.
            unsafe { System.alloc(layout) }
        }
    }

    #[inline(never)]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if is_small(layout) {
            let block = pages::alloc(layout.size());
            if !block.is_null() {
                // SAFETY: a block of `layout.size()` bytes, ours.
                unsafe { block.write_bytes(0, layout.size()) };
            }
            block
        } else if is_mapped(layout) {
            // A fresh anonymous mapping reads as zeros.
            map_block(layout.size())
        } else {
            // SAFETY: the caller's contract is System's.
            unsafe { System.alloc_zeroed(layout) }
        }
    }

    #[inline(never)]
    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        if is_small(layout) {
            // SAFETY: `alloc` took it from the pages (same layout, so same
            // answer), and the caller gives it up.
            unsafe { pages::dealloc(block, layout.size()) }
        } else if is_mapped(layout) {
            // SAFETY: `block` is a mapping of `layout.size()` bytes that
            // `alloc` made (same layout), and the caller gives it up.
            unsafe { unmap_block(block, layout.size()) };
        } else {
            // SAFETY: the caller's contract is System's.
            unsafe { System.dealloc(block, layout) }
        }
    }

    #[inline(never)]
    unsafe fn realloc(&self, block: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller guarantees a valid size for this alignment, as
        // it must for `realloc`.
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        if is_small(layout) || is_small(new_layout) {
            // SAFETY: the caller's contract, and one of the two is small.
            unsafe { realloc_small(block, layout, new_layout) }
        } else if is_mapped(layout) || is_mapped(new_layout) {
            // SAFETY: the caller's contract, and one of the two is mapped.
            unsafe { realloc_mapped(block, layout, new_layout) }
        } else {
            // SAFETY: the caller's contract is System's.
            unsafe { System.realloc(block, layout, new_size) }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::alloc::{GlobalAlloc, Layout};

    use super::{Allocator, OWN_MAPPING_AT};

    /// A mapping starts on a page; `malloc` returns blocks 16 bytes past
    /// a chunk header, which this allocator's big blocks never are.
    fn is_page_aligned(block: *mut u8) -> bool {
        (block as usize).is_multiple_of(4096)
    }

    #[test]
    fn big_blocks_are_mappings_of_their_own_through_every_resize() {
        let _alone = super::super::pages::tests::ALONE.lock().unwrap_or_else(|e| e.into_inner());
        let small = Layout::from_size_align(1000, 8).unwrap();
        let big = Layout::from_size_align(OWN_MAPPING_AT, 8).unwrap();
        // SAFETY: each block is used within its size, and released with the
        // layout it has at that moment.
        unsafe {
            let block = Allocator.alloc(small);
            block.write_bytes(7, 1000);
            let block = Allocator.realloc(block, small, OWN_MAPPING_AT);
            assert!(is_page_aligned(block), "grown past the threshold: mapped");
            assert_eq!(std::slice::from_raw_parts(block, 1000), &[7; 1000][..]);
            block.add(OWN_MAPPING_AT - 1).write(9);
            let grown = Layout::from_size_align(4 * OWN_MAPPING_AT, 8).unwrap();
            let block = Allocator.realloc(block, big, grown.size());
            assert_eq!((*block, *block.add(OWN_MAPPING_AT - 1)), (7, 9));
            let block = Allocator.realloc(block, grown, 1000);
            assert_eq!(std::slice::from_raw_parts(block, 1000), &[7; 1000][..]);
            Allocator.dealloc(block, small);

            let zeroed = Allocator.alloc_zeroed(big);
            assert!(is_page_aligned(zeroed));
            assert!(std::slice::from_raw_parts(zeroed, OWN_MAPPING_AT).iter().all(|&b| b == 0));
            Allocator.dealloc(zeroed, big);
        }
    }
}
