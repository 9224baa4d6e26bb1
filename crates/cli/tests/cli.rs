//! Goal: `headway serve`, `headway produce` and `headway consume` work together as a
//! user runs them: lines from stdin with keys, generated records, formatted output,
//! and clear errors.
//!
//! Method: run the built binary as separate processes; the broker on an ephemeral port
//! with a temporary data directory, found from its "listening on" line.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

const BIN: &str = env!("CARGO_BIN_EXE_headway");

struct Broker {
    child: Child,
    addr: String,
    _dir: tempfile::TempDir,
}

impl Broker {
    fn start() -> Broker {
        Broker::start_on("127.0.0.1:0")
    }

    /// `headway serve --listen LISTEN`, once it says where it listens.
    fn start_on(listen: &str) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("serve.stderr")).unwrap();
        let mut child = Command::new(BIN)
            .args(["serve", "--listen", listen, "--default-partitions", "3"])
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .trim()
            .strip_prefix("headway listening on ")
            .unwrap_or_else(|| panic!("no listening line: {line:?}"))
            .to_string();
        Broker {
            child,
            addr,
            _dir: dir,
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // A panic is a bug even when the broker contained it and the test passed.
        let log =
            std::fs::read_to_string(self._dir.path().join("serve.stderr")).unwrap_or_default();
        if !std::thread::panicking() {
            assert!(!log.contains("panicked at "), "the broker panicked:\n{log}");
        }
    }
}

/// Runs the binary with `stdin`, killing it if it outlives a generous deadline.
fn run(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(BIN)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let pid = child.id();
    // Output is drained by `wait_with_output` on a thread, so a full pipe never stalls it.
    let (done, outcome) = std::sync::mpsc::channel();
    std::thread::spawn(move || done.send(child.wait_with_output()));
    match outcome.recv_timeout(Duration::from_secs(60)) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            panic!("headway {args:?} did not finish");
        }
    }
}

#[test]
fn produce_from_stdin_and_consume_with_a_format() {
    let broker = Broker::start();
    let b = broker.addr.as_str();
    let input: String = (0..500)
        .map(|i| format!("key-{}:value {i}\n", i % 5))
        .collect();
    let produced = run(&["produce", "lines", "-b", b, "-K", ":", "-q"], &input);
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    assert!(String::from_utf8_lossy(&produced.stderr).contains("produced 500 records"));

    let consumed = run(
        &[
            "consume",
            "lines",
            "-b",
            b,
            "--from-beginning",
            "-e",
            "-q",
            "-f",
            "{partition} {offset} {key} {value}",
        ],
        "",
    );
    assert!(
        consumed.status.success(),
        "{}",
        String::from_utf8_lossy(&consumed.stderr)
    );
    let stdout = String::from_utf8(consumed.stdout).unwrap();
    let mut lines: Vec<(i32, i64, String, String)> = stdout
        .lines()
        .map(|l| {
            let mut f = l.splitn(4, ' ');
            let p = f.next().unwrap().parse().unwrap();
            let o = f.next().unwrap().parse().unwrap();
            (
                p,
                o,
                f.next().unwrap().to_string(),
                f.next().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(lines.len(), 500);
    // Every key sits on one partition, and its values keep their order there.
    lines.sort_by_key(|(p, o, ..)| (*p, *o));
    for key in 0..5 {
        let key = format!("key-{key}");
        let of_key: Vec<_> = lines.iter().filter(|l| l.2 == key).collect();
        assert!(
            of_key.windows(2).all(|w| w[0].0 == w[1].0),
            "{key} on one partition"
        );
        let values: Vec<u32> = of_key
            .iter()
            .map(|l| l.3.trim_start_matches("value ").parse().unwrap())
            .collect();
        assert!(values.windows(2).all(|w| w[0] < w[1]), "{key} in order");
    }
}

#[test]
fn generated_records_are_counted_and_bad_flags_are_refused() {
    let broker = Broker::start();
    let b = broker.addr.as_str();
    let produced = run(
        &[
            "produce",
            "bulk",
            "-b",
            b,
            "--count",
            "20000",
            "--size",
            "512",
            "--compression",
            "zstd",
        ],
        "",
    );
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let consumed = run(
        &[
            "consume",
            "bulk",
            "-b",
            b,
            "--from-beginning",
            "-e",
            "-q",
            "-f",
            "{offset}",
        ],
        "",
    );
    assert_eq!(
        String::from_utf8_lossy(&consumed.stdout).lines().count(),
        20000
    );

    let bad = run(&["produce", "bulk", "-b", b, "--acks", "2"], "");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--acks must be all, 1 or 0"));
    let bad = run(&["consume", "bulk", "-b", b, "-f", "{nope}"], "");
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("{nope}"));
}

#[test]
fn consume_with_a_group_resumes_from_its_commits() {
    let broker = Broker::start();
    let b = broker.addr.as_str();
    let input: String = (0..300).map(|i| format!("line {i}\n")).collect();
    let produced = run(&["produce", "grouped", "-b", b, "-q"], &input);
    assert!(
        produced.status.success(),
        "{}",
        String::from_utf8_lossy(&produced.stderr)
    );
    let args = [
        "consume",
        "grouped",
        "-b",
        b,
        "--group",
        "readers",
        "--from-beginning",
        "-e",
        "-q",
    ];
    let first = run(&args, "");
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&first.stdout).lines().count(), 300);
    // The first run committed what it read: the group's next run starts at the end.
    let second = run(&args, "");
    assert!(
        second.status.success(),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&second.stdout).lines().count(), 0);
}

#[test]
fn a_busy_address_is_named_and_leaves_no_data_directory() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let data_arg = data.to_str().unwrap();
    let failed = run(&["serve", "--listen", &addr, "--data-dir", data_arg], "");
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "{stderr}");
    assert!(stderr.contains(&format!("listening on {addr}")), "{stderr}");
    assert!(!data.exists(), "the data directory was created: {stderr}");
    // Log lines carry no colour codes when stderr is not a terminal.
    assert!(!stderr.contains('\u{1b}'), "{stderr}");
}

#[test]
fn listen_accepts_a_host_name() {
    let broker = Broker::start_on("localhost:0");
    assert!(
        broker.addr.ends_with(|c: char| c.is_ascii_digit()),
        "{}",
        broker.addr
    );
}
