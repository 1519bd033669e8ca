//! Blocking helpers for the roles around a relay: a rank registering itself, a client
//! connecting through the relay, a target accepting a relayed connection, and the end-to-end
//! ferry handshake that follows. Used by the tests, the benchmark and `ferry relay` probes; the
//! runtime drives the same frames from its own nonblocking loop.

use ferry_wire::relay::{
    self, RefuseCode, Registrar, RelayAcceptor, RelayConnector, RelayError, RelayFrame, ReplayGuard,
};
use ferry_wire::{Handshake, HandshakeError, JobKey};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;
use thiserror::Error;

/// Why a relay exchange failed.
#[derive(Debug, Error)]
pub enum ClientError {
    /// Socket trouble.
    #[error("relay connection: {0}")]
    Io(#[from] std::io::Error),
    /// The other side sent something that is not the expected relay frame.
    #[error("relay protocol: {0}")]
    Protocol(#[from] RelayError),
    /// A frame arrived that does not fit here.
    #[error("unexpected relay frame {0:#04x}")]
    Unexpected(u8),
    /// The relay or the target said no.
    #[error("refused by the relay or target: {0:?}")]
    Refused(RefuseCode),
    /// The end-to-end handshake failed.
    #[error("end-to-end handshake: {0}")]
    Handshake(#[from] HandshakeError),
    /// The connection closed during the exchange.
    #[error("connection closed during the relay exchange")]
    Closed,
}

/// Reads exactly one relay frame (no more bytes than it holds).
pub fn read_frame(stream: &mut TcpStream) -> Result<RelayFrame, ClientError> {
    let mut buf = vec![0u8; relay::HEADER_LEN];
    fill(stream, &mut buf)?;
    let len = match RelayFrame::decode(&buf)? {
        Some((frame, _)) => return Ok(frame),
        None => u16::from_le_bytes([buf[6], buf[7]]) as usize,
    };
    buf.resize(relay::HEADER_LEN + len, 0);
    fill(stream, &mut buf[relay::HEADER_LEN..])?;
    match RelayFrame::decode(&buf)? {
        Some((frame, _)) => Ok(frame),
        None => Err(ClientError::Closed),
    }
}

fn fill(stream: &mut TcpStream, buf: &mut [u8]) -> Result<(), ClientError> {
    stream.read_exact(buf).map_err(|e| match e.kind() {
        std::io::ErrorKind::UnexpectedEof => ClientError::Closed,
        _ => ClientError::Io(e),
    })
}

/// Drives a sans-IO relay machine over a blocking stream: sends its output, feeds it input one
/// read at a time (never reading past what it wants), until `done`.
fn drive<M>(
    stream: &mut TcpStream,
    machine: &mut M,
    output: impl Fn(&M) -> Vec<u8>,
    consume: impl Fn(&mut M, usize),
    mut input: impl FnMut(&mut M, &[u8]) -> Result<usize, RelayError>,
    done: impl Fn(&M) -> bool,
) -> Result<(), ClientError> {
    let mut byte = [0u8; 1];
    loop {
        let out = output(machine);
        if !out.is_empty() {
            stream.write_all(&out)?;
            consume(machine, out.len());
        }
        if done(machine) {
            return Ok(());
        }
        // One byte at a time: whatever follows the last relay frame belongs to the caller.
        let n = stream.read(&mut byte)?;
        if n == 0 {
            return Err(ClientError::Closed);
        }
        if let Err(e) = input(machine, &byte) {
            // A queued REFUSED goes out before the error is reported.
            let out = output(machine);
            let _ = stream.write_all(&out);
            return Err(match e {
                RelayError::Refused(code) => ClientError::Refused(code),
                RelayError::Unexpected(op) => ClientError::Unexpected(op),
                other => ClientError::Protocol(other),
            });
        }
    }
}

/// Fresh random bytes for a nonce.
pub fn fresh_nonce() -> Result<[u8; 32], ClientError> {
    let mut n = [0u8; 32];
    getrandom::getrandom(&mut n)
        .map_err(|e| ClientError::Io(std::io::Error::other(e.to_string())))?;
    Ok(n)
}

/// Registers `rank` of `job` (accepting relayed connections on `port` at this host's address)
/// over a fresh connection to the relay. The registration lasts while the returned stream is
/// open.
pub fn register(
    relay_addr: SocketAddr,
    job_key: &JobKey,
    job: u64,
    rank: u32,
    port: u16,
) -> Result<TcpStream, ClientError> {
    let mut stream = TcpStream::connect_timeout(&relay_addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut m = Registrar::new(job_key.clone(), job, rank, port);
    drive(
        &mut stream,
        &mut m,
        |m| m.pending_output().to_vec(),
        Registrar::consume_output,
        |m, b| m.handle_input(b),
        Registrar::is_registered,
    )?;
    stream.set_read_timeout(None)?;
    Ok(stream)
}

/// Connects from rank `src` to rank `target` of `job` through the relay at `relay_addr`;
/// returns the stream once the relay says ESTABLISHED (the end-to-end handshake comes next).
/// A relay that answers with a pinhole is followed through it: the stream returned is then the
/// one through the pinhole, the target's ACCEPTED read.
pub fn connect(
    relay_addr: SocketAddr,
    job_key: &JobKey,
    job: u64,
    src: u32,
    target: u32,
) -> Result<TcpStream, ClientError> {
    let mut stream = TcpStream::connect_timeout(&relay_addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(15)))?;
    let mut m = RelayConnector::new(job_key.clone(), job, src, target, fresh_nonce()?);
    let run =
        |stream: &mut TcpStream, m: &mut RelayConnector, done: fn(&RelayConnector) -> bool| {
            drive(
                stream,
                m,
                |m| m.pending_output().to_vec(),
                RelayConnector::consume_output,
                |m, b| m.handle_input(b),
                done,
            )
        };
    run(&mut stream, &mut m, |m| {
        m.is_established() || m.pinhole().is_some()
    })?;
    if let Some(port) = m.pinhole() {
        let control = stream;
        stream = TcpStream::connect_timeout(
            &SocketAddr::new(relay_addr.ip(), port),
            Duration::from_secs(5),
        )?;
        stream.set_read_timeout(Some(Duration::from_secs(15)))?;
        m.through_pinhole();
        run(&mut stream, &mut m, RelayConnector::is_established)?;
        // Through: the relay closes the pinhole when its CONNECT ends.
        drop(control);
    }
    stream.set_read_timeout(None)?;
    Ok(stream)
}

/// Target side of a connection the relay opened: checks INCOMING end to end, answers
/// ACCEPTED (or REFUSED) and returns the client's rank.
pub fn accept(
    stream: &mut TcpStream,
    job_key: &JobKey,
    job: u64,
    my_rank: u32,
    seen: &mut ReplayGuard,
) -> Result<u32, ClientError> {
    let mut m = RelayAcceptor::new(job_key.clone(), job, my_rank);
    drive(
        stream,
        &mut m,
        |m| m.pending_output().to_vec(),
        RelayAcceptor::consume_output,
        |m, b| m.handle_input(b, seen),
        |m| m.peer_rank().is_some(),
    )?;
    m.peer_rank().ok_or(ClientError::Closed)
}

/// Runs the ferry handshake to completion over a blocking stream; returns the peer's rank.
pub fn handshake(stream: &mut TcpStream, mut hs: Handshake) -> Result<u32, ClientError> {
    let mut buf = [0u8; 256];
    loop {
        let out = hs.pending_output().to_vec();
        if !out.is_empty() {
            stream.write_all(&out)?;
            hs.consume_output(out.len());
        }
        if let Some(rank) = hs.peer_rank() {
            return Ok(rank);
        }
        let want = hs.wanted().min(buf.len());
        let n = stream.read(&mut buf[..want.max(1)])?;
        if n == 0 {
            return Err(ClientError::Closed);
        }
        hs.handle_input(&buf[..n])?;
    }
}
