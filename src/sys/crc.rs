//! The CPU's CRC-32C instruction (SSE 4.2's `crc32`), where the CPU has
//! it: the log's checksum (`binlog/crc32c.rs`) at about 8 bytes a cycle,
//! where the tables do about one. Every record written and every body
//! read back from the log (`binlog/body.rs`) is checked with it, so a
//! 4 KiB body costs about 0.4 µs instead of 4. It decides nothing: `None`
//! where the instruction is missing, and the caller uses its tables.

/// The CRC-32C of some bytes whose CRC-32C is `crc`, followed by `bytes`;
/// `None` if this CPU lacks the instruction.
#[cfg(target_arch = "x86_64")]
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> Option<u32> {
    if !std::is_x86_feature_detected!("sse4.2") {
        return None;
    }
    // SAFETY: `with_sse42` needs SSE 4.2, which the CPU has: detected
    // just above (std caches the answer).
    Some(unsafe { with_sse42(crc, bytes) })
}

#[cfg(not(target_arch = "x86_64"))]
pub fn crc32c_append(_crc: u32, _bytes: &[u8]) -> Option<u32> {
    None
}

/// Eight bytes an instruction, then the rest one by one; the register
/// holds the CRC inverted, as the tables' loop does.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn with_sse42(crc: u32, bytes: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u64, _mm_crc32_u8};
    let mut state = u64::from(!crc);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let word =
            u64::from_le_bytes([word[0], word[1], word[2], word[3], word[4], word[5], word[6], word[7]]);
        state = _mm_crc32_u64(state, word);
    }
    let mut state = state as u32;
    for &byte in words.remainder() {
        state = _mm_crc32_u8(state, byte);
    }
    !state
}
