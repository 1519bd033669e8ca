//! A private rank's registrations with the relays on its cluster's front nodes, held for the
//! job's life.

use super::*;

/// A private rank's registration with the relay on its front node.
pub(super) struct RelayLink {
    pub(super) stream: TcpStream,
    pub(super) front: String,
    /// Where we registered: the relay's address inside the cluster, which is also where its
    /// forwarded connections come from.
    pub(super) inside: SocketAddr,
    /// False once the registration ended (the relay died).
    pub(super) alive: bool,
}

impl TcpTransport {
    /// Registers this rank with a relay of its cluster (on `front`, reached at `inside`) so
    /// that ranks outside the cluster can reach it through that relay, and keeps the
    /// connection: the end of the last one fails the job ("relay on `front` went away").
    /// Called once per relay of the cluster. Blocks until registered, retrying a refused
    /// connect for up to `timeout` (the relay may be starting).
    pub(crate) fn register_with_relay(
        &mut self,
        inside: SocketAddr,
        front: &str,
        timeout: Duration,
    ) -> Result<(), Error> {
        let fail = |what: String| Error::Transport(format!("relay on {front} at {inside}: {what}"));
        let deadline = Instant::now() + timeout;
        let mut stream = loop {
            match std::net::TcpStream::connect_timeout(&inside, Duration::from_secs(2)) {
                Ok(s) => break s,
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => return Err(fail(format!("cannot connect: {e}"))),
            }
        };
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_secs(1)),
            ))
            .map_err(|e| fail(e.to_string()))?;
        let mut reg = Registrar::new(self.key.clone(), self.job, self.me, self.listen_addr.port());
        let mut buf = [0u8; relay::MAX_FRAME];
        while !reg.is_registered() {
            if !reg.pending_output().is_empty() {
                stream
                    .write_all(reg.pending_output())
                    .map_err(|e| fail(format!("write failed: {e}")))?;
                let n = reg.pending_output().len();
                reg.consume_output(n);
                continue;
            }
            let n = match stream.read(&mut buf) {
                Ok(0) => return Err(fail("closed the registration".into())),
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(fail(format!("no registration: {e}"))),
            };
            // The relay answers REGISTER only after receiving it, so one read never holds
            // more than the frames of one step.
            let mut used = 0;
            while used < n && !reg.is_registered() {
                let step = reg
                    .handle_input(&buf[used..n])
                    .map_err(|e| fail(format!("registration refused: {e}")))?;
                if step == 0 {
                    break;
                }
                used += step;
            }
        }
        stream
            .set_nonblocking(true)
            .map_err(|e| fail(e.to_string()))?;
        let mut stream = TcpStream::from_std(stream);
        self.poll
            .registry()
            .register(
                &mut stream,
                Token(RELAY_BASE + self.relays.len()),
                Interest::READABLE,
            )
            .map_err(|e| io_error("epoll_ctl", e))?;
        self.relays.push(RelayLink {
            stream,
            front: front.to_string(),
            inside,
            alive: true,
        });
        Ok(())
    }

    /// The front node of the relay that a connection from `addr` came through: the relay
    /// whose inside address it is, else (a relay forwarding in the kernel keeps the dialer's
    /// address) the one relay of the cluster, or all of them.
    pub(super) fn relay_of(&self, addr: SocketAddr) -> Option<String> {
        if let Some(link) = self.relays.iter().find(|l| l.inside.ip() == addr.ip()) {
            return Some(link.front.clone());
        }
        let fronts: Vec<&str> = self.relays.iter().map(|l| l.front.as_str()).collect();
        (!fronts.is_empty()).then(|| fronts.join(" or "))
    }

    /// Reads registration `index` after an event on it. The end of the last live one is the
    /// job's failure; with others left, the connections through that relay fail as rails do
    /// and the rest go on.
    #[cold]
    pub(super) fn check_relay(&mut self, index: usize) -> Result<(), Error> {
        let Some(link) = self.relays.get_mut(index).filter(|l| l.alive) else {
            return Ok(());
        };
        let mut buf = [0u8; 256];
        loop {
            match link.stream.read(&mut buf) {
                Ok(0) => break,
                // The relay sends nothing after REGISTERED; ignore whatever it is.
                Ok(_) => continue,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        link.alive = false;
        let _ = self.poll.registry().deregister(&mut link.stream);
        let gone = link.front.clone();
        self.relay_deaths.went_away(&gone);
        let left: Vec<&str> = self
            .relays
            .iter()
            .filter(|l| l.alive)
            .map(|l| l.front.as_str())
            .collect();
        if left.is_empty() {
            return Err(Error::Transport(format!(
                "rank {}: relay on {gone} went away",
                self.me
            )));
        }
        eprintln!(
            "ferry: rank {}: relay on {gone} went away; the relays on {} remain",
            self.me,
            left.join(", ")
        );
        Ok(())
    }
}
