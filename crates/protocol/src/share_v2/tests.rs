//! Goal: ShareFetch and ShareAcknowledge version 2 requests decode to what was sent,
//! answers encode to the version 2 layout, and no body, however cut or garbled,
//! panics the decoder.
//!
//! Method: requests are encoded by the crate at version 1 and the version 2 fields are
//! put in by hand where the message schemas place them; answers are taken apart by
//! hand. Truncations at every length and random bytes (seed printed, `SHARE_V2_SEED`
//! replays it) must give an error or a value, never a panic.

use super::*;
use kafka_protocol::messages::share_acknowledge_request::{
    AcknowledgePartition, AcknowledgeTopic, AcknowledgementBatch as AcknowledgeBatch,
};
use kafka_protocol::messages::share_acknowledge_response::{
    PartitionData as AckPartitionData, ShareAcknowledgeTopicResponse,
};
use kafka_protocol::messages::share_fetch_request::{
    AcknowledgementBatch, FetchPartition, FetchTopic, ForgottenTopic,
};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::StrBytes;

fn request(api_key: ApiKey, version: i16, body: Vec<u8>) -> Request {
    Request {
        api_key,
        header: RequestHeader::default().with_request_api_version(version),
        body: Bytes::from(body),
    }
}

fn encode_v1<T: Encodable>(value: &T) -> Vec<u8> {
    let mut out = BytesMut::new();
    value.encode(&mut out, 1).unwrap();
    out.to_vec()
}

fn share_fetch() -> ShareFetchRequest {
    ShareFetchRequest::default()
        .with_group_id(Some(StrBytes::from_static_str("group-a").into()))
        .with_member_id(Some(StrBytes::from_static_str("member-1")))
        .with_share_session_epoch(3)
        .with_max_wait_ms(500)
        .with_min_bytes(1)
        .with_max_bytes(1 << 20)
        .with_max_records(7)
        .with_batch_size(7)
        .with_topics(vec![FetchTopic::default()
            .with_topic_id(uuid::Uuid::from_u128(42))
            .with_partitions(vec![FetchPartition::default()
                .with_partition_index(2)
                .with_acknowledgement_batches(vec![
                    AcknowledgementBatch::default()
                        .with_first_offset(10)
                        .with_last_offset(12)
                        .with_acknowledge_types(vec![4]),
                ])])])
        .with_forgotten_topics_data(vec![ForgottenTopic::default()
            .with_topic_id(uuid::Uuid::from_u128(7))
            .with_partitions(vec![0, 1])])
}

fn share_acknowledge() -> ShareAcknowledgeRequest {
    ShareAcknowledgeRequest::default()
        .with_group_id(Some(StrBytes::from_static_str("group-a").into()))
        .with_member_id(Some(StrBytes::from_static_str("member-1")))
        .with_share_session_epoch(4)
        .with_topics(vec![AcknowledgeTopic::default()
            .with_topic_id(uuid::Uuid::from_u128(42))
            .with_partitions(vec![AcknowledgePartition::default()
                .with_partition_index(2)
                .with_acknowledgement_batches(vec![
                    AcknowledgeBatch::default()
                        .with_first_offset(10)
                        .with_last_offset(10)
                        .with_acknowledge_types(vec![4]),
                ])])])
}

/// A ShareFetch v2 body: v1 with mode and renew after BatchSize.
fn share_fetch_v2(mode: u8, renew: u8) -> Vec<u8> {
    let mut body = encode_v1(&share_fetch());
    // Compact strings "group-a" and "member-1": a one-byte length each.
    let at = (1 + 7) + (1 + 8) + 6 * 4;
    body.splice(at..at, [mode, renew]);
    body
}

fn share_acknowledge_v2(renew: u8) -> Vec<u8> {
    let mut body = encode_v1(&share_acknowledge());
    let at = (1 + 7) + (1 + 8) + 4;
    body.insert(at, renew);
    body
}

#[test]
fn a_share_fetch_v2_decodes_to_what_was_sent() {
    let r = request(ApiKey::ShareFetch, 2, share_fetch_v2(1, 1));
    let (body, v2) = decode_share_fetch(&r).unwrap();
    assert_eq!(body, share_fetch());
    assert_eq!(
        v2,
        ShareFetchV2 {
            acquire_mode: 1,
            is_renew_ack: true
        }
    );
    let r = request(ApiKey::ShareFetch, 2, share_fetch_v2(0, 0));
    assert_eq!(decode_share_fetch(&r).unwrap().1, ShareFetchV2::default());
    // Version 1 has neither field.
    let r = request(ApiKey::ShareFetch, 1, encode_v1(&share_fetch()));
    assert_eq!(
        decode_share_fetch(&r).unwrap(),
        (share_fetch(), ShareFetchV2::default())
    );
    assert_eq!(
        ShareAcquireMode::from_wire(1),
        Some(ShareAcquireMode::RecordLimit)
    );
    assert_eq!(ShareAcquireMode::from_wire(-1), None);
}

