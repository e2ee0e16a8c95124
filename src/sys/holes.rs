//! Holes: the free pages of a region that other pages keep alive, their
//! address space given back one by one (`regions.rs` decides when), and
//! mapped again when handed out. What a hole costs is a map: it splits
//! its region's map in two, and the kernel allows a process only
//! `vm.max_map_count` of them, which thread stacks need too; this file
//! counts them, exactly as the kernel does but for a region's last page,
//! counted high.
//!
//! It owns the bookkeeping of holes (which pages, how many maps) and the
//! system calls that make and fill them; it does not decide which pages
//! are free, or when a region goes.

use std::ffi::c_int;

use super::regions::{
    mmap, unmap_block, Pool, Region, MAP_ANONYMOUS, MAP_FAILED, MAP_PRIVATE, PAGE, PROT_READ, PROT_WRITE,
    REGION_PAGES,
};

/// Most maps the holes of regions may add to the process's count of maps
/// (each hole splits a region's map in two); `host.rs` reserves them.
pub const HOLE_MAPS: u64 = 4096;

/// Map at exactly this address, or fail if anything is there (Linux 4.17).
const MAP_FIXED_NOREPLACE: c_int = 0x10_0000;
const ENOMEM: i32 = 12;

/// Maps a hole at page `n` adds, among the region's other `holes`: it
/// splits a map (1), extends a hole (0), or joins two (-1). The page past
/// the region's end counts as mapped, so the count never falls short.
pub(super) fn hole_split(holes: u64, n: usize) -> i64 {
    let left = holes >> (n - 1) & 1 == 1;
    let right = n + 1 < REGION_PAGES && holes >> (n + 1) & 1 == 1;
    1 - left as i64 - right as i64
}

/// The region's pages that are not ours to touch or are not mapped.
///
/// # Safety
/// `region` is live.
pub(super) unsafe fn holes(region: *mut Region) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { (*region).unmapped | (*region).lost }
}

/// The runs of set bits of `mask`, as (first, count).
fn runs(mut mask: u64) -> impl Iterator<Item = (usize, usize)> {
    std::iter::from_fn(move || {
        if mask == 0 {
            return None;
        }
        let first = mask.trailing_zeros() as usize;
        let count = (mask >> first).trailing_ones() as usize;
        mask &= !(((1u128 << count) - 1) as u64) << first;
        Some((first, count))
    })
}

impl Pool {
    /// Gives free page `n` of `region` back as a hole, if the maps allow
    /// it; false if it stays mapped.
    ///
    /// # Safety
    /// `region` is live and page `n` is free, mapped and unused; the lock
    /// is held.
    pub(super) unsafe fn punch(&mut self, region: *mut Region, n: usize) -> bool {
        // SAFETY: the caller's promise: the page is ours and nothing uses it.
        unsafe {
            let split = hole_split(holes(region), n);
            if split > 0 && self.hole_maps >= HOLE_MAPS {
                return false;
            }
            if unmap_block((region as usize + n * PAGE) as *mut u8, PAGE) != 0 {
                return false;
            }
            (*region).unmapped |= 1 << n;
            self.hole_maps = self.hole_maps.saturating_add_signed(split);
            true
        }
    }

    /// Maps hole `n` of `region` again; false if it cannot be. If another
    /// mapping has taken its place, the page is marked lost and leaves the
    /// free pages; out of address space, it stays a hole.
    ///
    /// # Safety
    /// `region` is live and page `n` is one of its holes; the lock is held.
    pub(super) unsafe fn fill(&mut self, region: *mut Region, n: usize) -> bool {
        let want = region as usize + n * PAGE;
        let flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE;
        // SAFETY: maps only where nothing is (MAP_FIXED_NOREPLACE); an older
        // kernel may map elsewhere, which is undone below. The region is
        // live and the lock held, as the caller promised.
        unsafe {
            let got = mmap(want as *mut u8, PAGE, PROT_READ | PROT_WRITE, flags, -1, 0);
            let bit = 1u64 << n;
            (*region).unmapped &= !bit;
            if got as usize == want {
                self.hole_maps = self.hole_maps.saturating_add_signed(-hole_split(holes(region), n));
                return true;
            }
            let out_of_room =
                got == MAP_FAILED && std::io::Error::last_os_error().raw_os_error() == Some(ENOMEM);
            if got != MAP_FAILED {
                unmap_block(got, PAGE);
            }
            if out_of_room {
                (*region).unmapped |= bit;
            } else {
                (*region).lost |= bit;
                (*region).free &= !bit;
                if (*region).free == 0 {
                    self.unlink(region);
                }
            }
            false
        }
    }

    /// Unmaps what is ours of a region whose pages are all free or lost:
    /// its mapped runs, then the header's page. False if a run stays mapped
    /// (the region then lives on, its unmapped runs holes).
    ///
    /// # Safety
    /// `region` is live, off the list, and nothing uses its pages; the
    /// lock is held.
    pub(super) unsafe fn unmap_region(&mut self, region: *mut Region) -> bool {
        // SAFETY: the caller's promise; each run is ours and unused, and
        // the header's page, which holds `region`, goes last.
        unsafe {
            let before = runs(holes(region)).count() as u64;
            let mapped = !holes(region);
            for (first, count) in runs(mapped & !1) {
                if unmap_block((region as usize + first * PAGE) as *mut u8, count * PAGE) == 0 {
                    (*region).unmapped |= (((1u128 << count) - 1) as u64) << first;
                }
            }
            if holes(region) | 1 == !0 && unmap_block(region as *mut u8, PAGE) == 0 {
                self.hole_maps = self.hole_maps.saturating_sub(before);
                return true;
            }
            let after = runs(holes(region)).count() as u64;
            self.hole_maps = self.hole_maps.saturating_sub(before).saturating_add(after);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_and_splits_count_holes_as_the_kernel_counts_maps() {
        assert_eq!(runs(0b0110_1110).collect::<Vec<_>>(), [(1, 3), (5, 2)]);
        assert_eq!(runs(!0).collect::<Vec<_>>(), [(0, 64)]);
        assert_eq!([hole_split(0, 5), hole_split(1 << 4, 5), hole_split(0b101 << 4, 5)], [1, 0, -1]);
        assert_eq!(hole_split(0, 63), 1);
    }
}
