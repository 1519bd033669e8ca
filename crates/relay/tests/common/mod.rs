//! Shared by the relay tests: a relay process, a job key file, a target that accepts relayed
//! connections, and a checksummed exchange.
#![allow(dead_code)]

use ferry_relay::client;
use ferry_wire::relay::{relay_key, ReplayGuard};
use ferry_wire::{Handshake, JobKey};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

pub const JOB: u64 = 0xfe11;
pub const SIZE: u32 = 4;

pub fn job_key() -> JobKey {
    JobKey([0x3c; 32])
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        let dir = std::env::temp_dir().join(format!("ferry-relay-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes the job's relay key as the relay reads it; returns the jobs directory.
pub fn jobs_dir(tmp: &TempDir) -> PathBuf {
    let dir = tmp.0.join("jobs");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{JOB:016x}.key"));
    std::fs::write(&file, relay_key(&job_key()).to_hex()).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    dir
}

/// A relay process, killed on drop.
pub struct RelayProcess {
    pub child: Child,
    pub addr: SocketAddr,
    pub stderr: mpsc::Receiver<String>,
    /// What it printed before listening.
    pub early: Vec<String>,
}

impl RelayProcess {
    /// Starts `ferry-relay` (through `prefix`, e.g. `ip netns exec NS`) and waits for its
    /// listening line.
    pub fn start(prefix: &[&str], listen: &str, jobs: &Path, extra: &[&str]) -> RelayProcess {
        let exe = env!("CARGO_BIN_EXE_ferry-relay");
        let mut cmd = if let Some((first, rest)) = prefix.split_first() {
            let mut c = Command::new(first);
            c.args(rest).arg(exe);
            c
        } else {
            Command::new(exe)
        };
        cmd.args(["--listen", listen, "--jobs-dir"])
            .arg(jobs)
            .args(extra)
            .stdin(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("start ferry-relay");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // Lines before the listening one (a note on the descriptor limit) are kept aside.
        let mut early = Vec::new();
        let line = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("relay printed no listening line: {early:?}"));
            if line.contains("listening on") {
                break line;
            }
            early.push(line);
        };
        let addr = line
            .split_whitespace()
            .nth(4)
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        RelayProcess {
            child,
            addr,
            stderr: rx,
            early,
        }
    }

    /// Sends `signal` to the relay (by its pid).
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Lines printed so far.
    pub fn lines(&self, wait: Duration) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(line) = self.stderr.recv_timeout(wait) {
            out.push(line);
        }
        out
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Deterministic test data.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2654435761).to_le_bytes()[1] ^ seed)
        .collect()
}

/// Target side, one relayed connection: verify INCOMING, run the ferry handshake as acceptor,
/// then echo `len`-byte messages until the client closes. Returns the client's rank.
pub fn serve_one(
    listener: &TcpListener,
    my_rank: u32,
    seen: &mut ReplayGuard,
) -> Result<u32, client::ClientError> {
    let (mut s, _) = listener.accept()?;
    let src = client::accept(&mut s, &job_key(), JOB, my_rank, seen)?;
    let hs = Handshake::accept(job_key(), JOB, SIZE, my_rank, client::fresh_nonce()?);
    let peer = client::handshake(&mut s, hs)?;
    assert_eq!(peer, src);
    echo(&mut s)?;
    Ok(src)
}

/// Echoes length-prefixed messages until EOF.
pub fn echo(s: &mut TcpStream) -> std::io::Result<()> {
    let mut len = [0u8; 8];
    loop {
        match s.read_exact(&mut len) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let mut buf = vec![0u8; u64::from_le_bytes(len) as usize];
        s.read_exact(&mut buf)?;
        s.write_all(&len)?;
        s.write_all(&buf)?;
    }
}

/// Client side: connect through the relay, authenticate end to end, and check that messages
/// of 0 B … 8 MiB come back intact.
pub fn exchange(
    relay: SocketAddr,
    src: u32,
    target: u32,
) -> Result<TcpStream, client::ClientError> {
    let mut s = client::connect(relay, &job_key(), JOB, src, target)?;
    let hs = Handshake::connect(job_key(), JOB, SIZE, src, target, client::fresh_nonce()?);
    assert_eq!(client::handshake(&mut s, hs)?, target);
    for (i, len) in [0usize, 1, 1000, 65536, 1 << 20, 8 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8);
        s.write_all(&(len as u64).to_le_bytes())?;
        s.write_all(&data)?;
        let mut back_len = [0u8; 8];
        s.read_exact(&mut back_len)?;
        assert_eq!(u64::from_le_bytes(back_len) as usize, len);
        let mut back = vec![0u8; len];
        s.read_exact(&mut back)?;
        assert!(back == data, "message of {len} bytes changed on the way");
    }
    Ok(s)
}

/// Half-close through the relay: the client sends `up` bytes and shuts its write side; the
/// target (rank `target`, listening on `listener`, registered) reads to EOF, answers with
/// `down` bytes and closes; each side checks what it got.
pub fn half_close(
    relay: SocketAddr,
    listener: TcpListener,
    src: u32,
    target: u32,
    up: usize,
    down: usize,
) {
    let server = std::thread::spawn(move || -> Result<(), String> {
        let e = |e: &dyn std::fmt::Display| e.to_string();
        let (mut s, _) = listener.accept().map_err(|x| e(&x))?;
        let mut seen = ReplayGuard::default();
        client::accept(&mut s, &job_key(), JOB, target, &mut seen).map_err(|x| e(&x))?;
        let nonce = client::fresh_nonce().map_err(|x| e(&x))?;
        let hs = Handshake::accept(job_key(), JOB, SIZE, target, nonce);
        client::handshake(&mut s, hs).map_err(|x| e(&x))?;
        let mut got = Vec::new();
        s.read_to_end(&mut got).map_err(|x| e(&x))?;
        if got != pattern(up, 5) {
            return Err(format!("target got {} bytes, not the {up} sent", got.len()));
        }
        s.write_all(&pattern(down, 6)).map_err(|x| e(&x))?;
        Ok(())
    });
    let mut s = client::connect(relay, &job_key(), JOB, src, target).unwrap();
    let hs = Handshake::connect(
        job_key(),
        JOB,
        SIZE,
        src,
        target,
        client::fresh_nonce().unwrap(),
    );
    assert_eq!(client::handshake(&mut s, hs).unwrap(), target);
    s.write_all(&pattern(up, 5)).unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut back = Vec::new();
    s.read_to_end(&mut back).unwrap();
    assert!(
        back == pattern(down, 6),
        "client got {} bytes, not the {down} answered",
        back.len()
    );
    server.join().unwrap().unwrap();
}
