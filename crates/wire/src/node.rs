//! The control protocol between `ferry run` and a node daemon (`ferry node`), one per host of a
//! multi-host job.
//!
//! The launcher starts each daemon (over ssh, locally, or with another remote shell) and talks
//! to it over the daemon's standard input and output, so nothing needs to connect back through
//! firewalls, and the job key travels on ssh's encrypted stdin, never on a command line. The
//! daemon forks its host's ranks and reports on them; the launcher decides about the job.
//!
//! Every message is one frame: a 12-byte header, then `len` body bytes.
//!
//! ```text
//! 0  magic "FRND" | 4 version u8 (1) | 5 op u8 | 6 reserved u16 (0) | 8 len u32 LE
//! ```
//!
//! Bodies are little-endian integers and byte strings (u32 length, then the bytes), in the
//! field order documented on each [`NodeMessage`] variant. Op codes below 0x10 go from the
//! launcher to the daemon, the others back. A decoder says "need more bytes" (`Ok(None)`) on
//! short input and checks every length against what is left before allocating.

use crate::handshake::JobKey;
use thiserror::Error;

/// First bytes of every frame.
pub const MAGIC: [u8; 4] = *b"FRND";
/// Protocol version.
pub const VERSION: u8 = 1;
/// Header length.
pub const HEADER_LEN: usize = 12;
/// Largest body accepted (a job's environment and arguments fit many times over).
pub const MAX_BODY: usize = 16 << 20;

/// Launcher → daemon: the job and this host's ranks; the first message, once.
pub const OP_START: u8 = 0x01;
/// Launcher → daemon: bytes for rank 0's standard input; an empty body closes it.
pub const OP_STDIN: u8 = 0x02;
/// Launcher → daemon: pass a signal to every rank.
pub const OP_SIGNAL: u8 = 0x03;
/// Launcher → daemon: end every rank (SIGTERM, SIGKILL after a grace), then exit.
pub const OP_STOP: u8 = 0x04;
/// Launcher → daemon: a rank's `put` is in the key space.
pub const OP_KV_ACK: u8 = 0x05;
/// Launcher → daemon: the answer to a rank's `get`.
pub const OP_KV_VALUE: u8 = 0x06;
/// Launcher → daemon: every host's ranks have fenced; here is what was put since this
/// daemon's last fence.
pub const OP_FENCE_DONE: u8 = 0x07;
/// Launcher → daemon: hosts this daemon starts and speaks for (a tree of daemons).
pub const OP_CHILDREN: u8 = 0x08;
/// Daemon → launcher: a rank runs.
pub const OP_STARTED: u8 = 0x11;
/// Daemon → launcher: output of a rank.
pub const OP_OUTPUT: u8 = 0x12;
/// Daemon → launcher: a rank ended.
pub const OP_EXITED: u8 = 0x13;
/// Daemon → launcher: something went wrong on this host (a rank could not start, …).
pub const OP_FAILED: u8 = 0x14;
/// Daemon → launcher: a rank's bootstrap session changed (see [`Session`]).
pub const OP_SESSION: u8 = 0x15;
/// Daemon → launcher: a rank asked to end the job.
pub const OP_ABORT: u8 = 0x16;
/// Daemon → launcher: a rank's `put`.
pub const OP_KV_PUT: u8 = 0x17;
/// Daemon → launcher: a rank's `get` that this host could not answer.
pub const OP_KV_GET: u8 = 0x18;
/// Daemon → launcher: every rank of this host has entered the fence.
pub const OP_FENCE: u8 = 0x19;

/// What a daemon needs to start its host's ranks.
#[derive(Clone, PartialEq, Eq)]
pub struct JobSpec {
    /// Job id (names the shared-memory segments).
    pub job: u64,
    /// The job key.
    pub key: JobKey,
    /// `ip:port` of the launcher as this host reaches it: the ranks' TCP address is this
    /// host's address on the route there.
    pub launcher: String,
    /// Ranks in the job.
    pub size: u32,
    /// The ranks this daemon starts, ascending.
    pub ranks: Vec<u32>,
    /// The program (bytes of a path or a name looked up in `PATH`).
    pub program: Vec<u8>,
    /// Its arguments.
    pub args: Vec<Vec<u8>>,
    /// Environment for the ranks beyond the daemon's own: (name, value).
    pub env: Vec<(Vec<u8>, Vec<u8>)>,
    /// Working directory of the ranks (empty: the daemon's).
    pub cwd: Vec<u8>,
    /// Prefix every line of output with `[rank] `.
    pub tag_output: bool,
}

