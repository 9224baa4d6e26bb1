//! DescribeUserScramCredentials: the SCRAM mechanisms and iteration counts of the named
//! users (of every user when none is named), for a principal with Describe on the
//! cluster, as Kafka answers it: RESOURCE_NOT_FOUND for a user without credentials,
//! DUPLICATE_RESOURCE for a user named twice. Salts and keys are never sent.

use crate::authorize;
use crate::call::{ready, Call, Handler, HandlerError, Reply};
use crate::requests::ErrorCodes;
use headway_auth::acl::Operation;
use headway_auth::scram::Mechanism;
use headway_protocol::kafka_protocol::messages::describe_user_scram_credentials_response::{
    CredentialInfo, DescribeUserScramCredentialsResult,
};
use headway_protocol::kafka_protocol::messages::{
    ApiKey, DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse,
};
use headway_protocol::kafka_protocol::protocol::StrBytes;
use headway_protocol::kafka_protocol::ResponseError;
use headway_protocol::{decode_body, Request};
use std::collections::{BTreeMap, HashMap};

pub const HANDLER: Handler = Handler {
    key: ApiKey::DescribeUserScramCredentials,
    min_version: 0,
    max_version: 0,
    handle,
};

pub fn handle(call: &mut Call<'_>, request: &Request) -> Result<Reply, HandlerError> {
    let body: DescribeUserScramCredentialsRequest = decode_body(request)?;
    if let Some(code) = authorize::cluster_refusal(call, Operation::Describe) {
        let response = DescribeUserScramCredentialsResponse::default()
            .with_error_code(code)
            .with_error_message(Some(StrBytes::from_static_str(
                "Cluster authorization failed.",
            )));
        return ready(request, &response);
    }
    let named: Vec<String> = body
        .users
        .unwrap_or_default()
        .into_iter()
        .map(|u| u.name.to_string())
        .collect();
    let results = describe(&call.ctx.security.users(), &named);
    ready(
        request,
        &DescribeUserScramCredentialsResponse::default().with_results(results),
    )
}

/// The answer for `named` users (every user when empty), over the store's users.
fn describe(
    users: &BTreeMap<String, Vec<(Mechanism, u32)>>,
    named: &[String],
) -> Vec<DescribeUserScramCredentialsResult> {
    if named.is_empty() {
        return users
            .iter()
            .map(|(user, credentials)| found(user, credentials))
            .collect();
    }
    let mut times: HashMap<&str, usize> = HashMap::new();
    for name in named {
        *times.entry(name.as_str()).or_default() += 1;
    }
    let mut answered = std::collections::HashSet::new();
    named
        .iter()
        .filter(|name| answered.insert(name.as_str()))
        .map(|name| match (times[name.as_str()], users.get(name)) {
            (1, Some(credentials)) => found(name, credentials),
            (1, None) => failed(
                name,
                ResponseError::ResourceNotFound,
                "Attempt to describe a user credential that does not exist",
            ),
            _ => failed(
                name,
                ResponseError::DuplicateResource,
                "Cannot describe SCRAM credentials for the same user twice in a single request",
            ),
        })
        .collect()
}

fn found(user: &str, credentials: &[(Mechanism, u32)]) -> DescribeUserScramCredentialsResult {
    let infos = credentials
        .iter()
        .map(|(mechanism, iterations)| {
            CredentialInfo::default()
                .with_mechanism(mechanism.code())
                .with_iterations(i32::try_from(*iterations).unwrap_or(i32::MAX))
        })
        .collect();
    DescribeUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user.to_string()))
        .with_credential_infos(infos)
}

fn failed(user: &str, error: ResponseError, message: &str) -> DescribeUserScramCredentialsResult {
    DescribeUserScramCredentialsResult::default()
        .with_user(StrBytes::from_string(user.to_string()))
        .with_error_code(error.code())
        .with_error_message(Some(StrBytes::from_string(format!("{message}: {user}"))))
}

/// This API's answers are counted on `/metrics` without their codes.
impl ErrorCodes for DescribeUserScramCredentialsResponse {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_users_unknown_users_and_users_named_twice_get_kafkas_answers() {
        let mut users = BTreeMap::new();
        users.insert(
            "alice".to_string(),
            vec![(Mechanism::Sha256, 4096), (Mechanism::Sha512, 8192)],
        );
        users.insert("bob".to_string(), vec![(Mechanism::Sha512, 4096)]);
        let all = describe(&users, &[]);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].credential_infos[1].mechanism, 2);
        assert_eq!(all[0].credential_infos[1].iterations, 8192);
        let named: Vec<String> = ["bob", "carol", "alice", "alice"]
            .map(String::from)
            .to_vec();
        let results = describe(&users, &named);
        let codes: Vec<(String, i16)> = results
            .iter()
            .map(|r| (r.user.to_string(), r.error_code))
            .collect();
        assert_eq!(
            codes,
            [
                ("bob".to_string(), 0),
                ("carol".to_string(), ResponseError::ResourceNotFound.code()),
                ("alice".to_string(), ResponseError::DuplicateResource.code()),
            ]
        );
        assert_eq!(results[0].credential_infos.len(), 1);
    }
}
