//! Process ids, the path a connection between two of them takes, and which side opens it.
//!
//! The path table (docs/ARCHITECTURE.md §4), read from "me" to "peer":
//!
//! | me → peer | [`Path`] |
//! |---|---|
//! | same cluster | [`Path::Direct`] |
//! | peer public, I am public | [`Path::Direct`] |
//! | peer public, I am private | [`Path::ViaMyNat`] |
//! | peer private, other cluster | [`Path::ViaPeerRelay`] (`my_nat` when I am private) |
//!
//! A process is *public* when its host is its own front node (`front == host`): a public cluster's
//! hosts, or the front node of a private cluster. **Who connects** follows reachability, never
//! rank order: a side can open a connection when its path to the other is not through the other's
//! relay, or — when neither can reach the other directly — through the peer's relay. When both
//! sides can (or both need the relay), the lower rank opens, as the TCP transport already does.

use std::fmt::{self, Write as _};

/// Process id: where a process runs in the grid.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Guid {
    /// Cluster name (a subjob of the seed's format).
    pub cluster: String,
    /// Front node of the host's cluster; equal to `host` for a publicly reachable host.
    pub front: String,
    /// Host name.
    pub host: String,
    /// Operating-system process id (0 before launch).
    pub pid: u32,
}

impl Guid {
    /// Whether others can reach this process directly (its host is its own front node).
    pub fn is_public(&self) -> bool {
        self.front == self.host
    }
}

impl fmt::Display for Guid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}:{}",
            self.cluster, self.front, self.host, self.pid
        )
    }
}

/// How bytes from one process reach another. Chosen once per peer when the connection is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Path {
    /// Straight to the peer's address.
    Direct,
    /// To the peer's (public) address through my front node's NAT.
    ViaMyNat,
    /// To the relay on the peer's front node, which forwards to the peer; `my_nat` when the first
    /// hop leaves my private cluster through my front node's NAT.
    ViaPeerRelay {
        /// The connection to the relay goes through my NAT.
        my_nat: bool,
    },
}

impl Path {
    /// Short code used in the path matrix: `D`, `N`, `R` or `NR`.
    pub fn code(self) -> &'static str {
        match self {
            Path::Direct => "D",
            Path::ViaMyNat => "N",
            Path::ViaPeerRelay { my_nat: false } => "R",
            Path::ViaPeerRelay { my_nat: true } => "NR",
        }
    }

    /// Whether the peer can be reached without its relay.
    pub fn reaches_directly(self) -> bool {
        !matches!(self, Path::ViaPeerRelay { .. })
    }
}

/// One side of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The process asking.
    Me,
    /// The other process.
    Peer,
}

/// The path from `me` to `peer` (the path table of docs/ARCHITECTURE.md §4).
pub fn choose(me: &Guid, peer: &Guid) -> Path {
    if me.cluster == peer.cluster {
        Path::Direct
    } else if peer.is_public() {
        if me.is_public() {
            Path::Direct
        } else {
            Path::ViaMyNat
        }
    } else {
        Path::ViaPeerRelay {
            my_nat: !me.is_public(),
        }
    }
}

/// Whether the pair may try hole punching (`ferry_wire::punch`) before the relay path: both
/// are private, on different clusters, so each would otherwise need the other's relay.
pub fn punchable(me: &Guid, peer: &Guid) -> bool {
    choose(me, peer) == (Path::ViaPeerRelay { my_nat: true })
}

/// Which side opens the connection between `me` (rank `my_rank`) and `peer` (rank
/// `peer_rank`): the side that reaches the other directly; the lower rank when both do or
/// neither does. Rank order only breaks ties, so renumbering ranks never changes a path.
pub fn dialer(my_rank: u32, me: &Guid, peer_rank: u32, peer: &Guid) -> Side {
    let i_reach = choose(me, peer).reaches_directly();
    let peer_reaches = choose(peer, me).reaches_directly();
    match (i_reach, peer_reaches) {
        (true, false) => Side::Me,
        (false, true) => Side::Peer,
        _ if my_rank < peer_rank => Side::Me,
        _ => Side::Peer,
    }
}

/// The connection the dialing side of a pair opens: who dials and along which path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Rank that opens the connection.
    pub dialer: u32,
    /// Rank that accepts it.
    pub acceptor: u32,
    /// Path from the dialer to the acceptor.
    pub path: Path,
}

