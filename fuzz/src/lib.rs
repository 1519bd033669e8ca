//! The properties ferry's decoders are fuzzed against, one function per target: each takes
//! any bytes and panics only when the property fails. Two drivers call them: libFuzzer through
//! `fuzz_targets/*.rs` (`cargo +nightly fuzz run <target> --features libfuzzer`), and the
//! stable driver in `tests/stable.rs` (seeds, then mutated and random inputs for a bounded
//! time), which CI runs. [`TARGETS`] lists them all for the stable driver.
#![deny(missing_docs)]

use ferry_wire::pmi::{Reply, Request};
use ferry_wire::procman::{take_pmi1_line, take_pmi2_frame, Pmi1Request, Pmi2Request};
use ferry_wire::relay::{verify_incoming, RelayFrame, ReplayGuard};
use ferry_wire::{Frame, Handshake, JobKey};

/// A property: panics when `data` breaks it.
pub type Property = fn(&[u8]);

/// Every target: its name (the folder of its seeds under `fuzz/seeds/`) and its property.
pub const TARGETS: &[(&str, Property)] = &[
    ("frame", frame),
    ("handshake", handshake),
    ("node", node),
    ("pmi", pmi),
    ("procman", procman),
    ("relay", relay),
    ("rma", rma),
    ("grid", grid),
    ("bsp", bsp),
    ("bsp_apply", bsp_apply),
    ("compress", compress),
];

/// Frame headers: any bytes decode or fail cleanly, and what decodes re-encodes to the same
/// header fields.
pub fn frame(data: &[u8]) {
    if let Ok(frame) = Frame::decode(data, 1 << 30) {
        assert_eq!(Frame::decode(&frame.to_bytes(), 1 << 30), Ok(frame));
    }
}

/// Compressed payloads: a frame header and what follows it, as a peer could send them,
/// decompress to exactly the announced length or fail cleanly (never a panic or a write past
/// the buffer); and any bytes that compress come back unchanged.
pub fn compress(data: &[u8]) {
    use ferry_wire::compress::{compress, compressed_len, decompress};
    let (mut grouped, mut out) = (Vec::new(), Vec::new());
    if let Ok(frame) = Frame::decode(data, 1 << 20) {
        if let Some(sent) = compressed_len(data) {
            let payload = &data[ferry_wire::HEADER_LEN..];
            let payload = &payload[..sent.min(payload.len())];
            let mut raw = vec![0u8; frame.payload_len() as usize];
            let _ = decompress(payload, &mut grouped, &mut raw);
        }
    }
    if compress(data, &mut grouped, &mut out) {
        let mut back = vec![0u8; data.len()];
        if let Err(e) = decompress(&out, &mut grouped, &mut back) {
            panic!("own output does not decompress: {e}");
        }
        assert_eq!(back, data, "compressed bytes came back changed");
    }
}

/// A stranger's bytes against an accepting handshake, split at an arbitrary point: never a
/// panic, and never an authenticated peer without the key.
pub fn handshake(data: &[u8]) {
    let mut acceptor = Handshake::accept(JobKey([7; 32]), 42, 8, 0, [9; 32]);
    let split = data.first().map_or(0, |b| *b as usize).min(data.len());
    for part in [&data[..split], &data[split..]] {
        match acceptor.handle_input(part) {
            Ok(_) => {
                let out = acceptor.pending_output().len();
                acceptor.consume_output(out);
            }
            Err(_) => return,
        }
    }
    assert_eq!(acceptor.peer_rank(), None, "authenticated without the key");
}

/// Node daemon control frames: decoding never panics, and a decoded message encodes back to
/// the very bytes it came from.
pub fn node(data: &[u8]) {
    if let Ok(Some((message, used))) = ferry_wire::node::NodeMessage::decode(data) {
        assert_eq!(message.to_bytes(), data[..used]);
    }
}

/// Bootstrap lines: parsing never panics, and a parsed request or reply encodes back to a line
/// that parses to the same request or reply.
pub fn pmi(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(request) = Request::parse(text) {
            if let Ok(line) = request.encode() {
                assert_eq!(Request::parse(&line), Ok(request));
            }
        }
        if let Ok(reply) = Reply::parse(text) {
            assert_eq!(Reply::parse(&reply.encode()), Ok(reply));
        }
    }
}

