//! The experiments of the TTCC paper (Cha et al., "Two-Tree Collective Communication in Grid
//! Computing Systems"): broadcast schedules built from a *measured* cost matrix M1 that differs
//! from the true one M0 by a random error, evaluated by simulation on M0.
//!
//! # Choices the paper leaves open (and ours)
//! - **The grid.** `n` ranks in [`GridSetup::clusters`] clusters of consecutive ranks (default 4).
//!   Inside a cluster: latency uniform in 10 µs–1 ms, bandwidth uniform in 10–200 MB/s; between
//!   clusters: latency uniform in 1–20 ms, bandwidth uniform in 10–50 KB/s. Links are symmetric
//!   (one draw per unordered pair). The root is rank 0. Messages of 1 MB (10⁶ bytes).
//! - **The error model.** M1 = M0 · (1 + N(μ, σ)), one independent normal draw per ordered pair
//!   and entry: a factor `f = 1 + μ + σ·z` with `z ~ N(0, 1)`. [`ErrorTarget::Time`] (default)
//!   scales the whole transfer time (latency × f, bandwidth ÷ f): the matrix the schedulers see is
//!   a matrix of times. [`ErrorTarget::Separate`] draws independent factors for latency and for
//!   bandwidth. The same `z` is used for every σ of a trial (common random numbers), so the curves
//!   over σ are smooth and the difference between algorithms is not sampling noise.
//! - **Factors ≤ 0** (`1 + N` < 0 has probability Φ(−1/σ): 0.04 % of the pairs at σ = 0.3, 0.6 %
//!   at 0.4, 2.3 % at 0.5) are not valid measurements. [`Negative::Fold`] (default) takes
//!   `|f|` (at least 10⁻⁶): an error larger than the value, in magnitude. [`Negative::Floor`] clamps
//!   to a floor, which makes many pairs exactly equally cheap at large σ, so the greedy choice
//!   among them falls back to the true cost and the damage *shrinks* as σ grows past ~0.3 (an
//!   artefact, shown in the report). [`Negative::Keep`] keeps negative times: the schedulers then
//!   prefer the worst links and the delay explodes.
//! - **α.** The decision time of a receive-first step, simulated as a delay after the first copy
//!   arrives ([`crate::SimConfig::alpha`]); default 100 µs (the order of an intra-cluster latency).
//! - **P(E).** The mean over trials of the broadcast completion time (the time the last rank has
//!   the data, [`crate::SimResult::delivery`]); the delay ratio is `(P(E_σ) − P(E_0)) / P(E_0)`
//!   for each algorithm against its own σ = 0.
//!
//! Every trial draws from its own ChaCha8 stream seeded from (seed, nodes, trial), so results do
//! not depend on the number of threads, and a fixed seed repeats a run bit for bit.

use crate::{simulate, SimConfig};
use ferry_sched::hetero::{BcastScheduler, CostMatrix, CostModel};
use ferry_sched::Rank;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use rand_distr::StandardNormal;

/// Link parameters of a multi-cluster grid (seconds, bytes per second; uniform ranges).
#[derive(Debug, Clone, PartialEq)]
pub struct GridSetup {
    /// Clusters; ranks are split into this many blocks of consecutive ranks.
    pub clusters: usize,
    /// Latency range inside a cluster.
    pub intra_latency: (f64, f64),
    /// Bandwidth range inside a cluster.
    pub intra_bandwidth: (f64, f64),
    /// Latency range between clusters.
    pub inter_latency: (f64, f64),
    /// Bandwidth range between clusters.
    pub inter_bandwidth: (f64, f64),
}

impl Default for GridSetup {
    /// The paper's ranges, 4 clusters.
    fn default() -> GridSetup {
        GridSetup {
            clusters: 4,
            intra_latency: (10e-6, 1e-3),
            intra_bandwidth: (10e6, 200e6),
            inter_latency: (1e-3, 20e-3),
            inter_bandwidth: (10e3, 50e3),
        }
    }
}

impl GridSetup {
    /// The cluster of `rank` among `n` ranks.
    pub fn cluster_of(&self, rank: Rank, n: usize) -> usize {
        rank * self.clusters.max(1) / n.max(1)
    }

