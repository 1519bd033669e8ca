//! Which host a process is on, as far as shared memory goes.
//!
//! Two ranks talk over shared memory exactly when their host ids are equal, so the id covers
//! what that transport needs the two to share: the running kernel (`boot_id`: futexes and the
//! page cache of one machine), the `/dev/shm` mount that holds the segments (its device and
//! inode), the network namespace (the doorbells are abstract UNIX sockets, which live there)
//! and the pid namespace (CMA copies name the peer by pid). Host names and addresses are not
//! used: containers on one machine may share a name, and one machine has many addresses.
//!
//! Every rank publishes its id in its bootstrap card; the ranks with ours are this host's.
//! `FERRY_HOST_ID` overrides the id (to keep ranks of one host apart, or to vouch that they
//! share all of the above).

use std::os::unix::fs::MetadataExt;

/// The environment variable that overrides [`host_id`].
pub(crate) const HOST_ID_VAR: &str = "FERRY_HOST_ID";

/// This process's host id: 16 hex digits, or `FERRY_HOST_ID` when that is set (trimmed;
/// characters outside `[A-Za-z0-9._:-]` become `_` so that it fits in a card).
pub fn host_id() -> String {
    if let Some(id) = std::env::var(HOST_ID_VAR)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
    {
        return id
            .chars()
            .map(|c| match c {
                'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | ':' | '-' => c,
                _ => '_',
            })
            .collect();
    }
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let ids = |path: &str| {
        std::fs::metadata(path)
            .map(|m| (m.dev(), m.ino()))
            .unwrap_or_default()
    };
    let (shm_dev, shm_ino) = ids("/dev/shm");
    let (_, net) = ids("/proc/self/ns/net");
    let (_, pid) = ids("/proc/self/ns/pid");
    let text = format!("{}|{shm_dev}:{shm_ino}|{net}|{pid}", boot.trim());
    format!("{:016x}", fnv1a(text.as_bytes()))
}

/// An address of this host that other hosts can likely reach, for ranks that no launcher told
/// (`FERRY_TCP_ADDR`): the host name MPICH's hydra passes (`MPIR_CVAR_CH3_INTERFACE_HOSTNAME`)
/// or this host's name, resolved to an address that is not loopback, else the first IPv4
/// address of an interface that is up and not loopback.
pub(crate) fn reachable_ip() -> Option<std::net::IpAddr> {
    use std::net::ToSocketAddrs;
    let names = [
        std::env::var("MPIR_CVAR_CH3_INTERFACE_HOSTNAME").ok(),
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_string()),
    ];
    for name in names.into_iter().flatten().filter(|n| !n.is_empty()) {
        if let Ok(addrs) = (name.as_str(), 0).to_socket_addrs() {
            if let Some(a) = addrs
                .map(|a| a.ip())
                .find(|ip| ip.is_ipv4() && !ip.is_loopback())
            {
                return Some(a);
            }
        }
    }
    interface_ipv4()
}

/// The first IPv4 address of an interface that is up and not loopback.
fn interface_ipv4() -> Option<std::net::IpAddr> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a list we free below with freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return None;
    }
    let mut found = None;
    let mut at = list;
    while !at.is_null() {
        // SAFETY: `at` is a node of the list getifaddrs made, alive until freeifaddrs.
        let entry = unsafe { &*at };
        at = entry.ifa_next;
        let up = entry.ifa_flags & libc::IFF_UP as u32 != 0;
        let loopback = entry.ifa_flags & libc::IFF_LOOPBACK as u32 != 0;
        if !up || loopback || entry.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: ifa_addr is non-null and points to a sockaddr of the family it names.
        if unsafe { (*entry.ifa_addr).sa_family } as i32 != libc::AF_INET {
            continue;
        }
        // SAFETY: an AF_INET sockaddr is a sockaddr_in.
        let sin = unsafe { &*(entry.ifa_addr as *const libc::sockaddr_in) };
        found = Some(std::net::IpAddr::from(
            u32::from_be(sin.sin_addr.s_addr).to_be_bytes(),
        ));
        break;
    }
    // SAFETY: `list` came from getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// FNV-1a, 64 bit: stable across builds and languages (unlike std's hasher), which matters
/// because every binary of a job must compute the same id for the same host.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Dense host numbers for a list of host ids: the first host named is 0, the next new one 1,
/// and so on (so rank 0 is on host 0).
pub(crate) fn host_numbers<S: AsRef<str>>(ids: &[S]) -> Vec<u32> {
    let mut seen: Vec<&str> = Vec::new();
    ids.iter()
        .map(|id| {
            let id = id.as_ref();
            match seen.iter().position(|s| *s == id) {
                Some(i) => i as u32,
                None => {
                    seen.push(id);
                    (seen.len() - 1) as u32
                }
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_stable_and_hex() {
        if std::env::var_os(HOST_ID_VAR).is_some() {
            return;
        }
        let a = host_id();
        assert_eq!(a, host_id());
        assert_eq!(a.len(), 16);
        assert!(a.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn a_reachable_address_is_not_loopback() {
        if let Some(ip) = reachable_ip() {
            assert!(!ip.is_loopback(), "{ip}");
        }
    }

    #[test]
    fn fnv_matches_its_reference_values() {
        // Published test vectors of FNV-1a 64.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn hosts_are_numbered_by_first_appearance() {
        assert_eq!(
            host_numbers(&["b", "a", "b", "c", "a"]),
            vec![0, 1, 0, 2, 1]
        );
        assert_eq!(host_numbers::<&str>(&[]), Vec::<u32>::new());
    }
}
