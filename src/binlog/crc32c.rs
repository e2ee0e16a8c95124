//! CRC-32C (Castagnoli), the checksum every record of the log carries
//! (`record.rs`): the CPU's instruction where it has one (`sys/crc.rs`),
//! else slicing by 4, with its tables made at compile time. It knows
//! nothing of records.

/// CRC-32C (Castagnoli), the checksum of every record's payload.
pub fn crc32c(bytes: &[u8]) -> u32 {
    crc32c_append(0, bytes)
}

/// The CRC-32C of some bytes whose CRC-32C is `crc`, followed by `bytes`:
/// a record read in pieces (`body.rs`) is checked without a copy.
pub fn crc32c_append(crc: u32, bytes: &[u8]) -> u32 {
    crate::sys::crc::crc32c_append(crc, bytes).unwrap_or_else(|| by_tables(crc, bytes))
}

/// [`crc32c_append`] by the tables.
fn by_tables(crc: u32, bytes: &[u8]) -> u32 {
    static TABLE: [[u32; 256]; 4] = crc_tables();
    let mut crc = !crc;
    let mut chunks = bytes.chunks_exact(4);
    for c in &mut chunks {
        crc ^= u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        crc = TABLE[3][(crc & 0xff) as usize]
            ^ TABLE[2][((crc >> 8) & 0xff) as usize]
            ^ TABLE[1][((crc >> 16) & 0xff) as usize]
            ^ TABLE[0][(crc >> 24) as usize];
    }
    for &b in chunks.remainder() {
        crc = TABLE[0][((crc ^ u32::from(b)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// Slicing-by-4 tables for the reflected polynomial 0x82F63B78.
const fn crc_tables() -> [[u32; 256]; 4] {
    let mut t = [[0u32; 256]; 4];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 { (c >> 1) ^ 0x82F6_3B78 } else { c >> 1 };
            k += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut i = 0;
    while i < 256 {
        t[1][i] = (t[0][i] >> 8) ^ t[0][(t[0][i] & 0xff) as usize];
        t[2][i] = (t[1][i] >> 8) ^ t[0][(t[1][i] & 0xff) as usize];
        t[3][i] = (t[2][i] >> 8) ^ t[0][(t[2][i] & 0xff) as usize];
        i += 1;
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU's instruction and the tables agree, at every length and
    /// split, and on the standard check value.
    #[test]
    fn the_instruction_and_the_tables_agree() {
        assert_eq!(by_tables(0, b"123456789"), 0xE306_9283);
        let bytes: Vec<u8> = (0..1000u32).map(|n| (n.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in 0..bytes.len() {
            let (a, b) = bytes[..len].split_at(len / 3);
            assert_eq!(crc32c_append(crc32c(a), b), by_tables(0, &bytes[..len]), "{len} bytes");
        }
        if std::is_x86_feature_detected!("sse4.2") {
            assert!(crate::sys::crc::crc32c_append(0, b"x").is_some(), "the instruction is used");
        }
    }
}