    /// A random true matrix M0 of `n` ranks.
    pub fn random_matrix(&self, n: usize, rng: &mut ChaCha8Rng) -> CostMatrix {
        let mut m = CostMatrix::uniform(n, 0.0, f64::INFINITY);
        let mut draw = |(lo, hi): (f64, f64)| {
            if hi > lo {
                rng.random_range(lo..hi)
            } else {
                lo
            }
        };
        for i in 0..n {
            for j in i + 1..n {
                let intra = self.cluster_of(i, n) == self.cluster_of(j, n);
                let (l, b) = if intra {
                    (draw(self.intra_latency), draw(self.intra_bandwidth))
                } else {
                    (draw(self.inter_latency), draw(self.inter_bandwidth))
                };
                m.set(i, j, l, b);
                m.set(j, i, l, b);
            }
        }
        m
    }
}

/// The same grid as [`GridSetup::random_matrix`] but computed on demand from a hash of
/// (seed, pair): no n² memory, for runs with 10 000 ranks.
#[derive(Debug, Clone)]
pub struct HashedGrid {
    /// Ranks.
    pub n: usize,
    /// Link parameters.
    pub setup: GridSetup,
    /// Seed of the hash.
    pub seed: u64,
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl HashedGrid {
    fn unit(&self, i: Rank, j: Rank, salt: u64) -> f64 {
        let (a, b) = (i.min(j) as u64, i.max(j) as u64);
        let h = splitmix(self.seed ^ splitmix(a << 32 ^ b) ^ salt);
        (h >> 11) as f64 / (1u64 << 53) as f64
    }
    fn pick(&self, i: Rank, j: Rank, salt: u64, intra: (f64, f64), inter: (f64, f64)) -> f64 {
        let same = self.setup.cluster_of(i, self.n) == self.setup.cluster_of(j, self.n);
        let (lo, hi) = if same { intra } else { inter };
        lo + (hi - lo) * self.unit(i, j, salt)
    }
}

impl CostModel for HashedGrid {
    fn size(&self) -> usize {
        self.n
    }
    fn latency(&self, i: Rank, j: Rank) -> f64 {
        self.pick(i, j, 1, self.setup.intra_latency, self.setup.inter_latency)
    }
    fn bandwidth(&self, i: Rank, j: Rank) -> f64 {
        self.pick(
            i,
            j,
            2,
            self.setup.intra_bandwidth,
            self.setup.inter_bandwidth,
        )
    }
}

/// Which entries of M0 the measurement error multiplies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorTarget {
    /// One factor per ordered pair on the transfer time (latency × f, bandwidth ÷ f).
    Time,
    /// Independent factors on latency and on bandwidth.
    Separate,
}

/// What to do with an error factor `1 + N(μ, σ)` that is not positive.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Negative {
    /// Take its magnitude, at least 10⁻⁶.
    Fold,
    /// Clamp every factor to at least this.
    Floor(f64),
    /// Keep it (negative measured times).
    Keep,
}

/// The error model M1 = M0 · (1 + N(μ, σ)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorModel {
    /// Mean of the normal error.
    pub mu: f64,
    /// Standard deviation.
    pub sigma: f64,
    /// Factors that are not positive.
    pub negative: Negative,
    /// What the factor multiplies.
    pub target: ErrorTarget,
}

/// Standard normal draws for one trial: two per ordered pair (latency, bandwidth).
pub struct Noise {
    n: usize,
    z: Vec<f64>,
}

impl Noise {
    /// Draws the noise of an `n`-rank matrix.
    pub fn draw(n: usize, rng: &mut ChaCha8Rng) -> Noise {
        Noise {
            n,
            z: (0..2 * n * n).map(|_| rng.sample(StandardNormal)).collect(),
        }
    }

