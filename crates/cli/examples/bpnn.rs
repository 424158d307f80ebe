//! Data-parallel back-propagation neural network training on the UCI Iris
//! data set (seed 004 §4.2's application, over groups or point to point).
//!
//! ```sh
//! cargo build --release -p bulkwire --example bpnn
//! bulkwire run -n 8 target/release/examples/bpnn [--epochs N] [--p2p] [--json]
//! ```
//!
//! Every process reads the 150 flowers that `linfa-datasets` ships, splits
//! them the same way (stratified: 40 of each species to train, 10 to test,
//! drawn with a fixed seed) and standardises the four features by the
//! training set's mean and deviation. The network has one hidden layer
//! (4-H-3, tanh, softmax output, cross-entropy loss) and learns by full-batch
//! gradient descent. Rank 0 draws the initial weights with a fixed seed and
//! broadcasts them; each process computes the gradient of its share of the
//! training set (samples rank, rank + P, …); an allreduce sums the gradients
//! and every process applies the same update. With `--p2p` the program uses
//! point-to-point messages only, as a program without group communication
//! would: the weights go from rank 0 to each process, each gradient to rank
//! 0, which sums them in rank order, updates the weights and sends them back
//! to every process.
//!
//! Rank 0 prints the training loss every `--every` epochs, the final loss,
//! the test accuracy and the wall time of the training loop (from a barrier
//! before the first broadcast to a barrier after the last update); with
//! `--json`, one row in the project's row format instead.

use std::error::Error;
use std::process::ExitCode;

use bulkwire_bench::rows::{Report, Row};
use bulkwire_comm::{Source, Tag, World};
use bulkwire_groups::{Groups, Op};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const FEATURES: usize = 4;
const CLASSES: usize = 3;
/// Flowers of each species held out for the test set (of 50).
const TEST_PER_CLASS: usize = 10;
/// Point-to-point tags: weights from rank 0, gradients to it.
const WEIGHTS: i32 = 1;
const GRADIENT: i32 = 2;

const USAGE: &str = "usage: bpnn [--epochs N] [--every K] [--hidden H] [--rate LR] [--seed S] [--p2p] [--json]

Trains a 4-H-3 network on the Iris data set, data parallel over the job's
processes: weights broadcast from rank 0, gradients summed by allreduce, or
with --p2p by point-to-point messages through rank 0.

  --epochs N   full-batch epochs (default 500)
  --every K    print the training loss every K epochs (default epochs / 10)
  --hidden H   hidden units (default 16)
  --rate LR    learning rate (default 0.5)
  --seed S     seed of the split and of the initial weights (default 4)
  --p2p        point-to-point sends and receives only, no group
  --json       one row (bench bpnn) as JSON instead of the text";

struct Options {
    epochs: usize,
    every: usize,
    hidden: usize,
    rate: f64,
    seed: u64,
    p2p: bool,
    json: bool,
}

fn parse(args: &[String]) -> Result<Options, String> {
    let mut o = Options { epochs: 500, every: 0, hidden: 16, rate: 0.5, seed: 4, p2p: false, json: false };
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match arg.as_str() {
            "--epochs" => o.epochs = number(value("--epochs")?)?,
            "--every" => o.every = number(value("--every")?)?,
            "--hidden" => o.hidden = number(value("--hidden")?)?,
            "--rate" => o.rate = number(value("--rate")?)?,
            "--seed" => o.seed = number(value("--seed")?)?,
            "--p2p" => o.p2p = true,
            "--json" => o.json = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if o.epochs == 0 || o.hidden == 0 {
        return Err("--epochs and --hidden must be at least 1".into());
    }
    if o.every == 0 {
        o.every = (o.epochs / 10).max(1);
    }
    Ok(o)
}

fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("not a number: {text}"))
}

/// The split data set, standardised.
struct Data {
    train_x: Vec<[f64; FEATURES]>,
    train_y: Vec<usize>,
    test_x: Vec<[f64; FEATURES]>,
    test_y: Vec<usize>,
}

