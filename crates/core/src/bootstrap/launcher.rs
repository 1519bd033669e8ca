//! The session with `ferry run`'s bootstrap server: ferry's own line protocol
//! (`ferry_wire::pmi`), authenticated with the job key that came through the environment.

use super::bootstrap_error;
use crate::error::Error;
use ferry_wire::pmi::{self, Reply, Request};
use ferry_wire::JobKey;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// An authenticated session with the launcher.
pub(crate) struct LauncherSession {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
    /// Where the launcher listens, for messages.
    addr: String,
}

impl LauncherSession {
    /// Connects to `addr` and proves to the launcher that we are `rank` of the job of `key`.
    pub(crate) fn connect(addr: &str, key: &JobKey, rank: u32) -> Result<LauncherSession, Error> {
        let timeout = super::reply_timeout()?;
        let stream = super::connect_within(addr, timeout)
            .map_err(|e| bootstrap_error(format!("cannot reach the launcher at {addr}: {e}")))?;
        stream.set_nodelay(true).ok();
        // The challenge and the answer to our hello come at once from a live launcher: bounded.
        // Later requests include fences, which wait for every rank, and are not.
        stream.set_read_timeout(timeout).map_err(bootstrap_error)?;
        let writer = stream.try_clone().map_err(bootstrap_error)?;
        let mut session = LauncherSession {
            reader: BufReader::new(stream),
            writer,
            addr: addr.to_string(),
        };
        let Reply::Challenge { nonce } = session.read_reply()? else {
            return Err(bootstrap_error("launcher did not open with a challenge"));
        };
        let mac = pmi::hello_mac(key, &nonce, rank);
        session.request(&Request::Hello {
            version: pmi::VERSION,
            rank,
            mac,
        })?;
        session
            .writer
            .set_read_timeout(None)
            .map_err(bootstrap_error)?;
        Ok(session)
    }

    fn read_reply(&mut self) -> Result<Reply, Error> {
        let mut line = String::new();
        let n = (&mut self.reader)
            .take(pmi::MAX_LINE as u64 + 1)
            .read_line(&mut line)
            .map_err(|e| match super::timed_out(&e) {
                true => bootstrap_error(format!(
                    "the launcher at {} accepted the bootstrap connection but sent nothing within FERRY_CONNECT_TIMEOUT",
                    self.addr
                )),
                false => bootstrap_error(e),
            })?;
        if n == 0 {
            return Err(bootstrap_error(
                "the launcher closed the bootstrap connection",
            ));
        }
        Reply::parse(&line).map_err(bootstrap_error)
    }

    /// Sends `request` and returns the launcher's reply (an `error` reply becomes `Err`).
    fn request(&mut self, request: &Request) -> Result<Reply, Error> {
        let line = request.encode().map_err(bootstrap_error)?;
        self.writer
            .write_all(line.as_bytes())
            .map_err(bootstrap_error)?;
        match self.read_reply()? {
            Reply::Error(message) => Err(bootstrap_error(format!("launcher refused: {message}"))),
            reply => Ok(reply),
        }
    }

    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<(), Error> {
        self.request(&Request::Put {
            key: key.into(),
            value: value.into(),
        })
        .map(drop)
    }

    /// The value published under `key`, or `None` if nothing is (yet).
    pub(crate) fn lookup(&mut self, key: &str) -> Result<Option<String>, Error> {
        match self.request(&Request::Get { key: key.into() })? {
            Reply::Value(v) => Ok(Some(v)),
            Reply::NotFound => Ok(None),
            other => Err(bootstrap_error(format!("unexpected reply {other:?}"))),
        }
    }

    pub(crate) fn fence(&mut self) -> Result<(), Error> {
        self.request(&Request::Fence).map(drop)
    }

    pub(crate) fn finalize(&mut self) -> Result<(), Error> {
        self.request(&Request::Finalize).map(drop)
    }

    /// Asks the launcher to start a new world; returns the universe rank of its rank 0.
    pub(crate) fn spawn(&mut self, parent: &str, apps: Vec<pmi::App>) -> Result<u32, Error> {
        match self.request(&Request::Spawn {
            parent: parent.into(),
            apps,
        })? {
            Reply::Spawned { base, .. } => Ok(base),
            other => Err(bootstrap_error(format!("unexpected reply {other:?}"))),
        }
    }

    /// Asks the launcher to end the job; does not wait for an answer.
    pub(crate) fn abort(&mut self, code: i32, message: &str) {
        if let Ok(line) = (Request::Abort {
            code,
            message: message.into(),
        })
        .encode()
        {
            let _ = self.writer.write_all(line.as_bytes());
        }
    }
}
