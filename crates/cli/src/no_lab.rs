//! `secrelay lab …` and `secrelay demo` in the deployment build (`--no-default-features`),
//! which leaves out the lab and the demo's simulated participants (the test kit): refused
//! with a message that says how the binary was built. Compiled in every build (and tested in
//! the default one), so the deployment binary's only code of its own cannot rot.
#![cfg_attr(all(feature = "lab", feature = "demo"), allow(dead_code))]

use clap::{Args, Subcommand};

/// Whatever follows `lab` in a build without it.
#[derive(Subcommand, Debug)]
pub enum NoLab {
    /// Any study and its flags.
    #[command(external_subcommand)]
    Any(Vec<String>),
}

/// Refuses the study, naming it and the build.
pub fn run(c: NoLab) -> anyhow::Result<()> {
    let NoLab::Any(args) = c;
    let study = args.first().map_or("", String::as_str);
    Err(anyhow::anyhow!(
        "lab {study}: this secrelay was built without the lab (cargo feature `lab`, on by \
         default; a deployment build leaves it out); build it with `cargo build --release -p \
         secrelay` to run the studies"
    ))
}

/// Whatever follows `demo` in a build without it.
#[derive(Args, Debug)]
pub struct NoDemo {
    /// The demo's flags.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// Refuses the demo, naming the build.
pub fn run_demo(_: &NoDemo) -> anyhow::Result<()> {
    Err(anyhow::anyhow!(
        "demo: this secrelay was built without the demo (cargo feature `demo`, on by default; a          deployment build leaves it and its simulated participants out); build it with `cargo          build --release -p secrelay` to run the demo"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        lab: NoLab,
    }

    #[derive(Parser, Debug)]
    struct DemoCli {
        #[command(flatten)]
        demo: NoDemo,
    }

    #[test]
    fn the_demo_is_refused_with_the_build_named() {
        let cli = DemoCli::try_parse_from(["secrelay-demo", "--seconds", "3"]).unwrap();
        let e = run_demo(&cli.demo).unwrap_err().to_string();
        assert!(e.starts_with("demo: "), "{e}");
        assert!(e.contains("without the demo"), "{e}");
    }

    #[test]
    fn any_study_is_refused_by_name() {
        let cli = Cli::try_parse_from(["secrelay-lab", "srtp", "--quick"]).unwrap();
        let e = run(cli.lab).unwrap_err().to_string();
        assert!(e.starts_with("lab srtp: "), "{e}");
        assert!(e.contains("without the lab"), "{e}");
    }
}
