//! Goal: the tables in `shapes.rs` match what `kafka-protocol` decodes, and whatever the
//! walk accepts, the decoder allocates no more than the walk's footprint.
//!
//! Method: bodies are generated from the tables (random counts, lengths, values and
//! tagged fields) for every API and every version the crate decodes; the crate must
//! decode each to its last byte. Then the same bodies are damaged at random positions
//! with the counts an attacker would send; for each damaged body the walk accepts, the
//! decoder runs under an allocator that records the most bytes the thread held at once,
//! which must stay within the footprint. Seeds are printed; `SHAPE_SEED` replays one.

use super::*;
use crate::shapes::{Elem, Kind, Message, Struct, Tag, MESSAGES};
use fastrand::Rng;
use kafka_protocol::messages::*;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the bytes this thread holds while `TRACKING` is on, and their peak.
struct Tracking;

thread_local! {
    static TRACKING: Cell<bool> = const { Cell::new(false) };
    static HELD: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Tracking {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size() as isize);
        System.alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        note(-(layout.size() as isize));
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size as isize - layout.size() as isize);
        System.realloc(ptr, layout, new_size)
    }
}

fn note(delta: isize) {
    let _ = TRACKING.try_with(|on| {
        if on.get() {
            HELD.with(|h| {
                let held = h.get() + delta;
                h.set(held);
                PEAK.with(|p| p.set(p.get().max(held)));
            });
        }
    });
}

#[global_allocator]
static ALLOCATOR: Tracking = Tracking;

/// Runs `f` and returns the most bytes it held at once.
fn peak_bytes(f: impl FnOnce()) -> usize {
    HELD.with(|h| h.set(0));
    PEAK.with(|p| p.set(0));
    TRACKING.with(|t| t.set(true));
    f();
    TRACKING.with(|t| t.set(false));
    PEAK.with(|p| p.get()).max(0) as usize
}

/// A generator seeded from `SHAPE_SEED` or at random; the seed is printed.
fn rng() -> Rng {
    let seed = std::env::var("SHAPE_SEED")
        .ok()
        .and_then(|s| s.parse().ok());
    let seed = seed.unwrap_or_else(|| fastrand::u64(..));
    println!("SHAPE_SEED={seed}");
    Rng::with_seed(seed)
}

/// Writes a random body of `s` at `version`.
struct Gen<'r> {
    rng: &'r mut Rng,
    version: i16,
    flexible: bool,
    out: Vec<u8>,
}

impl Gen<'_> {
    fn varint(&mut self, mut v: u32) {
        while v >= 0x80 {
            self.out.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.out.push(v as u8);
    }

    fn length(&mut self, n: usize, wide: bool) {
        if self.flexible {
            self.varint(n as u32 + 1);
        } else if wide {
            self.out.extend_from_slice(&(n as i32).to_be_bytes());
        } else {
            self.out.extend_from_slice(&(n as i16).to_be_bytes());
        }
    }

    fn structure(&mut self, s: &Struct) {
        for f in s.fields {
            if (f.min..=f.max).contains(&self.version) {
                self.kind(&f.kind);
            }
        }
        if self.flexible {
            let known: Vec<&Tag> = s
                .tags
                .iter()
                .filter(|t| (t.min..=t.max).contains(&self.version) && self.rng.u64(..2) == 0)
                .collect();
            let unknown = self.rng.u64(..2) as u32;
            self.varint(known.len() as u32 + unknown);
            for t in known {
                let mut inner = Gen {
                    rng: self.rng,
                    version: self.version,
                    flexible: true,
                    out: Vec::new(),
                };
                inner.kind(&t.kind);
                let value = inner.out;
                self.varint(t.tag);
                self.varint(value.len() as u32);
                self.out.extend_from_slice(&value);
            }
            if unknown == 1 {
                // Tags are ordered; one past any known tag is unknown to the decoder.
                self.varint(1000);
                let n = self.rng.u64(..4) as usize;
                self.varint(n as u32);
                self.out.extend(std::iter::repeat_n(7u8, n));
            }
        }
    }

    fn kind(&mut self, kind: &Kind) {
        match kind {
            Kind::Fixed(n) => {
                for _ in 0..*n {
                    let b = self.rng.u64(..256) as u8;
                    self.out.push(b);
                }
            }
            Kind::Str => {
                let n = self.rng.u64(..6) as usize;
                self.length(n, false);
                self.out.extend(std::iter::repeat_n(b'a', n));
            }
            Kind::Bytes => {
                let n = self.rng.u64(..6) as usize;
                self.length(n, true);
                self.out.extend(std::iter::repeat_n(0u8, n));
            }
            Kind::Struct(s) => self.structure(s),
            Kind::Array(elem) => {
                let n = self.rng.u64(..3) as usize;
                self.length(n, true);
                for _ in 0..n {
                    match elem {
                        Elem::Fixed(wire, _) => self.kind(&Kind::Fixed(*wire)),
                        Elem::Str => self.kind(&Kind::Str),
                        Elem::Struct(s) => self.structure(s),
                    }
                }
            }
        }
    }
}