impl std::fmt::Debug for JobSpec {
    // The key stays out of logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobSpec")
            .field("job", &self.job)
            .field("launcher", &self.launcher)
            .field("size", &self.size)
            .field("ranks", &self.ranks)
            .field("program", &String::from_utf8_lossy(&self.program))
            .finish_non_exhaustive()
    }
}

/// A host a daemon starts for the launcher, in a tree of daemons ([`NodeMessage::Children`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildNode {
    /// The host's name.
    pub host: String,
    /// The remote shell's destination for it (empty: its name).
    pub dest: String,
    /// The host ssh reaches it through (`ProxyJump`; empty: none).
    pub jump: String,
    /// Its job description, as it would get it from the launcher.
    pub spec: JobSpec,
}

/// Which output stream a chunk of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

/// How a rank ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RankExit {
    /// It exited with this code.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
}

/// Where a rank's bootstrap session with its daemon stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Session {
    /// It connected and proved the job key.
    Connected,
    /// It said `finalize`.
    Finalized,
    /// Its connection closed; `finalized` says whether it had said `finalize`.
    Closed {
        /// Whether it had.
        finalized: bool,
    },
}

/// One control message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeMessage {
    /// [`OP_START`]: job u64, key 32 bytes, launcher str, size u32, ranks (count u32, each
    /// u32), program str, args (count u32, each str), env (count u32, each name str, value
    /// str), cwd str, tag_output u8 (0 or 1).
    Start(Box<JobSpec>),
    /// [`OP_STDIN`]: the bytes (the whole body).
    Stdin(Vec<u8>),
    /// [`OP_SIGNAL`]: signal i32.
    Signal(i32),
    /// [`OP_STOP`]: no body.
    Stop,
    /// [`OP_KV_ACK`]: rank u32.
    KvAck {
        /// The rank whose put it was.
        rank: u32,
    },
    /// [`OP_KV_VALUE`]: rank u32, found u8 (0 or 1), value str.
    KvValue {
        /// The rank that asked.
        rank: u32,
        /// The value, if one was put.
        value: Option<String>,
    },
    /// [`OP_CHILDREN`]: ferry str, shell words (count u32, each str), words u8 (0: the shell
    /// takes the daemon's command as one quoted word, as ssh; 1: as separate words after
    /// `--nodelist=HOST`, as srun), children (count u32, each host str, dest str, jump str, then
    /// its START body).
    Children {
        /// The `ferry` executable on the children.
        ferry: String,
        /// The remote shell that reaches them, in words.
        shell: Vec<String>,
        /// Whether the shell takes the command as separate words (srun) rather than one (ssh).
        words: bool,
        /// The hosts.
        nodes: Vec<ChildNode>,
    },
    /// [`OP_FENCE_DONE`]: count u32, then (key str, value str) each.
    FenceDone {
        /// What was put since this daemon's previous fence, in order.
        entries: Vec<(String, String)>,
    },
    /// [`OP_STARTED`]: rank u32, pid u32.
    Started {
        /// The rank.
        rank: u32,
        /// Its process id on this host.
        pid: u32,
    },
    /// [`OP_OUTPUT`]: rank u32, stream u8 (1 stdout, 2 stderr), then the bytes (the rest).
    Output {
        /// The rank.
        rank: u32,
        /// Which stream.
        stream: Stream,
        /// Whole lines (the last may lack its newline when the rank ended without one).
        bytes: Vec<u8>,
    },
    /// [`OP_EXITED`]: rank u32, kind u8 (0 code, 1 signal), value i32.
    Exited {
        /// The rank.
        rank: u32,
        /// How.
        exit: RankExit,
    },
    /// [`OP_FAILED`]: rank u32 (`u32::MAX`: none), message str.
    Failed {
        /// The rank concerned, if any.
        rank: Option<u32>,
        /// What went wrong.
        message: String,
    },
    /// [`OP_SESSION`]: rank u32, state u8 (1 connected, 2 finalized, 3 closed, 4 closed
    /// after finalize).
    Session {
        /// The rank.
        rank: u32,
        /// Its new state.
        state: Session,
    },
    /// [`OP_ABORT`]: rank u32, code i32, message str.
    Abort {
        /// The rank.
        rank: u32,
        /// The exit code it asked for.
        code: i32,
        /// Its reason.
        message: String,
    },
    /// [`OP_KV_PUT`]: rank u32, key str, value str.
    KvPut {
        /// The rank.
        rank: u32,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// [`OP_KV_GET`]: rank u32, key str.
    KvGet {
        /// The rank.
        rank: u32,
        /// The key.
        key: String,
    },
    /// [`OP_FENCE`]: no body.
    Fence,
}

