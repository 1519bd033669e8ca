//! Starting and ending a computation, and what it says about itself.

use crate::combine::NO_LAST;
use crate::posted::Posted;
use crate::spin::{Spin, SPIN_US};
use crate::sync::{tag, KIND_FINAL};
use crate::{Allocs, Bsp, BspError, Config, ErrorKind, STOPPING};
use ferry_core::World;
use std::cell::Cell;
use std::collections::{BinaryHeap, HashMap};
use std::mem::ManuallyDrop;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

impl Bsp {
    /// Starts ferry (`ferry_core::init`) and a BSP computation on all its processes, with
    /// settings from the environment.
    pub fn init() -> Result<Bsp, BspError> {
        let world = ferry_core::init()
            .map_err(|e| BspError::new(0, "bsp_begin", ErrorKind::Transport(e)))?;
        Bsp::begin(world, None)
    }

    /// Starts a BSP computation on the first `nprocs` processes of `world` (all when `None`
    /// or larger than the job). Collective over the whole world; process 0's `nprocs` is the
    /// one that counts (as in BSPlib, where with `bsp_init` only process 0 runs the code that
    /// decides it). On the processes beyond `nprocs` it finalizes the world and exits with
    /// status 0.
    ///
    /// On an error the world is left as it is, not finalized (that would wait for processes
    /// that may be waiting for this one): the process should exit, which stops the job.
    pub fn begin(world: World, nprocs: Option<usize>) -> Result<Bsp, BspError> {
        match Config::from_env() {
            Ok(config) => Bsp::with_config(world, nprocs, config),
            Err(e) => Err(abandon(world, ErrorKind::Config(e))),
        }
    }