    /// M1 from M0 with this noise scaled by `error`.
    pub fn perturb(&self, m0: &CostMatrix, error: &ErrorModel) -> CostMatrix {
        let n = self.n;
        let factor = |z: f64| {
            let f = 1.0 + error.mu + error.sigma * z;
            match error.negative {
                Negative::Fold => f.abs().max(1e-6),
                Negative::Floor(floor) => f.max(floor),
                Negative::Keep => f,
            }
        };
        CostMatrix::from_fn(n, |i, j| {
            let k = 2 * (i * n + j);
            let (l, b) = (m0.latency(i, j), m0.bandwidth(i, j));
            match error.target {
                ErrorTarget::Time => {
                    let f = factor(self.z[k]);
                    (l * f, b / f)
                }
                ErrorTarget::Separate => (l * factor(self.z[k]), b * factor(self.z[k + 1])),
            }
        })
    }
}

/// One experiment: every algorithm at every σ on `trials` random grids of `nodes` ranks.
#[derive(Debug, Clone)]
pub struct Experiment {
    /// Ranks.
    pub nodes: usize,
    /// Message size in bytes.
    pub bytes: usize,
    /// The grid.
    pub grid: GridSetup,
    /// Error mean μ, floor and target (σ comes from `sigmas`).
    pub error: ErrorModel,
    /// Values of σ.
    pub sigmas: Vec<f64>,
    /// Random grids.
    pub trials: usize,
    /// Seed of everything.
    pub seed: u64,
    /// The simulator's settings (α).
    pub sim: SimConfig,
    /// Worker threads (results do not depend on it).
    pub threads: usize,
}

impl Default for Experiment {
    /// The paper's setup at 100 nodes: 1 MB, σ = 0, 0.1, …, 0.5, 1000 trials, α = 100 µs.
    fn default() -> Experiment {
        Experiment {
            nodes: 100,
            bytes: 1_000_000,
            grid: GridSetup::default(),
            error: ErrorModel {
                mu: 0.0,
                sigma: 0.0,
                negative: Negative::Fold,
                target: ErrorTarget::Time,
            },
            sigmas: vec![0.0, 0.1, 0.2, 0.3, 0.4, 0.5],
            trials: 1000,
            seed: 1,
            sim: SimConfig { alpha: 100e-6 },
            threads: 2,
        }
    }
}

/// The completion times of one algorithm at one σ over all trials.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Algorithm name.
    pub algorithm: &'static str,
    /// Ranks.
    pub nodes: usize,
    /// σ.
    pub sigma: f64,
    /// Completion time (s) per trial, in trial order.
    pub times: Vec<f64>,
}

