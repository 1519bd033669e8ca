//! The wire protocols of foreign process managers: PMI-1 (text lines) and PMI-2 (length-framed
//! `key=value;` lists), as spoken by MPICH's hydra and Slurm's `--mpi=pmi2` plugin to the
//! processes they start. Sans-IO: requests encode to bytes, and [`take_pmi1_line`] /
//! [`take_pmi2_frame`] cut one message off the front of whatever bytes have arrived.
//!
//! Both protocols carry a command and a list of `key=value` fields:
//!
//! ```text
//! PMI-1   cmd=get kvsname=kvs_1_0 key=card-0\n           one line, fields split by spaces
//! PMI-2   43    cmd=kvs-get;jobid=1.0;srcid=-1;key=k1;    6-char decimal length (padded with
//!                                                          spaces), then `k=v;` fields; a `;`
//!                                                          inside a value is written `;;`
//! ```
//!
//! Replies are read as a [`Message`] and never by field position: the two managers order their
//! fields differently and add their own. What they were seen to send (Slurm 22.05.8 with
//! `--mpi=pmi2`, hydra of MPICH 4.0.2):
//!
//! | request | Slurm | hydra |
//! |---|---|---|
//! | `cmd=init pmi_version=1 pmi_subversion=1` | `cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1` | `cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0` |
//! | `cmd=get_maxes` | `cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024` | `cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024` |
//! | `cmd=get_appnum` | `appnum=-1` | `cmd=appnum appnum=0` |
//! | `cmd=get_universe_size` | `size=<ntasks>` | `cmd=universe_size size=-1` |
//! | `cmd=get_my_kvsname` | `kvsname=<jobid>.<stepid>` | `cmd=my_kvsname kvsname=kvs_<pid>_0_<rand>_vm` |
//! | `cmd=put …` | `rc=0` | `cmd=put_result rc=0 msg=success` |
//! | `cmd=barrier_in` | `cmd=barrier_out rc=0` | `cmd=barrier_out` (no `rc`) |
//! | `cmd=get …` | `cmd=get_result rc=0 value=…` | `cmd=get_result rc=0 msg=success value=…`; missing: `rc=-1 msg=key_<k>_not_found value=unknown` |
//! | `cmd=finalize` | `cmd=finalize_ack rc=0` | `cmd=finalize_ack` (no `rc`) |
//! | `cmd=publish_name service= port=` | | `cmd=publish_result info=ok rc=0 msg=success` |
//! | `cmd=lookup_name service=` | | `cmd=lookup_result port=… info=ok rc=0 msg=success`; missing: `rc=1 msg=service_not_found` |
//! | `cmd=unpublish_name service=` | | `cmd=unpublish_result info=ok rc=0 msg=success` |
//! | `cmd=abort exitcode=7` | | ends the job with exit status 7 |
//!
//! A missing `rc` means success. Hydra accepts a value longer than `vallen_max` and then
//! answers "not found" for it: the client must keep to the limits of `get_maxes` itself.
//! With `PMI_PORT` and `PMI_ID` (no inherited socket) a process first sends
//! `cmd=initack pmiid=<id>`, gets `cmd=initack`, then three `cmd=set` lines (`size=`, `rank=`,
//! `debug=`, in any order).
//!
//! PMI-2 starts with the PMI-1 line `cmd=init pmi_version=2 pmi_subversion=0`; then frames.
//! Slurm refuses a `fullinit` without `pmijobid=$PMI_JOBID` (`rc=3`); hydra sets no `PMI_JOBID`.

use thiserror::Error;

/// Longest PMI-1 line or PMI-2 frame accepted (without the newline or the length prefix).
/// Both managers limit values to about 1 KiB; this leaves room for larger `vallen_max`.
pub const MAX_MESSAGE: usize = 64 << 10;
/// Width of the PMI-2 length prefix.
pub const PMI2_PREFIX: usize = 6;