/// Plans the connection between ranks `a` and `b` of `ids` (indexed by rank).
///
/// # Panics
/// If `a` or `b` is not an index of `ids` (a caller bug, not outside input).
pub fn plan(ids: &[Guid], a: u32, b: u32) -> Plan {
    let (ga, gb) = (&ids[a as usize], &ids[b as usize]);
    let (dialer, acceptor) = match dialer(a, ga, b, gb) {
        Side::Me => (a, b),
        Side::Peer => (b, a),
    };
    Plan {
        dialer,
        acceptor,
        path: choose(&ids[dialer as usize], &ids[acceptor as usize]),
    }
}

/// Environment variable that asks a job to print its path matrix.
pub const SHOW_PATHS_ENV: &str = "FERRY_SHOW_PATHS";

/// The path matrix printed for `FERRY_SHOW_PATHS=1`: one row per rank (me), one column per
/// peer; each cell is the path code of [`Path::code`], followed by `*` where the row's rank
/// opens the connection. The diagonal is `-`. A legend and each rank's id follow.
///
/// ```text
/// paths (row -> column; * = row dials; D direct, N via my NAT, R via peer's relay, NR both)
///      r0   r1   r2
/// r0   -    D*   R*
/// r1   D    -    NR*
/// r2   R    NR   -
/// r0 = a/a-front/a1:0
/// …
/// ```
pub fn render_matrix(ids: &[Guid]) -> String {
    render_matrix_punched(ids, &[])
}

