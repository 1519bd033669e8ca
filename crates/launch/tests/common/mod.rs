//! A bootstrap client for tests: std sockets plus the `ferry_wire::pmi` codec.
#![allow(dead_code)]

use ferry_wire::pmi::{hello_mac, Reply, Request, VERSION};
use ferry_wire::JobKey;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    /// Connects and reads the challenge.
    pub fn open(addr: SocketAddr) -> (Client, [u8; 32]) {
        let stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .expect("timeout");
        let writer = stream.try_clone().expect("clone");
        let mut client = Client {
            reader: BufReader::new(stream),
            writer,
        };
        match client.reply() {
            Some(Reply::Challenge { nonce }) => (client, nonce),
            other => panic!("expected a challenge, got {other:?}"),
        }
    }

    /// Connects and authenticates as `rank`.
    pub fn hello(addr: SocketAddr, key: &JobKey, rank: u32) -> Client {
        let (mut client, nonce) = Client::open(addr);
        let reply = client.request(&Request::Hello {
            version: VERSION,
            rank,
            mac: hello_mac(key, &nonce, rank),
        });
        assert_eq!(reply, Some(Reply::Ok), "hello of rank {rank}");
        client
    }

    pub fn send_raw(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)
    }

    /// The next reply; `None` once the launcher has closed the connection.
    pub fn reply(&mut self) -> Option<Reply> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(Reply::parse(&line).expect("launcher sent a malformed reply")),
        }
    }

    pub fn request(&mut self, request: &Request) -> Option<Reply> {
        let line = request.encode().expect("encode");
        self.send_raw(line.as_bytes()).ok()?;
        self.reply()
    }

    pub fn put(&mut self, key: &str, value: &str) {
        let reply = self.request(&Request::Put {
            key: key.into(),
            value: value.into(),
        });
        assert_eq!(reply, Some(Reply::Ok));
    }

    pub fn get(&mut self, key: &str) -> Option<String> {
        match self.request(&Request::Get { key: key.into() }) {
            Some(Reply::Value(v)) => Some(v),
            Some(Reply::NotFound) => None,
            other => panic!("get {key}: {other:?}"),
        }
    }

    pub fn fence(&mut self) {
        assert_eq!(self.request(&Request::Fence), Some(Reply::Ok));
    }

    pub fn finalize(&mut self) {
        assert_eq!(self.request(&Request::Finalize), Some(Reply::Ok));
    }

    /// Reads until the launcher closes the connection; returns the replies seen on the way.
    pub fn drain(&mut self) -> Vec<Reply> {
        std::iter::from_fn(|| self.reply()).collect()
    }
}

/// A stranger's attempts on `addr`; each must be refused (an `error` reply at most, then closed).
pub fn stranger_attempts(addr: SocketAddr, size: u32) {
    let wrong_key = JobKey([0x55; 32]);
    // Wrong MAC.
    let (mut c, nonce) = Client::open(addr);
    let line = Request::Hello {
        version: VERSION,
        rank: 0,
        mac: hello_mac(&wrong_key, &nonce, 0),
    }
    .encode()
    .unwrap();
    c.send_raw(line.as_bytes()).unwrap();
    assert_refused(&mut c, "wrong MAC");
    // Garbage.
    let (mut c, _) = Client::open(addr);
    c.send_raw(b"\x00\xff GET / HTTP/1.0\r\n\r\n").unwrap();
    assert_refused(&mut c, "garbage");
    // A line longer than MAX_LINE, without a newline.
    let (mut c, _) = Client::open(addr);
    let _ = c.send_raw(&vec![b'a'; ferry_wire::pmi::MAX_LINE + 100]);
    assert_refused(&mut c, "overlong line");
    // A rank out of range (the MAC is irrelevant: the rank is checked first).
    let (mut c, nonce) = Client::open(addr);
    let line = Request::Hello {
        version: VERSION,
        rank: size,
        mac: hello_mac(&wrong_key, &nonce, size),
    }
    .encode()
    .unwrap();
    c.send_raw(line.as_bytes()).unwrap();
    assert_refused(&mut c, "rank out of range");
}

pub fn assert_refused(client: &mut Client, what: &str) {
    let replies = client.drain();
    assert!(
        replies.iter().all(|r| matches!(r, Reply::Error(_))),
        "{what}: expected only an error before the close, got {replies:?}"
    );
}