/// What can go wrong reading or writing a PMI message.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum PmiError {
    /// The bytes are not UTF-8.
    #[error("PMI message is not text")]
    NotText,
    /// No end of message within [`MAX_MESSAGE`] bytes, or a PMI-2 length above it.
    #[error("PMI message longer than {max} bytes")]
    TooLong {
        /// The limit.
        max: usize,
    },
    /// A PMI-2 length prefix that is not a decimal number.
    #[error("PMI-2 length prefix {0:?} is not a number")]
    BadLength(String),
    /// A field without `=`.
    #[error("PMI field {0:?} has no '='")]
    BadField(String),
    /// No `cmd=` field.
    #[error("PMI message without cmd: {0:?}")]
    NoCommand(String),
    /// The manager answered with another command than the one asked for.
    #[error("expected PMI reply {expected:?}, got {got:?}")]
    UnexpectedReply {
        /// The command awaited.
        expected: &'static str,
        /// The command received.
        got: String,
    },
    /// A reply without a field it must carry.
    #[error("PMI reply {cmd:?} has no field {field:?}")]
    MissingField {
        /// The reply's command.
        cmd: String,
        /// The missing field.
        field: &'static str,
    },
    /// A field that should be a number.
    #[error("PMI reply {cmd:?}: {field}={value:?} is not a number")]
    NotANumber {
        /// The reply's command.
        cmd: String,
        /// The field.
        field: &'static str,
        /// What it held.
        value: String,
    },
    /// The manager said no (`rc` other than 0).
    #[error("PMI {cmd:?} failed with rc={rc}{}", if msg.is_empty() { String::new() } else { format!(" ({msg})") })]
    Failed {
        /// The reply's command.
        cmd: String,
        /// Its return code.
        rc: i64,
        /// Its `msg=`/`errmsg=`, if any.
        msg: String,
    },
    /// A key or value that the protocol cannot carry.
    #[error("cannot send {what} {text:?} over PMI: {why}")]
    Unsendable {
        /// "key", "value", "kvsname"…
        what: &'static str,
        /// The offending text (cut to 80 characters).
        text: String,
        /// Which character or limit.
        why: &'static str,
    },
}

/// A decoded PMI-1 line or PMI-2 frame: its command and its other fields, in arrival order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The `cmd=` field.
    pub cmd: String,
    /// Every other field.
    pub fields: Vec<(String, String)>,
}

impl Message {
    fn from_fields(text: &str, fields: Vec<(String, String)>) -> Result<Message, PmiError> {
        let mut cmd = None;
        let mut rest = Vec::with_capacity(fields.len());
        for (k, v) in fields {
            // `mcmd` opens hydra's multi-line spawn; we never send it, but name it if it comes.
            if (k == "cmd" || k == "mcmd") && cmd.is_none() {
                cmd = Some(v);
            } else {
                rest.push((k, v));
            }
        }
        let cmd = cmd.ok_or_else(|| PmiError::NoCommand(cut(text)))?;
        Ok(Message { cmd, fields: rest })
    }

    /// The first field named `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// The field `key` as a number.
    pub fn number<T: std::str::FromStr>(&self, key: &'static str) -> Result<T, PmiError> {
        let value = self.get(key).ok_or_else(|| PmiError::MissingField {
            cmd: self.cmd.clone(),
            field: key,
        })?;
        value.trim().parse().map_err(|_| PmiError::NotANumber {
            cmd: self.cmd.clone(),
            field: key,
            value: cut(value),
        })
    }

    /// The return code: 0 when missing (hydra leaves it out of some replies).
    pub fn rc(&self) -> Result<i64, PmiError> {
        match self.get("rc") {
            None => Ok(0),
            Some(_) => self.number("rc"),
        }
    }

    /// This reply if it is `expected` with `rc` 0 (or none).
    pub fn expect(&self, expected: &'static str) -> Result<&Message, PmiError> {
        if self.cmd != expected {
            return Err(PmiError::UnexpectedReply {
                expected,
                got: self.cmd.clone(),
            });
        }
        match self.rc()? {
            0 => Ok(self),
            rc => Err(PmiError::Failed {
                cmd: self.cmd.clone(),
                rc,
                msg: self
                    .get("msg")
                    .or_else(|| self.get("errmsg"))
                    .unwrap_or("")
                    .to_string(),
            }),
        }
    }
}

fn cut(text: &str) -> String {
    text.chars().take(80).collect()
}

/// Parses one PMI-1 line (with or without its newline).
pub fn parse_pmi1(line: &str) -> Result<Message, PmiError> {
    if line.len() > MAX_MESSAGE + 1 {
        return Err(PmiError::TooLong { max: MAX_MESSAGE });
    }
    let body = line.strip_suffix('\n').unwrap_or(line);
    let body = body.strip_suffix('\r').unwrap_or(body);
    let mut fields = Vec::new();
    for token in body.split(' ').filter(|t| !t.is_empty()) {
        let (k, v) = token
            .split_once('=')
            .ok_or_else(|| PmiError::BadField(cut(token)))?;
        fields.push((k.to_string(), v.to_string()));
    }
    Message::from_fields(body, fields)
}

