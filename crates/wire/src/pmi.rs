//! The bootstrap protocol between a rank and its launcher: a key-value space with a fence
//! (like PMI), plus abort and finalize notices.
//!
//! One request or reply per line, words separated by single spaces, version 1:
//!
//! ```text
//! launcher → rank   challenge <64 hex nonce>
//! rank → launcher   hello 1 <rank> <64 hex HMAC(key, "pmi" | nonce | rank as u32 LE)>
//! launcher → rank   ok
//! rank → launcher   put <key> <value>         → ok
//!                   get <key>                 → value <value> | none
//!                   fence                     → ok  (once every rank has fenced)
//!                   abort <code> <message…>   (the launcher ends the job)
//!                   finalize                  → ok  (a clean exit follows)
//!                   spawn <parent> <app>…     → spawned <base> <world>
//! any error         error <message…>
//! ```
//!
//! `spawn` (MPI_Comm_spawn) asks the launcher to start a new world of processes. Each `<app>` is
//! `<procs>:<command>:<wdir>:<arg>:…` with the strings in hex (they may hold any byte but NUL);
//! `<parent>` is an opaque token (`[A-Za-z0-9._:,-]`, may be `-` for none) handed to the new
//! processes in [`env::PARENT`]. The reply names the universe rank of the new world's rank 0
//! and the world's number (the launcher's world is number 0). A rank's `hello` carries its
//! universe rank: the launcher's ranks are 0..n, each spawned world takes the next block.
//!
//! Keys are 1–256 characters of `[A-Za-z0-9._:-]`, values 0–4096 characters without white space.
//! Lines longer than [`MAX_LINE`] are refused.

use crate::handshake::JobKey;
use thiserror::Error;

/// Protocol version carried in `hello`.
pub const VERSION: u32 = 1;
/// Longest accepted line, without its newline.
pub const MAX_LINE: usize = 64 << 10;
/// Longest key.
pub const MAX_KEY: usize = 256;
/// Longest value.
pub const MAX_VALUE: usize = 4096;

/// Environment variables through which the launcher tells a rank who it is.
pub mod env {
    /// `host:port` of the launcher's bootstrap server.
    pub const ADDR: &str = "FERRY_PMI_ADDR";
    /// This process's rank in the job.
    pub const RANK: &str = "FERRY_RANK";
    /// Number of ranks in the job.
    pub const SIZE: &str = "FERRY_SIZE";
    /// Job id (decimal u64), also used to name shared-memory segments.
    pub const JOB_ID: &str = "FERRY_JOB_ID";
    /// The job key as 64 hex digits (never on a command line).
    pub const JOB_KEY: &str = "FERRY_JOB_KEY";
    /// Universe rank of this world's rank 0 (absent: 0, the launcher's world).
    pub const UNIVERSE_BASE: &str = "FERRY_UNIVERSE_BASE";
    /// Number of this world among the job's worlds (absent: 0, the launcher's world).
    pub const WORLD_INDEX: &str = "FERRY_WORLD_INDEX";
    /// The spawning group's token (see `spawn`), only in spawned worlds.
    pub const PARENT: &str = "FERRY_PARENT";
    /// Which command of an MPI_Comm_spawn_multiple this process runs (MPI_APPNUM).
    pub const APPNUM: &str = "FERRY_APPNUM";
    /// MPI_UNIVERSE_SIZE: how many processes the job may grow to (`ferry run --universe-size`).
    pub const UNIVERSE_SIZE: &str = "FERRY_UNIVERSE_SIZE";
}

/// One command of a `spawn` request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// How many processes run it.
    pub procs: u32,
    /// The program.
    pub command: String,
    /// Working directory (empty: the launcher's).
    pub wdir: String,
    /// Its arguments (without the program name).
    pub args: Vec<String>,
}

fn hex_string(text: &str) -> String {
    text.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex_string(hex: &str) -> Option<String> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()?;
    if bytes.contains(&0) {
        return None;
    }
    String::from_utf8(bytes).ok()
}