/// Iris, split by species with a fixed seed and standardised by the
/// training set's mean and standard deviation: the same on every process.
fn iris(seed: u64) -> Data {
    let set = linfa_datasets::iris();
    let (records, targets) = (set.records(), set.targets());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (mut train, mut test) = (Vec::new(), Vec::new());
    for class in 0..CLASSES {
        let mut of_class: Vec<usize> = (0..targets.len()).filter(|&i| targets[i] == class).collect();
        of_class.shuffle(&mut rng);
        test.extend_from_slice(&of_class[..TEST_PER_CLASS]);
        train.extend_from_slice(&of_class[TEST_PER_CLASS..]);
    }
    // Mixed species in the training order, so every process's share holds
    // all three.
    train.shuffle(&mut rng);
    let row = |i: usize| std::array::from_fn::<f64, FEATURES, _>(|f| records[[i, f]]);
    let n = train.len() as f64;
    let mean: [f64; FEATURES] = std::array::from_fn(|f| train.iter().map(|&i| records[[i, f]]).sum::<f64>() / n);
    let std: [f64; FEATURES] =
        std::array::from_fn(|f| (train.iter().map(|&i| (records[[i, f]] - mean[f]).powi(2)).sum::<f64>() / n).sqrt());
    let scale = |x: [f64; FEATURES]| std::array::from_fn(|f| (x[f] - mean[f]) / std[f]);
    Data {
        train_x: train.iter().map(|&i| scale(row(i))).collect(),
        train_y: train.iter().map(|&i| targets[i]).collect(),
        test_x: test.iter().map(|&i| scale(row(i))).collect(),
        test_y: test.iter().map(|&i| targets[i]).collect(),
    }
}

/// The network's shape and where each block of weights sits in one flat
/// vector: W1 (hidden × features), b1, W2 (classes × hidden), b2.
#[derive(Clone, Copy)]
struct Net {
    hidden: usize,
}

impl Net {
    fn len(self) -> usize {
        self.hidden * FEATURES + self.hidden + CLASSES * self.hidden + CLASSES
    }

    fn offsets(self) -> (usize, usize, usize) {
        let b1 = self.hidden * FEATURES;
        let w2 = b1 + self.hidden;
        (b1, w2, w2 + CLASSES * self.hidden)
    }