/// Why bytes are not a valid control frame.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum NodeError {
    /// The first bytes are not [`MAGIC`]: not a ferry node daemon (or a shell printed
    /// something first, e.g. a login banner on stdout).
    #[error("not a ferry node frame (bytes {0:02x?}); does the remote shell print anything before running the command?")]
    BadMagic([u8; 4]),
    /// Another protocol version.
    #[error(
        "node protocol version {0}, expected {VERSION}: is the same ferry installed on every host?"
    )]
    Version(u8),
    /// An unknown op code.
    #[error("unknown node op 0x{0:02x}")]
    UnknownOp(u8),
    /// A body larger than [`MAX_BODY`].
    #[error("node frame of {0} bytes exceeds the limit of {MAX_BODY}")]
    TooLarge(usize),
    /// The body does not hold what its op says.
    #[error("malformed node frame (op 0x{op:02x}): {what}")]
    Malformed {
        /// The op.
        op: u8,
        /// What was wrong.
        what: &'static str,
    },
}

impl NodeMessage {
    /// The op code.
    pub fn op(&self) -> u8 {
        match self {
            NodeMessage::Start(_) => OP_START,
            NodeMessage::Stdin(_) => OP_STDIN,
            NodeMessage::Signal(_) => OP_SIGNAL,
            NodeMessage::Stop => OP_STOP,
            NodeMessage::KvAck { .. } => OP_KV_ACK,
            NodeMessage::KvValue { .. } => OP_KV_VALUE,
            NodeMessage::FenceDone { .. } => OP_FENCE_DONE,
            NodeMessage::Children { .. } => OP_CHILDREN,
            NodeMessage::Started { .. } => OP_STARTED,
            NodeMessage::Output { .. } => OP_OUTPUT,
            NodeMessage::Exited { .. } => OP_EXITED,
            NodeMessage::Failed { .. } => OP_FAILED,
            NodeMessage::Session { .. } => OP_SESSION,
            NodeMessage::Abort { .. } => OP_ABORT,
            NodeMessage::KvPut { .. } => OP_KV_PUT,
            NodeMessage::KvGet { .. } => OP_KV_GET,
            NodeMessage::Fence => OP_FENCE,
        }
    }

