//! `secrelay lab …` in a build without the lab (`--no-default-features`): every study is
//! refused with a message that says how the binary was built. Compiled in every build (and
//! tested in the default one), so the lab-less binary's only code of its own cannot rot.
#![cfg_attr(feature = "lab", allow(dead_code))]

use clap::Subcommand;

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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(subcommand)]
        lab: NoLab,
    }

    #[test]
    fn any_study_is_refused_by_name() {
        let cli = Cli::try_parse_from(["secrelay-lab", "srtp", "--quick"]).unwrap();
        let e = run(cli.lab).unwrap_err().to_string();
        assert!(e.starts_with("lab srtp: "), "{e}");
        assert!(e.contains("without the lab"), "{e}");
    }
}