    /// Uniform Glorot initialisation of the weights, biases zero.
    fn init(self, seed: u64) -> Vec<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        rng.set_stream(1);
        let (b1, w2, b2) = self.offsets();
        let mut w = vec![0.0; self.len()];
        let a1 = (6.0 / (FEATURES + self.hidden) as f64).sqrt();
        let a2 = (6.0 / (self.hidden + CLASSES) as f64).sqrt();
        w[..b1].iter_mut().for_each(|x| *x = rng.random_range(-a1..a1));
        w[w2..b2].iter_mut().for_each(|x| *x = rng.random_range(-a2..a2));
        w
    }

    /// Hidden activations and class probabilities of one sample.
    fn forward(self, w: &[f64], x: &[f64; FEATURES], h: &mut [f64], p: &mut [f64; CLASSES]) {
        let (b1, w2, b2) = self.offsets();
        for (j, hj) in h.iter_mut().enumerate() {
            let row = &w[j * FEATURES..(j + 1) * FEATURES];
            *hj = (w[b1 + j] + row.iter().zip(x).map(|(a, b)| a * b).sum::<f64>()).tanh();
        }
        for (k, pk) in p.iter_mut().enumerate() {
            let row = &w[w2 + k * self.hidden..w2 + (k + 1) * self.hidden];
            *pk = w[b2 + k] + row.iter().zip(h.iter()).map(|(a, b)| a * b).sum::<f64>();
        }
        let top = p.iter().copied().fold(f64::MIN, f64::max);
        p.iter_mut().for_each(|z| *z = (*z - top).exp());
        let total: f64 = p.iter().sum();
        p.iter_mut().for_each(|z| *z /= total);
    }

    /// Adds to `grad` the gradient of the summed cross-entropy of the
    /// samples `xs`/`ys` and puts their summed loss in its last element.
    fn gradient(self, w: &[f64], xs: &[&[f64; FEATURES]], ys: &[usize], grad: &mut [f64]) {
        let (b1, w2, b2) = self.offsets();
        let (mut h, mut p, mut dh) = (vec![0.0; self.hidden], [0.0; CLASSES], vec![0.0; self.hidden]);
        let mut loss = 0.0;
        for (x, &y) in xs.iter().zip(ys) {
            self.forward(w, x, &mut h, &mut p);
            loss -= p[y].max(f64::MIN_POSITIVE).ln();
            dh.iter_mut().for_each(|d| *d = 0.0);
            for k in 0..CLASSES {
                let dz = p[k] - if k == y { 1.0 } else { 0.0 };
                grad[b2 + k] += dz;
                for j in 0..self.hidden {
                    grad[w2 + k * self.hidden + j] += dz * h[j];
                    dh[j] += dz * w[w2 + k * self.hidden + j];
                }
            }
            for j in 0..self.hidden {
                let d = dh[j] * (1.0 - h[j] * h[j]);
                grad[b1 + j] += d;
                for f in 0..FEATURES {
                    grad[j * FEATURES + f] += d * x[f];
                }
            }
        }
        grad[self.len()] += loss;
    }

    /// Correctly classified samples.
    fn correct(self, w: &[f64], xs: &[[f64; FEATURES]], ys: &[usize]) -> usize {
        let (mut h, mut p) = (vec![0.0; self.hidden], [0.0; CLASSES]);
        xs.iter()
            .zip(ys)
            .filter(|(x, &y)| {
                self.forward(w, x, &mut h, &mut p);
                (0..CLASSES).max_by(|&a, &b| p[a].total_cmp(&p[b])) == Some(y)
            })
            .count()
    }
}

fn to_bytes(v: &[f64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn from_bytes(bytes: &[u8], v: &mut [f64]) -> Result<(), Box<dyn Error>> {
    if bytes.len() != v.len() * 8 {
        return Err(format!("a message of {} bytes where {} were expected", bytes.len(), v.len() * 8).into());
    }
    for (x, b) in v.iter_mut().zip(bytes.chunks_exact(8)) {
        *x = f64::from_le_bytes(b.try_into().expect("8 bytes"));
    }
    Ok(())
}

/// What training found.
struct Outcome {
    losses: Vec<(usize, f64)>,
    initial_loss: f64,
    final_loss: f64,
    weights: Vec<f64>,
    seconds: f64,
    /// Every process ended with rank 0's weights, bit for bit.
    agree: bool,
}

/// How the processes exchange weights and gradients.
trait Exchange {
    /// Rank 0's `w` to every process.
    fn weights(&self, w: &mut [f64]) -> Result<(), Box<dyn Error>>;
    /// Sums `grad` over the processes and leaves `w` updated by
    /// `step(w, sum)` on every process.
    fn step(&self, grad: &mut [f64], w: &mut [f64], step: &dyn Fn(&mut [f64], &[f64])) -> Result<(), Box<dyn Error>>;
    /// Processes whose weights differ from rank 0's (known at rank 0).
    fn disagreeing(&self, w: &[f64]) -> Result<u32, Box<dyn Error>>;
    fn barrier(&self) -> Result<(), Box<dyn Error>>;
}

/// Broadcast and allreduce on the group of every process.
struct Collective<'g>(bulkwire_groups::Group<'g>);

impl Exchange for Collective<'_> {
    fn weights(&self, w: &mut [f64]) -> Result<(), Box<dyn Error>> {
        let mut bytes = to_bytes(w);
        self.0.bcast(0, &mut bytes)?;
        from_bytes(&bytes, w)
    }

    fn step(&self, grad: &mut [f64], w: &mut [f64], step: &dyn Fn(&mut [f64], &[f64])) -> Result<(), Box<dyn Error>> {
        self.0.allreduce(grad, Op::Sum)?;
        step(w, grad);
        Ok(())
    }

    fn disagreeing(&self, w: &[f64]) -> Result<u32, Box<dyn Error>> {
        let mut root = w.to_vec();
        self.weights(&mut root)?;
        let mut differ = [i32::from(root.iter().zip(w).any(|(a, b)| a.to_bits() != b.to_bits()))];
        self.0.allreduce(&mut differ, Op::Sum)?;
        Ok(differ[0] as u32)
    }

    fn barrier(&self) -> Result<(), Box<dyn Error>> {
        Ok(self.0.barrier()?)
    }
}