impl App {
    fn encode(&self) -> String {
        let mut s = format!(
            "{}:{}:{}",
            self.procs,
            hex_string(&self.command),
            hex_string(&self.wdir)
        );
        for a in &self.args {
            s.push(':');
            s += &hex_string(a);
        }
        s
    }

    fn parse(word: &str) -> Option<App> {
        let mut fields = word.split(':');
        let procs = fields.next()?.parse().ok()?;
        let command = unhex_string(fields.next()?)?;
        let wdir = unhex_string(fields.next()?)?;
        let args = fields.map(unhex_string).collect::<Option<Vec<_>>>()?;
        Some(App {
            procs,
            command,
            wdir,
            args,
        })
    }
}

fn valid_token(token: &str) -> bool {
    (1..=MAX_VALUE).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:,-".contains(&b))
}

/// A message from a rank to the launcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Authenticates the connection as `rank`.
    Hello {
        /// Protocol version.
        version: u32,
        /// Claimed rank.
        rank: u32,
        /// 32-byte MAC over the launcher's nonce.
        mac: [u8; 32],
    },
    /// Stores `value` under `key`.
    Put {
        /// Key.
        key: String,
        /// Value.
        value: String,
    },
    /// Looks `key` up.
    Get {
        /// Key.
        key: String,
    },
    /// Waits until every rank has fenced; puts before are visible to gets after.
    Fence,
    /// Ends the job with `code`.
    Abort {
        /// Exit code for the job.
        code: i32,
        /// Why.
        message: String,
    },
    /// The rank finalized and is about to exit normally.
    Finalize,
    /// Start a new world running `apps` (MPI_Comm_spawn).
    Spawn {
        /// Token for the new processes ([`env::PARENT`]).
        parent: String,
        /// The commands, in the order their processes take ranks.
        apps: Vec<App>,
    },
}

/// A message from the launcher to a rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Opens the session.
    Challenge {
        /// Nonce to MAC in `hello`.
        nonce: [u8; 32],
    },
    /// Success.
    Ok,
    /// The value of a `get`.
    Value(String),
    /// `get` found nothing.
    NotFound,
    /// The request failed.
    Error(String),
    /// The new world of a `spawn` started.
    Spawned {
        /// Universe rank of its rank 0.
        base: u32,
        /// Its number among the job's worlds.
        world: u32,
    },
}

/// A line that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum PmiError {
    /// Line longer than [`MAX_LINE`].
    #[error("bootstrap line of {0} bytes is longer than {MAX_LINE}")]
    LineTooLong(usize),
    /// Unknown or malformed message.
    #[error("malformed bootstrap message: {0:?}")]
    Malformed(String),
    /// A line break inside a line: one request or reply is one line, so the text after the
    /// break would be a second message smuggled into the first (an abort message, a value).
    #[error("bootstrap message holds a line break inside it: {0:?}")]
    LineBreak(String),
    /// Key or value of a forbidden form.
    #[error("invalid bootstrap key or value: {0:?}")]
    BadKeyOrValue(String),
}

/// The MAC a rank presents in `hello`.
pub fn hello_mac(key: &JobKey, nonce: &[u8; 32], rank: u32) -> [u8; 32] {
    key.mac(&[b"pmi", nonce, &rank.to_le_bytes()])
}

fn hex32(text: &str) -> Option<[u8; 32]> {
    JobKey::from_hex(text).map(|k| k.0)
}

fn to_hex(bytes: &[u8; 32]) -> String {
    JobKey(*bytes).to_hex()
}

fn valid_key(key: &str) -> bool {
    (1..=MAX_KEY).contains(&key.len())
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._:-".contains(&b))
}

fn valid_value(value: &str) -> bool {
    value.len() <= MAX_VALUE && value.bytes().all(|b| b.is_ascii_graphic())
}

fn check_line(line: &str) -> Result<&str, PmiError> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    if line.len() > MAX_LINE {
        return Err(PmiError::LineTooLong(line.len()));
    }
    if line.contains('\n') {
        return Err(PmiError::LineBreak(line.chars().take(80).collect()));
    }
    Ok(line)
}

fn malformed(line: &str) -> PmiError {
    PmiError::Malformed(line.chars().take(80).collect())
}

