//! The durable security state of a broker: SCRAM credentials per user and the ACLs,
//! each in one JSON file under `<data_dir>/security/`, replaced whole and durably on
//! every change (`headway_base::durable_file::replace`: temporary file, fsync,
//! rename, fsync of the directory), so a change that was acknowledged survives a crash
//! and a crash mid-write leaves the previous file.
//!
//! The files are small and bounded (`users_max`, `acls_max`); reads are from memory.
//! A file that does not parse stops the broker's start with its path: security state
//! is never guessed.

use crate::acl::{AclBinding, AclFilter, Acls};
use crate::scram::{Mechanism, ScramCredential};
use crate::AuthError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

const CREDENTIALS_FILE: &str = "scram-credentials.json";
const ACLS_FILE: &str = "acls.json";
const FORMAT_VERSION: u32 = 1;

#[derive(serde::Serialize, serde::Deserialize)]
struct CredentialsFile {
    version: u32,
    users: BTreeMap<String, Vec<ScramCredential>>,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct AclsFile {
    version: u32,
    acls: Acls,
}

/// One change of a user's SCRAM credentials.
#[derive(Debug, Clone)]
pub enum CredentialChange {
    /// Adds or replaces the credential of its mechanism.
    Upsert(ScramCredential),
    /// Removes the credential of this mechanism.
    Delete(Mechanism),
}

/// Bounds of the store.
#[derive(Debug, Clone, Copy)]
pub struct StoreLimits {
    pub users_max: usize,
    pub acls_max: usize,
}

pub struct SecurityStore {
    dir: PathBuf,
    limits: StoreLimits,
    users: RwLock<BTreeMap<String, Vec<ScramCredential>>>,
    acls: RwLock<Acls>,
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, AuthError> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| AuthError::Storage(format!("{}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(AuthError::Storage(format!("{}: {e}", path.display()))),
    }
}

fn check_version(version: u32, path: &Path) -> Result<(), AuthError> {
    match version {
        FORMAT_VERSION => Ok(()),
        other => Err(AuthError::Storage(format!(
            "{}: format version {other} is not one this broker reads ({FORMAT_VERSION})",
            path.display()
        ))),
    }
}

impl SecurityStore {
    /// Opens (creating the directory if needed) the store in `dir`. Blocking.
    pub fn open(dir: &Path, limits: StoreLimits) -> Result<SecurityStore, AuthError> {
        std::fs::create_dir_all(dir)
            .map_err(|e| AuthError::Storage(format!("{}: {e}", dir.display())))?;
        let credentials_path = dir.join(CREDENTIALS_FILE);
        let users = match read_json::<CredentialsFile>(&credentials_path)? {
            Some(file) => {
                check_version(file.version, &credentials_path)?;
                file.users
            }
            None => BTreeMap::new(),
        };
        let acls_path = dir.join(ACLS_FILE);
        let acls = match read_json::<AclsFile>(&acls_path)? {
            Some(file) => {
                check_version(file.version, &acls_path)?;
                file.acls
            }
            None => Acls::default(),
        };
        Ok(SecurityStore {
            dir: dir.to_path_buf(),
            limits,
            users: RwLock::new(users),
            acls: RwLock::new(acls),
        })
    }

    /// The user's credential for `mechanism`.
    pub fn credential(&self, user: &str, mechanism: Mechanism) -> Option<ScramCredential> {
        let users = self.users.read().expect("users lock");
        users
            .get(user)?
            .iter()
            .find(|c| c.mechanism == mechanism)
            .cloned()
    }

    /// Every credential of the user.
    pub fn credentials(&self, user: &str) -> Vec<ScramCredential> {
        let users = self.users.read().expect("users lock");
        users.get(user).cloned().unwrap_or_default()
    }

    /// Users and their mechanisms with iteration counts, for DescribeUserScramCredentials.
    pub fn users(&self) -> BTreeMap<String, Vec<(Mechanism, u32)>> {
        let users = self.users.read().expect("users lock");
        users
            .iter()
            .map(|(user, creds)| {
                let list = creds.iter().map(|c| (c.mechanism, c.iterations)).collect();
                (user.clone(), list)
            })
            .collect()
    }

    /// Sets (adds or replaces) the user's credential for its mechanism. Blocking: the
    /// file is on disk when this returns.
    pub fn upsert_credential(
        &self,
        user: &str,
        credential: ScramCredential,
    ) -> Result<(), AuthError> {
        let change = (user.to_string(), CredentialChange::Upsert(credential));
        self.alter_credentials(vec![change])
            .pop()
            .expect("one result per change")
    }

