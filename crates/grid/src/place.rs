//! Where the launcher put one rank: what the rank needs to know about its place in the grid,
//! handed over in one environment variable, [`PLACE_ENV`].
//!
//! The value is `key=value` fields separated by `;`, e.g.
//! `cluster=a;front=fa;host=a1;addr=10.1.0.11;relay=198.18.0.10:7390;inside=10.1.0.1:7390`.
//! `relay` (the relay's public address, which outside ranks dial) and `inside` (its address on
//! the cluster's network, which the rank registers with) are present for ranks on a private
//! cluster's hosts only. A cluster with several relays adds the others in `more=`, each as
//! `front/public/inside`, comma-separated:
//! `more=fa2/198.18.0.11:7390/10.1.0.2:7390`. Unknown keys are ignored, so the format can grow.

use crate::path::Guid;
use crate::topology::{Kind, Topology};
use std::net::{Ipv4Addr, SocketAddrV4};

/// Environment variable holding a rank's [`Placement`].
pub const PLACE_ENV: &str = "FERRY_GRID_PLACE";

/// One rank's place in the grid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Cluster name.
    pub cluster: String,
    /// Front node name (the host itself for a public host).
    pub front: String,
    /// Host name.
    pub host: String,
    /// The host's address: where the rank listens and what it publishes.
    pub addr: Ipv4Addr,
    /// Relay of a private cluster: public address (dialled from outside) and inside address
    /// (registered with from the host); `None` for public hosts.
    pub relay: Option<RelayAddrs>,
    /// The cluster's other relays (`[[cluster.relay]]`), by front node name; empty with one.
    pub more_relays: Vec<(String, RelayAddrs)>,
}

/// The two addresses of one front node's relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayAddrs {
    /// Public address and port: where processes outside the cluster connect.
    pub public: SocketAddrV4,
    /// Address and port inside the cluster: where its ranks register.
    pub inside: SocketAddrV4,
}

impl Placement {
    /// The process id of this placement for process `pid`.
    pub fn guid(&self, pid: u32) -> Guid {
        Guid {
            cluster: self.cluster.clone(),
            front: self.front.clone(),
            host: self.host.clone(),
            pid,
        }
    }

    /// Every relay of the rank's cluster, its front node's name first: `front` with `relay`,
    /// then `more_relays`. Empty on a public host.
    pub fn relays(&self) -> Vec<(String, RelayAddrs)> {
        self.relay
            .map(|r| (self.front.clone(), r))
            .into_iter()
            .chain(self.more_relays.iter().cloned())
            .collect()
    }

    /// The [`PLACE_ENV`] value.
    pub fn encode(&self) -> String {
        let mut s = format!(
            "cluster={};front={};host={};addr={}",
            self.cluster, self.front, self.host, self.addr
        );
        if let Some(r) = self.relay {
            s += &format!(";relay={};inside={}", r.public, r.inside);
        }
        if !self.more_relays.is_empty() {
            let more: Vec<String> = self
                .more_relays
                .iter()
                .map(|(front, r)| format!("{front}/{}/{}", r.public, r.inside))
                .collect();
            s += &format!(";more={}", more.join(","));
        }
        s
    }

    /// Parses a [`PLACE_ENV`] value; the error says which field is wrong.
    pub fn parse(text: &str) -> Result<Placement, String> {
        let mut fields = std::collections::HashMap::new();
        for field in text.split(';').filter(|f| !f.is_empty()) {
            let (k, v) = field
                .split_once('=')
                .ok_or_else(|| format!("{field:?} is not key=value"))?;
            fields.insert(k, v);
        }
        let name = |k: &str| -> Result<String, String> {
            match fields.get(k) {
                Some(v) if !v.is_empty() => Ok(v.to_string()),
                _ => Err(format!("no {k}=")),
            }
        };
        let sock = |k: &str| -> Result<Option<SocketAddrV4>, String> {
            fields
                .get(k)
                .map(|v| {
                    v.parse()
                        .map_err(|_| format!("{k}={v:?} is not an IPv4 address:port"))
                })
                .transpose()
        };
        let addr_text = name("addr")?;
        let addr = addr_text
            .parse()
            .map_err(|_| format!("addr={addr_text:?} is not an IPv4 address"))?;
        let relay = match (sock("relay")?, sock("inside")?) {
            (Some(public), Some(inside)) => Some(RelayAddrs { public, inside }),
            (None, None) => None,
            _ => return Err("relay= and inside= go together".into()),
        };
        let mut more_relays = Vec::new();
        for entry in fields.get("more").iter().flat_map(|v| v.split(',')) {
            let bad = || format!("more={entry:?} is not front/public:port/inside:port");
            let mut parts = entry.split('/');
            let (Some(front), Some(public), Some(inside), None) =
                (parts.next(), parts.next(), parts.next(), parts.next())
            else {
                return Err(bad());
            };
            let (Ok(public), Ok(inside)) = (public.parse(), inside.parse()) else {
                return Err(bad());
            };
            if front.is_empty() || relay.is_none() {
                return Err(bad());
            }
            more_relays.push((front.to_string(), RelayAddrs { public, inside }));
        }
        Ok(Placement {
            cluster: name("cluster")?,
            front: name("front")?,
            host: name("host")?,
            addr,
            relay,
            more_relays,
        })
    }
}