impl Request {
    /// The line for this request, with its newline. Fails on keys or values of a forbidden form.
    pub fn encode(&self) -> Result<String, PmiError> {
        Ok(match self {
            Request::Hello { version, rank, mac } => {
                format!("hello {version} {rank} {}\n", to_hex(mac))
            }
            Request::Put { key, value } => {
                if !valid_key(key) || !valid_value(value) {
                    return Err(PmiError::BadKeyOrValue(key.clone()));
                }
                format!("put {key} {value}\n")
            }
            Request::Get { key } => {
                if !valid_key(key) {
                    return Err(PmiError::BadKeyOrValue(key.clone()));
                }
                format!("get {key}\n")
            }
            Request::Fence => "fence\n".into(),
            Request::Abort { code, message } => {
                let message: String = message
                    .chars()
                    .map(|c| if c == '\n' { ' ' } else { c })
                    .collect();
                format!("abort {code} {message}\n")
            }
            Request::Finalize => "finalize\n".into(),
            Request::Spawn { parent, apps } => {
                if !valid_token(parent) || apps.is_empty() {
                    return Err(PmiError::BadKeyOrValue(parent.clone()));
                }
                let apps: Vec<String> = apps.iter().map(App::encode).collect();
                format!("spawn {parent} {}\n", apps.join(" "))
            }
        })
    }

    /// Parses one line (with or without its newline).
    pub fn parse(line: &str) -> Result<Request, PmiError> {
        let line = check_line(line)?;
        let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
        let words: Vec<&str> = if rest.is_empty() {
            vec![]
        } else {
            rest.split(' ').collect()
        };
        let request = match (verb, words.as_slice()) {
            ("hello", [version, rank, mac]) => Request::Hello {
                version: version.parse().map_err(|_| malformed(line))?,
                rank: rank.parse().map_err(|_| malformed(line))?,
                mac: hex32(mac).ok_or_else(|| malformed(line))?,
            },
            ("put", [key, value]) => Request::Put {
                key: key.to_string(),
                value: value.to_string(),
            },
            ("put", [key]) => Request::Put {
                key: key.to_string(),
                value: String::new(),
            },
            ("get", [key]) => Request::Get {
                key: key.to_string(),
            },
            ("fence", []) => Request::Fence,
            ("finalize", []) => Request::Finalize,
            ("spawn", [parent, apps @ ..]) if !apps.is_empty() && valid_token(parent) => {
                Request::Spawn {
                    parent: parent.to_string(),
                    apps: apps
                        .iter()
                        .map(|a| App::parse(a))
                        .collect::<Option<_>>()
                        .ok_or_else(|| malformed(line))?,
                }
            }
            ("abort", [code, ..]) => Request::Abort {
                code: code.parse().map_err(|_| malformed(line))?,
                message: rest
                    .split_once(' ')
                    .map(|(_, m)| m)
                    .unwrap_or("")
                    .to_string(),
            },
            _ => return Err(malformed(line)),
        };
        match &request {
            Request::Put { key, value } if !valid_key(key) || !valid_value(value) => {
                Err(PmiError::BadKeyOrValue(key.clone()))
            }
            Request::Get { key } if !valid_key(key) => Err(PmiError::BadKeyOrValue(key.clone())),
            _ => Ok(request),
        }
    }
}

impl Reply {
    /// The line for this reply, with its newline.
    pub fn encode(&self) -> String {
        match self {
            Reply::Challenge { nonce } => format!("challenge {}\n", to_hex(nonce)),
            Reply::Ok => "ok\n".into(),
            Reply::Value(v) => format!("value {v}\n"),
            Reply::NotFound => "none\n".into(),
            Reply::Error(m) => format!("error {}\n", m.replace('\n', " ")),
            Reply::Spawned { base, world } => format!("spawned {base} {world}\n"),
        }
    }