/// Point-to-point messages through rank 0.
struct PointToPoint<'w>(&'w World);

impl PointToPoint<'_> {
    fn recv_from(&self, from: u32, tag: i32, v: &mut [f64]) -> Result<(), Box<dyn Error>> {
        let (_, bytes) = self.0.recv(Source::Rank(from), Tag::Is(tag))?;
        from_bytes(&bytes, v)
    }

    fn send_to_all(&self, tag: i32, v: &[f64]) -> Result<(), Box<dyn Error>> {
        let bytes = to_bytes(v);
        for to in 1..self.0.size() {
            self.0.send(to, tag, &bytes)?;
        }
        Ok(())
    }
}

impl Exchange for PointToPoint<'_> {
    fn weights(&self, w: &mut [f64]) -> Result<(), Box<dyn Error>> {
        if self.0.rank() == 0 {
            self.send_to_all(WEIGHTS, w)
        } else {
            self.recv_from(0, WEIGHTS, w)
        }
    }

    fn step(&self, grad: &mut [f64], w: &mut [f64], step: &dyn Fn(&mut [f64], &[f64])) -> Result<(), Box<dyn Error>> {
        if self.0.rank() == 0 {
            let mut other = vec![0.0; grad.len()];
            for from in 1..self.0.size() {
                self.recv_from(from, GRADIENT, &mut other)?;
                grad.iter_mut().zip(&other).for_each(|(g, o)| *g += o);
            }
            step(w, grad);
            self.send_to_all(WEIGHTS, w)
        } else {
            self.0.send(0, GRADIENT, &to_bytes(grad))?;
            self.recv_from(0, WEIGHTS, w)
        }
    }

    fn disagreeing(&self, w: &[f64]) -> Result<u32, Box<dyn Error>> {
        if self.0.rank() != 0 {
            self.0.send(0, WEIGHTS, &to_bytes(w))?;
            return Ok(0);
        }
        let mut other = vec![0.0; w.len()];
        let mut differ = 0;
        for from in 1..self.0.size() {
            self.recv_from(from, WEIGHTS, &mut other)?;
            differ += u32::from(other.iter().zip(w).any(|(a, b)| a.to_bits() != b.to_bits()));
        }
        Ok(differ)
    }

    fn barrier(&self) -> Result<(), Box<dyn Error>> {
        Ok(self.0.barrier()?)
    }
}

