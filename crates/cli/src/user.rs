//! `headway user`: SCRAM users. With `--bootstrap`, through a running broker
//! (AlterUserScramCredentials and DescribeUserScramCredentials, over a plaintext
//! connection: the CLI's client has no TLS or SASL settings yet); the password is
//! salted here and only the salted form is sent. Without it, in a stopped broker's
//! security store (`<data_dir>/security/`): this is how the first user is made before
//! anyone can authenticate (Kafka's `kafka-storage format --add-scram`). PLAIN checks
//! passwords against the same credentials.

use anyhow::Context;
use clap::{Args, Subcommand};
use headway_auth::scram::{Mechanism, ScramCredential, ITERATIONS_MIN};
use headway_auth::store::{SecurityStore, StoreLimits};
use headway_base::limits;
use headway_client::{ClientConfig, Cluster, ScramAlteration};
use std::io::BufRead;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct UserArgs {
    /// A running broker, HOST:PORT[,HOST:PORT...]; without it, the data
    /// directory of a stopped broker is edited.
    #[arg(
        long,
        short = 'b',
        env = "HEADWAY_BOOTSTRAP",
        conflicts_with = "data_dir"
    )]
    bootstrap: Option<String>,
    #[command(flatten)]
    security: crate::security_args::SecurityArgs,
    /// The data directory of a stopped broker [default: headway-data].
    #[arg(long, env = "HEADWAY_DATA_DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: UserCommand,
}

#[derive(Subcommand)]
enum UserCommand {
    /// Add a user, or set its password: a credential per mechanism.
    Add {
        name: String,
        /// The password; without it, the first line of stdin.
        #[arg(long)]
        password: Option<String>,
        /// SCRAM-SHA-256 or SCRAM-SHA-512 (repeatable) [default: both].
        #[arg(long = "mechanism")]
        mechanisms: Vec<String>,
        /// PBKDF2 iterations (4096..=16384).
        #[arg(long, default_value_t = ITERATIONS_MIN)]
        iterations: u32,
    },
    /// List users and their mechanisms (the named ones, or all).
    List { names: Vec<String> },
    /// Delete a user's credentials (all mechanisms unless --mechanism is given).
    Delete {
        name: String,
        #[arg(long = "mechanism")]
        mechanisms: Vec<String>,
    },
}

fn open(data_dir: &Path) -> anyhow::Result<SecurityStore> {
    let limits = StoreLimits {
        users_max: limits::SCRAM_USERS_MAX,
        acls_max: limits::ACLS_MAX,
    };
    SecurityStore::open(&data_dir.join("security"), limits).map_err(anyhow::Error::msg)
}

fn mechanisms(names: &[String]) -> anyhow::Result<Vec<Mechanism>> {
    if names.is_empty() {
        return Ok(Mechanism::ALL.to_vec());
    }
    names
        .iter()
        .map(|n| {
            Mechanism::from_name(n)
                .with_context(|| format!("{n:?} is not SCRAM-SHA-256 or SCRAM-SHA-512"))
        })
        .collect()
}