    /// Removes the user's credential for `mechanism`; `false` when there was none.
    pub fn delete_credential(&self, user: &str, mechanism: Mechanism) -> Result<bool, AuthError> {
        let change = (user.to_string(), CredentialChange::Delete(mechanism));
        match self.alter_credentials(vec![change]).pop() {
            Some(Ok(())) => Ok(true),
            Some(Err(AuthError::NotFound(_))) => Ok(false),
            Some(Err(e)) => Err(e),
            None => unreachable!("one result per change"),
        }
    }

    /// Applies the changes in order and writes the file once (AlterUserScramCredentials
    /// changes several users in one request); one result per change. A change that
    /// fails (an empty name, a user past `users_max`, a deletion of a credential that
    /// does not exist: [`AuthError::NotFound`]) leaves the others applied. Blocking: the
    /// file is on disk when this returns; if it cannot be written, nothing changed and
    /// every change gets the error.
    pub fn alter_credentials(
        &self,
        changes: Vec<(String, CredentialChange)>,
    ) -> Vec<Result<(), AuthError>> {
        let mut users = self.users.write().expect("users lock");
        let mut next = users.clone();
        let results: Vec<Result<(), AuthError>> = changes
            .into_iter()
            .map(|(user, change)| self.apply(&mut next, user, change))
            .collect();
        if next != *users {
            if let Err(e) = self.write_credentials(&next) {
                return results.iter().map(|_| Err(e.clone())).collect();
            }
            *users = next;
        }
        results
    }

    fn apply(
        &self,
        users: &mut BTreeMap<String, Vec<ScramCredential>>,
        user: String,
        change: CredentialChange,
    ) -> Result<(), AuthError> {
        match change {
            CredentialChange::Upsert(credential) => {
                if user.is_empty() {
                    return Err(AuthError::InvalidCredential(
                        "the user name must not be empty".into(),
                    ));
                }
                if !users.contains_key(&user) && users.len() >= self.limits.users_max {
                    return Err(AuthError::InvalidCredential(format!(
                        "the broker holds at most {} SCRAM users",
                        self.limits.users_max
                    )));
                }
                let list = users.entry(user).or_default();
                list.retain(|c| c.mechanism != credential.mechanism);
                list.push(credential);
                list.sort_by_key(|c| c.mechanism);
                Ok(())
            }
            CredentialChange::Delete(mechanism) => {
                let missing = || {
                    AuthError::NotFound(format!(
                        "user {user} has no {} credential",
                        mechanism.name()
                    ))
                };
                let list = users.get_mut(&user).ok_or_else(missing)?;
                let before = list.len();
                list.retain(|c| c.mechanism != mechanism);
                if list.len() == before {
                    return Err(missing());
                }
                if list.is_empty() {
                    users.remove(&user);
                }
                Ok(())
            }
        }
    }

    fn write_credentials(
        &self,
        users: &BTreeMap<String, Vec<ScramCredential>>,
    ) -> Result<(), AuthError> {
        let file = CredentialsFile {
            version: FORMAT_VERSION,
            users: users.clone(),
        };
        self.write(CREDENTIALS_FILE, &file)
    }

    fn write<T: serde::Serialize>(&self, name: &str, value: &T) -> Result<(), AuthError> {
        let bytes = serde_json::to_vec_pretty(value).expect("security state serializes");
        // The same words as when the broker's writer reported this failure.
        headway_base::durable_file::replace(&self.dir.join(name), &bytes)
            .map_err(|e| AuthError::Storage(format!("storage error: {e}")))
    }

    /// Reads the ACLs under their lock (authorization checks).
    pub fn with_acls<T>(&self, read: impl FnOnce(&Acls) -> T) -> T {
        read(&self.acls.read().expect("acls lock"))
    }

    /// Adds each ACL; one result per ACL, in order. Blocking: written before it returns.
    pub fn create_acls(&self, bindings: Vec<AclBinding>) -> Vec<Result<(), AuthError>> {
        let mut acls = self.acls.write().expect("acls lock");
        let mut next = acls.clone();
        let results: Vec<Result<(), AuthError>> = bindings
            .into_iter()
            .map(|b| next.add(b, self.limits.acls_max).map(|_| ()))
            .collect();
        if next != *acls {
            let file = AclsFile {
                version: FORMAT_VERSION,
                acls: next.clone(),
            };
            if let Err(e) = self.write(ACLS_FILE, &file) {
                return results.iter().map(|_| Err(e.clone())).collect();
            }
            *acls = next;
        }
        results
    }

