//! A walk over a request body that checks every length and count against the bytes
//! actually present, before `kafka-protocol` decodes it.
//!
//! Why: `kafka-protocol`'s decoder sizes an array's `Vec` from the count on the wire
//! before it reads a single element, so four bytes saying "two billion topics" make it
//! ask the allocator for hundreds of gigabytes, and the process aborts. The walk reads the
//! same fields in the same order as the decoder (the tables in [`crate::shapes`] describe
//! every served request, version by version) and refuses a body in which
//!
//! - an array count, string length or byte-string length is larger than the bytes left
//!   could hold (each array element takes at least its smallest encoded size);
//! - a known tagged field's value is not exactly as long as its declared size, or a
//!   tagged field is not valid at the request's version;
//! - the decoded value would take more memory than the caller allows: the walk adds up
//!   what the decoder will allocate (each array's elements at their in-memory size, each
//!   unknown tagged field), which is the request's [`Footprint`].
//!
//! The walk is lenient where leniency is harmless (a null where the decoder wants a
//! value is left for the decoder to refuse), and strict where the two could disagree
//! about where the next field starts: whatever the walk accepts, the decoder reads at
//! the positions the walk checked. A test in this module generates bodies from the
//! tables and checks that `kafka-protocol` decodes each of them to the last byte, so a
//! table that drifts from the decoder fails the build's tests.
//!
//! Bytes after the last field are allowed, as the decoder allows them (see
//! [`crate::decode_body`]).

use crate::shapes::{Elem, Kind, Struct, MESSAGES};
use kafka_protocol::messages::ApiKey;

/// The largest size of one unknown tagged field held by the decoder (its tag and a
/// `Bytes` handle in a `BTreeMap` node, amortised), charged per tagged field.
const UNKNOWN_TAG_BYTES: usize = 64;
/// What a struct's first unknown tagged field costs on top: the decoder's `BTreeMap`
/// allocates a whole leaf node (eleven keys and values) for it, so one tag in each of
/// many small structs costs far more than the amortised size.
const UNKNOWN_TAGS_FIRST_NODE_BYTES: usize =
    16 + 11 * (std::mem::size_of::<i32>() + std::mem::size_of::<bytes::Bytes>());

/// What a checked request body costs once decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes the decoder allocates for arrays and unknown tagged fields (strings and
    /// byte strings share the frame's buffer).
    pub decoded_bytes: usize,
}

/// Why a body was refused, with the byte position where the walk stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShapeError {
    #[error("no request layout is known for {api_key:?} v{version}")]
    UnknownLayout { api_key: ApiKey, version: i16 },
    #[error("{what} at byte {at}: {count} does not fit in the {left} bytes left")]
    TooLong {
        what: &'static str,
        at: usize,
        count: i64,
        left: usize,
    },
    #[error("truncated at byte {at}")]
    Truncated { at: usize },
    #[error("varint at byte {at} is longer than 5 bytes")]
    Varint { at: usize },
    #[error("tagged field {tag} at byte {at} is not valid at this version")]
    TagVersion { tag: u32, at: usize },
    #[error("tagged field {tag} at byte {at} declares {declared} bytes, holds {actual}")]
    TagSize {
        tag: u32,
        at: usize,
        declared: usize,
        actual: usize,
    },
    #[error("decoding would allocate {decoded_bytes} bytes, more than the {limit} allowed")]
    TooCostly { decoded_bytes: usize, limit: usize },
}

/// Walks `body`, a request of `api_key` at `version`, and returns what decoding it
/// will allocate. Fails on the first length or count the bytes cannot back, and when
/// the decoded value would take more than `decoded_bytes_max`.
pub fn check_body(
    api_key: ApiKey,
    version: i16,
    body: &[u8],
    decoded_bytes_max: usize,
) -> Result<Footprint, ShapeError> {
    let message = MESSAGES
        .iter()
        .find(|m| m.api_key == api_key && version >= m.min_version)
        .ok_or(ShapeError::UnknownLayout { api_key, version })?;
    let mut walk = Walk {
        body,
        at: 0,
        version,
        flexible: version >= message.flexible_min,
        decoded_bytes: message.root.size,
        decoded_bytes_max,
    };
    walk.structure(message.root)?;
    Ok(Footprint {
        decoded_bytes: walk.decoded_bytes,
    })
}

struct Walk<'a> {
    body: &'a [u8],
    at: usize,
    version: i16,
    flexible: bool,
    decoded_bytes: usize,
    decoded_bytes_max: usize,
}