    /// As [`Bsp::begin`], with explicit settings.
    pub fn with_config(
        world: World,
        nprocs: Option<usize>,
        mut config: Config,
    ) -> Result<Bsp, BspError> {
        let size = world.size();
        let rank = world.rank();
        let mut asked = [nprocs.map_or(u64::MAX, |n| n as u64)];
        if let Err(e) = world.bcast(&mut asked, 0) {
            return Err(abandon(world, ErrorKind::Transport(e)));
        }
        let p = usize::try_from(asked[0])
            .unwrap_or(usize::MAX)
            .clamp(1, size);
        let comm = if p == size {
            world.dup()
        } else {
            match world.split((rank < p).then_some(0), 0) {
                Ok(Some(c)) => Ok(c),
                Ok(None) => {
                    // Not part of the computation: end cleanly once the others do.
                    drop(world.finalize());
                    std::process::exit(0)
                }
                Err(e) => Err(e),
            }
        };
        let comm = match comm {
            Ok(c) => c,
            Err(e) => return Err(abandon(world, ErrorKind::Transport(e))),
        };
        let me = comm.rank();
        // Early sends go eagerly (they return once copied out, never waiting for the receiver
        // to sync), so one frame must carry them.
        for q in (0..p).filter(|&q| q != me) {
            if let Ok(limit) = comm.active_limit(q) {
                config.early_bytes = config.early_bytes.min(limit);
            }
        }
        let (order, from_order) = if config.reorder {
            (
                (1..p).map(|k| (me + k) % p).collect(),
                (1..p).map(|k| (me + p - k) % p).collect(),
            )
        } else {
            let all: Vec<usize> = (0..p).filter(|&q| q != me).collect();
            (all.clone(), all)
        };
        let spin = Spin::new(Duration::from_micros(config.spin_us.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
            if size > cores {
                0
            } else {
                SPIN_US
            }
        })));
        // A ring record is at most an early send's size, and fits the pre-posted buffer.
        let ring_want = if config.combine && config.ring {
            let mut w = if config.early_bytes > 0 {
                config.early_bytes
            } else {
                usize::MAX
            };
            if config.prepost {
                w = w.min(config.prepost_bytes);
            }
            w
        } else {
            0
        };
        // On shared memory exactly when a reservation can be had now, with nothing sent yet.
        let ring_peer: Vec<bool> = (0..p)
            .map(|q| ring_want > 0 && q != me && comm.raw_reserve(q, 8, 8).ok().flatten().is_some())
            .collect();
        let fifo = config.fifo;
        let mut posted = Posted {
            comm: comm.clone(),
            bufs: Vec::new(),
            reqs: vec![None; p],
            in_place: config.prepost && config.in_place,
            taken: vec![None; p],
            ring: vec![None; p],
        };
        if config.prepost {
            posted.bufs = (0..p)
                .map(|q| {
                    if q != me {
                        vec![0u8; config.prepost_bytes]
                    } else {
                        Vec::new()
                    }
                })
                .collect();
            if let Err(e) = posted.post(me, tag(KIND_FINAL, 0)) {
                return Err(abandon(world, ErrorKind::Transport(e)));
            }
        }
        Ok(Bsp {
            pid: me,
            nprocs: p,
            comm,
            world: ManuallyDrop::new(world),
            config,
            start: Instant::now(),
            step: 0,
            slots: Vec::new(),
            free_slots: BinaryHeap::new(),
            by_addr: HashMap::new(),
            slot_cache: Cell::new(None),
            pushes: Vec::new(),
            pops: Vec::new(),
            out: vec![Vec::new(); p],
            out_single: vec![Vec::new(); p],
            last_put: vec![NO_LAST; p],
            ring: (0..p).map(|_| None).collect(),
            ring_want,
            ring_peer,
            ring_off: vec![false; p],
            hpputs: (0..p).map(|_| Vec::new()).collect(),
            gets: vec![Vec::new(); p],
            tagsize: 0,
            next_tagsize: 0,
            inbox: Vec::new(),
            msgs: Vec::with_capacity(fifo),
            next_msg: 0,
            order,
            from_order,
            posted,
            spin,
            reg: Vec::new(),
            sends: Vec::with_capacity(2 * p),
            chunks: vec![Vec::new(); p],
            pre_len: vec![None; p],
            replies: vec![Vec::new(); p],
            reply_out: vec![Vec::new(); p],
            allocs: Allocs(HashMap::new()),
            ending: false,
            ended: false,
            broken: None,
            last_error: Cell::new(None),
        })
    }

    /// Ends the computation: waits for the other processes and finalizes ferry.
    ///
    /// Its last exchange is a sync that tells every process this one is ending, so a process
    /// still calling `sync` (or ending while the others sync) gets an error naming both,
    /// instead of waiting forever for a closing message that never comes. On an error the
    /// world is left as it is, not finalized (that would wait for processes that are not
    /// ending): the process should exit, non-zero, which stops the job.
    pub fn end(mut self) -> Result<(), BspError> {
        let pid = self.pid;
        self.ending = true;
        let mut done = self.sync();
        if done.is_ok() {
            // Nothing more will come: withdraw the receives posted for a next superstep, and
            // give back ring reservations (puts after the last sync), which would hold up the
            // barrier.
            self.ring.iter_mut().for_each(|r| *r = None);
            self.posted.withdraw();
            if let Err(e) = self.comm.barrier() {
                done = Err(self.transport("bsp_end", e));
            }
        }
        self.ended = true;
        done?;
        // SAFETY: taken once; `ended` tells `Drop` the field is gone.
        let world = unsafe { ManuallyDrop::take(&mut self.world) };
        drop(self);
        world
            .finalize()
            .map_err(|e| BspError::new(pid, "bsp_end", ErrorKind::Transport(e)))
    }

    /// This process's id, 0 ≤ pid < nprocs.
    pub fn pid(&self) -> usize {
        self.pid
    }

    /// Number of processes in the computation.
    pub fn nprocs(&self) -> usize {
        self.nprocs
    }

    /// Seconds since the computation began.
    pub fn time(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// The settings in use.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Number of supersteps completed (syncs done).
    pub fn superstep(&self) -> u64 {
        self.step
    }

    /// Stops the whole job with `message`, naming this process.
    pub fn abort(&self, message: &str) -> ! {
        STOPPING.store(true, Ordering::Relaxed);
        self.world.abort(
            1,
            &format!("ferry-bsp: process {}: bsp_abort: {message}", self.pid),
        )
    }

    /// Stops the job with `error` (BSPlib's answer to every error), naming this process and
    /// the call: the C ABI's mapping of the errors this crate returns.
    #[cold]
    pub fn stop(&self, error: &BspError) -> ! {
        STOPPING.store(true, Ordering::Relaxed);
        self.world.abort(1, &format!("ferry-bsp: {error}"))
    }

    /// Stops the job: `call` went wrong as `detail` says. The message names this process and
    /// the call (for layers on top, such as the C ABI checking its arguments).
    #[cold]
    pub fn fail(&self, call: &str, detail: String) -> ! {
        let msg = format!("ferry-bsp: process {}: {call}: {detail}", self.pid);
        STOPPING.store(true, Ordering::Relaxed);
        self.world.abort(1, &msg)
    }
}

/// The error `kind` of `bsp_begin` on `world`'s process; the world is left unfinalized.
#[cold]
fn abandon(world: World, kind: ErrorKind) -> BspError {
    let e = BspError::new(world.rank(), "bsp_begin", kind);
    // Finalizing would wait for processes that may be waiting for this one.
    std::mem::forget(world);
    e
}