fn read_password(password: Option<String>) -> anyhow::Result<String> {
    let password = match password {
        Some(password) => password,
        None => {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line)?;
            line.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    anyhow::ensure!(!password.is_empty(), "the password must not be empty");
    Ok(password)
}

/// A user and its credentials as `list` prints them: `NAME MECHANISM:ITERATIONS,...`.
fn user_line(name: &str, credentials: &[(Mechanism, u32)]) -> String {
    let list: Vec<String> = credentials
        .iter()
        .map(|(m, iterations)| format!("{}:{iterations}", m.name()))
        .collect();
    format!("{name} {}", list.join(","))
}

pub fn run(args: UserArgs) -> anyhow::Result<()> {
    match args.bootstrap {
        Some(bootstrap) => {
            let config = args.security.client_config()?;
            crate::runtime::client_runtime()?.block_on(remote(&bootstrap, config, args.command))
        }
        None => local(
            &args
                .data_dir
                .unwrap_or_else(|| PathBuf::from("headway-data")),
            args.command,
        ),
    }
}

fn local(data_dir: &Path, command: UserCommand) -> anyhow::Result<()> {
    let store = open(data_dir)?;
    match command {
        UserCommand::Add {
            name,
            password,
            mechanisms: names,
            iterations,
        } => {
            let password = read_password(password)?;
            for mechanism in mechanisms(&names)? {
                let credential = ScramCredential::from_password(mechanism, &password, iterations)
                    .map_err(anyhow::Error::msg)?;
                store
                    .upsert_credential(&name, credential)
                    .map_err(anyhow::Error::msg)?;
                println!("{name} {}", mechanism.name());
            }
        }
        UserCommand::List { names } => {
            let users = store.users();
            for name in &names {
                anyhow::ensure!(users.contains_key(name), "user {name} has no credentials");
            }
            for (name, credentials) in &users {
                if names.is_empty() || names.contains(name) {
                    println!("{}", user_line(name, credentials));
                }
            }
        }
        UserCommand::Delete {
            name,
            mechanisms: names,
        } => {
            let mut deleted = 0;
            for mechanism in mechanisms(&names)? {
                if store
                    .delete_credential(&name, mechanism)
                    .map_err(anyhow::Error::msg)?
                {
                    deleted += 1;
                }
            }
            anyhow::ensure!(deleted > 0, "user {name} has no such credential");
        }
    }
    Ok(())
}

async fn remote(bootstrap: &str, config: ClientConfig, command: UserCommand) -> anyhow::Result<()> {
    let cluster = Cluster::connect(bootstrap, config)
        .await
        .with_context(|| format!("connecting to {bootstrap}"))?;
    match command {
        UserCommand::Add {
            name,
            password,
            mechanisms: names,
            iterations,
        } => {
            let password = read_password(password)?;
            // One request per mechanism: Kafka refuses a user named twice in one.
            for mechanism in mechanisms(&names)? {
                let salt = headway_auth::random_bytes(32).map_err(anyhow::Error::msg)?;
                let salted_password =
                    mechanism.salted_password(password.as_bytes(), &salt, iterations);
                let upsert = ScramAlteration::Upsert {
                    user: name.clone(),
                    mechanism: mechanism.code(),
                    iterations: i32::try_from(iterations).context("iterations")?,
                    salt,
                    salted_password,
                };
                one_result(
                    &name,
                    cluster.alter_user_scram_credentials(&[upsert]).await?,
                )?;
                println!("{name} {}", mechanism.name());
            }
        }
        UserCommand::List { names } => {
            for (name, result) in cluster.describe_user_scram_credentials(&names).await? {
                let infos = result.with_context(|| format!("user {name}"))?;
                let credentials: Vec<(Mechanism, u32)> = infos
                    .iter()
                    .filter_map(|c| {
                        let mechanism = Mechanism::from_code(c.mechanism)?;
                        Some((mechanism, u32::try_from(c.iterations).ok()?))
                    })
                    .collect();
                println!("{}", user_line(&name, &credentials));
            }
        }
        UserCommand::Delete {
            name,
            mechanisms: names,
        } => {
            let explicit = !names.is_empty();
            let mut deleted = 0;
            for mechanism in mechanisms(&names)? {
                let delete = ScramAlteration::Delete {
                    user: name.clone(),
                    mechanism: mechanism.code(),
                };
                let results = cluster.alter_user_scram_credentials(&[delete]).await?;
                match one_result(&name, results) {
                    Ok(()) => deleted += 1,
                    // Deleting every mechanism: the ones the user lacks are no error.
                    Err(e) if !explicit && is_not_found(&e) => {}
                    Err(e) => return Err(e),
                }
            }
            anyhow::ensure!(deleted > 0, "user {name} has no such credential");
        }
    }
    Ok(())
}

fn is_not_found(e: &anyhow::Error) -> bool {
    e.chain().any(|cause| {
        matches!(
            cause.downcast_ref::<headway_client::ClientError>(),
            Some(headway_client::ClientError::Broker { name, .. }) if name == "RESOURCE_NOT_FOUND"
        )
    })
}

/// The result of a request about one user.
fn one_result(
    name: &str,
    results: Vec<(String, Result<(), headway_client::ClientError>)>,
) -> anyhow::Result<()> {
    let (_, result) = results
        .into_iter()
        .find(|(user, _)| user == name)
        .with_context(|| format!("the broker's answer has no result for user {name}"))?;
    result.with_context(|| format!("user {name}"))
}