impl Point {
    /// Mean completion time: P(E).
    pub fn mean(&self) -> f64 {
        self.times.iter().sum::<f64>() / self.times.len().max(1) as f64
    }
    /// Sample standard deviation.
    pub fn std_dev(&self) -> f64 {
        let n = self.times.len();
        if n < 2 {
            return 0.0;
        }
        let m = self.mean();
        (self.times.iter().map(|t| (t - m) * (t - m)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
    /// The `q`-quantile (0 ≤ q ≤ 1, nearest rank).
    pub fn quantile(&self, q: f64) -> f64 {
        let mut t = self.times.clone();
        t.sort_by(f64::total_cmp);
        t.get(((t.len() as f64 - 1.0) * q).round() as usize)
            .copied()
            .unwrap_or(f64::NAN)
    }
}

/// The delay ratio `(P(E_σ) − P(E_0)) / P(E_0)` of `point` against `base` (same algorithm, σ = 0).
pub fn delay_ratio(point: &Point, base: &Point) -> f64 {
    (point.mean() - base.mean()) / base.mean()
}

/// The random stream of one trial.
pub fn trial_rng(seed: u64, nodes: usize, trial: usize) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(splitmix(
        seed ^ splitmix((nodes as u64) << 32 ^ trial as u64),
    ))
}

impl Experiment {
    /// Runs every algorithm of `algorithms` at every σ; points in (algorithm, σ) order.
    /// Fails if a schedule cannot be simulated (a scheduler bug).
    pub fn run(
        &self,
        algorithms: &[&(dyn BcastScheduler + Sync)],
    ) -> Result<Vec<Point>, crate::SimError> {
        let per_trial = |trial: usize| -> Result<Vec<f64>, crate::SimError> {
            let mut rng = trial_rng(self.seed, self.nodes, trial);
            let m0 = self.grid.random_matrix(self.nodes, &mut rng);
            let noise = Noise::draw(self.nodes, &mut rng);
            let mut out = Vec::with_capacity(algorithms.len() * self.sigmas.len());
            for alg in algorithms {
                for &sigma in &self.sigmas {
                    let m1 = noise.perturb(
                        &m0,
                        &ErrorModel {
                            sigma,
                            ..self.error
                        },
                    );
                    let schedules = alg.schedules(&m1, 0, self.bytes);
                    out.push(simulate(&schedules, &m0, &self.sim)?.delivery());
                }
            }
            Ok(out)
        };
        let threads = self.threads.clamp(1, self.trials.max(1));
        let mut rows: Vec<Option<Result<Vec<f64>, crate::SimError>>> = vec![None; self.trials];
        std::thread::scope(|s| {
            let chunks: Vec<_> = rows
                .chunks_mut(self.trials.div_ceil(threads).max(1))
                .enumerate()
                .map(|(c, chunk)| {
                    let first = c * self.trials.div_ceil(threads).max(1);
                    let per_trial = &per_trial;
                    s.spawn(move || {
                        for (k, slot) in chunk.iter_mut().enumerate() {
                            *slot = Some(per_trial(first + k));
                        }
                    })
                })
                .collect();
            for c in chunks {
                c.join().expect("a trial panicked");
            }
        });
        let rows: Vec<Vec<f64>> = rows
            .into_iter()
            .map(|r| r.expect("every trial ran"))
            .collect::<Result<_, _>>()?;
        let mut points = vec![];
        for (a, alg) in algorithms.iter().enumerate() {
            for (k, &sigma) in self.sigmas.iter().enumerate() {
                points.push(Point {
                    algorithm: alg.name(),
                    nodes: self.nodes,
                    sigma,
                    times: rows.iter().map(|r| r[a * self.sigmas.len() + k]).collect(),
                });
            }
        }
        Ok(points)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferry_sched::hetero::{Ecef, Ttcc};

    fn small() -> Experiment {
        Experiment {
            nodes: 24,
            trials: 20,
            sigmas: vec![0.0, 0.3],
            ..Experiment::default()
        }
    }

    #[test]
    fn fixed_seed_repeats_whatever_the_threads() {
        let a = small().run(&[&Ecef, &Ttcc]).unwrap();
        let b = Experiment {
            threads: 3,
            ..small()
        }
        .run(&[&Ecef, &Ttcc])
        .unwrap();
        assert_eq!(a, b);
        let c = Experiment { seed: 2, ..small() }.run(&[&Ecef]).unwrap();
        assert_ne!(a[0].times, c[0].times);
    }

    #[test]
    fn exact_measurements_ttcc_within_alpha_depth_of_ecef() {
        for (nodes, trial) in [2, 3, 5, 9, 17, 24, 40, 64]
            .into_iter()
            .flat_map(|n| (0..8).map(move |t| (n, t)))
        {
            let e = Experiment { nodes, ..small() };
            let mut rng = trial_rng(e.seed, e.nodes, trial);
            let m0 = e.grid.random_matrix(e.nodes, &mut rng);
            let ecef = Ecef.plan(&m0, 0, e.bytes);
            let ttcc = Ttcc.plan(&m0, 0, e.bytes);
            let te = simulate(&ecef.schedules(e.bytes), &m0, &e.sim).unwrap();
            let tt = simulate(&ttcc.schedules(e.bytes), &m0, &e.sim).unwrap();
            let depth = ecef.depths().into_iter().max().unwrap() as f64;
            assert!(
                tt.delivery() <= te.delivery() + e.sim.alpha * depth + 1e-9,
                "trial {trial}: {} vs {}",
                tt.delivery(),
                te.delivery()
            );
            // and the simulated ECEF time is the one ECEF predicted
            assert!((te.delivery() - ecef.predicted_completion()).abs() < 1e-9);
        }
    }

    #[test]
    fn hashed_grid_is_a_grid() {
        let g = HashedGrid {
            n: 40,
            setup: GridSetup::default(),
            seed: 9,
        };
        assert_eq!(g.latency(3, 17), g.latency(17, 3));
        assert!(g.bandwidth(0, 1) >= 10e6 && g.bandwidth(0, 39) <= 50e3);
    }
}