    /// Removes the ACLs each filter matches; per filter, the ACLs it removed.
    pub fn delete_acls(&self, filters: &[AclFilter]) -> Result<Vec<Vec<AclBinding>>, AuthError> {
        let mut acls = self.acls.write().expect("acls lock");
        let mut next = acls.clone();
        let removed: Vec<Vec<AclBinding>> = filters.iter().map(|f| next.remove(f)).collect();
        if next != *acls {
            let file = AclsFile {
                version: FORMAT_VERSION,
                acls: next.clone(),
            };
            self.write(ACLS_FILE, &file)?;
            *acls = next;
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::{Operation, PatternType, Permission, ResourceType};

    const LIMITS: StoreLimits = StoreLimits {
        users_max: 2,
        acls_max: 10,
    };

    fn read_acl(principal: &str) -> AclBinding {
        AclBinding {
            resource_type: ResourceType::Topic,
            resource_name: "a".into(),
            pattern_type: PatternType::Literal,
            principal: principal.into(),
            host: "*".into(),
            operation: Operation::Read,
            permission: Permission::Allow,
        }
    }

    #[test]
    fn credentials_and_acls_survive_a_reopen_and_no_password_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = SecurityStore::open(dir.path(), LIMITS).unwrap();
            let cred = ScramCredential::from_password(Mechanism::Sha512, "hunter2", 4096).unwrap();
            store.upsert_credential("alice", cred).unwrap();
            let cred = ScramCredential::from_password(Mechanism::Sha256, "hunter2", 4096).unwrap();
            store.upsert_credential("alice", cred).unwrap();
            let cred = ScramCredential::from_password(Mechanism::Sha256, "pw", 8192).unwrap();
            store.upsert_credential("bob", cred).unwrap();
            let third = ScramCredential::from_password(Mechanism::Sha256, "pw", 4096).unwrap();
            assert!(
                store.upsert_credential("carol", third).is_err(),
                "past users_max"
            );
            assert!(store.delete_credential("bob", Mechanism::Sha256).unwrap());
            assert!(!store.delete_credential("bob", Mechanism::Sha256).unwrap());
            let results = store.create_acls(vec![read_acl("User:alice"), read_acl("bad")]);
            assert!(results[0].is_ok() && results[1].is_err());
        }
        let text = std::fs::read_to_string(dir.path().join(CREDENTIALS_FILE)).unwrap();
        assert!(!text.contains("hunter2"));
        let store = SecurityStore::open(dir.path(), LIMITS).unwrap();
        let users = store.users();
        assert_eq!(
            users.get("alice"),
            Some(&vec![(Mechanism::Sha256, 4096), (Mechanism::Sha512, 4096)])
        );
        assert!(!users.contains_key("bob"), "its last credential went");
        assert!(store
            .credential("alice", Mechanism::Sha512)
            .unwrap()
            .matches_password("hunter2"));
        assert_eq!(store.with_acls(|a| a.len()), 1);
        let removed = store.delete_acls(&[AclFilter::any()]).unwrap();
        assert_eq!(removed, vec![vec![read_acl("User:alice")]]);
        let store = SecurityStore::open(dir.path(), LIMITS).unwrap();
        assert!(store.with_acls(|a| a.is_empty()));
    }

    #[test]
    fn a_batch_of_changes_applies_what_it_can_and_reports_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let store = SecurityStore::open(dir.path(), LIMITS).unwrap();
        let cred = |m| ScramCredential::from_password(m, "pw", 4096).unwrap();
        let results = store.alter_credentials(vec![
            (
                "alice".into(),
                CredentialChange::Upsert(cred(Mechanism::Sha512)),
            ),
            ("bob".into(), CredentialChange::Delete(Mechanism::Sha256)),
            ("".into(), CredentialChange::Upsert(cred(Mechanism::Sha256))),
            (
                "carol".into(),
                CredentialChange::Upsert(cred(Mechanism::Sha256)),
            ),
            (
                "dave".into(),
                CredentialChange::Upsert(cred(Mechanism::Sha256)),
            ),
        ]);
        assert!(results[0].is_ok());
        assert!(matches!(results[1], Err(AuthError::NotFound(_))));
        assert!(matches!(results[2], Err(AuthError::InvalidCredential(_))));
        assert!(results[3].is_ok());
        assert!(
            matches!(results[4], Err(AuthError::InvalidCredential(_))),
            "past users_max"
        );
        let store = SecurityStore::open(dir.path(), LIMITS).unwrap();
        let users: Vec<String> = store.users().into_keys().collect();
        assert_eq!(users, ["alice", "carol"]);
    }

    #[test]
    fn a_damaged_file_stops_the_open_with_its_path() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(ACLS_FILE), b"{not json").unwrap();
        let error = SecurityStore::open(dir.path(), LIMITS).err().unwrap();
        assert!(error.to_string().contains(ACLS_FILE), "{error}");
    }
}
