//! The tube names a replay meets, each stored once, by the number records
//! of the replayed state name them with.

use std::collections::HashMap;

/// Tube names seen so far, each stored once.
#[derive(Default)]
pub(super) struct Tubes {
    pub(super) names: Vec<Vec<u8>>,
    index: HashMap<Vec<u8>, usize>,
}

impl Tubes {
    pub(super) fn intern(&mut self, name: &[u8]) -> usize {
        if let Some(&i) = self.index.get(name) {
            return i;
        }
        self.names.push(name.to_vec());
        self.index.insert(name.to_vec(), self.names.len() - 1);
        self.names.len() - 1
    }
}