/// Cuts the first PMI-1 line off `input`: `Ok(None)` until a whole line has arrived, else the
/// message and how many bytes it took (newline included).
pub fn take_pmi1_line(input: &[u8]) -> Result<Option<(Message, usize)>, PmiError> {
    let window = &input[..input.len().min(MAX_MESSAGE + 1)];
    match window.iter().position(|&b| b == b'\n') {
        Some(end) => {
            let text = std::str::from_utf8(&input[..end]).map_err(|_| PmiError::NotText)?;
            Ok(Some((parse_pmi1(text)?, end + 1)))
        }
        None if input.len() > MAX_MESSAGE => Err(PmiError::TooLong { max: MAX_MESSAGE }),
        None => Ok(None),
    }
}

/// Parses the body of one PMI-2 frame (after its length prefix): `k=v;` fields, `;;` inside a
/// value standing for `;`.
pub fn parse_pmi2(body: &str) -> Result<Message, PmiError> {
    if body.len() > MAX_MESSAGE {
        return Err(PmiError::TooLong { max: MAX_MESSAGE });
    }
    let mut fields = Vec::new();
    let mut rest = body;
    while !rest.is_empty() {
        let (key, after) = rest
            .split_once('=')
            .ok_or_else(|| PmiError::BadField(cut(rest)))?;
        let mut value = String::new();
        let mut chars = after.char_indices().peekable();
        let mut consumed = after.len();
        while let Some((i, c)) = chars.next() {
            if c == ';' {
                if chars.peek().is_some_and(|&(_, n)| n == ';') {
                    chars.next();
                    value.push(';');
                    continue;
                }
                consumed = i + 1;
                break;
            }
            value.push(c);
        }
        if key.is_empty() || key.contains(';') {
            return Err(PmiError::BadField(cut(key)));
        }
        fields.push((key.to_string(), value));
        rest = &after[consumed..];
    }
    Message::from_fields(body, fields)
}

/// Cuts the first PMI-2 frame off `input`: `Ok(None)` until it has wholly arrived, else the
/// message and how many bytes it took. The length is checked before anything is kept.
pub fn take_pmi2_frame(input: &[u8]) -> Result<Option<(Message, usize)>, PmiError> {
    if input.len() < PMI2_PREFIX {
        return Ok(None);
    }
    let prefix = std::str::from_utf8(&input[..PMI2_PREFIX]).map_err(|_| PmiError::NotText)?;
    let len: usize = prefix
        .trim()
        .parse()
        .map_err(|_| PmiError::BadLength(prefix.to_string()))?;
    if len > MAX_MESSAGE {
        return Err(PmiError::TooLong { max: MAX_MESSAGE });
    }
    let Some(body) = input.get(PMI2_PREFIX..PMI2_PREFIX + len) else {
        return Ok(None);
    };
    let text = std::str::from_utf8(body).map_err(|_| PmiError::NotText)?;
    Ok(Some((parse_pmi2(text)?, PMI2_PREFIX + len)))
}

/// Refuses text a PMI-1 line cannot carry: white space ends a field, `=` would move a key's end.
fn pmi1_safe<'a>(what: &'static str, text: &'a str, key_like: bool) -> Result<&'a str, PmiError> {
    let bad = |why| PmiError::Unsendable {
        what,
        text: cut(text),
        why,
    };
    if text.len() > MAX_MESSAGE / 2 {
        return Err(bad("too long"));
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad("it holds white space or a control character"));
    }
    if key_like && (text.is_empty() || text.contains('=')) {
        return Err(bad("a key must be non-empty and hold no '='"));
    }
    Ok(text)
}

