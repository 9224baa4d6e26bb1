//! AlterUserScramCredentials: adds, replaces and deletes users' SCRAM credentials,
//! durably, for a principal with Alter on the cluster. An upsertion carries the salt,
//! the iteration count and the salted password (the client runs PBKDF2; the password
//! never crosses the wire); the broker keeps only the keys derived from it.
//!
//! As Kafka answers it, one result per user: a user named twice in one request
//! (deletions and upsertions together) gets DUPLICATE_RESOURCE and none of its changes
//! is made; an empty name or an iteration count outside 4096..=16384
//! UNACCEPTABLE_CREDENTIAL; a mechanism other than SCRAM-SHA-256 and SCRAM-SHA-512
//! UNSUPPORTED_SASL_MECHANISM; the deletion of a credential that does not exist
//! RESOURCE_NOT_FOUND. The other users' changes are written in one durable write, and
//! the next authentication of a changed user uses its new credentials.

use crate::authorize;
use crate::call::{pending, ready, Call, Handler, HandlerError, Reply};
use crate::requests::ErrorCodes;
use headway_auth::acl::Operation;
use headway_auth::scram::{Mechanism, ScramCredential, ITERATIONS_MAX, ITERATIONS_MIN};
use headway_auth::store::CredentialChange;
use headway_auth::AuthError;
use headway_base::limits;
use headway_protocol::kafka_protocol::messages::alter_user_scram_credentials_response::AlterUserScramCredentialsResult;
use headway_protocol::kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse, ApiKey,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use std::collections::HashMap;
use std::sync::Arc;

pub const HANDLER: Handler = Handler {
    key: ApiKey::AlterUserScramCredentials,
    min_version: 0,
    max_version: 0,
    handle,
};

/// Why one user's change is refused: a Kafka error and its message.
type Refusal = (ResponseError, String);

fn refused(error: ResponseError, message: &str) -> Refusal {
    (error, message.to_string())
}

fn result(user: &str, outcome: Result<(), Refusal>) -> AlterUserScramCredentialsResult {
    let result =
        AlterUserScramCredentialsResult::default().with_user(StrBytes::from_string(user.into()));
    match outcome {
        Ok(()) => result,
        Err((error, message)) => result
            .with_error_code(error.code())
            .with_error_message(Some(StrBytes::from_string(message))),
    }
}

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: AlterUserScramCredentialsRequest = decode_body(request)?;
    let planned = plan(&body);
    if let Some(code) = authorize::cluster_refusal(call, Operation::Alter) {
        let results = planned
            .iter()
            .map(|(user, _)| {
                AlterUserScramCredentialsResult::default()
                    .with_user(StrBytes::from_string(user.clone()))
                    .with_error_code(code)
                    .with_error_message(Some(StrBytes::from_static_str(
                        "Cluster authorization failed.",
                    )))
            })
            .collect();
        return ready(
            request,
            &AlterUserScramCredentialsResponse::default().with_results(results),
        );
    }
    let changes: Vec<(String, CredentialChange)> = planned
        .iter()
        .filter_map(|(user, change)| Some((user.clone(), change.as_ref().ok()?.clone())))
        .collect();
    let store = Arc::clone(&call.ctx.security);
    pending(request, async move {
        // The store writes its file and syncs it: off the connection's thread.
        let applied = tokio::task::spawn_blocking(move || store.alter_credentials(changes))
            .await
            .unwrap_or_default();
        let mut applied = applied.into_iter();
        let results = planned
            .into_iter()
            .map(|(user, change)| {
                let outcome = change.and_then(|_| match applied.next() {
                    Some(Ok(())) => Ok(()),
                    Some(Err(e)) => Err(store_refusal(e)),
                    None => Err(refused(
                        ResponseError::UnknownServerError,
                        "the credentials could not be stored",
                    )),
                });
                result(&user, outcome)
            })
            .collect();
        AlterUserScramCredentialsResponse::default().with_results(results)
    })
}

fn store_refusal(error: AuthError) -> Refusal {
    match error {
        AuthError::NotFound(_) => refused(
            ResponseError::ResourceNotFound,
            "Attempt to delete a user credential that does not exist",
        ),
        AuthError::InvalidCredential(message) => (ResponseError::UnacceptableCredential, message),
        other => (ResponseError::UnknownServerError, other.to_string()),
    }
}

/// Each user of the request once, in the order first named, with its change or why it
/// is refused before the store is asked.
fn plan(
    body: &AlterUserScramCredentialsRequest,
) -> Vec<(String, Result<CredentialChange, Refusal>)> {
    let mut times: HashMap<&str, usize> = HashMap::new();
    let names = body
        .deletions
        .iter()
        .map(|d| &d.name)
        .chain(body.upsertions.iter().map(|u| &u.name));
    for name in names {
        *times.entry(name.as_str()).or_default() += 1;
    }
    let deletions = body.deletions.iter().map(|d| {
        let change = mechanism(&d.name, d.mechanism).map(CredentialChange::Delete);
        (d.name.as_str(), change)
    });
    let upsertions = body.upsertions.iter().map(|u| {
        let change = mechanism(&u.name, u.mechanism).and_then(|m| {
            credential(m, u.iterations, &u.salt, &u.salted_password).map(CredentialChange::Upsert)
        });
        (u.name.as_str(), change)
    });
    let mut planned: Vec<(String, Result<CredentialChange, Refusal>)> = Vec::new();
    for (name, change) in deletions.chain(upsertions) {
        match times.get(name).copied() {
            Some(0) => {} // answered at its first mention
            Some(1) => planned.push((name.to_string(), change)),
            Some(_) => {
                // The first mention answers for all of them.
                times.insert(name, 0);
                let duplicate = refused(
                    ResponseError::DuplicateResource,
                    "A user credential cannot be altered twice in the same request",
                );
                planned.push((name.to_string(), Err(duplicate)));
            }
            None => unreachable!("every name was counted"),
        }
    }
    planned
}