    /// Appends the frame to `out`.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        out.push(VERSION);
        out.push(self.op());
        out.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
        match self {
            NodeMessage::Start(spec) => encode_spec(out, spec),
            NodeMessage::Children {
                ferry,
                shell,
                words,
                nodes,
            } => {
                put_bytes(out, ferry.as_bytes());
                put_u32(out, shell.len());
                for word in shell {
                    put_bytes(out, word.as_bytes());
                }
                out.push(u8::from(*words));
                put_u32(out, nodes.len());
                for node in nodes {
                    put_bytes(out, node.host.as_bytes());
                    put_bytes(out, node.dest.as_bytes());
                    put_bytes(out, node.jump.as_bytes());
                    encode_spec(out, &node.spec);
                }
            }
            NodeMessage::Stdin(bytes) => out.extend_from_slice(bytes),
            NodeMessage::Signal(signal) => out.extend_from_slice(&signal.to_le_bytes()),
            NodeMessage::Stop | NodeMessage::Fence => {}
            NodeMessage::KvAck { rank } => out.extend_from_slice(&rank.to_le_bytes()),
            NodeMessage::KvValue { rank, value } => {
                out.extend_from_slice(&rank.to_le_bytes());
                out.push(u8::from(value.is_some()));
                put_bytes(out, value.as_deref().unwrap_or("").as_bytes());
            }
            NodeMessage::FenceDone { entries } => {
                put_u32(out, entries.len());
                for (k, v) in entries {
                    put_bytes(out, k.as_bytes());
                    put_bytes(out, v.as_bytes());
                }
            }
            NodeMessage::Session { rank, state } => {
                out.extend_from_slice(&rank.to_le_bytes());
                out.push(match state {
                    Session::Connected => 1,
                    Session::Finalized => 2,
                    Session::Closed { finalized: false } => 3,
                    Session::Closed { finalized: true } => 4,
                });
            }
            NodeMessage::Abort {
                rank,
                code,
                message,
            } => {
                out.extend_from_slice(&rank.to_le_bytes());
                out.extend_from_slice(&code.to_le_bytes());
                put_bytes(out, message.as_bytes());
            }
            NodeMessage::KvPut { rank, key, value } => {
                out.extend_from_slice(&rank.to_le_bytes());
                put_bytes(out, key.as_bytes());
                put_bytes(out, value.as_bytes());
            }
            NodeMessage::KvGet { rank, key } => {
                out.extend_from_slice(&rank.to_le_bytes());
                put_bytes(out, key.as_bytes());
            }
            NodeMessage::Started { rank, pid } => {
                out.extend_from_slice(&rank.to_le_bytes());
                out.extend_from_slice(&pid.to_le_bytes());
            }
            NodeMessage::Output {
                rank,
                stream,
                bytes,
            } => {
                out.extend_from_slice(&rank.to_le_bytes());
                out.push(match stream {
                    Stream::Stdout => 1,
                    Stream::Stderr => 2,
                });
                out.extend_from_slice(bytes);
            }
            NodeMessage::Exited { rank, exit } => {
                out.extend_from_slice(&rank.to_le_bytes());
                let (kind, value) = match exit {
                    RankExit::Code(c) => (0u8, *c),
                    RankExit::Signal(s) => (1, *s),
                };
                out.push(kind);
                out.extend_from_slice(&value.to_le_bytes());
            }
            NodeMessage::Failed { rank, message } => {
                out.extend_from_slice(&rank.unwrap_or(u32::MAX).to_le_bytes());
                put_bytes(out, message.as_bytes());
            }
        }
        let len = (out.len() - start - HEADER_LEN) as u32;
        out[start + 8..start + 12].copy_from_slice(&len.to_le_bytes());
    }

    /// The frame as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.encode(&mut out);
        out
    }

    /// Decodes the frame at the start of `bytes`: the message and the bytes it took, or
    /// `None` if more bytes are needed.
    pub fn decode(bytes: &[u8]) -> Result<Option<(NodeMessage, usize)>, NodeError> {
        if bytes.len() < HEADER_LEN {
            // A wrong start is reported as soon as it shows.
            let n = bytes.len().min(4);
            if bytes[..n] != MAGIC[..n] {
                let mut got = [0u8; 4];
                got[..n].copy_from_slice(&bytes[..n]);
                return Err(NodeError::BadMagic(got));
            }
            return Ok(None);
        }
        let magic = [bytes[0], bytes[1], bytes[2], bytes[3]];
        if magic != MAGIC {
            return Err(NodeError::BadMagic(magic));
        }
        if bytes[4] != VERSION {
            return Err(NodeError::Version(bytes[4]));
        }
        let op = bytes[5];
        if bytes[6..8] != [0, 0] {
            return Err(NodeError::Malformed {
                op,
                what: "reserved header bytes are not zero",
            });
        }
        let len = u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize;
        if len > MAX_BODY {
            return Err(NodeError::TooLarge(len));
        }
        if bytes.len() < HEADER_LEN + len {
            return Ok(None);
        }
        let body = &bytes[HEADER_LEN..HEADER_LEN + len];
        let mut r = Reader { rest: body, op };
        let message = match op {
            OP_START => NodeMessage::Start(Box::new(decode_spec(&mut r)?)),
            OP_CHILDREN => {
                let ferry = r.string()?;
                let count = r.count(4)?;
                let shell = (0..count).map(|_| r.string()).collect::<Result<_, _>>()?;
                let words = match r.u8()? {
                    0 => false,
                    1 => true,
                    _ => return Err(r.bad("words is neither 0 nor 1")),
                };
                let count = r.count(12)?;
                let nodes = (0..count)
                    .map(|_| {
                        Ok(ChildNode {
                            host: r.string()?,
                            dest: r.string()?,
                            jump: r.string()?,
                            spec: decode_spec(&mut r)?,
                        })
                    })
                    .collect::<Result<_, _>>()?;
                NodeMessage::Children {
                    ferry,
                    shell,
                    words,
                    nodes,
                }
            }
            OP_STDIN => NodeMessage::Stdin(r.rest()),
            OP_SIGNAL => NodeMessage::Signal(r.u32()? as i32),
            OP_STOP => NodeMessage::Stop,
            OP_FENCE => NodeMessage::Fence,
            OP_KV_ACK => NodeMessage::KvAck { rank: r.u32()? },
            OP_KV_VALUE => {
                let rank = r.u32()?;
                let found = r.u8()?;
                let value = r.string()?;
                match found {
                    0 if value.is_empty() => NodeMessage::KvValue { rank, value: None },
                    1 => NodeMessage::KvValue {
                        rank,
                        value: Some(value),
                    },
                    _ => return Err(r.bad("found is neither 0 (with no value) nor 1")),
                }
            }
            OP_FENCE_DONE => {
                let count = r.count(8)?;
                let entries = (0..count)
                    .map(|_| Ok((r.string()?, r.string()?)))
                    .collect::<Result<_, _>>()?;
                NodeMessage::FenceDone { entries }
            }
            OP_SESSION => {
                let rank = r.u32()?;
                let state = match r.u8()? {
                    1 => Session::Connected,
                    2 => Session::Finalized,
                    3 => Session::Closed { finalized: false },
                    4 => Session::Closed { finalized: true },
                    _ => return Err(r.bad("session state is not 1 … 4")),
                };
                NodeMessage::Session { rank, state }
            }
            OP_ABORT => NodeMessage::Abort {
                rank: r.u32()?,
                code: r.u32()? as i32,
                message: r.string()?,
            },
            OP_KV_PUT => NodeMessage::KvPut {
                rank: r.u32()?,
                key: r.string()?,
                value: r.string()?,
            },
            OP_KV_GET => NodeMessage::KvGet {
                rank: r.u32()?,
                key: r.string()?,
            },
            OP_STARTED => NodeMessage::Started {
                rank: r.u32()?,
                pid: r.u32()?,
            },
            OP_OUTPUT => {
                let rank = r.u32()?;
                let stream = match r.u8()? {
                    1 => Stream::Stdout,
                    2 => Stream::Stderr,
                    _ => return Err(r.bad("stream is neither 1 nor 2")),
                };
                NodeMessage::Output {
                    rank,
                    stream,
                    bytes: r.rest(),
                }
            }
            OP_EXITED => {
                let rank = r.u32()?;
                let kind = r.u8()?;
                let value = r.u32()? as i32;
                let exit = match kind {
                    0 => RankExit::Code(value),
                    1 => RankExit::Signal(value),
                    _ => return Err(r.bad("exit kind is neither 0 nor 1")),
                };
                NodeMessage::Exited { rank, exit }
            }
            OP_FAILED => {
                let rank = r.u32()?;
                NodeMessage::Failed {
                    rank: (rank != u32::MAX).then_some(rank),
                    message: r.string()?,
                }
            }
            other => return Err(NodeError::UnknownOp(other)),
        };
        if !r.rest.is_empty() {
            return Err(r.bad("bytes after the last field"));
        }
        Ok(Some((message, HEADER_LEN + len)))
    }
}