impl Topology {
    /// Every rank's placement, in rank order.
    pub fn placements(&self) -> Vec<Placement> {
        self.rank_hosts()
            .into_iter()
            .map(|(ci, h)| {
                let c = &self.clusters[ci];
                let front = match (&c.kind, &c.front) {
                    (Kind::Private, Some(f)) => Some(f),
                    _ => None,
                };
                Placement {
                    cluster: c.name.clone(),
                    front: front.map_or_else(|| h.name.clone(), |f| f.name.clone()),
                    host: h.name.clone(),
                    addr: h.addr,
                    relay: front.map(|f| RelayAddrs {
                        public: SocketAddrV4::new(f.public_addr, c.relay_port),
                        inside: SocketAddrV4::new(f.inside_addr, c.relay_port),
                    }),
                    more_relays: match front {
                        Some(_) => c
                            .more_fronts
                            .iter()
                            .map(|f| {
                                let addrs = RelayAddrs {
                                    public: SocketAddrV4::new(f.public_addr, c.relay_port),
                                    inside: SocketAddrV4::new(f.inside_addr, c.relay_port),
                                };
                                (f.name.clone(), addrs)
                            })
                            .collect(),
                        None => Vec::new(),
                    },
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_errors() {
        let grid = Topology::load(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testbed/grids/three.toml"
        )))
        .unwrap();
        let places = grid.placements();
        assert_eq!(places.len(), 6);
        assert_eq!(
            places[0].encode(),
            "cluster=a;front=fa;host=a1;addr=10.1.0.11;relay=198.18.0.10:7390;inside=10.1.0.1:7390"
        );
        assert_eq!(
            places[5].encode(),
            "cluster=p;front=p2;host=p2;addr=198.18.1.2"
        );
        for (p, g) in places.iter().zip(grid.rank_guids()) {
            assert_eq!(Placement::parse(&p.encode()).unwrap(), *p);
            assert_eq!(p.guid(0), g);
        }
        assert!(Placement::parse("cluster=a;front=fa;host=a1").is_err());
        assert!(Placement::parse("cluster=a;front=fa;host=a1;addr=x").is_err());
        assert!(
            Placement::parse("cluster=a;front=fa;host=a1;addr=10.0.0.1;relay=1.2.3.4:5").is_err()
        );
        assert!(Placement::parse("garbage").is_err());
    }

    #[test]
    fn several_relays_round_trip() {
        let grid = Topology::load(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../testbed/grids/relays.toml"
        )))
        .unwrap();
        let places = grid.placements();
        let a1 = &places[0];
        assert_eq!(
            a1.encode(),
            "cluster=a;front=fa;host=a1;addr=10.1.0.11;relay=198.18.0.10:7390;inside=10.1.0.1:7390;\
             more=fa2/198.18.0.11:7390/10.1.0.2:7390,fa3/198.18.0.12:7390/10.1.0.3:7390"
        );
        let names: Vec<String> = a1.relays().into_iter().map(|(f, _)| f).collect();
        assert_eq!(names, ["fa", "fa2", "fa3"]);
        for p in &places {
            assert_eq!(Placement::parse(&p.encode()).unwrap(), *p);
        }
        let base =
            "cluster=a;front=fa;host=a1;addr=10.1.0.11;relay=198.18.0.10:7390;inside=10.1.0.1:7390";
        for bad in [
            "more=fa2",
            "more=fa2/1.2.3.4:5",
            "more=/1.2.3.4:5/10.0.0.1:5",
            "more=x/y/z",
        ] {
            let e = Placement::parse(&format!("{base};{bad}")).unwrap_err();
            assert!(e.contains("more="), "{e}");
        }
        let public = "cluster=p;front=p1;host=p1;addr=198.18.1.1;more=f/1.2.3.4:5/10.0.0.1:5";
        assert!(
            Placement::parse(public).is_err(),
            "more relays need a relay"
        );
    }
}
