//! The transport alone on loopback sockets (the engine over TCP is tested in
//! `crate::engine`'s `over_tcp`).

use super::*;

/// The job key and id of the tests' transports.
pub(crate) const KEY: [u8; 32] = [7; 32];
pub(crate) const JOB: u64 = 0x5eed;

/// Rank `me` of two, listening on loopback with socket buffers of `buffer` bytes (0: the
/// kernel's autotuning).
pub(crate) fn transport(me: u32, buffer: usize) -> TcpTransport {
    TcpTransport::bind(
        "127.0.0.1:0".parse().expect("address"),
        JobKey(KEY),
        JOB,
        (me, 0..2),
        1 << 20,
        buffer,
        1,
        Duration::from_secs(3),
    )
    .expect("bind on loopback")
}

/// A connection through a relay that fails marks that relay gone: the connections this rank
/// opens later (a punch's fallback) take the other relays of the cluster.
#[test]
fn a_relay_whose_connection_failed_is_not_chosen_again() {
    let mut a = transport(0, 0);
    let b = transport(1, 0);
    let relays: Vec<(String, SocketAddr)> = ["fb", "fb2", "fb3"]
        .iter()
        .map(|f| (f.to_string(), b.listen_addr()))
        .collect();
    let chosen = |t: &TcpTransport, rail| {
        t.choose_relay((0, 1, rail), &relays)
            .map(|(front, _)| front.clone())
    };
    // None gone: the spreading rule, rail 0 of 0 -> 1 through relay (0 + 1 + 0) mod 3.
    assert_eq!(chosen(&a, 0).as_deref(), Some("fb2"));
    a.dial((1, 0), b.listen_addr(), None, Some("fb2"))
        .expect("dial");
    a.rail_failed(1, 0, "through the relay on fb2: reset".into());
    assert_eq!(a.take_failures().len(), 1);
    for rail in 0..6 {
        let front = chosen(&a, rail);
        assert!(
            matches!(front.as_deref(), Some("fb") | Some("fb3")),
            "rail {rail}: {front:?}"
        );
    }
    // A direct connection's failure says nothing about relays.
    let mut c = transport(0, 0);
    c.dial((1, 0), b.listen_addr(), None, None).expect("dial");
    c.rail_failed(1, 0, "reset".into());
    assert_eq!(chosen(&c, 0).as_deref(), Some("fb2"));
}