fn encode_spec(out: &mut Vec<u8>, spec: &JobSpec) {
    out.extend_from_slice(&spec.job.to_le_bytes());
    out.extend_from_slice(&spec.key.0);
    put_bytes(out, spec.launcher.as_bytes());
    out.extend_from_slice(&spec.size.to_le_bytes());
    put_u32(out, spec.ranks.len());
    for r in &spec.ranks {
        out.extend_from_slice(&r.to_le_bytes());
    }
    put_bytes(out, &spec.program);
    put_u32(out, spec.args.len());
    for a in &spec.args {
        put_bytes(out, a);
    }
    put_u32(out, spec.env.len());
    for (k, v) in &spec.env {
        put_bytes(out, k);
        put_bytes(out, v);
    }
    put_bytes(out, &spec.cwd);
    out.push(u8::from(spec.tag_output));
}

fn decode_spec(r: &mut Reader<'_>) -> Result<JobSpec, NodeError> {
    let job = r.u64()?;
    let key = JobKey(r.array()?);
    let launcher = r.string()?;
    let size = r.u32()?;
    let count = r.count(4)?;
    let ranks = (0..count).map(|_| r.u32()).collect::<Result<_, _>>()?;
    let program = r.bytes()?;
    let count = r.count(4)?;
    let args = (0..count).map(|_| r.bytes()).collect::<Result<_, _>>()?;
    let count = r.count(8)?;
    let env = (0..count)
        .map(|_| Ok((r.bytes()?, r.bytes()?)))
        .collect::<Result<_, _>>()?;
    let cwd = r.bytes()?;
    let tag_output = match r.u8()? {
        0 => false,
        1 => true,
        _ => return Err(r.bad("tag_output is neither 0 nor 1")),
    };
    Ok(JobSpec {
        job,
        key,
        launcher,
        size,
        ranks,
        program,
        args,
        env,
        cwd,
        tag_output,
    })
}