impl Walk<'_> {
    fn left(&self) -> usize {
        self.body.len() - self.at
    }

    fn skip(&mut self, what: &'static str, n: usize) -> Result<(), ShapeError> {
        if n > self.left() {
            return Err(ShapeError::TooLong {
                what,
                at: self.at,
                count: n as i64,
                left: self.left(),
            });
        }
        self.at += n;
        Ok(())
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], ShapeError> {
        let bytes = self
            .body
            .get(self.at..self.at + N)
            .ok_or(ShapeError::Truncated { at: self.at })?;
        self.at += N;
        Ok(bytes.try_into().expect("slice of N bytes"))
    }

    fn varint(&mut self) -> Result<u32, ShapeError> {
        let start = self.at;
        let mut value: u32 = 0;
        for i in 0..5 {
            let [b] = self.take::<1>()?;
            value |= u32::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(ShapeError::Varint { at: start })
    }

    fn charge(&mut self, bytes: usize) -> Result<(), ShapeError> {
        self.decoded_bytes = self.decoded_bytes.saturating_add(bytes);
        if self.decoded_bytes > self.decoded_bytes_max {
            return Err(ShapeError::TooCostly {
                decoded_bytes: self.decoded_bytes,
                limit: self.decoded_bytes_max,
            });
        }
        Ok(())
    }

    /// A length or count prefix: `None` for null, else the length.
    fn length(&mut self, wide: bool) -> Result<Option<usize>, ShapeError> {
        if self.flexible {
            return Ok(match self.varint()? {
                0 => None,
                n => Some(n as usize - 1),
            });
        }
        let at = self.at;
        let n = if wide {
            i64::from(i32::from_be_bytes(self.take()?))
        } else {
            i64::from(i16::from_be_bytes(self.take()?))
        };
        match n {
            -1 => Ok(None),
            n if n >= 0 => Ok(Some(n as usize)),
            n => Err(ShapeError::TooLong {
                what: "negative length",
                at,
                count: n,
                left: self.left(),
            }),
        }
    }

    fn structure(&mut self, s: &Struct) -> Result<(), ShapeError> {
        for f in s.fields {
            if (f.min..=f.max).contains(&self.version) {
                self.kind(&f.kind)?;
            }
        }
        if self.flexible {
            self.tagged_fields(s)?;
        }
        Ok(())
    }

    fn tagged_fields(&mut self, s: &Struct) -> Result<(), ShapeError> {
        let count = self.varint()? as usize;
        // Each tagged field takes at least two bytes (tag and size).
        if count > self.left() / 2 {
            return Err(ShapeError::TooLong {
                what: "tagged field count",
                at: self.at,
                count: count as i64,
                left: self.left(),
            });
        }
        let mut unknown = 0usize;
        for _ in 0..count {
            let at = self.at;
            let tag = self.varint()?;
            let declared = self.varint()? as usize;
            match s.tags.iter().find(|t| t.tag == tag) {
                // The decoder reads a known tag's value as its type, whatever size was
                // declared: the two must agree or the decoder would read other bytes
                // than the walk checked.
                Some(known) => {
                    if !(known.min..=known.max).contains(&self.version) {
                        return Err(ShapeError::TagVersion { tag, at });
                    }
                    let start = self.at;
                    self.kind(&known.kind)?;
                    let actual = self.at - start;
                    if actual != declared {
                        return Err(ShapeError::TagSize {
                            tag,
                            at,
                            declared,
                            actual,
                        });
                    }
                }
                None => {
                    self.skip("tagged field size", declared)?;
                    if unknown == 0 {
                        self.charge(UNKNOWN_TAGS_FIRST_NODE_BYTES)?;
                    }
                    unknown += 1;
                    self.charge(UNKNOWN_TAG_BYTES)?;
                }
            }
        }
        Ok(())
    }

    fn kind(&mut self, kind: &Kind) -> Result<(), ShapeError> {
        match kind {
            Kind::Fixed(n) => self.skip("field", *n),
            Kind::Str => match self.length(false)? {
                Some(n) => self.skip("string length", n),
                None => Ok(()),
            },
            Kind::Bytes => match self.length(true)? {
                Some(n) => self.skip("bytes length", n),
                None => Ok(()),
            },
            Kind::Struct(s) => self.structure(s),
            Kind::Array(elem) => self.array(elem),
        }
    }

    fn array(&mut self, elem: &Elem) -> Result<(), ShapeError> {
        let at = self.at;
        let Some(count) = self.length(true)? else {
            return Ok(());
        };
        let (wire_min, memory) = match elem {
            Elem::Fixed(wire, memory) => (*wire, *memory),
            Elem::Str => (if self.flexible { 1 } else { 2 }, STR_BYTES),
            Elem::Struct(s) => (self.wire_min(s), s.size),
        };
        // An element that takes no bytes (no field at this version) still counts as
        // one, so a count is never larger than the bytes left.
        if count > self.left() / wire_min.max(1) {
            return Err(ShapeError::TooLong {
                what: "array count",
                at,
                count: count as i64,
                left: self.left(),
            });
        }
        self.charge(count.saturating_mul(memory))?;
        for _ in 0..count {
            match elem {
                Elem::Fixed(wire, _) => self.skip("array element", *wire)?,
                Elem::Str => self.kind(&Kind::Str)?,
                Elem::Struct(s) => self.structure(s)?,
            }
        }
        Ok(())
    }

    /// The fewest bytes a struct takes at this version: every field at its shortest
    /// (empty strings and arrays, nulls), no tagged fields.
    fn wire_min(&self, s: &Struct) -> usize {
        let prefix = |wide: usize| if self.flexible { 1 } else { wide };
        let fields: usize = s
            .fields
            .iter()
            .filter(|f| (f.min..=f.max).contains(&self.version))
            .map(|f| match &f.kind {
                Kind::Fixed(n) => *n,
                Kind::Str => prefix(2),
                Kind::Bytes | Kind::Array(_) => prefix(4),
                Kind::Struct(inner) => self.wire_min(inner),
            })
            .sum();
        fields + usize::from(self.flexible)
    }
}

/// In-memory size of a decoded string (`StrBytes`, a `Bytes` handle).
const STR_BYTES: usize = std::mem::size_of::<kafka_protocol::protocol::StrBytes>();

#[cfg(test)]
mod tests;
