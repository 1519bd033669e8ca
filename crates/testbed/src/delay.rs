//! WAN delay without netem: a forwarder that holds every frame of a link for a fixed time.
//!
//! The kernels this testbed runs on may lack the `netem` and `fq` qdiscs (the machine it was
//! built on has only `tbf`, `htb` and `pfifo_fast`), so a delayed link to the WAN is made in
//! user space. The host's veth end in the switch namespace (`vN`) is not put on the bridge;
//! one more veth pair `dN`/`eN` is, by `eN`, and `ferry testbed delay vN dN --delay …`, run in
//! the switch namespace, reads every frame that arrives on either device from a packet socket
//! and sends it out of the other once the delay has passed. The sockets carry virtio-net
//! headers, so the veths' segmentation-offload frames (up to 64 KiB) pass whole: a frame costs
//! two system calls, not a packet of 1500 bytes.
//!
//! [`DelayLine`] is the queue of one direction, sans-IO (time passed in); [`forward`] is the
//! loop around two of them.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The frames of one direction of a delayed link, each due at its arrival plus the delay.
#[derive(Debug)]
pub struct DelayLine {
    delay: Duration,
    queue: VecDeque<(Instant, Vec<u8>)>,
    bytes: usize,
    limit: usize,
    dropped: u64,
}

impl DelayLine {
    /// A line that delays by `delay` and holds at most `limit` bytes (what a router's buffer
    /// would: a frame that does not fit is dropped, as on a congested link).
    pub fn new(delay: Duration, limit: usize) -> DelayLine {
        DelayLine {
            delay,
            queue: VecDeque::new(),
            bytes: 0,
            limit,
            dropped: 0,
        }
    }

    /// Takes a frame that arrived at `now`. Returns it back if the line is full (dropped).
    pub fn push(&mut self, now: Instant, frame: Vec<u8>) -> Result<(), Vec<u8>> {
        if self.bytes + frame.len() > self.limit {
            self.dropped += 1;
            return Err(frame);
        }
        self.bytes += frame.len();
        self.queue.push_back((now + self.delay, frame));
        Ok(())
    }

    /// When the next frame is due, if any.
    pub fn next_due(&self) -> Option<Instant> {
        self.queue.front().map(|(due, _)| *due)
    }

    /// The next frame if it is due at `now`. Frames leave in arrival order (one delay for all).
    pub fn pop_due(&mut self, now: Instant) -> Option<Vec<u8>> {
        if self.next_due()? > now {
            return None;
        }
        let (_, frame) = self.queue.pop_front()?;
        self.bytes -= frame.len();
        Some(frame)
    }

    /// Frames dropped because the line was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// Bytes one direction may hold: 10 Gbit/s for 100 ms.
const LINE_LIMIT: usize = 128 << 20;
/// Room for one frame read from a packet socket: a 64 KiB offload frame, its Ethernet header
/// and the virtio-net header.
const FRAME_ROOM: usize = (64 << 10) + 1024;

/// Forwards frames between devices `a` and `b` (both in this process's namespace), each way
/// after `delay`, until either device goes away (the testbed was removed). Errors name the
/// device.
pub fn forward(a: &str, b: &str, delay: Duration) -> Result<(), std::io::Error> {
    let sockets = [packet_socket(a)?, packet_socket(b)?];
    ready();
    // lines[i]: frames read from sockets[i], to be sent out of the other.
    let mut lines = [
        DelayLine::new(delay, LINE_LIMIT),
        DelayLine::new(delay, LINE_LIMIT),
    ];
    // Frames are read into one buffer and copied out at their own length: a frame buffer
    // reused at full size would be cleared for every 66-byte acknowledgement.
    let mut room = vec![0u8; FRAME_ROOM];
    let mut spare: Vec<Vec<u8>> = Vec::new();
    loop {
        let now = Instant::now();
        for (from, line) in lines.iter_mut().enumerate() {
            let to = &sockets[1 - from];
            while let Some(frame) = line.pop_due(now) {
                match to.send(&frame) {
                    Ok(_) => {}
                    // A full device queue drops the frame, as a congested link would.
                    Err(e) if is_congestion(&e) => {}
                    Err(e) if is_gone(&e) => return Ok(()),
                    Err(e) => return Err(named(e, to.name)),
                }
                spare.push(frame);
            }
        }
        let due = lines.iter().filter_map(DelayLine::next_due).min();
        let timeout = due.map(|d| d.saturating_duration_since(Instant::now()));
        let ready = wait_readable(&sockets, timeout)?;
        let now = Instant::now();
        for (from, socket) in sockets.iter().enumerate() {
            if !ready[from] {
                continue;
            }
            loop {
                match socket.recv(&mut room) {
                    Ok(Some(n)) => {
                        let mut frame = spare.pop().unwrap_or_default();
                        frame.clear();
                        frame.extend_from_slice(&room[..n]);
                        if let Err(frame) = lines[from].push(now, frame) {
                            spare.push(frame);
                        }
                    }
                    // Larger than any frame the veths make: not ours to pass.
                    Ok(None) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) if is_gone(&e) => return Ok(()),
                    Err(e) => return Err(named(e, socket.name)),
                }
            }
        }
    }
}

