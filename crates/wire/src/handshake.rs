//! Mutual challenge-response that opens every rank-to-rank connection.
//!
//! Both ends prove knowledge of the 256-bit job key without sending it, and each proof covers a
//! nonce chosen by the other end, so a recorded handshake cannot be replayed.
//!
//! ```text
//! connector                                   acceptor
//!   HELLO  {magic, job, rank_c, lane, nonce_c}  →
//!                                         ←   CHALLENGE {magic, rank_a, nonce_a,
//!                                                        HMAC(key, "accept"  | job | nonce_c | rank_a | rank_c | lane)}
//!   PROOF  {HMAC(key, "connect" | job | nonce_a | nonce_c | rank_c | rank_a | lane)}  →
//! ```
//!
//! `lane` says which rail of a multi-rail peer pair this connection is: rail index and rail
//! count, 16 bits each (0 and 1 without rails). Both MACs cover it, so it cannot be altered on
//! the way, and an acceptor refuses a count other than its own.
//!
//! Layouts are fixed-size and little-endian; [`HELLO_LEN`], [`CHALLENGE_LEN`], [`PROOF_LEN`].
//! The machine consumes only its own bytes, so frames that follow a proof in the same read are
//! left to the caller.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use thiserror::Error;

/// First bytes of HELLO and CHALLENGE: protocol name and handshake version 1.
pub const MAGIC: [u8; 8] = *b"FERRYHS1";
/// Length of HELLO.
pub const HELLO_LEN: usize = 8 + 8 + 4 + 4 + 32;
/// Length of CHALLENGE.
pub const CHALLENGE_LEN: usize = 8 + 4 + 4 + 32 + 32;
/// Length of PROOF.
pub const PROOF_LEN: usize = 32;

/// The secret shared by the ranks of one job.
#[derive(Clone, PartialEq, Eq)]
pub struct JobKey(pub [u8; 32]);

impl std::fmt::Debug for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobKey(<redacted>)")
    }
}

impl JobKey {
    /// Parses 64 hex digits.
    pub fn from_hex(text: &str) -> Option<JobKey> {
        let text = text.trim().as_bytes();
        if text.len() != 64 {
            return None;
        }
        let mut key = [0u8; 32];
        for (i, pair) in text.chunks(2).enumerate() {
            let digit = |c: u8| (c as char).to_digit(16);
            key[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
        }
        Some(JobKey(key))
    }

    /// Formats as 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// HMAC-SHA256 over the concatenation of `parts`.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; 32] {
        self.hmac(parts).finalize().into_bytes().into()
    }

    /// Checks `tag` against the HMAC of `parts` in constant time.
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        self.hmac(parts).verify_slice(tag).is_ok()
    }

    fn hmac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        // A 32-byte key is always a valid HMAC key.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&self.0)
            .unwrap_or_else(|_| unreachable!("HMAC accepts keys of any length"));
        for part in parts {
            mac.update(part);
        }
        mac
    }
}

/// Why a handshake failed. Every variant means: close the connection, log, carry on.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HandshakeError {
    /// The first bytes are not a ferry handshake.
    #[error("peer did not speak the ferry handshake (bad magic)")]
    BadMagic,
    /// The peer belongs to another job.
    #[error("peer belongs to job {got:#x}, not {expected:#x}")]
    WrongJob {
        /// Our job id.
        expected: u64,
        /// The peer's.
        got: u64,
    },
    /// A MAC did not verify: the peer does not hold the job key.
    #[error("peer failed authentication (wrong MAC)")]
    BadMac,
    /// The peer answered as another rank than the one we dialled.
    #[error("expected rank {expected}, peer says it is rank {got}")]
    WrongPeer {
        /// Rank we dialled.
        expected: u32,
        /// Rank the peer claims.
        got: u32,
    },
    /// The peer opens a rail this side does not have.
    #[error("peer opens rail {rail} of {rails}, but this side uses {ours} rails (set the same FERRY_RAILS for every rank)")]
    RailMismatch {
        /// Rail index the peer announced.
        rail: u16,
        /// Rail count the peer announced.
        rails: u16,
        /// Our rail count.
        ours: u16,
    },
    /// The peer claims a rank outside the job.
    #[error("peer claims rank {rank}, but the job has {size} ranks")]
    RankOutOfRange {
        /// Claimed rank.
        rank: u32,
        /// Job size.
        size: u32,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Connector: HELLO queued, waiting for CHALLENGE.
    AwaitChallenge,
    /// Acceptor: waiting for HELLO.
    AwaitHello,
    /// Acceptor: CHALLENGE queued, waiting for PROOF.
    AwaitProof,
    Established,
}

