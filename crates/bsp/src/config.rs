//! Settings of the BSP layer: the three optimisations of the seed paper, each switchable so it
//! can be measured. Every field has a `FERRY_BSP_…` environment name.

/// How supersteps move their data.
#[derive(Debug, Clone)]
pub struct Config {
    /// `FERRY_BSP_COMBINE` (`1` | `0`, default `1`): combine the puts, get requests and sends
    /// of a superstep to one destination into one message. Off: one message per operation.
    pub combine: bool,
    /// `FERRY_BSP_EARLY` (bytes, default 65536, `0` = off): with combining, a destination's
    /// buffer that would pass this size is sent at once, during the superstep (overlap), instead
    /// of at the sync. Early sends, and superstep messages up to this size, go eagerly
    /// (`SendMode::Eager`, clamped to what one frame carries), so an early send never waits for
    /// a handshake with a receiver that is still computing.
    pub early_bytes: usize,
    /// `FERRY_BSP_REORDER` (`1` | `0`, default `1`): at a sync process p sends to and receives
    /// from (p + k) mod P in step k (a Latin square), instead of every process going 0, 1, 2…
    pub reorder: bool,
    /// `FERRY_BSP_PREPOST` (`1` | `0`, default `1`): post the receives of a sync's closing
    /// messages (into buffers of `prepost_bytes`) before sending, so they land in place instead
    /// of going through the unexpected queue and a probe.
    pub prepost: bool,
    /// `FERRY_BSP_PREPOST_BYTES` (bytes, default 65536): size of each pre-posted buffer; a
    /// longer closing message is sent ahead as a separate (probed) message.
    pub prepost_bytes: usize,
    /// `FERRY_BSP_IN_PLACE` (`1` | `0`, default `1`): with pre-posted receives, read a closing
    /// message that came whole through shared memory where it arrived, in the sender's ring,
    /// instead of copying it into the pre-posted buffer first (the sender's later messages
    /// wait behind it until the puts are applied).
    pub in_place: bool,
    /// `FERRY_BSP_RING` (`1` | `0`, default `1`): with combining, write the records for a
    /// process on this host's shared memory straight into its ring (a reservation of up to
    /// `FERRY_BSP_EARLY` bytes, and `FERRY_BSP_PREPOST_BYTES` with pre-posted receives), so that
    /// a put's call-time copy lands where the receiver reads it: one copy of every put word
    /// fewer. The message on the wire is the same; a full reservation is sent as an early
    /// message (even with `FERRY_BSP_EARLY=0`), and when the ring has no room the records go
    /// to the combining buffer as without this.
    pub ring: bool,
    /// `FERRY_BSP_SPIN` (µs, default: 50, or 0 when the job has more processes than the host
    /// has cores): longest time a process waiting in a sync spins before it yields its core
    /// between polls (for 200 µs; then it sleeps as ferry-core's waits do). Adapted: halved
    /// after each wait that outlasted it (down to none, with a 4 µs spin every 16th wait),
    /// doubled after one that ended while spinning. Until a job has spent 50 ms in spins
    /// that did not catch the peer, they last up to 10 ms (unless this is 0): spinning
    /// processes get separate cores from the scheduler.
    pub spin_us: Option<u64>,
    /// `FERRY_BSP_FIFO` (messages, default 0): room reserved at `bsp_begin` in the queue of
    /// received BSMP messages, so that a program that knows its queue's size (the Oxford
    /// toolset's `bspcc -bspfifo N`) does not grow it during its first supersteps. The queue
    /// grows past it as needed.
    pub fifo: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            combine: true,
            early_bytes: 65536,
            reorder: true,
            prepost: true,
            prepost_bytes: 65536,
            in_place: true,
            ring: true,
            spin_us: None,
            fifo: 0,
        }
    }
}

impl Config {
    /// Defaults overridden by the `FERRY_BSP_…` environment variables; an unreadable value is
    /// reported by its name.
    pub fn from_env() -> Result<Config, String> {
        let mut c = Config::default();
        let flag = |name: &str, default: bool| -> Result<bool, String> {
            match std::env::var(name) {
                Err(_) => Ok(default),
                Ok(v) => match v.as_str() {
                    "1" | "on" | "yes" | "true" => Ok(true),
                    "0" | "off" | "no" | "false" => Ok(false),
                    _ => Err(format!("{name}={v}: expected 1 or 0")),
                },
            }
        };
        // Numbers are checked against the one table of ranges (ferry-wire's, re-exported by
        // ferry-core; docs/settings.md).
        let get = |name: &str| std::env::var(name).ok();
        let number = |name: &str| {
            ferry_core::settings::number(&get, name).map_err(|e| match e {
                ferry_core::Error::Config(message) => message,
                other => other.to_string(),
            })
        };
        let bytes = |name: &str, default: usize| -> Result<usize, String> {
            Ok(number(name)?.map_or(default, |v| v as usize))
        };
        c.combine = flag("FERRY_BSP_COMBINE", c.combine)?;
        c.early_bytes = bytes("FERRY_BSP_EARLY", c.early_bytes)?;
        c.reorder = flag("FERRY_BSP_REORDER", c.reorder)?;
        c.prepost = flag("FERRY_BSP_PREPOST", c.prepost)?;
        c.prepost_bytes = bytes("FERRY_BSP_PREPOST_BYTES", c.prepost_bytes)?;
        c.in_place = flag("FERRY_BSP_IN_PLACE", c.in_place)?;
        c.ring = flag("FERRY_BSP_RING", c.ring)?;
        if let Some(us) = number("FERRY_BSP_SPIN")? {
            c.spin_us = Some(us as _);
        }
        c.fifo = number("FERRY_BSP_FIFO")?.map_or(c.fifo, |n| n as usize);
        Ok(c)
    }

    /// Every setting with its environment name and current value.
    pub fn describe(&self) -> Vec<(&'static str, String)> {
        vec![
            ("FERRY_BSP_COMBINE", (self.combine as u8).to_string()),
            ("FERRY_BSP_EARLY", self.early_bytes.to_string()),
            ("FERRY_BSP_REORDER", (self.reorder as u8).to_string()),
            ("FERRY_BSP_PREPOST", (self.prepost as u8).to_string()),
            ("FERRY_BSP_PREPOST_BYTES", self.prepost_bytes.to_string()),
            ("FERRY_BSP_IN_PLACE", (self.in_place as u8).to_string()),
            ("FERRY_BSP_RING", (self.ring as u8).to_string()),
            (
                "FERRY_BSP_SPIN",
                self.spin_us
                    .map_or("auto (50, 0 when oversubscribed)".into(), |s| s.to_string()),
            ),
            ("FERRY_BSP_FIFO", self.fifo.to_string()),
        ]
    }
}
