//! `secrelay token create`: an access token for one person, signed with one of the gateway's
//! API keys, printed for an operator, a script or the demo.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args, Subcommand};
use secrelay_gateway::server::auth::{self, Claims, Grants, Secret};
use secrelay_gateway::server::ServeConfig;

/// What `secrelay token` does.
#[derive(Subcommand, Debug)]
pub enum TokenCommand {
    /// Print a signed access token (a JWT, HS256) for one identity.
    Create(CreateArgs),
}

/// Flags of `secrelay token create`.
#[derive(Args, Debug)]
pub struct CreateArgs {
    /// The API key that signs (its id in the gateway's `api_keys`).
    #[arg(long, value_name = "KEY")]
    pub key: String,
    /// The gateway's configuration, whose `api_keys` holds the key's secret.
    #[arg(long, value_name = "FILE", conflicts_with = "secret_file")]
    pub config: Option<PathBuf>,
    /// A file holding the key's secret (else --config, else $SECRELAY_API_SECRET).
    #[arg(long, value_name = "FILE")]
    pub secret_file: Option<PathBuf>,
    /// Who the token is for: the participant's name in the API, the room page and webhooks.
    #[arg(long)]
    pub identity: String,
    /// The one room it is for (default: every room; the calls of the ng socket only when
    /// named, `call:…`).
    #[arg(long, conflicts_with = "room_prefix")]
    pub room: Option<String>,
    /// Every room whose name starts with this.
    #[arg(long, value_name = "PREFIX")]
    pub room_prefix: Option<String>,
    /// May send media (WHIP, joins, telephony legs).
    #[arg(long)]
    pub publish: bool,
    /// May receive media (WHEP, joins, telephony legs).
    #[arg(long)]
    pub subscribe: bool,
    /// May change the room and end others' sessions.
    #[arg(long)]
    pub admin: bool,
    /// May list the rooms and their participants.
    #[arg(long)]
    pub list: bool,
    /// How long it is valid: seconds, or with a unit (90s, 15m, 1h, 2d).
    #[arg(long, default_value = "1h", value_parser = parse_ttl)]
    pub ttl: Duration,
}

/// `90`, `90s`, `15m`, `1h`, `2d`.
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?}: a number of seconds, or with s, m, h or d"))?;
    let secs = match unit {
        "" | "s" => n,
        "m" => n.saturating_mul(60),
        "h" => n.saturating_mul(3600),
        "d" => n.saturating_mul(86_400),
        _ => return Err(format!("{s:?}: the unit is s, m, h or d")),
    };
    if secs == 0 {
        return Err("the token would never be valid: give a time above 0".into());
    }
    Ok(Duration::from_secs(secs))
}

/// The secret of `key`, from wherever the flags say.
fn secret(a: &CreateArgs) -> Result<Secret> {
    if let Some(path) = &a.secret_file {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("--secret-file {}", path.display()))?;
        return Ok(Secret::from(text.trim()));
    }
    if let Some(path) = &a.config {
        let c = ServeConfig::from_file(path).map_err(|e| anyhow!("{e}"))?;
        return c.api_keys.get(&a.key).cloned().ok_or_else(|| {
            anyhow!(
                "--config {}: api_keys has no key {:?}",
                path.display(),
                a.key
            )
        });
    }
    match std::env::var("SECRELAY_API_SECRET") {
        Ok(s) if !s.is_empty() => Ok(Secret::from(s)),
        _ => bail!("the key's secret: give --config, --secret-file or $SECRELAY_API_SECRET"),
    }
}

/// The claims the flags ask for, valid from now for `ttl`.
pub fn claims(a: &CreateArgs) -> Claims {
    let now = auth::unix_now();
    Claims {
        iss: None,
        sub: a.identity.clone(),
        exp: now.saturating_add(a.ttl.as_secs()),
        nbf: None,
        iat: Some(now),
        grants: Grants {
            room: a.room.clone(),
            room_prefix: a.room_prefix.clone(),
            publish: a.publish,
            subscribe: a.subscribe,
            admin: a.admin,
            list: a.list,
        },
    }
}

/// Runs `secrelay token …`.
pub fn run(c: TokenCommand) -> Result<()> {
    match c {
        TokenCommand::Create(a) => {
            if !(a.publish || a.subscribe || a.admin || a.list) {
                bail!(
                    "the token would allow nothing: give --publish, --subscribe, --admin or --list"
                );
            }
            let secret = secret(&a)?;
            let token = auth::mint(&a.key, secret.expose().as_bytes(), &claims(&a))
                .map_err(|e| anyhow!("{e}"))?;
            println!("{token}");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttls_parse_with_units_and_refuse_nonsense() {
        assert_eq!(parse_ttl("90").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_ttl("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(parse_ttl("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(parse_ttl("2d").unwrap(), Duration::from_secs(172_800));
        assert!(parse_ttl("0").is_err());
        assert!(parse_ttl("1w").is_err());
        assert!(parse_ttl("h").is_err());
    }
}