    /// Parses one line (with or without its newline).
    pub fn parse(line: &str) -> Result<Reply, PmiError> {
        let line = check_line(line)?;
        let (verb, rest) = line.split_once(' ').unwrap_or((line, ""));
        match verb {
            "challenge" => Ok(Reply::Challenge {
                nonce: hex32(rest).ok_or_else(|| malformed(line))?,
            }),
            "ok" if rest.is_empty() => Ok(Reply::Ok),
            "value" => Ok(Reply::Value(rest.to_string())),
            "none" if rest.is_empty() => Ok(Reply::NotFound),
            "error" => Ok(Reply::Error(rest.to_string())),
            "spawned" => {
                let (base, world) = rest.split_once(' ').ok_or_else(|| malformed(line))?;
                Ok(Reply::Spawned {
                    base: base.parse().map_err(|_| malformed(line))?,
                    world: world.parse().map_err(|_| malformed(line))?,
                })
            }
            _ => Err(malformed(line)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        let requests = [
            Request::Hello {
                version: 1,
                rank: 3,
                mac: [7; 32],
            },
            Request::Put {
                key: "card-3".into(),
                value: "shm;123;127.0.0.1:4000".into(),
            },
            Request::Put {
                key: "empty".into(),
                value: String::new(),
            },
            Request::Get {
                key: "card-0".into(),
            },
            Request::Fence,
            Request::Abort {
                code: 3,
                message: "rank 2 called abort".into(),
            },
            Request::Finalize,
            Request::Spawn {
                parent: "ctx:12,0,1".into(),
                apps: vec![
                    App {
                        procs: 2,
                        command: "./a b".into(),
                        wdir: String::new(),
                        args: vec![String::new(), "x:y z".into()],
                    },
                    App {
                        procs: 1,
                        command: "c".into(),
                        wdir: "/tmp".into(),
                        args: vec![],
                    },
                ],
            },
        ];
        for request in requests {
            let line = request.encode().unwrap();
            assert!(line.ends_with('\n'));
            assert_eq!(Request::parse(&line), Ok(request));
        }
    }

    #[test]
    fn replies_round_trip() {
        for reply in [
            Reply::Challenge { nonce: [9; 32] },
            Reply::Ok,
            Reply::Value("x".into()),
            Reply::NotFound,
            Reply::Error("no such rank".into()),
            Reply::Spawned { base: 4, world: 2 },
        ] {
            assert_eq!(Reply::parse(&reply.encode()), Ok(reply));
        }
    }

    #[test]
    fn a_line_break_inside_a_line_is_refused() {
        // Found by the `pmi` fuzz target: the break stayed in the message and encoding turned
        // it into a space, so the round trip differed; by the wire rules it is no line at all.
        assert!(matches!(
            Request::parse("abort 1 a\nb"),
            Err(PmiError::LineBreak(_))
        ));
        assert!(matches!(
            Reply::parse("value a\nok\n"),
            Err(PmiError::LineBreak(_))
        ));
        let abort = Request::Abort {
            code: 1,
            message: "a\nb".into(),
        };
        assert_eq!(
            Request::parse(&abort.encode().unwrap()),
            Ok(Request::Abort {
                code: 1,
                message: "a b".into()
            })
        );
    }

    #[test]
    fn bad_lines_are_named_errors() {
        assert!(matches!(
            Request::parse("fetch x"),
            Err(PmiError::Malformed(_))
        ));
        assert!(matches!(
            Request::parse("put a b c"),
            Err(PmiError::Malformed(_))
        ));
        assert!(matches!(
            Request::parse("get a/b"),
            Err(PmiError::BadKeyOrValue(_))
        ));
        assert!(matches!(
            Request::parse("hello 1 x zz"),
            Err(PmiError::Malformed(_))
        ));
        let long = "put k ".to_string() + &"v".repeat(MAX_LINE);
        assert!(matches!(
            Request::parse(&long),
            Err(PmiError::LineTooLong(_))
        ));
        assert!(Request::Put {
            key: "a b".into(),
            value: "v".into()
        }
        .encode()
        .is_err());
    }

    #[test]
    fn hello_mac_depends_on_nonce_and_rank() {
        let key = JobKey([1; 32]);
        assert_ne!(hello_mac(&key, &[0; 32], 1), hello_mac(&key, &[0; 32], 2));
        assert_ne!(hello_mac(&key, &[0; 32], 1), hello_mac(&key, &[1; 32], 1));
    }
}