/// PMI-1 lines and PMI-2 frames from a foreign process manager: cutting and parsing never
/// panic, a message never claims more bytes than it was given, and a PMI-1 put line or a
/// PMI-2 put frame that encodes parses back to the same key and value.
pub fn procman(data: &[u8]) {
    if let Ok(Some((_, used))) = take_pmi1_line(data) {
        assert!(used <= data.len());
    }
    if let Ok(Some((_, used))) = take_pmi2_frame(data) {
        assert!(used <= data.len());
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let (key, value) = text.split_once('\0').unwrap_or(("k", text));
    let put1 = Pmi1Request::Put {
        kvsname: "kvs_1_0".into(),
        key: key.into(),
        value: value.into(),
    };
    if let Ok(line) = put1.encode() {
        let (message, used) = take_pmi1_line(line.as_bytes())
            .expect("an encoded PMI-1 put parses")
            .expect("an encoded PMI-1 put is a whole line");
        assert_eq!(used, line.len());
        assert_eq!(message.get("key"), Some(key));
        assert_eq!(message.get("value"), Some(value));
    }
    if key.is_empty() || key.contains(['=', ';']) {
        return;
    }
    let put2 = Pmi2Request::Put {
        key: key.into(),
        value: value.into(),
    };
    if let Ok(frame) = put2.encode() {
        let (message, used) = take_pmi2_frame(&frame)
            .expect("an encoded PMI-2 put parses")
            .expect("an encoded PMI-2 put is a whole frame");
        assert_eq!(used, frame.len());
        assert_eq!(message.get("key"), Some(key));
        assert_eq!(message.get("value"), Some(value));
    }
}

/// Relay frames: decoding any bytes never panics and never reads past a frame; a decoded frame
/// encodes to bytes that decode to the same frame; a target's check of any INCOMING never
/// panics and never accepts one without the job key, nor a rank's check of any OBSERVED. The
/// same bytes as a punch offer (text) parse or fail cleanly, and an offer that parses encodes
/// to the same offer; fed to an observer they never panic nor give an address.
pub fn relay(data: &[u8]) {
    use ferry_wire::punch::{Observer, Offer};
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(offer) = Offer::decode(text) {
            assert_eq!(Offer::decode(&offer.encode()), Ok(offer));
        }
    }
    let mut observer = Observer::new(JobKey([0x5a; 32]), 1, 2, [3; 32]);
    let _ = observer.handle_input(data);
    assert_eq!(observer.observed(), None);
    if let Ok(Some((frame, used))) = RelayFrame::decode(data) {
        assert!(used <= data.len());
        let bytes = frame.to_bytes();
        assert_eq!(bytes.len(), used);
        assert_eq!(RelayFrame::decode(&bytes), Ok(Some((frame.clone(), used))));
        if let RelayFrame::Observed { addr, mac } = &frame {
            let key = JobKey([0x5a; 32]);
            assert!(!ferry_wire::relay::verify_observed(
                &key, &[3; 32], addr, mac
            ));
        }
        if let RelayFrame::Incoming(incoming) = frame {
            let mut seen = ReplayGuard::default();
            let key = JobKey([0x5a; 32]);
            assert!(
                verify_incoming(&key, incoming.job, incoming.target, &incoming, &mut seen).is_err()
            );
        }
    }
}

/// One-sided messages from strangers against a 64-byte window: any sequence of (sender, tag,
/// payload) is applied, held back or refused, never a panic and never a write outside the
/// window (the bytes around it stay untouched).
pub fn rma(data: &[u8]) {
    use mpi::rma::{Memory, Win};
    let mut mem = [0xa5u8; 192];
    {
        let base = mem[64..].as_mut_ptr();
        let mut win = Win::new(4, Memory::Fixed { base, size: 64 });
        let mut out = Vec::new();
        let mut rest = data;
        // Each message: sender, tag, payload length, payload.
        while let [from, tag, len, tail @ ..] = rest {
            let n = (*len as usize).min(tail.len());
            win.handle(*from as usize % 4, *tag as i32, &tail[..n], &mut out);
            rest = &tail[n..];
        }
    }
    assert!(
        mem[..64].iter().chain(&mem[128..]).all(|&b| b == 0xa5),
        "wrote outside the window"
    );
}