fn put_u32(out: &mut Vec<u8>, n: usize) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(out, bytes.len());
    out.extend_from_slice(bytes);
}

/// Reads fields off a body, checking each length against what is left.
struct Reader<'a> {
    rest: &'a [u8],
    op: u8,
}

impl Reader<'_> {
    fn bad(&self, what: &'static str) -> NodeError {
        NodeError::Malformed { op: self.op, what }
    }

    fn take(&mut self, n: usize) -> Result<&[u8], NodeError> {
        if self.rest.len() < n {
            return Err(self.bad("body ends inside a field"));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], NodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, NodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn u32(&mut self) -> Result<u32, NodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, NodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A count of items of at least `min_each` bytes each, checked against what is left so a
    /// forged count cannot make the caller allocate.
    fn count(&mut self, min_each: usize) -> Result<usize, NodeError> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_each) > self.rest.len() {
            return Err(self.bad("count larger than the body"));
        }
        Ok(n)
    }

    fn bytes(&mut self) -> Result<Vec<u8>, NodeError> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }

    fn string(&mut self) -> Result<String, NodeError> {
        String::from_utf8(self.bytes()?).map_err(|_| self.bad("text is not UTF-8"))
    }

    fn rest(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.rest).to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JobSpec {
        JobSpec {
            job: 0x1234_5678_9abc_def0,
            key: JobKey([7; 32]),
            launcher: "10.0.0.1:4242".into(),
            size: 6,
            ranks: vec![2, 3],
            program: b"./app".to_vec(),
            args: vec![b"-x".to_vec(), vec![0xff, b' ', 0]],
            env: vec![(b"FERRY_TRANSPORT".to_vec(), b"tcp".to_vec())],
            cwd: b"/work".to_vec(),
            tag_output: true,
        }
    }

    fn all() -> Vec<NodeMessage> {
        vec![
            NodeMessage::Start(Box::new(spec())),
            NodeMessage::Stdin(b"input\n".to_vec()),
            NodeMessage::Stdin(Vec::new()),
            NodeMessage::Signal(2),
            NodeMessage::Stop,
            NodeMessage::Started { rank: 3, pid: 999 },
            NodeMessage::Output {
                rank: 2,
                stream: Stream::Stderr,
                bytes: b"hello\n".to_vec(),
            },
            NodeMessage::Exited {
                rank: 2,
                exit: RankExit::Signal(9),
            },
            NodeMessage::Exited {
                rank: 3,
                exit: RankExit::Code(-1),
            },
            NodeMessage::Failed {
                rank: None,
                message: "cannot start ./app: not found".into(),
            },
            NodeMessage::Failed {
                rank: Some(1),
                message: String::new(),
            },
            NodeMessage::KvAck { rank: 5 },
            NodeMessage::KvValue {
                rank: 5,
                value: Some("pid=1;host=h1".into()),
            },
            NodeMessage::KvValue {
                rank: 5,
                value: Some(String::new()),
            },
            NodeMessage::KvValue {
                rank: 5,
                value: None,
            },
            NodeMessage::FenceDone {
                entries: vec![
                    ("card-0".into(), "x".into()),
                    ("tcp-1".into(), String::new()),
                ],
            },
            NodeMessage::FenceDone { entries: vec![] },
            NodeMessage::Session {
                rank: 1,
                state: Session::Connected,
            },
            NodeMessage::Session {
                rank: 1,
                state: Session::Closed { finalized: true },
            },
            NodeMessage::Abort {
                rank: 2,
                code: -3,
                message: "bad".into(),
            },
            NodeMessage::KvPut {
                rank: 0,
                key: "card-0".into(),
                value: "pid=3".into(),
            },
            NodeMessage::KvGet {
                rank: 0,
                key: "card-9".into(),
            },
            NodeMessage::Fence,
            NodeMessage::Children {
                ferry: "/opt/ferry".into(),
                shell: vec!["ssh".into(), "-F".into(), "cfg".into()],
                words: false,
                nodes: vec![
                    ChildNode {
                        host: "h2".into(),
                        dest: String::new(),
                        jump: "fa".into(),
                        spec: spec(),
                    },
                    ChildNode {
                        host: "h3".into(),
                        dest: "root@h3".into(),
                        jump: String::new(),
                        spec: JobSpec {
                            ranks: vec![4, 5],
                            ..spec()
                        },
                    },
                ],
            },
        ]
    }

    #[test]
    fn every_message_round_trips_alone_and_in_a_stream() {
        let mut stream = Vec::new();
        for m in all() {
            let bytes = m.to_bytes();
            assert_eq!(
                NodeMessage::decode(&bytes),
                Ok(Some((m.clone(), bytes.len())))
            );
            stream.extend_from_slice(&bytes);
        }
        let mut at = 0;
        for m in all() {
            let (got, n) = NodeMessage::decode(&stream[at..]).unwrap().unwrap();
            assert_eq!(got, m);
            at += n;
        }
        assert_eq!(at, stream.len());
    }

    #[test]
    fn short_input_needs_more_bytes_at_every_cut() {
        for m in all() {
            let bytes = m.to_bytes();
            for cut in 0..bytes.len() {
                assert_eq!(
                    NodeMessage::decode(&bytes[..cut]),
                    Ok(None),
                    "{m:?} cut at {cut}"
                );
            }
        }
    }

    #[test]
    fn a_banner_or_another_version_is_named() {
        assert_eq!(
            NodeMessage::decode(b"Welcome"),
            Err(NodeError::BadMagic(*b"Welc"))
        );
        assert!(matches!(
            NodeMessage::decode(b"X"),
            Err(NodeError::BadMagic(_))
        ));
        let mut bytes = NodeMessage::Stop.to_bytes();
        bytes[4] = 9;
        assert_eq!(NodeMessage::decode(&bytes), Err(NodeError::Version(9)));
        bytes[4] = VERSION;
        bytes[5] = 0x55;
        assert_eq!(NodeMessage::decode(&bytes), Err(NodeError::UnknownOp(0x55)));
    }

    #[test]
    fn forged_lengths_are_refused_before_allocating() {
        let mut bytes = NodeMessage::Stop.to_bytes();
        bytes[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            NodeMessage::decode(&bytes),
            Err(NodeError::TooLarge(u32::MAX as usize))
        );
        // A START whose rank count claims far more than the body holds.
        let mut body = Vec::new();
        body.extend_from_slice(&1u64.to_le_bytes());
        body.extend_from_slice(&[0; 32]);
        put_bytes(&mut body, b"a:1");
        body.extend_from_slice(&4u32.to_le_bytes());
        body.extend_from_slice(&u32::MAX.to_le_bytes());
        let mut frame = MAGIC.to_vec();
        frame.extend_from_slice(&[VERSION, OP_START, 0, 0]);
        frame.extend_from_slice(&(body.len() as u32).to_le_bytes());
        frame.extend_from_slice(&body);
        assert!(matches!(
            NodeMessage::decode(&frame),
            Err(NodeError::Malformed { op: OP_START, .. })
        ));
    }

    #[test]
    fn trailing_bytes_and_bad_fields_are_malformed() {
        let mut bytes = NodeMessage::Signal(15).to_bytes();
        bytes.push(0);
        let len = (bytes.len() - HEADER_LEN) as u32;
        bytes[8..12].copy_from_slice(&len.to_le_bytes());
        assert!(matches!(
            NodeMessage::decode(&bytes),
            Err(NodeError::Malformed { .. })
        ));
        let mut bytes = NodeMessage::Output {
            rank: 0,
            stream: Stream::Stdout,
            bytes: vec![],
        }
        .to_bytes();
        bytes[HEADER_LEN + 4] = 3;
        assert!(matches!(
            NodeMessage::decode(&bytes),
            Err(NodeError::Malformed { .. })
        ));
    }

    #[test]
    fn the_key_stays_out_of_debug_output() {
        let text = format!("{:?}", spec());
        assert!(!text.contains("7, 7"), "{text}");
    }
}