fn mechanism(name: &str, code: i8) -> Result<Mechanism, Refusal> {
    if name.is_empty() {
        return Err(refused(
            ResponseError::UnacceptableCredential,
            "Username must not be empty",
        ));
    }
    Mechanism::from_code(code).ok_or_else(|| {
        refused(
            ResponseError::UnsupportedSaslMechanism,
            "Unknown SCRAM mechanism",
        )
    })
}

fn credential(
    mechanism: Mechanism,
    iterations: i32,
    salt: &[u8],
    salted_password: &[u8],
) -> Result<ScramCredential, Refusal> {
    let unacceptable = |message: &str| refused(ResponseError::UnacceptableCredential, message);
    if iterations < ITERATIONS_MIN as i32 {
        return Err(unacceptable("Too few iterations"));
    }
    if iterations > ITERATIONS_MAX as i32 {
        return Err(unacceptable("Too many iterations"));
    }
    if salt.len() > limits::SCRAM_SALT_BYTES_MAX {
        return Err(unacceptable(&format!(
            "the salt is longer than {} bytes",
            limits::SCRAM_SALT_BYTES_MAX
        )));
    }
    if salted_password.len() != mechanism.hash_bytes() {
        return Err(unacceptable(&format!(
            "a {} salted password is {} bytes",
            mechanism.name(),
            mechanism.hash_bytes()
        )));
    }
    ScramCredential::from_salted_password(
        mechanism,
        salt.to_vec(),
        salted_password,
        iterations as u32,
    )
    .map_err(|e| (ResponseError::UnacceptableCredential, e.to_string()))
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for AlterUserScramCredentialsResponse {}

#[cfg(test)]
mod tests {
    use super::*;
    use headway_protocol::kafka_protocol::messages::alter_user_scram_credentials_request::{
        ScramCredentialDeletion, ScramCredentialUpsertion,
    };

    fn upsertion(name: &str, mechanism: i8, iterations: i32) -> ScramCredentialUpsertion {
        let bytes = if mechanism == 2 { 64 } else { 32 };
        ScramCredentialUpsertion::default()
            .with_name(StrBytes::from_string(name.into()))
            .with_mechanism(mechanism)
            .with_iterations(iterations)
            .with_salt(vec![7u8; 32].into())
            .with_salted_password(vec![9u8; bytes].into())
    }

    fn deletion(name: &str, mechanism: i8) -> ScramCredentialDeletion {
        ScramCredentialDeletion::default()
            .with_name(StrBytes::from_string(name.into()))
            .with_mechanism(mechanism)
    }

    fn codes(body: &AlterUserScramCredentialsRequest) -> Vec<(String, i16)> {
        plan(body)
            .into_iter()
            .map(|(user, change)| (user, change.err().map_or(0, |(e, _)| e.code())))
            .collect()
    }

    #[test]
    fn each_refusal_has_kafkas_error_code() {
        let body = AlterUserScramCredentialsRequest::default()
            .with_deletions(vec![deletion("dup", 1), deletion("gone", 1)])
            .with_upsertions(vec![
                upsertion("alice", 2, 8192),
                upsertion("dup", 2, 4096),
                upsertion("few", 1, 4095),
                upsertion("many", 1, 16385),
                upsertion("md5", 3, 4096),
                upsertion("", 1, 4096),
            ]);
        let unacceptable = ResponseError::UnacceptableCredential.code();
        assert_eq!(
            codes(&body),
            [
                ("dup".to_string(), ResponseError::DuplicateResource.code()),
                ("gone".to_string(), 0),
                ("alice".to_string(), 0),
                ("few".to_string(), unacceptable),
                ("many".to_string(), unacceptable),
                (
                    "md5".to_string(),
                    ResponseError::UnsupportedSaslMechanism.code()
                ),
                ("".to_string(), unacceptable),
            ]
        );
    }

    #[test]
    fn a_salted_password_of_the_wrong_length_or_a_huge_salt_is_unacceptable() {
        let short = upsertion("a", 2, 4096).with_salted_password(vec![1u8; 32].into());
        let huge =
            upsertion("b", 1, 4096).with_salt(vec![1u8; limits::SCRAM_SALT_BYTES_MAX + 1].into());
        let body = AlterUserScramCredentialsRequest::default().with_upsertions(vec![short, huge]);
        let unacceptable = ResponseError::UnacceptableCredential.code();
        assert!(codes(&body).iter().all(|(_, code)| *code == unacceptable));
    }
}