/// Tells the testbed (on stdout, then closed) that the sockets are bound.
fn ready() {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "ready");
    let _ = out.flush();
}

fn named(e: std::io::Error, dev: &str) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("packet socket on {dev}: {e}"))
}

fn is_gone(e: &std::io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV)
    )
}

fn is_congestion(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ENOBUFS | libc::EAGAIN))
}

/// A nonblocking packet socket bound to one device, with virtio-net headers, that does not see
/// the frames it sends itself.
struct PacketSocket<'a> {
    fd: std::os::fd::OwnedFd,
    name: &'a str,
}

fn packet_socket(dev: &str) -> Result<PacketSocket<'_>, std::io::Error> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let fail = |what: &str| named(std::io::Error::other(what.to_string()), dev);
    let c_dev = std::ffi::CString::new(dev).map_err(|_| fail("bad device name"))?;
    // SAFETY: if_nametoindex reads the NUL-terminated name and nothing else.
    let index = unsafe { libc::if_nametoindex(c_dev.as_ptr()) };
    if index == 0 {
        return Err(named(std::io::Error::last_os_error(), dev));
    }
    let all = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: socket takes plain integers; the result is checked before use.
    let raw = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            i32::from(all),
        )
    };
    if raw < 0 {
        return Err(named(std::io::Error::last_os_error(), dev));
    }
    // SAFETY: `raw` is a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    let on: libc::c_int = 1;
    for option in [libc::PACKET_VNET_HDR, libc::PACKET_IGNORE_OUTGOING] {
        // SAFETY: the option value is a c_int that lives across the call.
        let r = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                option,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(named(std::io::Error::last_os_error(), dev));
        }
    }
    // SAFETY: sockaddr_ll is plain data; zeroed is a valid value before the fields are set.
    let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
    addr.sll_family = libc::AF_PACKET as u16;
    addr.sll_protocol = all;
    addr.sll_ifindex = index as i32;
    // SAFETY: `addr` is a valid sockaddr_ll and its size is passed with it.
    let r = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_ll).cast(),
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if r != 0 {
        return Err(named(std::io::Error::last_os_error(), dev));
    }
    Ok(PacketSocket { fd, name: dev })
}

