//! The live budgets every live subcommand takes (`run --backend live`,
//! `diff`, `fuzz`, `show --backend live`): one clap `Args` struct,
//! flattened into each. See docs/live.md, "Budgets".

use clap::Args;
use ptlab_live::{Amount, LiveLimits};

#[derive(Args, Clone, Debug, Default)]
#[command(next_help_heading = "Live budgets (checked before every statement on the live kernel)")]
pub struct LimitArgs {
    /// Memory the scenario's processes may populate: a size (8G, 512M) or a
    /// percentage of MemAvailable (75%). Default: 50% of MemAvailable. Each
    /// statement's worst case (its range in whole 2 MiB blocks) plus what
    /// the processes hold must fit, or the run stops before populating
    #[arg(long, value_name = "SIZE|N%", value_parser = parse_amount)]
    pub max_memory: Option<Amount>,

    /// Scenario processes alive at once (main and fork children not yet
    /// exited). Default: 256
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_procs: Option<u64>,

    /// Largest `swap SIZE` file: a size (4G) or a percentage of the free
    /// space where the swap file goes (50%). Default: 25% of that free
    /// space; 256 MiB always stay free
    #[arg(long, value_name = "SIZE|N%", value_parser = parse_amount)]
    pub max_swap: Option<Amount>,
}

fn parse_amount(s: &str) -> Result<Amount, String> {
    Amount::parse(s)
}

impl LimitArgs {
    pub fn limits(&self) -> LiveLimits {
        LiveLimits {
            max_memory: self.max_memory,
            max_procs: self.max_procs,
            max_swap: self.max_swap,
        }
    }
}