/// A request of the PMI-1 protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pmi1Request {
    /// `cmd=initack pmiid=<id>`: first line over a `PMI_PORT` connection.
    InitAck {
        /// `PMI_ID`.
        pmiid: u32,
    },
    /// `cmd=init pmi_version=<v> pmi_subversion=<s>`.
    Init {
        /// 1 (or 2 to switch the socket to PMI-2 framing).
        version: u32,
        /// 1 for PMI-1, 0 for PMI-2.
        subversion: u32,
    },
    /// `cmd=get_maxes` → `maxes kvsname_max= keylen_max= vallen_max=`.
    GetMaxes,
    /// `cmd=get_appnum` → `appnum appnum=`.
    GetAppnum,
    /// `cmd=get_universe_size` → `universe_size size=`.
    GetUniverseSize,
    /// `cmd=get_my_kvsname` → `my_kvsname kvsname=`.
    GetMyKvsname,
    /// `cmd=put kvsname= key= value=` → `put_result`.
    Put {
        /// The key space.
        kvsname: String,
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// `cmd=barrier_in` → `barrier_out` once every process has sent it.
    BarrierIn,
    /// `cmd=get kvsname= key=` → `get_result value=` (`rc` ≠ 0: not found).
    Get {
        /// The key space.
        kvsname: String,
        /// The key.
        key: String,
    },
    /// `cmd=finalize` → `finalize_ack`.
    Finalize,
    /// `cmd=publish_name service= port=` → `publish_result` (a name service, MPI_Publish_name;
    /// seen by others at once, unlike puts).
    PublishName {
        /// The service name.
        service: String,
        /// What is published under it.
        port: String,
    },
    /// `cmd=unpublish_name service=` → `unpublish_result`.
    UnpublishName {
        /// The service name.
        service: String,
    },
    /// `cmd=lookup_name service=` → `lookup_result port=` (`rc` ≠ 0: not published).
    LookupName {
        /// The service name.
        service: String,
    },
    /// `cmd=abort exitcode=<code>`: the manager ends the job (no reply).
    Abort {
        /// Exit status for the job.
        code: i32,
    },
}

impl Pmi1Request {
    /// The line to send, newline included.
    pub fn encode(&self) -> Result<String, PmiError> {
        Ok(match self {
            Pmi1Request::InitAck { pmiid } => format!("cmd=initack pmiid={pmiid}\n"),
            Pmi1Request::Init {
                version,
                subversion,
            } => format!("cmd=init pmi_version={version} pmi_subversion={subversion}\n"),
            Pmi1Request::GetMaxes => "cmd=get_maxes\n".into(),
            Pmi1Request::GetAppnum => "cmd=get_appnum\n".into(),
            Pmi1Request::GetUniverseSize => "cmd=get_universe_size\n".into(),
            Pmi1Request::GetMyKvsname => "cmd=get_my_kvsname\n".into(),
            Pmi1Request::Put {
                kvsname,
                key,
                value,
            } => format!(
                "cmd=put kvsname={} key={} value={}\n",
                pmi1_safe("kvsname", kvsname, true)?,
                pmi1_safe("key", key, true)?,
                pmi1_safe("value", value, false)?
            ),
            Pmi1Request::BarrierIn => "cmd=barrier_in\n".into(),
            Pmi1Request::Get { kvsname, key } => format!(
                "cmd=get kvsname={} key={}\n",
                pmi1_safe("kvsname", kvsname, true)?,
                pmi1_safe("key", key, true)?
            ),
            Pmi1Request::Finalize => "cmd=finalize\n".into(),
            Pmi1Request::PublishName { service, port } => format!(
                "cmd=publish_name service={} port={}\n",
                pmi1_safe("service", service, true)?,
                pmi1_safe("port", port, false)?
            ),
            Pmi1Request::UnpublishName { service } => format!(
                "cmd=unpublish_name service={}\n",
                pmi1_safe("service", service, true)?
            ),
            Pmi1Request::LookupName { service } => format!(
                "cmd=lookup_name service={}\n",
                pmi1_safe("service", service, true)?
            ),
            Pmi1Request::Abort { code } => format!("cmd=abort exitcode={code}\n"),
        })
    }
}

/// A request of the PMI-2 protocol (after the PMI-1 `init` line with version 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pmi2Request {
    /// `cmd=fullinit;[pmijobid=;]pmirank=;threaded=FALSE;` → `fullinit-response` with `rank`,
    /// `size`, `appnum`, `debugged`, `pmiverbose`, `spawner-jobid`.
    FullInit {
        /// `PMI_JOBID` (Slurm needs it; hydra sets none).
        jobid: Option<String>,
        /// `PMI_RANK`.
        rank: u32,
    },
    /// `cmd=job-getid;` → `job-getid-response` with `jobid`.
    JobGetId,
    /// `cmd=info-getjobattr;key=;` → `info-getjobattr-response` with `found`, `value`.
    GetJobAttr {
        /// e.g. `PMI_process_mapping`, `universeSize`.
        key: String,
    },
    /// `cmd=kvs-put;key=;value=;` → `kvs-put-response`.
    Put {
        /// The key.
        key: String,
        /// The value.
        value: String,
    },
    /// `cmd=kvs-fence;` → `kvs-fence-response` once every process has sent it.
    Fence,
    /// `cmd=kvs-get;jobid=;srcid=-1;key=;` → `kvs-get-response` with `found`, `value`.
    Get {
        /// From `job-getid`.
        jobid: String,
        /// The key.
        key: String,
    },
    /// `cmd=finalize;` → `finalize-response`.
    Finalize,
    /// `cmd=abort;isworld=TRUE;msg=;` (no reply).
    Abort {
        /// Shown by the manager.
        message: String,
    },
}