fn train(world: &World, ex: &dyn Exchange, o: &Options, net: Net, data: &Data) -> Result<Outcome, Box<dyn Error>> {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let mine: Vec<usize> = (rank..data.train_x.len()).step_by(size).collect();
    let xs: Vec<&[f64; FEATURES]> = mine.iter().map(|&i| &data.train_x[i]).collect();
    let ys: Vec<usize> = mine.iter().map(|&i| data.train_y[i]).collect();
    let n = data.train_x.len() as f64;
    let rate = o.rate;
    let update = move |w: &mut [f64], sum: &[f64]| w.iter_mut().zip(sum).for_each(|(x, g)| *x -= rate * g / n);

    let mut w = if rank == 0 { net.init(o.seed) } else { vec![0.0; net.len()] };
    // The gradient and, in its last element, the summed loss.
    let mut grad = vec![0.0; net.len() + 1];
    let mut losses = Vec::new();
    let (mut initial_loss, mut final_loss) = (f64::NAN, f64::NAN);
    ex.barrier()?;
    let start = world.wtime();
    ex.weights(&mut w)?;
    for epoch in 1..=o.epochs {
        grad.iter_mut().for_each(|g| *g = 0.0);
        net.gradient(&w, &xs, &ys, &mut grad);
        ex.step(&mut grad, &mut w, &update)?;
        // The mean loss of the weights this epoch started with (known at
        // rank 0 in both modes).
        let loss = grad[net.len()] / n;
        if epoch == 1 {
            initial_loss = loss;
        }
        if epoch % o.every == 0 || epoch == 1 {
            losses.push((epoch, loss));
        }
        final_loss = loss;
    }
    ex.barrier()?;
    let seconds = world.wtime() - start;
    let agree = ex.disagreeing(&w)? == 0;
    Ok(Outcome { losses, initial_loss, final_loss, weights: w, seconds, agree })
}

fn run(o: &Options) -> Result<(), Box<dyn Error>> {
    let world = World::init()?;
    let data = iris(o.seed);
    let net = Net { hidden: o.hidden };
    let outcome = if o.p2p {
        train(&world, &PointToPoint(&world), o, net, &data)?
    } else {
        let groups = Groups::new(&world)?;
        train(&world, &Collective(groups.world()), o, net, &data)?
    };
    if world.rank() == 0 {
        report(o, world.size(), &data, net, &outcome);
    }
    world.finalize()?;
    if !outcome.agree {
        return Err("the processes ended with different weights".into());
    }
    Ok(())
}

fn report(o: &Options, procs: u32, data: &Data, net: Net, out: &Outcome) {
    let correct = net.correct(&out.weights, &data.test_x, &data.test_y);
    let tests = data.test_y.len();
    let accuracy = correct as f64 / tests as f64;
    let what = if o.p2p { "p2p" } else { "groups" };
    if o.json {
        let row = Row::new("bpnn", "bulkwire", what, procs)
            .with("epochs_count", o.epochs)
            .with("hidden_count", o.hidden)
            .with("learning_rate", o.rate)
            .with("train_samples_count", data.train_y.len())
            .with("test_samples_count", tests)
            .with("initial_loss", out.initial_loss)
            .with("final_loss", out.final_loss)
            .with("test_accuracy_share", accuracy)
            .with("train_s", out.seconds)
            .with("weights_agree", out.agree);
        println!("{}", Report { rows: vec![row], notes: Vec::new() }.json());
        return;
    }
    println!(
        "# bpnn: Iris, {} flowers to train and {tests} to test (stratified, seed {}), network {FEATURES}-{}-{CLASSES} \
         (tanh, softmax, cross-entropy), full batch, learning rate {}",
        data.train_y.len(),
        o.seed,
        o.hidden,
        o.rate
    );
    println!(
        "# {procs} processes, {}",
        if o.p2p {
            "point to point: weights from rank 0 to each, gradients to rank 0"
        } else {
            "groups: weights by bcast from rank 0, gradients by allreduce (sum)"
        }
    );
    for (epoch, loss) in &out.losses {
        println!("epoch {epoch:>6}  loss {loss:.6}");
    }
    println!("final loss {:.6} after {} epochs", out.final_loss, o.epochs);
    println!("test accuracy {accuracy:.4} ({correct} of {tests})");
    println!("training loop {:.3} s ({:.3} ms per epoch)", out.seconds, out.seconds * 1e3 / o.epochs as f64);
    println!("weights identical on every process: {}", if out.agree { "yes" } else { "NO" });
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let options = match parse(&args) {
        Ok(o) => o,
        Err(message) => {
            if message.is_empty() {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            eprintln!("bpnn: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bpnn: {e}");
            ExitCode::FAILURE
        }
    }
}
