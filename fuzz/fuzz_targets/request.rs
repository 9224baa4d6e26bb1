//! A request frame's body (header and message) as a client could send it: the header is
//! parsed, the walk checks the body, and whatever the walk lets through is decoded by
//! `kafka-protocol`. Nothing may panic, and no allocation may exceed libFuzzer's
//! `-malloc_limit_mb` (the walk's footprint bound is 16 MiB).
#![no_main]

use bytes::Bytes;
use headway_protocol::kafka_protocol::messages::RequestKind;
use headway_protocol::parse_request;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(request) = parse_request(Bytes::copy_from_slice(data)) else {
        return;
    };
    if request.footprint().is_err() {
        return;
    }
    let mut body = request.body.clone();
    let _ = RequestKind::decode(request.api_key, &mut body, request.api_version());
});