fn pmi2_field(out: &mut String, key: &str, value: &str) {
    out.push_str(key);
    out.push('=');
    out.push_str(&value.replace(';', ";;"));
    out.push(';');
}

impl Pmi2Request {
    /// The frame to send: length prefix and body.
    pub fn encode(&self) -> Result<Vec<u8>, PmiError> {
        if let Pmi2Request::GetJobAttr { key }
        | Pmi2Request::Put { key, .. }
        | Pmi2Request::Get { key, .. } = self
        {
            if key.is_empty() || key.contains(['=', ';']) {
                return Err(PmiError::Unsendable {
                    what: "key",
                    text: cut(key),
                    why: "a PMI-2 key must be non-empty and hold no '=' or ';'",
                });
            }
        }
        let mut body = String::new();
        let f = |body: &mut String, k: &str, v: &str| pmi2_field(body, k, v);
        match self {
            Pmi2Request::FullInit { jobid, rank } => {
                f(&mut body, "cmd", "fullinit");
                if let Some(id) = jobid {
                    f(&mut body, "pmijobid", id);
                }
                f(&mut body, "pmirank", &rank.to_string());
                f(&mut body, "threaded", "FALSE");
            }
            Pmi2Request::JobGetId => f(&mut body, "cmd", "job-getid"),
            Pmi2Request::GetJobAttr { key } => {
                f(&mut body, "cmd", "info-getjobattr");
                f(&mut body, "key", key);
            }
            Pmi2Request::Put { key, value } => {
                f(&mut body, "cmd", "kvs-put");
                f(&mut body, "key", key);
                f(&mut body, "value", value);
            }
            Pmi2Request::Fence => f(&mut body, "cmd", "kvs-fence"),
            Pmi2Request::Get { jobid, key } => {
                f(&mut body, "cmd", "kvs-get");
                f(&mut body, "jobid", jobid);
                f(&mut body, "srcid", "-1");
                f(&mut body, "key", key);
            }
            Pmi2Request::Finalize => f(&mut body, "cmd", "finalize"),
            Pmi2Request::Abort { message } => {
                f(&mut body, "cmd", "abort");
                f(&mut body, "isworld", "TRUE");
                f(&mut body, "msg", message);
            }
        }
        if body.len() > MAX_MESSAGE || body.len() > 999_999 {
            return Err(PmiError::Unsendable {
                what: "frame",
                text: cut(&body),
                why: "longer than a PMI-2 length prefix allows",
            });
        }
        let mut frame = format!("{:<6}", body.len()).into_bytes();
        frame.extend_from_slice(body.as_bytes());
        Ok(frame)
    }
}

/// The limits of a key space (`get_maxes`), each counting a C string's terminating NUL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Maxes {
    /// Longest key space name.
    pub kvsname_max: usize,
    /// Longest key.
    pub keylen_max: usize,
    /// Longest value.
    pub vallen_max: usize,
}

impl Maxes {
    /// Reads a `maxes` reply.
    pub fn from_reply(reply: &Message) -> Result<Maxes, PmiError> {
        let reply = reply.expect("maxes")?;
        Ok(Maxes {
            kvsname_max: reply.number("kvsname_max")?,
            keylen_max: reply.number("keylen_max")?,
            vallen_max: reply.number("vallen_max")?,
        })
    }
}

/// The value of a PMI-1 `get_result`: `None` when the manager has no such key (any `rc` ≠ 0:
/// hydra says -1, and neither tells "missing" from other failures).
pub fn get_result(reply: &Message) -> Result<Option<String>, PmiError> {
    if reply.cmd != "get_result" {
        return Err(PmiError::UnexpectedReply {
            expected: "get_result",
            got: reply.cmd.clone(),
        });
    }
    if reply.rc()? != 0 {
        return Ok(None);
    }
    reply
        .get("value")
        .map(|v| Some(v.to_string()))
        .ok_or_else(|| PmiError::MissingField {
            cmd: reply.cmd.clone(),
            field: "value",
        })
}

