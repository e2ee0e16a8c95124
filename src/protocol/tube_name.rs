//! Tube names: the one type that proves a name legal (reference §1.4),
//! kept inline so that parsing allocates nothing. It must not create or
//! look up tubes: that is the engine's (`Tubes::find_or_create`).
#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects, clippy::unwrap_used, clippy::expect_used)]

use std::fmt;

/// Longest tube name.
pub const MAX_TUBE_NAME: usize = 200;

/// A tube name that satisfies the protocol: 1 to 200 bytes from
/// `A-Za-z0-9-+/;.$_()`, not starting with `-`. Holding one is proof of that,
/// so nothing past the parser checks names again.
///
/// Kept inline, as beanstalkd keeps it, not on the heap: parsing a command
/// allocates nothing, and creating a tube claims its memory in one place
/// (`Tubes::find_or_create`), where a failure is an answer.
#[derive(Clone)]
pub struct TubeName {
    len: u8,
    bytes: [u8; MAX_TUBE_NAME],
}

impl TubeName {
    /// The tube every client starts out using and watching.
    pub fn default_tube() -> TubeName {
        TubeName::new(b"default").unwrap_or_else(|| unreachable!("a legal name"))
    }

    /// Whether `bytes` are a legal name, without making one.
    pub fn is_legal(bytes: &[u8]) -> bool {
        !bytes.is_empty()
            && bytes.len() <= MAX_TUBE_NAME
            && bytes.first() != Some(&b'-')
            && bytes.iter().all(|&b| is_name_byte(b))
    }

    /// Validates `bytes` as a tube name.
    pub fn new(bytes: &[u8]) -> Option<TubeName> {
        if !TubeName::is_legal(bytes) {
            return None;
        }
        let mut name = TubeName { len: u8::try_from(bytes.len()).ok()?, bytes: [0; MAX_TUBE_NAME] };
        name.bytes.get_mut(..bytes.len())?.copy_from_slice(bytes);
        Some(name)
    }

    fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        // Every name byte is ASCII, so this never fails.
        std::str::from_utf8(self.as_bytes()).unwrap_or_default()
    }

    /// True for the tube that is never destroyed.
    pub fn is_default(&self) -> bool {
        self.as_bytes() == b"default"
    }
}

impl PartialEq for TubeName {
    fn eq(&self, other: &TubeName) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl Eq for TubeName {}

impl std::hash::Hash for TubeName {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.as_bytes().hash(state);
    }
}

impl PartialOrd for TubeName {
    fn partial_cmp(&self, other: &TubeName) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for TubeName {
    fn cmp(&self, other: &TubeName) -> std::cmp::Ordering {
        self.as_bytes().cmp(other.as_bytes())
    }
}

impl fmt::Debug for TubeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self.as_str(), f)
    }
}

impl fmt::Display for TubeName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A byte a tube name may hold; `pause-tube` also reads a name's extent by it.
pub(super) fn is_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-+/;.$_()".contains(&b)
}