/// One end of a handshake. Feed it input with [`Handshake::handle_input`], send what
/// [`Handshake::pending_output`] holds, until [`Handshake::peer_rank`] is `Some`.
#[derive(Debug)]
pub struct Handshake {
    key: JobKey,
    job: u64,
    my_rank: u32,
    job_size: u32,
    my_nonce: [u8; 32],
    peer_nonce: [u8; 32],
    peer_rank: u32,
    rail: u16,
    rails: u16,
    state: State,
    input: Vec<u8>,
    output: Vec<u8>,
}

impl Handshake {
    /// Starts the connecting side, which dialled `peer_rank`. `nonce` must be fresh random bytes.
    pub fn connect(
        key: JobKey,
        job: u64,
        job_size: u32,
        my_rank: u32,
        peer_rank: u32,
        nonce: [u8; 32],
    ) -> Handshake {
        let mut output = Vec::with_capacity(HELLO_LEN);
        output.extend_from_slice(&MAGIC);
        output.extend_from_slice(&job.to_le_bytes());
        output.extend_from_slice(&my_rank.to_le_bytes());
        output.extend_from_slice(&[0, 0, 1, 0]); // lane: rail 0 of 1
        output.extend_from_slice(&nonce);
        Handshake {
            key,
            job,
            my_rank,
            job_size,
            my_nonce: nonce,
            peer_nonce: [0; 32],
            peer_rank,
            rail: 0,
            rails: 1,
            state: State::AwaitChallenge,
            input: Vec::new(),
            output,
        }
    }

    /// Starts the accepting side. `nonce` must be fresh random bytes.
    pub fn accept(
        key: JobKey,
        job: u64,
        job_size: u32,
        my_rank: u32,
        nonce: [u8; 32],
    ) -> Handshake {
        Handshake {
            key,
            job,
            my_rank,
            job_size,
            my_nonce: nonce,
            peer_nonce: [0; 32],
            peer_rank: u32::MAX,
            rail: 0,
            rails: 1,
            state: State::AwaitHello,
            input: Vec::new(),
            output: Vec::new(),
        }
    }

    /// Connector: this connection is rail `rail` of `rails`. Call before sending anything.
    pub fn on_rail(mut self, rail: u16, rails: u16) -> Handshake {
        self.rail = rail;
        self.rails = rails;
        if self.state == State::AwaitChallenge && self.output.len() == HELLO_LEN {
            let lane = self.lane();
            self.output[20..24].copy_from_slice(&lane);
        }
        self
    }

    /// Acceptor: this side keeps `rails` connections per peer; a HELLO for another count fails.
    pub fn with_rails(mut self, rails: u16) -> Handshake {
        self.rails = rails;
        self
    }

    /// The rail this connection is (0 without rails); the acceptor learns it from HELLO.
    pub fn rail(&self) -> u16 {
        self.rail
    }

    fn lane(&self) -> [u8; 4] {
        let mut lane = [0u8; 4];
        lane[..2].copy_from_slice(&self.rail.to_le_bytes());
        lane[2..].copy_from_slice(&self.rails.to_le_bytes());
        lane
    }

    /// Bytes to send now.
    pub fn pending_output(&self) -> &[u8] {
        &self.output
    }

