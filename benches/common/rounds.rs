//! Rounds of one workload against several servers in turn: finding the
//! no-engine responder, the order each round runs the servers in, and the
//! table of medians and of the rounds' own ratios. It measures nothing
//! itself: a workload is a function from a server binary to its figures.

use std::path::Path;
use std::process::Command;

use super::median;

/// The no-engine responder of `../shared/tools/limit-server` (the ceiling
/// of thread per connection on this machine): `LIMIT_SERVER` if set ("" to
/// skip it), else built on demand from the sources beside the repository
/// into `target/tools`. `None`, with a note printed, when there is none.
pub fn limit_server() -> Option<String> {
    if let Ok(path) = std::env::var("LIMIT_SERVER") {
        if !path.is_empty() && !Path::new(&path).exists() {
            println!("(no responder: LIMIT_SERVER={path} does not exist)");
        }
        return Some(path).filter(|p| Path::new(p).exists());
    }
    let repo = env!("CARGO_MANIFEST_DIR");
    let manifest = format!("{repo}/../shared/tools/limit-server/Cargo.toml");
    if !Path::new(&manifest).exists() {
        println!("(no responder: {manifest} is absent; set LIMIT_SERVER to its binary)");
        return None;
    }
    let target = format!("{repo}/target/tools");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let build = ["build", "--release", "--quiet", "--manifest-path", &manifest, "--target-dir", &target];
    match Command::new(cargo).args(build).status() {
        Ok(status) if status.success() => Some(format!("{target}/release/limit-server")),
        _ => {
            println!("(no responder: building {manifest} failed; set LIMIT_SERVER to its binary)");
            None
        }
    }
}

/// `rounds` runs of `measure` on each of `binaries`, each round starting
/// one server later than the last (ours first, then beanstalkd first, ...),
/// so that none always meets the machine as another left it. Returns each
/// binary's rounds, in the order given.
pub fn alternate<T>(binaries: &[&str], rounds: usize, measure: impl Fn(&str) -> T) -> Vec<Vec<T>> {
    let mut each: Vec<Vec<T>> = binaries.iter().map(|_| Vec::new()).collect();
    for round in 0..rounds {
        for k in 0..binaries.len() {
            let i = (round + k) % binaries.len();
            each[i].push(measure(binaries[i]));
        }
    }
    each
}

/// Ours against theirs over paired rounds: the ratio of the medians and,
/// with more than one round, the range of the rounds' own ratios (a shared
/// machine's noise, to read a difference against). "-" without theirs.
pub fn ratio_of_rounds(ours: &[f64], theirs: &[f64]) -> String {
    if theirs.is_empty() || median(theirs.to_vec()) <= 0.0 {
        return "-".to_owned();
    }
    let ratio = median(ours.to_vec()) / median(theirs.to_vec());
    if ours.len() < 2 {
        return format!("{ratio:.2}");
    }
    let each = ours.iter().zip(theirs).map(|(a, b)| a / b);
    let (low, high) = each.fold((f64::MAX, f64::MIN), |(l, h), r| (l.min(r), h.max(r)));
    format!("{ratio:.2} ({low:.2} to {high:.2})")
}

/// A figure as a table shows it: three significant digits or whole.
pub fn shown(v: f64) -> String {
    match v.abs() {
        a if a >= 100.0 => format!("{v:.0}"),
        a if a >= 10.0 => format!("{v:.1}"),
        a if a >= 1.0 => format!("{v:.2}"),
        _ => format!("{v:.3}"),
    }
}

/// A table of figures, one column a server (ours first) and one ratio
/// column for ours against each other server.
pub struct Table<'a> {
    pub servers: &'a [&'a str],
}

impl Table<'_> {
    pub fn header(&self, title: &str) {
        print!("\n{title}\n{:<46}", "");
        self.servers.iter().for_each(|name| print!(" {name:>11}"));
        self.servers[1..].iter().for_each(|name| print!(" {:>22}", format!("ours/{name}")));
        println!();
    }

    /// One figure's row from each server's rounds: the medians, then ours
    /// against each other server.
    pub fn row(&self, name: &str, each: &[Vec<f64>]) {
        print!("{name:<46}");
        each.iter().for_each(|rounds| print!(" {:>11}", shown(median(rounds.clone()))));
        each[1..].iter().for_each(|theirs| print!(" {:>22}", ratio_of_rounds(&each[0], theirs)));
        println!();
    }

    /// Every round's value, each server's in the order they ran: a round
    /// far from the others is a finding of its own.
    pub fn each_round(&self, name: &str, each: &[Vec<f64>]) {
        let listed = |rounds: &Vec<f64>| rounds.iter().map(|&v| shown(v)).collect::<Vec<_>>().join(" ");
        let servers = self.servers.iter().zip(each);
        let all: Vec<String> =
            servers.map(|(server, rounds)| format!("{server} {}", listed(rounds))).collect();
        println!("  {name}: {}", all.join("; "));
    }
}