#[test]
fn a_share_acknowledge_v2_decodes_to_what_was_sent() {
    let r = request(ApiKey::ShareAcknowledge, 2, share_acknowledge_v2(1));
    assert_eq!(
        decode_share_acknowledge(&r).unwrap(),
        (share_acknowledge(), true)
    );
    let r = request(ApiKey::ShareAcknowledge, 1, encode_v1(&share_acknowledge()));
    assert_eq!(
        decode_share_acknowledge(&r).unwrap(),
        (share_acknowledge(), false)
    );
}

#[test]
fn cut_bodies_are_errors_not_panics() {
    let fetch = share_fetch_v2(1, 0);
    for len in 0..fetch.len() {
        let r = request(ApiKey::ShareFetch, 2, fetch[..len].to_vec());
        assert!(decode_share_fetch(&r).is_err(), "{len} bytes");
    }
    let ack = share_acknowledge_v2(1);
    for len in 0..ack.len() {
        let r = request(ApiKey::ShareAcknowledge, 2, ack[..len].to_vec());
        assert!(decode_share_acknowledge(&r).is_err(), "{len} bytes");
    }
}

#[test]
fn garbled_bodies_never_panic() {
    let seed = std::env::var("SHARE_V2_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    println!("SHARE_V2_SEED={seed}");
    let mut rng = fastrand::Rng::with_seed(seed);
    for _ in 0..2_000 {
        let mut fetch = share_fetch_v2(rng.u8(..), rng.u8(..));
        let mut ack = share_acknowledge_v2(rng.u8(..));
        for body in [&mut fetch, &mut ack] {
            for _ in 0..rng.usize(1..4) {
                let at = rng.usize(..body.len());
                body[at] = rng.u8(..);
            }
            body.truncate(rng.usize(..=body.len()));
        }
        let _ = decode_share_fetch(&request(ApiKey::ShareFetch, 2, fetch));
        let _ = decode_share_acknowledge(&request(ApiKey::ShareAcknowledge, 2, ack));
    }
    // Pure noise, of every short length.
    for len in 0..64 {
        let noise: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
        let _ = decode_share_fetch(&request(ApiKey::ShareFetch, 2, noise.clone()));
        let _ = decode_share_acknowledge(&request(ApiKey::ShareAcknowledge, 2, noise));
    }
}

#[test]
fn a_share_acknowledge_v2_answer_carries_the_lock_duration_after_the_error_message() {
    for message in [None, Some(StrBytes::from_static_str("refused"))] {
        let body = ShareAcknowledgeResponse::default()
            .with_error_code(0)
            .with_error_message(message.clone())
            .with_responses(vec![ShareAcknowledgeTopicResponse::default()
                .with_topic_id(uuid::Uuid::from_u128(42))
                .with_partitions(vec![AckPartitionData::default()
                    .with_partition_index(2)
                    .with_error_code(0)])]);
        let answer = ShareAcknowledgeAnswer {
            body: body.clone(),
            acquisition_lock_timeout_ms: 30_000,
        };
        let mut v2 = BytesMut::new();
        answer.encode(&mut v2, 2).unwrap();
        assert_eq!(v2.len(), answer.compute_size(2).unwrap());
        let at = 4 + 2 + message.as_ref().map_or(1, |m| 1 + m.len());
        assert_eq!(&v2[at..at + 4], &30_000i32.to_be_bytes());
        let mut v1 = v2.to_vec();
        v1.drain(at..at + 4);
        let decoded = ShareAcknowledgeResponse::decode(&mut Bytes::from(v1.clone()), 1).unwrap();
        assert_eq!(decoded, body);
        // Version 1 has no such field.
        let mut only_v1 = BytesMut::new();
        answer.encode(&mut only_v1, 1).unwrap();
        assert_eq!(only_v1.to_vec(), v1);
        assert_eq!(answer.compute_size(1).unwrap(), v1.len());
    }
}

#[test]
fn a_share_fetch_v2_answer_is_laid_out_as_v1() {
    let answer = ShareFetchAnswer(
        ShareFetchResponse::default()
            .with_acquisition_lock_timeout_ms(30_000)
            .with_error_message(Some(StrBytes::from_static_str("x"))),
    );
    let mut v1 = BytesMut::new();
    let mut v2 = BytesMut::new();
    answer.encode(&mut v1, 1).unwrap();
    answer.encode(&mut v2, 2).unwrap();
    assert_eq!(v1, v2);
    assert_eq!(answer.compute_size(2).unwrap(), v2.len());
    assert_eq!(
        ShareFetchAnswer::header_version(2),
        ShareFetchResponse::header_version(1)
    );
}