    /// Marks the first `n` bytes of [`Handshake::pending_output`] as sent.
    pub fn consume_output(&mut self, n: usize) {
        self.output.drain(..n.min(self.output.len()));
    }

    /// The authenticated peer rank, once the handshake is complete on this side and nothing is
    /// left to send.
    pub fn peer_rank(&self) -> Option<u32> {
        (self.state == State::Established && self.output.is_empty()).then_some(self.peer_rank)
    }

    /// Bytes this side still waits for (0 when established).
    pub fn wanted(&self) -> usize {
        let total = match self.state {
            State::AwaitChallenge => CHALLENGE_LEN,
            State::AwaitHello => HELLO_LEN,
            State::AwaitProof => PROOF_LEN,
            State::Established => return 0,
        };
        total - self.input.len()
    }

    /// Takes received bytes; returns how many belonged to the handshake. Bytes after the last
    /// handshake message are not consumed.
    pub fn handle_input(&mut self, bytes: &[u8]) -> Result<usize, HandshakeError> {
        let mut used = 0;
        while self.state != State::Established && used < bytes.len() {
            let take = self.wanted().min(bytes.len() - used);
            self.input.extend_from_slice(&bytes[used..used + take]);
            used += take;
            // Refuse garbage as soon as the magic is visible, not only once a full message is in.
            let magic_seen = self.input.len().min(MAGIC.len());
            if self.state != State::AwaitProof && self.input[..magic_seen] != MAGIC[..magic_seen] {
                return Err(HandshakeError::BadMagic);
            }
            if self.wanted() == 0 {
                let message = std::mem::take(&mut self.input);
                self.on_message(&message)?;
            }
        }
        Ok(used)
    }

    fn on_message(&mut self, m: &[u8]) -> Result<(), HandshakeError> {
        let u32_at = |i: usize| u32::from_le_bytes([m[i], m[i + 1], m[i + 2], m[i + 3]]);
        match self.state {
            State::AwaitHello => {
                let job = u64::from_le_bytes(m[8..16].try_into().unwrap_or([0; 8]));
                if job != self.job {
                    return Err(HandshakeError::WrongJob {
                        expected: self.job,
                        got: job,
                    });
                }
                let rank = u32_at(16);
                if rank >= self.job_size {
                    return Err(HandshakeError::RankOutOfRange {
                        rank,
                        size: self.job_size,
                    });
                }
                let (rail, rails) = (
                    u16::from_le_bytes([m[20], m[21]]),
                    u16::from_le_bytes([m[22], m[23]]),
                );
                if rails != self.rails || rail >= rails {
                    return Err(HandshakeError::RailMismatch {
                        rail,
                        rails,
                        ours: self.rails,
                    });
                }
                self.rail = rail;
                self.peer_rank = rank;
                self.peer_nonce.copy_from_slice(&m[24..56]);
                let mac = self.accept_mac(self.my_rank, self.peer_rank, &self.peer_nonce);
                self.output.extend_from_slice(&MAGIC);
                self.output.extend_from_slice(&self.my_rank.to_le_bytes());
                self.output.extend_from_slice(&0u32.to_le_bytes());
                self.output.extend_from_slice(&self.my_nonce);
                self.output.extend_from_slice(&mac);
                self.state = State::AwaitProof;
            }
            State::AwaitChallenge => {
                let rank = u32_at(8);
                if rank != self.peer_rank {
                    return Err(HandshakeError::WrongPeer {
                        expected: self.peer_rank,
                        got: rank,
                    });
                }
                let expected = self.accept_mac(rank, self.my_rank, &self.my_nonce);
                if !constant_time_eq(&expected, &m[48..80]) {
                    return Err(HandshakeError::BadMac);
                }
                self.peer_nonce.copy_from_slice(&m[16..48]);
                let proof = self.connect_mac(&self.peer_nonce, &self.my_nonce, self.my_rank, rank);
                self.output.extend_from_slice(&proof);
                self.state = State::Established;
            }
            State::AwaitProof => {
                let job = self.job.to_le_bytes();
                let (rank_c, rank_a) = (self.peer_rank.to_le_bytes(), self.my_rank.to_le_bytes());
                let lane = self.lane();
                let parts: [&[u8]; 7] = [
                    b"connect",
                    &job,
                    &self.my_nonce,
                    &self.peer_nonce,
                    &rank_c,
                    &rank_a,
                    &lane,
                ];
                if !self.key.verify(&parts, m) {
                    return Err(HandshakeError::BadMac);
                }
                self.state = State::Established;
            }
            State::Established => {}
        }
        Ok(())
    }