fn generate(rng: &mut Rng, message: &Message, version: i16) -> Vec<u8> {
    let mut g = Gen {
        rng,
        version,
        flexible: version >= message.flexible_min,
        out: Vec::new(),
    };
    g.structure(message.root);
    g.out
}

/// A trial decode: bytes left over, or the decoder's error.
type Trial = Result<usize, String>;

/// Decodes `body` as `api_key`'s request; returns the bytes left over.
fn decode(api_key: ApiKey, version: i16, body: &[u8]) -> Trial {
    let mut buf = bytes::Bytes::copy_from_slice(body);
    match RequestKind::decode(api_key, &mut buf, version) {
        Ok(value) => {
            drop(value);
            Ok(bytes::Buf::remaining(&buf))
        }
        Err(e) => Err(format!("{e:#}")),
    }
}

/// The versions `kafka-protocol` decodes for `api_key`: those where an empty body is
/// not refused for its version alone.
fn versions(api_key: ApiKey) -> Vec<i16> {
    (0..=30)
        .filter(|&v| {
            decode(api_key, v, &[]).map_or_else(|e| !e.contains("version not supported"), |_| true)
        })
        .collect()
}

/// The versions the decoder knows for `message`, the oldest being the table's.
fn decodable_versions(message: &Message) -> Vec<i16> {
    let versions = versions(message.api_key);
    assert_eq!(
        versions.first(),
        Some(&message.min_version),
        "{:?}",
        message.api_key
    );
    versions
}

const UNLIMITED: usize = usize::MAX;

#[test]
fn generated_bodies_decode_to_the_last_byte() {
    let mut rng = rng();
    for message in MESSAGES {
        for version in decodable_versions(message) {
            for _ in 0..100 {
                let body = generate(&mut rng, message, version);
                let what = format!("{:?} v{version} {body:?}", message.api_key);
                check_body(message.api_key, version, &body, UNLIMITED)
                    .unwrap_or_else(|e| panic!("walk refused {what}: {e}"));
                let left = decode(message.api_key, version, &body)
                    .unwrap_or_else(|e| panic!("decoder refused {what}: {e}"));
                assert_eq!(left, 0, "decoder left bytes of {what}");
            }
        }
    }
}

#[test]
fn generated_share_v2_bodies_decode_to_the_last_byte() {
    // The crate does not decode version 2: `share_v2` cuts out what it adds and the
    // crate decodes the rest as version 1.
    let mut rng = rng();
    for message in MESSAGES {
        for _ in 0..300 {
            let body = generate(&mut rng, message, 2);
            let v1 = match message.api_key {
                ApiKey::ShareFetch => {
                    crate::share_v2::split_share_fetch(&body.clone().into()).map(|(rest, _)| rest)
                }
                ApiKey::ShareAcknowledge => {
                    crate::share_v2::split_share_acknowledge(&body.clone().into())
                        .map(|(rest, _)| rest)
                }
                _ => break,
            };
            let what = format!("{:?} v2 {body:?}", message.api_key);
            check_body(message.api_key, 2, &body, UNLIMITED)
                .unwrap_or_else(|e| panic!("walk refused {what}: {e}"));
            let v1 = v1.unwrap_or_else(|e| panic!("share_v2 refused {what}: {e}"));
            let left = decode(message.api_key, 1, &v1)
                .unwrap_or_else(|e| panic!("decoder refused {what}: {e}"));
            assert_eq!(left, 0, "decoder left bytes of {what}");
        }
    }
}