/// [`render_matrix`] for a job some of whose pairs were punched (`(a, b, milliseconds to the
/// link)`, a < b): their cells read `P` (with `*` on the side that decided), and one line per
/// such pair says `rA <-> rB punched in T ms` after the ids.
pub fn render_matrix_punched(ids: &[Guid], punched: &[(u32, u32, f64)]) -> String {
    let is_punched = |a: usize, b: usize| {
        punched
            .iter()
            .any(|&(x, y, _)| (x as usize, y as usize) == (a.min(b), a.max(b)))
    };
    let n = ids.len();
    let width = format!("r{}", n.saturating_sub(1)).len().max(3) + 2;
    let mut out = String::from(
        "paths (row -> column; * = row dials; D direct, N via my NAT, R via peer's relay, NR both)\n",
    );
    let _ = write!(out, "{:width$}", "");
    for peer in 0..n {
        let _ = write!(out, "{:width$}", format!("r{peer}"));
    }
    out = out.trim_end().to_string();
    out.push('\n');
    for (me, gme) in ids.iter().enumerate() {
        let _ = write!(out, "{:width$}", format!("r{me}"));
        for (peer, gpeer) in ids.iter().enumerate() {
            let cell = if me == peer {
                "-".to_string()
            } else {
                let star = match dialer(me as u32, gme, peer as u32, gpeer) {
                    Side::Me => "*",
                    Side::Peer => "",
                };
                let code = match is_punched(me, peer) {
                    true => "P",
                    false => choose(gme, gpeer).code(),
                };
                format!("{code}{star}")
            };
            let _ = write!(out, "{cell:width$}");
        }
        out = out.trim_end().to_string();
        out.push('\n');
    }
    for (rank, id) in ids.iter().enumerate() {
        let _ = writeln!(out, "r{rank} = {id}");
    }
    for &(a, b, ms) in punched {
        let _ = writeln!(
            out,
            "r{a} <-> r{b} punched in {ms:.1} ms (direct through both NATs)"
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guid(cluster: &str, front: &str, host: &str) -> Guid {
        Guid {
            cluster: cluster.into(),
            front: front.into(),
            host: host.into(),
            pid: 1,
        }
    }

    /// The kinds of process the table distinguishes, with two clusters of each kind.
    fn cases() -> Vec<(&'static str, Guid)> {
        vec![
            ("privA-host", guid("a", "a-front", "a1")),
            ("privA-host2", guid("a", "a-front", "a2")),
            ("privA-front", guid("a", "a-front", "a-front")),
            ("privB-host", guid("b", "b-front", "b1")),
            ("privB-front", guid("b", "b-front", "b-front")),
            ("pubP-host", guid("p", "p1", "p1")),
            ("pubP-host2", guid("p", "p2", "p2")),
            ("pubQ-host", guid("q", "q1", "q1")),
        ]
    }

    /// The path table written out independently of `choose`, by kind of pair.
    fn expected(me: &Guid, peer: &Guid) -> Path {
        let same = me.cluster == peer.cluster;
        match (same, me.front == me.host, peer.front == peer.host) {
            (true, _, _) => Path::Direct,
            (false, true, true) => Path::Direct,
            (false, false, true) => Path::ViaMyNat,
            (false, true, false) => Path::ViaPeerRelay { my_nat: false },
            (false, false, false) => Path::ViaPeerRelay { my_nat: true },
        }
    }

    #[test]
    fn every_pair_follows_the_table() {
        for (na, a) in cases() {
            for (nb, b) in cases() {
                assert_eq!(choose(&a, &b), expected(&a, &b), "{na} -> {nb}");
            }
        }
    }

    #[test]
    fn named_rows_of_the_table() {
        let a1 = guid("a", "a-front", "a1");
        let a2 = guid("a", "a-front", "a2");
        let b1 = guid("b", "b-front", "b1");
        let p1 = guid("p", "p1", "p1");
        let q1 = guid("q", "q1", "q1");
        assert_eq!(choose(&a1, &a2), Path::Direct);
        assert_eq!(choose(&a1, &p1), Path::ViaMyNat);
        assert_eq!(choose(&p1, &q1), Path::Direct);
        assert_eq!(choose(&p1, &a1), Path::ViaPeerRelay { my_nat: false });
        assert_eq!(choose(&a1, &b1), Path::ViaPeerRelay { my_nat: true });
        assert_eq!(Path::ViaPeerRelay { my_nat: true }.code(), "NR");
    }

    #[test]
    fn exactly_one_side_dials_and_it_can_reach() {
        for (ia, (na, a)) in cases().into_iter().enumerate() {
            for (ib, (nb, b)) in cases().into_iter().enumerate() {
                if ia == ib {
                    continue;
                }
                let (ra, rb) = (ia as u32, ib as u32);
                let from_a = dialer(ra, &a, rb, &b);
                let from_b = dialer(rb, &b, ra, &a);
                assert_ne!(from_a, from_b, "{na} / {nb}: both or neither dial");
                // The dialer never needs the relay when the other side could have dialled
                // directly.
                let (d, acc) = if from_a == Side::Me {
                    (&a, &b)
                } else {
                    (&b, &a)
                };
                if choose(acc, d).reaches_directly() {
                    assert!(choose(d, acc).reaches_directly(), "{na} / {nb}");
                }
            }
        }
    }

    #[test]
    fn rank_order_does_not_change_who_dials_across_nat() {
        let private = guid("a", "a-front", "a1");
        let public = guid("p", "p1", "p1");
        for (rp, rq) in [(0, 1), (1, 0), (7, 3)] {
            assert_eq!(dialer(rp, &private, rq, &public), Side::Me);
            assert_eq!(dialer(rq, &public, rp, &private), Side::Peer);
        }
        // Symmetric pairs fall back to the lower rank.
        let b1 = guid("b", "b-front", "b1");
        assert_eq!(dialer(0, &private, 1, &b1), Side::Me);
        assert_eq!(dialer(1, &private, 0, &b1), Side::Peer);
    }

    #[test]
    fn plan_names_dialer_and_its_path() {
        let ids = vec![
            guid("p", "p1", "p1"),
            guid("a", "a-front", "a1"),
            guid("b", "b-front", "b1"),
        ];
        let p = plan(&ids, 0, 1);
        assert_eq!((p.dialer, p.acceptor, p.path), (1, 0, Path::ViaMyNat));
        let p = plan(&ids, 2, 1);
        assert_eq!(
            (p.dialer, p.acceptor, p.path),
            (1, 2, Path::ViaPeerRelay { my_nat: true })
        );
    }

    #[test]
    fn punched_pairs_in_the_matrix() {
        let ids = vec![
            guid("a", "a-front", "a1"),
            guid("b", "b-front", "b1"),
            guid("p", "p1", "p1"),
        ];
        assert!(punchable(&ids[0], &ids[1]) && punchable(&ids[1], &ids[0]));
        assert!(!punchable(&ids[0], &ids[2]) && !punchable(&ids[2], &ids[0]));
        assert!(!punchable(&ids[0], &guid("a", "a-front", "a2")));
        let text = render_matrix_punched(&ids, &[(0, 1, 12.34)]);
        assert!(text.contains("r0   -    P*   N*"), "{text}");
        assert!(text.contains("r1   P    -    N*"), "{text}");
        assert!(text.ends_with("r0 <-> r1 punched in 12.3 ms (direct through both NATs)\n"));
        assert_eq!(render_matrix_punched(&ids, &[]), render_matrix(&ids));
    }

    #[test]
    fn matrix_format() {
        let ids = vec![
            guid("p", "p1", "p1"),
            guid("a", "a-front", "a1"),
            guid("b", "b-front", "b1"),
        ];
        let text = render_matrix(&ids);
        let expected = "\
paths (row -> column; * = row dials; D direct, N via my NAT, R via peer's relay, NR both)
     r0   r1   r2
r0   -    R    R
r1   N*   -    NR*
r2   N*   NR   -
r0 = p/p1/p1:1
r1 = a/a-front/a1:1
r2 = b/b-front/b1:1
";
        assert_eq!(text, expected);
    }
}