impl PacketSocket<'_> {
    /// Reads one frame into `buf`: its length, or `None` if it did not fit.
    fn recv(&self, buf: &mut [u8]) -> Result<Option<usize>, std::io::Error> {
        use std::os::fd::AsRawFd;
        // SAFETY: `buf` is valid for writes of its length for the whole call.
        let n = unsafe {
            libc::recv(
                self.fd.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_TRUNC,
            )
        };
        match usize::try_from(n) {
            Err(_) => Err(std::io::Error::last_os_error()),
            Ok(n) if n > buf.len() => Ok(None),
            Ok(n) => Ok(Some(n)),
        }
    }

    /// Sends one frame (with its virtio-net header) out of the device.
    fn send(&self, frame: &[u8]) -> Result<(), std::io::Error> {
        use std::os::fd::AsRawFd;
        // SAFETY: `frame` is valid for reads of its length for the whole call.
        let n = unsafe { libc::send(self.fd.as_raw_fd(), frame.as_ptr().cast(), frame.len(), 0) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Waits until a socket is readable or `timeout` passes (none: forever); which are readable.
fn wait_readable(
    sockets: &[PacketSocket<'_>; 2],
    timeout: Option<Duration>,
) -> Result<[bool; 2], std::io::Error> {
    use std::os::fd::AsRawFd;
    let mut fds = sockets.each_ref().map(|s| libc::pollfd {
        fd: s.fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    let spec = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: libc::c_long::from(t.subsec_nanos() as i32),
    });
    let spec_ptr = spec
        .as_ref()
        .map_or(std::ptr::null(), |s| s as *const libc::timespec);
    // SAFETY: `fds` holds two valid pollfds and `spec_ptr` is null or points at `spec`, both
    // alive across the call; no signal mask is passed.
    let r = unsafe { libc::ppoll(fds.as_mut_ptr(), 2, spec_ptr, std::ptr::null()) };
    if r < 0 {
        let e = std::io::Error::last_os_error();
        if e.kind() == std::io::ErrorKind::Interrupted {
            return Ok([false; 2]);
        }
        return Err(e);
    }
    let gone = libc::POLLERR | libc::POLLHUP | libc::POLLNVAL;
    Ok(fds.map(|p| p.revents & (libc::POLLIN | gone) != 0))
}

/// The extra veth pair of a delayed link whose host end in the switch namespace is
/// `switch_dev`: the forwarder's end and the bridge's end.
fn pair_names(switch_dev: &str) -> (String, String) {
    (format!("{switch_dev}d"), format!("{switch_dev}w"))
}

/// The commands that put a delayed link on `bridge` through its forwarder, in switch
/// namespace `sw`, instead of enslaving `switch_dev` itself.
pub(crate) fn wiring(sw: &str, switch_dev: &str, bridge: &str) -> Vec<Vec<String>> {
    let (forwarder_end, bridge_end) = pair_names(switch_dev);
    let ip = |args: &[&str]| {
        ["ip", "-n", sw]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect::<Vec<_>>()
    };
    vec![
        ip(&[
            "link",
            "add",
            &forwarder_end,
            "type",
            "veth",
            "peer",
            "name",
            &bridge_end,
        ]),
        ip(&["link", "set", &bridge_end, "master", bridge]),
        ip(&["link", "set", &forwarder_end, "up"]),
        ip(&["link", "set", &bridge_end, "up"]),
    ]
}

/// Starts one forwarder (`ferry testbed delay`) per delayed link of `plan` in its switch
/// namespace and waits until each has its sockets; adds them to `started`. `ferry` is the
/// program (default: this one, if it is `ferry`).
pub(crate) fn start(
    plan: &crate::Plan,
    ferry: Option<&std::path::Path>,
    started: &mut Vec<std::process::Child>,
) -> Result<(), crate::TestbedError> {
    use std::io::BufRead as _;
    use std::process::{Command, Stdio};
    let delayed: Vec<_> = plan.links.iter().filter(|l| l.delay.is_some()).collect();
    if delayed.is_empty() {
        return Ok(());
    }
    let program = match ferry {
        Some(p) => p.to_path_buf(),
        None => std::env::current_exe()
            .ok()
            .filter(|p| p.file_name().is_some_and(|n| n == "ferry"))
            .ok_or_else(|| {
                crate::TestbedError::Grid(
                    "wan_delay needs the ferry program to forward delayed links \
                     (UpOptions::ferry, or build the testbed with `ferry testbed up`)"
                        .into(),
                )
            })?,
    };
    let sw = format!("{}{}", plan.prefix, crate::SWITCH);
    for link in delayed {
        let (forwarder_end, _) = pair_names(&link.switch_dev);
        let micros = link.delay.unwrap_or_default().as_micros().to_string();
        let mut argv: Vec<String> = vec!["ip".into(), "netns".into(), "exec".into(), sw.clone()];
        argv.push(program.to_string_lossy().into_owned());
        argv.extend(
            [
                "testbed",
                "delay",
                &link.switch_dev,
                &forwarder_end,
                "--delay-us",
                &micros,
            ]
            .map(String::from),
        );
        let line = argv.join(" ");
        let failed = |why: String| crate::TestbedError::Command {
            command: line.clone(),
            status: "no forwarder".into(),
            stderr: why,
        };
        // Its later errors go to our stderr; stdout only says when the sockets are bound.
        let mut child = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| failed(e.to_string()))?;
        let mut said = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = std::io::BufReader::new(out).read_line(&mut said);
        }
        if said.trim() != "ready" {
            let _ = child.kill();
            let status = child.wait().map(|s| s.to_string()).unwrap_or_default();
            return Err(failed(format!("it ended ({status}) before it was ready")));
        }
        started.push(child);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_leave_after_the_delay_in_order() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut line = DelayLine::new(ms(10), 1 << 20);
        assert_eq!(line.next_due(), None);
        line.push(t0, vec![1]).unwrap();
        line.push(t0 + ms(3), vec![2, 2]).unwrap();
        assert_eq!(line.next_due(), Some(t0 + ms(10)));
        assert_eq!(line.pop_due(t0 + ms(9)), None);
        assert_eq!(line.pop_due(t0 + ms(10)), Some(vec![1]));
        assert_eq!(line.next_due(), Some(t0 + ms(13)));
        assert_eq!(line.pop_due(t0 + ms(12)), None);
        assert_eq!(line.pop_due(t0 + ms(50)), Some(vec![2, 2]));
        assert_eq!(line.pop_due(t0 + ms(50)), None);
    }

    #[test]
    fn a_full_line_drops_and_counts() {
        let t0 = Instant::now();
        let mut line = DelayLine::new(Duration::ZERO, 4);
        line.push(t0, vec![0; 3]).unwrap();
        assert_eq!(line.push(t0, vec![0; 2]), Err(vec![0; 2]));
        assert_eq!(line.dropped(), 1);
        line.push(t0, vec![0; 1]).unwrap();
        assert_eq!(line.pop_due(t0).map(|f| f.len()), Some(3));
        line.push(t0, vec![0; 3]).unwrap();
        assert_eq!(line.dropped(), 1);
    }
}