    fn accept_mac(&self, rank_a: u32, rank_c: u32, nonce_c: &[u8; 32]) -> [u8; 32] {
        let job = self.job.to_le_bytes();
        self.key.mac(&[
            b"accept",
            &job,
            nonce_c,
            &rank_a.to_le_bytes(),
            &rank_c.to_le_bytes(),
            &self.lane(),
        ])
    }

    fn connect_mac(
        &self,
        nonce_a: &[u8; 32],
        nonce_c: &[u8; 32],
        rank_c: u32,
        rank_a: u32,
    ) -> [u8; 32] {
        let job = self.job.to_le_bytes();
        self.key.mac(&[
            b"connect",
            &job,
            nonce_a,
            nonce_c,
            &rank_c.to_le_bytes(),
            &rank_a.to_le_bytes(),
            &self.lane(),
        ])
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> JobKey {
        JobKey([byte; 32])
    }

    /// Moves bytes between the two ends until neither has anything to send.
    fn drive(a: &mut Handshake, b: &mut Handshake) -> Result<(), HandshakeError> {
        for _ in 0..8 {
            let out = a.pending_output().to_vec();
            a.consume_output(out.len());
            b.handle_input(&out)?;
            let out = b.pending_output().to_vec();
            b.consume_output(out.len());
            a.handle_input(&out)?;
        }
        Ok(())
    }

    #[test]
    fn same_key_establishes_both_ways() {
        let mut c = Handshake::connect(key(7), 42, 4, 1, 3, [1; 32]);
        let mut a = Handshake::accept(key(7), 42, 4, 3, [2; 32]);
        drive(&mut c, &mut a).unwrap();
        assert_eq!(c.peer_rank(), Some(3));
        assert_eq!(a.peer_rank(), Some(1));
    }

    #[test]
    fn byte_at_a_time_works_and_leaves_trailing_bytes() {
        let mut c = Handshake::connect(key(7), 42, 4, 0, 1, [1; 32]);
        let mut a = Handshake::accept(key(7), 42, 4, 1, [2; 32]);
        let hello = c.pending_output().to_vec();
        c.consume_output(hello.len());
        for byte in &hello {
            assert_eq!(a.handle_input(std::slice::from_ref(byte)), Ok(1));
        }
        let challenge = a.pending_output().to_vec();
        a.consume_output(challenge.len());
        c.handle_input(&challenge).unwrap();
        let mut proof = c.pending_output().to_vec();
        c.consume_output(proof.len());
        proof.extend_from_slice(b"frames");
        assert_eq!(a.handle_input(&proof), Ok(PROOF_LEN));
        assert_eq!(a.peer_rank(), Some(0));
    }

    #[test]
    fn wrong_key_fails_on_both_sides() {
        let mut c = Handshake::connect(key(7), 42, 4, 1, 3, [1; 32]);
        let mut a = Handshake::accept(key(8), 42, 4, 3, [2; 32]);
        assert_eq!(drive(&mut c, &mut a), Err(HandshakeError::BadMac));
        // An acceptor facing a connector that fakes the proof refuses it too.
        let mut a = Handshake::accept(key(7), 42, 4, 3, [2; 32]);
        let c = Handshake::connect(key(7), 42, 4, 1, 3, [1; 32]);
        a.handle_input(c.pending_output()).unwrap();
        assert_eq!(
            a.handle_input(&[0u8; PROOF_LEN]),
            Err(HandshakeError::BadMac)
        );
    }

    #[test]
    fn rails_are_agreed_and_authenticated() {
        let mut c = Handshake::connect(key(7), 42, 4, 1, 3, [1; 32]).on_rail(2, 3);
        let mut a = Handshake::accept(key(7), 42, 4, 3, [2; 32]).with_rails(3);
        drive(&mut c, &mut a).unwrap();
        assert_eq!((a.peer_rank(), a.rail()), (Some(1), 2));

        let c = Handshake::connect(key(7), 42, 4, 1, 3, [1; 32]).on_rail(1, 2);
        let mut a = Handshake::accept(key(7), 42, 4, 3, [2; 32]).with_rails(3);
        assert_eq!(
            a.handle_input(c.pending_output()),
            Err(HandshakeError::RailMismatch {
                rail: 1,
                rails: 2,
                ours: 3
            })
        );

        // A lane altered on the way breaks the acceptor's MAC for the connector.
        let mut c = Handshake::connect(key(7), 42, 4, 1, 3, [1; 32]).on_rail(1, 3);
        let mut hello = c.pending_output().to_vec();
        c.consume_output(hello.len());
        hello[20] = 2;
        let mut a = Handshake::accept(key(7), 42, 4, 3, [2; 32]).with_rails(3);
        a.handle_input(&hello).unwrap();
        assert_eq!(
            c.handle_input(a.pending_output()),
            Err(HandshakeError::BadMac)
        );
    }

    #[test]
    fn garbage_is_refused_at_the_first_wrong_byte() {
        let mut a = Handshake::accept(key(7), 42, 4, 3, [2; 32]);
        assert_eq!(
            a.handle_input(b"GET / HTTP/1.1\r\n"),
            Err(HandshakeError::BadMagic)
        );
    }

    #[test]
    fn other_job_and_bad_rank_are_refused() {
        let c = Handshake::connect(key(7), 41, 4, 1, 3, [1; 32]);
        let mut a = Handshake::accept(key(7), 42, 4, 3, [2; 32]);
        assert!(matches!(
            a.handle_input(c.pending_output()),
            Err(HandshakeError::WrongJob { .. })
        ));
        let c = Handshake::connect(key(7), 42, 4, 9, 3, [1; 32]);
        let mut a = Handshake::accept(key(7), 42, 4, 3, [2; 32]);
        assert!(matches!(
            a.handle_input(c.pending_output()),
            Err(HandshakeError::RankOutOfRange { rank: 9, size: 4 })
        ));
    }

    #[test]
    fn replayed_proof_fails_against_a_fresh_nonce() {
        let mut c = Handshake::connect(key(7), 42, 4, 1, 3, [1; 32]);
        let mut a = Handshake::accept(key(7), 42, 4, 3, [2; 32]);
        drive(&mut c, &mut a).unwrap();
        // Record the connector's messages, then replay them to an acceptor with another nonce.
        let c2 = Handshake::connect(key(7), 42, 4, 1, 3, [1; 32]);
        let hello = c2.pending_output().to_vec();
        let old_proof = {
            let mut c3 = Handshake::connect(key(7), 42, 4, 1, 3, [1; 32]);
            let mut a3 = Handshake::accept(key(7), 42, 4, 3, [2; 32]);
            a3.handle_input(c3.pending_output()).unwrap();
            c3.handle_input(a3.pending_output()).unwrap();
            c3.pending_output().to_vec()
        };
        let mut fresh = Handshake::accept(key(7), 42, 4, 3, [5; 32]);
        fresh.handle_input(&hello).unwrap();
        assert_eq!(fresh.handle_input(&old_proof), Err(HandshakeError::BadMac));
    }

    #[test]
    fn key_hex_round_trip() {
        let k = JobKey([0xab; 32]);
        assert_eq!(JobKey::from_hex(&k.to_hex()), Some(k));
        assert_eq!(JobKey::from_hex("xyz"), None);
        assert_eq!(format!("{:?}", JobKey([1; 32])), "JobKey(<redacted>)");
    }
}