/// The grid's text formats: a grid file (TOML), a process info file and a placement
/// (`FERRY_GRID_PLACE`) parse or fail with an error, never a panic; a placement that parses
/// encodes to text that parses to the same placement.
pub fn grid(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = ferry_grid::Topology::parse("fuzz.toml", text);
    let _ = ferry_grid::topology::ProcessInfo::parse("fuzz.info", text);
    if let Ok(place) = ferry_grid::Placement::parse(text) {
        assert_eq!(ferry_grid::Placement::parse(&place.encode()), Ok(place));
    }
}

/// The records of a BSP superstep (`ferry_bsp::record`): decoding any bytes never panics and
/// never claims more bytes than it was given; a decoded record encodes back to the very bytes
/// it came from; a message decodes record by record up to its end or its first bad record.
/// (Applying records needs a running computation, a job's world; the checks that keep a
/// sync's writes inside registered areas are its own, tested through `ferry run`.)
pub fn bsp(data: &[u8]) {
    use ferry_bsp::record::{decode, Records};
    if let Ok((record, used)) = decode(data) {
        assert!(used <= data.len());
        let mut bytes = Vec::new();
        record.encode(&mut bytes);
        assert_eq!(bytes, data[..used]);
    }
    let mut taken = 0;
    for record in Records::new(data) {
        let Ok(record) = record else { break };
        let mut bytes = Vec::new();
        record.encode(&mut bytes);
        assert_eq!(bytes, data[taken..taken + bytes.len()]);
        taken += bytes.len();
    }
    assert!(taken <= data.len());
}

/// A BSP superstep's records applied to a one-process computation (ferry's singleton world: no
/// network) with a 64-byte area registered in the middle of 192 bytes and a tag size of 4:
/// any bytes are applied or refused with an error naming the problem, never a panic, and
/// never a write outside the area (the bytes around it stay untouched).
pub fn bsp_apply(data: &[u8]) {
    use std::cell::RefCell;
    /// The computation and its memory, made once per thread and never dropped (a
    /// computation dropped without `end` stops the job).
    struct Fixture {
        bsp: &'static mut ferry_bsp::Bsp,
        mem: &'static mut [u8; 192],
    }
    thread_local! {
        static FIXTURE: RefCell<Option<Fixture>> = const { RefCell::new(None) };
    }
    fn make() -> Result<Fixture, String> {
        let world = ferry_core::init().map_err(|e| e.to_string())?;
        let bsp = ferry_bsp::Bsp::with_config(world, None, ferry_bsp::Config::default());
        let bsp = Box::leak(Box::new(bsp.map_err(|e| e.to_string())?));
        let mem = Box::leak(Box::new([0xa5u8; 192]));
        // SAFETY: the 64 bytes in the middle of `mem` live for ever (leaked) and are only
        // reached through the computation from here on.
        unsafe { bsp.push_reg_raw(mem[64..].as_ptr(), 64) };
        bsp.set_tagsize(4);
        bsp.sync().map_err(|e| e.to_string())?;
        Ok(Fixture { bsp, mem })
    }
    FIXTURE.with(|f| {
        let mut f = f.borrow_mut();
        let Fixture { bsp, mem } = f.get_or_insert_with(|| {
            make().unwrap_or_else(|e| panic!("no one-process computation to fuzz: {e}"))
        });
        if let Err(e) = bsp.receive_for_fuzzing(data) {
            assert!(e.to_string().starts_with("process 0: bsp_"), "{e}");
        }
        while bsp.move_into(&mut []).is_some() {}
        assert!(
            mem[..64].iter().chain(&mem[128..]).all(|&b| b == 0xa5),
            "wrote outside the area"
        );
    });
}
