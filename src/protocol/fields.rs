//! Numbers as beanstalkd reads them (reference §1.4): the cursor over a
//! line's space-separated numeric fields, `kick`'s `strtoul`-like bound,
//! and the numbers of tuber's batch commands, read as tuber reads them. Bytes from a client: nothing here may
//! panic, which the lints of `protocol` check here too.
#![deny(clippy::indexing_slicing, clippy::arithmetic_side_effects, clippy::unwrap_used, clippy::expect_used)]

use super::ParseError;
use crate::ids::JobId;

/// The ids of a `delete-batch`, read as tuber reads them: fields split
/// at any white space, each a [`tuber_number`]; `Some(None)` for a field
/// that is not one, after which the iterator ends.
pub(super) fn id_fields(s: &[u8]) -> impl Iterator<Item = Option<JobId>> + '_ {
    let mut fields = s.split(|b| is_white(*b)).filter(|field| !field.is_empty());
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed {
            return None;
        }
        let id = tuber_number(fields.next()?);
        failed = id.is_none();
        Some(id)
    })
}

/// White space as Rust's `str::split_whitespace`, which tuber splits with,
/// finds it in ASCII.
fn is_white(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r')
}

/// A number as Rust's `u64::from_str` reads it, which tuber's batch
/// commands use: digits, a `+` allowed before them, nothing else.
pub(super) fn tuber_number(s: &[u8]) -> Option<u64> {
    let digits = s.strip_prefix(b"+").unwrap_or(s);
    let (value, count) = leading_number(digits)?;
    (count > 0 && count == digits.len()).then_some(value)
}

/// `kick`'s bound, parsed the way C's `strtoul` does it (reference §1.4): any
/// leading white space, an optional sign, digits, junk ignored; a negative
/// number wraps, and the 64-bit result is cut to 32 bits.
pub(super) fn parse_kick_bound(rest: &[u8]) -> Result<u32, ParseError> {
    let is_c_space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let start = rest.iter().position(|b| !is_c_space(b)).unwrap_or(rest.len());
    let s = rest.get(start..).unwrap_or_default();
    let negative = s.first() == Some(&b'-');
    let s = match s.split_first() {
        Some((b'-' | b'+', unsigned)) => unsigned,
        _ => s,
    };
    let (value, digits) = leading_number(s).ok_or(ParseError::BadFormat)?;
    if digits == 0 {
        return Err(ParseError::BadFormat);
    }
    let value = if negative { value.wrapping_neg() } else { value };
    Ok(value as u32)
}

/// Reads the decimal digits at the start of `s`: `(value, digit count)`, or
/// `None` if the value does not fit in a u64.
pub(super) fn leading_number(s: &[u8]) -> Option<(u64, usize)> {
    let mut value: u64 = 0;
    let mut digits: usize = 0;
    // A plain loop, not an iterator chain: every field of every command
    // comes through here, and the size-optimised build keeps it tight.
    while let Some(&b) = s.get(digits) {
        if !b.is_ascii_digit() {
            break;
        }
        value = value.checked_mul(10)?.checked_add(u64::from(b.wrapping_sub(b'0')))?;
        // At most `s.len()`: cannot overflow.
        digits = digits.wrapping_add(1);
    }
    Some((value, digits))
}

pub(super) fn skip_spaces(s: &[u8]) -> &[u8] {
    let n = s.iter().position(|&b| b != b' ').unwrap_or(s.len());
    s.get(n..).unwrap_or_default()
}

/// A cursor over space-separated numeric fields, with beanstalkd's rules:
/// any number of spaces before a field, a digit first, every digit taken.
pub(super) struct Fields<'a> {
    pub(super) rest: &'a [u8],
}

impl<'a> Fields<'a> {
    pub(super) fn new(rest: &'a [u8]) -> Self {
        Fields { rest }
    }

    pub(super) fn u64(&mut self) -> Result<u64, ParseError> {
        let s = skip_spaces(self.rest);
        let (value, digits) = leading_number(s).ok_or(ParseError::BadFormat)?;
        if digits == 0 {
            return Err(ParseError::BadFormat);
        }
        self.rest = s.get(digits..).unwrap_or_default();
        Ok(value)
    }

    pub(super) fn u32(&mut self) -> Result<u32, ParseError> {
        u32::try_from(self.u64()?).map_err(|_| ParseError::BadFormat)
    }

    pub(super) fn end(&self) -> Result<(), ParseError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(ParseError::BadFormat)
        }
    }

    pub(super) fn last_u64(mut self) -> Result<u64, ParseError> {
        let value = self.u64()?;
        self.end()?;
        Ok(value)
    }

    pub(super) fn last_u32(mut self) -> Result<u32, ParseError> {
        let value = self.u32()?;
        self.end()?;
        Ok(value)
    }
}