/// The port of a PMI-1 `lookup_result`: `None` when nothing is published under the name (any
/// `rc` ≠ 0: hydra says `rc=1 msg=service_not_found`).
pub fn lookup_result(reply: &Message) -> Result<Option<String>, PmiError> {
    if reply.cmd != "lookup_result" {
        return Err(PmiError::UnexpectedReply {
            expected: "lookup_result",
            got: reply.cmd.clone(),
        });
    }
    if reply.rc()? != 0 {
        return Ok(None);
    }
    reply
        .get("port")
        .map(|v| Some(v.to_string()))
        .ok_or_else(|| PmiError::MissingField {
            cmd: reply.cmd.clone(),
            field: "port",
        })
}

/// A job id for a key space: the first 8 bytes of SHA-256 of its name, never 0 (0 means "no
/// job"). Every process of the job computes the same one.
pub fn job_id(kvsname: &str) -> u64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(kvsname.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(first).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str) -> Message {
        let (m, n) = take_pmi1_line(text.as_bytes()).unwrap().unwrap();
        assert_eq!(n, text.len());
        m
    }

    #[test]
    fn slurm_pmi1_transcript() {
        let init = line("cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n");
        init.expect("response_to_init").unwrap();
        let maxes = line("cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n");
        assert_eq!(
            Maxes::from_reply(&maxes).unwrap(),
            Maxes {
                kvsname_max: 256,
                keylen_max: 64,
                vallen_max: 1024
            }
        );
        let appnum = line("cmd=appnum rc=0 appnum=-1\n");
        assert_eq!(
            appnum.expect("appnum").unwrap().number::<i32>("appnum"),
            Ok(-1)
        );
        let universe = line("cmd=universe_size rc=0 size=3\n");
        assert_eq!(universe.number::<i64>("size"), Ok(3));
        let kvs = line("cmd=my_kvsname rc=0 kvsname=4242.0\n");
        assert_eq!(kvs.get("kvsname"), Some("4242.0"));
        let got = line("cmd=get_result rc=0 value=(vector,(0,3,1))\n");
        assert_eq!(get_result(&got), Ok(Some("(vector,(0,3,1))".into())));
        line("cmd=barrier_out rc=0\n")
            .expect("barrier_out")
            .unwrap();
        line("cmd=finalize_ack rc=0\n")
            .expect("finalize_ack")
            .unwrap();
    }

    #[test]
    fn hydra_pmi1_transcript_with_rc_last_missing_and_extra_fields() {
        line("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n")
            .expect("response_to_init")
            .unwrap();
        let maxes = line("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n");
        assert_eq!(Maxes::from_reply(&maxes).unwrap().vallen_max, 1024);
        assert_eq!(
            line("cmd=universe_size size=-1\n").number("size"),
            Ok(-1i64)
        );
        assert_eq!(line("cmd=appnum appnum=0\n").number("appnum"), Ok(0i32));
        line("cmd=put_result rc=0 msg=success\n")
            .expect("put_result")
            .unwrap();
        line("cmd=barrier_out\n").expect("barrier_out").unwrap();
        let got = line("cmd=get_result rc=0 msg=success value=v1@vm\n");
        assert_eq!(get_result(&got), Ok(Some("v1@vm".into())));
        let missing = line("cmd=get_result rc=-1 msg=key_nothere_not_found value=unknown\n");
        assert_eq!(get_result(&missing), Ok(None));
        line("cmd=finalize_ack\n").expect("finalize_ack").unwrap();
        // A value may hold '=': only the first one of a field splits.
        let eq = line("cmd=get_result value=a=b;c rc=0\n");
        assert_eq!(get_result(&eq), Ok(Some("a=b;c".into())));
    }

    #[test]
    fn hydra_name_service_transcript() {
        let publish = Pmi1Request::PublishName {
            service: "svc-a".into(),
            port: "tag#1$host:123;x=y".into(),
        };
        assert_eq!(
            publish.encode().unwrap(),
            "cmd=publish_name service=svc-a port=tag#1$host:123;x=y\n"
        );
        line("cmd=publish_result info=ok rc=0 msg=success\n")
            .expect("publish_result")
            .unwrap();
        let found = line("cmd=lookup_result port=tag#1$host:123;x=y info=ok rc=0 msg=success\n");
        assert_eq!(lookup_result(&found), Ok(Some("tag#1$host:123;x=y".into())));
        let missing = line("cmd=lookup_result rc=1 msg=service_not_found\n");
        assert_eq!(lookup_result(&missing), Ok(None));
        line("cmd=unpublish_result info=ok rc=0 msg=success\n")
            .expect("unpublish_result")
            .unwrap();
        assert!(matches!(
            lookup_result(&line("cmd=get_result rc=0 value=x\n")),
            Err(PmiError::UnexpectedReply { .. })
        ));
    }

    #[test]
    fn port_handshake_replies() {
        line("cmd=initack\n").expect("initack").unwrap();
        for (text, field, value) in [
            ("cmd=set size=4\n", "size", 4),
            ("cmd=set rank=2\n", "rank", 2),
            ("cmd=set debug=0\n", "debug", 0),
        ] {
            let m = line(text);
            assert_eq!(m.expect("set").unwrap().number::<u32>(field), Ok(value));
        }
        assert_eq!(
            Pmi1Request::InitAck { pmiid: 3 }.encode().unwrap(),
            "cmd=initack pmiid=3\n"
        );
    }

    #[test]
    fn failures_and_surprises_are_typed() {
        let failed = line("cmd=put_result rc=1 msg=duplicate_key\n");
        assert_eq!(
            failed.expect("put_result").unwrap_err(),
            PmiError::Failed {
                cmd: "put_result".into(),
                rc: 1,
                msg: "duplicate_key".into()
            }
        );
        assert!(matches!(
            line("cmd=barrier_out\n").expect("finalize_ack"),
            Err(PmiError::UnexpectedReply { .. })
        ));
        assert!(matches!(
            line("cmd=maxes kvsname_max=256 vallen_max=1024\n")
                .expect("maxes")
                .map(Maxes::from_reply),
            Ok(Err(PmiError::MissingField {
                field: "keylen_max",
                ..
            }))
        ));
        assert!(matches!(
            line("cmd=appnum appnum=x\n").number::<i32>("appnum"),
            Err(PmiError::NotANumber { .. })
        ));
        assert_eq!(
            take_pmi1_line(b"cmd=x y\n").unwrap_err(),
            PmiError::BadField("y".into())
        );
        assert!(matches!(
            take_pmi1_line(b"rc=0\n"),
            Err(PmiError::NoCommand(_))
        ));
        assert_eq!(take_pmi1_line(b"\xff\n").unwrap_err(), PmiError::NotText);
    }

    #[test]
    fn lines_wait_for_their_newline_and_have_a_limit() {
        assert_eq!(take_pmi1_line(b"cmd=barrier_o"), Ok(None));
        let two = b"cmd=barrier_out\ncmd=finalize_ack\n";
        let (m, n) = take_pmi1_line(two).unwrap().unwrap();
        assert_eq!((m.cmd.as_str(), n), ("barrier_out", 16));
        assert_eq!(
            take_pmi1_line(&two[n..]).unwrap().unwrap().0.cmd,
            "finalize_ack"
        );
        let long = vec![b'a'; MAX_MESSAGE + 1];
        assert_eq!(
            take_pmi1_line(&long).unwrap_err(),
            PmiError::TooLong { max: MAX_MESSAGE }
        );
        assert_eq!(take_pmi1_line(&long[..MAX_MESSAGE]), Ok(None));
    }

    #[test]
    fn pmi1_requests_encode_and_refuse_what_they_cannot_carry() {
        let put = Pmi1Request::Put {
            kvsname: "kvs_1_0".into(),
            key: "card-0".into(),
            value: "00ff".into(),
        };
        assert_eq!(
            put.encode().unwrap(),
            "cmd=put kvsname=kvs_1_0 key=card-0 value=00ff\n"
        );
        let spaced = Pmi1Request::Put {
            kvsname: "k".into(),
            key: "a".into(),
            value: "x y".into(),
        };
        assert!(matches!(
            spaced.encode(),
            Err(PmiError::Unsendable { what: "value", .. })
        ));
        let keyed = Pmi1Request::Get {
            kvsname: "k".into(),
            key: "a=b".into(),
        };
        assert!(matches!(
            keyed.encode(),
            Err(PmiError::Unsendable { what: "key", .. })
        ));
        assert_eq!(
            Pmi1Request::Init {
                version: 1,
                subversion: 1
            }
            .encode()
            .unwrap(),
            "cmd=init pmi_version=1 pmi_subversion=1\n"
        );
        assert_eq!(
            Pmi1Request::Abort { code: 7 }.encode().unwrap(),
            "cmd=abort exitcode=7\n"
        );
        // What is sent parses back to the same fields.
        let sent = parse_pmi1(&put.encode().unwrap()).unwrap();
        assert_eq!(
            (sent.cmd.as_str(), sent.get("value")),
            ("put", Some("00ff"))
        );
    }

    #[test]
    fn slurm_pmi2_transcript() {
        let fullinit = Pmi2Request::FullInit {
            jobid: Some("4242.0".into()),
            rank: 1,
        };
        assert_eq!(
            fullinit.encode().unwrap(),
            b"54    cmd=fullinit;pmijobid=4242.0;pmirank=1;threaded=FALSE;".to_vec()
        );
        let body = "cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=1;size=3;appnum=-1;debugged=FALSE;pmiverbose=FALSE;";
        let framed = format!("{:<6}{body}", body.len());
        // A frame waits for its last byte.
        assert_eq!(
            take_pmi2_frame(&framed.as_bytes()[..framed.len() - 1]),
            Ok(None)
        );
        let (m, n) = take_pmi2_frame(framed.as_bytes()).unwrap().unwrap();
        assert_eq!(n, framed.len());
        let m = m.expect("fullinit-response").unwrap();
        assert_eq!((m.number("rank"), m.number("size")), (Ok(1u32), Ok(3u32)));
        let refused = "cmd=fullinit-response;rc=3;";
        let framed = format!("{:<6}{refused}", refused.len());
        assert!(matches!(
            take_pmi2_frame(framed.as_bytes())
                .unwrap()
                .unwrap()
                .0
                .expect("fullinit-response"),
            Err(PmiError::Failed { rc: 3, .. })
        ));
        let got = "cmd=kvs-get-response;rc=0;found=TRUE;value=v1@node1;";
        let framed = format!("{:<6}{got}", got.len());
        let m = take_pmi2_frame(framed.as_bytes()).unwrap().unwrap().0;
        assert_eq!(m.get("found"), Some("TRUE"));
        assert_eq!(m.get("value"), Some("v1@node1"));
    }

    #[test]
    fn hydra_pmi2_universe_size_not_found_and_escaped_semicolons() {
        let body = "cmd=info-getjobattr-response;found=FALSE;rc=0;";
        let m = parse_pmi2(body).unwrap();
        assert_eq!(
            m.expect("info-getjobattr-response").unwrap().get("found"),
            Some("FALSE")
        );
        let put = Pmi2Request::Put {
            key: "card-0".into(),
            value: "pid=1;host=a".into(),
        };
        let frame = put.encode().unwrap();
        let (m, _) = take_pmi2_frame(&frame).unwrap().unwrap();
        assert_eq!(m.get("value"), Some("pid=1;host=a"));
        assert_eq!(
            take_pmi2_frame(b"abcdefcmd=x;").unwrap_err(),
            PmiError::BadLength("abcdef".into())
        );
        assert_eq!(
            take_pmi2_frame(b"999999cmd=x;").unwrap_err(),
            PmiError::TooLong { max: MAX_MESSAGE }
        );
        assert!(matches!(
            parse_pmi2("cmd=x;novalue;"),
            Err(PmiError::BadField(_))
        ));
    }

    #[test]
    fn job_ids_are_stable_and_nonzero() {
        assert_eq!(
            job_id("kvs_10904_0_1248072263_vm"),
            job_id("kvs_10904_0_1248072263_vm")
        );
        assert_ne!(job_id("4242.0"), job_id("4242.1"));
        assert_ne!(job_id(""), 0);
    }

    proptest::proptest! {
        #[test]
        fn pmi2_frames_roundtrip(key in "[a-z-]{1,12}", value in "[ -~]{0,40}") {
            let frame = Pmi2Request::Put { key: key.clone(), value: value.clone() }.encode().unwrap();
            let (m, n) = take_pmi2_frame(&frame).unwrap().unwrap();
            proptest::prop_assert_eq!(n, frame.len());
            proptest::prop_assert_eq!(m.get("key"), Some(key.as_str()));
            proptest::prop_assert_eq!(m.get("value"), Some(value.as_str()));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let _ = take_pmi1_line(&bytes);
            let _ = take_pmi2_frame(&bytes);
        }
    }
}