/// Counts an attacker would write over a length or count.
const HOSTILE: &[&[u8]] = &[
    &[0x7f, 0xff, 0xff, 0xff],
    &[0x00, 0x10, 0x00, 0x00],
    &[0xff, 0xff, 0xff, 0xff, 0x07],
    &[0x80, 0x80, 0x80, 0x40],
    &[0x7f, 0xff],
];

#[test]
fn damaged_bodies_never_allocate_beyond_the_footprint() {
    let mut rng = rng();
    let (mut accepted, mut refused) = (0u64, 0u64);
    for message in MESSAGES {
        for version in decodable_versions(message) {
            for _ in 0..300 {
                let mut body = generate(&mut rng, message, version);
                let at = rng.u64(..body.len() as u64 + 1) as usize;
                let hostile = HOSTILE[rng.u64(..HOSTILE.len() as u64) as usize];
                body.truncate(at);
                body.extend_from_slice(hostile);
                body.extend(std::iter::repeat_n(1u8, rng.u64(..64) as usize));
                let Ok(footprint) = check_body(message.api_key, version, &body, UNLIMITED) else {
                    refused += 1;
                    continue;
                };
                accepted += 1;
                let peak = peak_bytes(|| {
                    let _ = decode(message.api_key, version, &body);
                });
                // The trial decode copies the body into a buffer of its own, and a
                // decoder error holds its message.
                let allowed = footprint.decoded_bytes + body.len() + 4096;
                assert!(
                    peak <= allowed,
                    "{:?} v{version}: decoding {body:?} held {peak} bytes, footprint {footprint:?}",
                    message.api_key
                );
            }
        }
    }
    println!("damaged bodies: {accepted} accepted and decoded within bounds, {refused} refused");
    assert!(refused > 0 && accepted > 0);
}

#[test]
fn a_fetch_claiming_two_billion_topics_is_refused_before_decoding() {
    // The 37-byte request that used to abort the process: Fetch v4 whose topic count is
    // 2^31 - 1 with nothing behind it.
    let mut body = Vec::new();
    body.extend_from_slice(&(-1i32).to_be_bytes()); // replica_id
    body.extend_from_slice(&500i32.to_be_bytes()); // max_wait_ms
    body.extend_from_slice(&1i32.to_be_bytes()); // min_bytes
    body.extend_from_slice(&(1i32 << 20).to_be_bytes()); // max_bytes
    body.push(0); // isolation_level
    body.extend_from_slice(&i32::MAX.to_be_bytes()); // topics count
    let err = check_body(ApiKey::Fetch, 4, &body, UNLIMITED).unwrap_err();
    assert!(
        matches!(err, ShapeError::TooLong { what: "array count", count, .. } if count == i64::from(i32::MAX))
    );
    // Compact arrays (Metadata v12): a varint count of about 2^32.
    let mut body = vec![0xff, 0xff, 0xff, 0xff, 0x0f];
    body.extend_from_slice(&[1, 0, 0, 0]);
    assert!(check_body(ApiKey::Metadata, 12, &body, UNLIMITED).is_err());
}

#[test]
fn the_footprint_limit_refuses_costly_bodies() {
    // DeleteGroups v2 with 1,000 one-byte group names: small on the wire, 32 KiB or so
    // once decoded.
    let mut body = Vec::new();
    body.push(0xe9);
    body.push(0x07); // compact count 1000 + 1
    for _ in 0..1000 {
        body.extend_from_slice(&[2, b'g']);
    }
    body.push(0); // tagged fields
    let footprint = check_body(ApiKey::DeleteGroups, 2, &body, UNLIMITED).unwrap();
    assert!(footprint.decoded_bytes >= 1000 * STR_BYTES);
    let err = check_body(ApiKey::DeleteGroups, 2, &body, 4096).unwrap_err();
    assert!(matches!(err, ShapeError::TooCostly { limit: 4096, .. }));
}

#[test]
fn every_layout_is_known_once() {
    for (i, m) in MESSAGES.iter().enumerate() {
        assert!(
            MESSAGES[i + 1..].iter().all(|o| o.api_key != m.api_key),
            "{:?} twice",
            m.api_key
        );
    }
    // The decoder's own range, found by asking it: the version filter of the tests works.
    assert_eq!(versions(ApiKey::Fetch), (4..=18).collect::<Vec<i16>>());
    assert!(matches!(
        check_body(ApiKey::WriteTxnMarkers, 0, &[], UNLIMITED),
        Err(ShapeError::UnknownLayout { .. })
    ));
}
