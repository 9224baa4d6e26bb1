//! `headway user`: SCRAM users in a broker's security store (`<data_dir>/security/`),
//! edited on the data directory while the broker is stopped. This is how the first
//! user is made before anyone can authenticate (Kafka's `kafka-storage format
//! --add-scram`). PLAIN checks passwords against the same credentials.

use anyhow::Context;
use clap::{Args, Subcommand};
use headway_auth::scram::{Mechanism, ScramCredential, ITERATIONS_MIN};
use headway_auth::store::{SecurityStore, StoreLimits};
use headway_broker::limits;
use std::io::BufRead;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub struct UserArgs {
    /// The broker's data directory (the broker must be stopped).
    #[arg(long, env = "HEADWAY_DATA_DIR", default_value = "headway-data")]
    data_dir: PathBuf,
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
    /// List users and their mechanisms.
    List,
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

pub fn run(args: UserArgs) -> anyhow::Result<()> {
    let store = open(&args.data_dir)?;
    match args.command {
        UserCommand::Add {
            name,
            password,
            mechanisms: names,
            iterations,
        } => {
            let password = match password {
                Some(password) => password,
                None => {
                    let mut line = String::new();
                    std::io::stdin().lock().read_line(&mut line)?;
                    line.trim_end_matches(['\r', '\n']).to_string()
                }
            };
            anyhow::ensure!(!password.is_empty(), "the password must not be empty");
            for mechanism in mechanisms(&names)? {
                let credential = ScramCredential::from_password(mechanism, &password, iterations)
                    .map_err(anyhow::Error::msg)?;
                store
                    .upsert_credential(&name, credential)
                    .map_err(anyhow::Error::msg)?;
                println!("{name} {}", mechanism.name());
            }
        }
        UserCommand::List => {
            for (name, credentials) in store.users() {
                let list: Vec<String> = credentials
                    .iter()
                    .map(|(m, iterations)| format!("{}:{iterations}", m.name()))
                    .collect();
                println!("{name} {}", list.join(","));
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
