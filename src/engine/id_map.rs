//! Hash maps keyed by job or client id, with a cheaper hash than std's.
//!
//! A simpler server would use `HashMap`'s default SipHash, which resists
//! keys chosen to collide. Ids are not chosen by clients: they are handed
//! out in sequence, so a multiplicative hash spreads them well at a
//! fraction of SipHash's cost. Nothing else here; a first reading can take
//! `IdMap<V>` as `HashMap<u64, V>`.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use super::ClientId;

/// A `HashMap` keyed by job or client id. Ids are sequential integers, so a
/// multiplicative hash spreads them well at a fraction of SipHash's cost.
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// A `HashMap` keyed by client id, with the same cheap hash.
pub type ClientMap<V> = HashMap<ClientId, V, BuildHasherDefault<IdHasher>>;

/// Fibonacci hashing for `u64` keys.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, id: u64) {
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}
