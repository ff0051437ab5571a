//! What a signaling request's credential costs to check (`Policy::identify` then
//! `Policy::allow`), by kind of credential: the figure behind "a flood of forged tokens costs a
//! few microseconds each" (docs/security.md). Run: `cargo bench -p secrelay-gateway --bench
//! access`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use secrelay_gateway::server::auth::{mint, unix_now, Claims, Grants, Need, Policy};
use secrelay_gateway::server::ServeConfig;

const KEY: &str = "0123456789abcdef0123456789abcdef-bench";

fn claims(exp: u64) -> Claims {
    Claims {
        iss: None,
        sub: "alice".into(),
        exp,
        nbf: None,
        iat: None,
        grants: Grants {
            room: Some("r".into()),
            publish: true,
            subscribe: true,
            ..Grants::default()
        },
    }
}

fn access(c: &mut Criterion) {
    let mut config = ServeConfig::default();
    config.api_keys.insert("k1".into(), KEY.into());
    config.admin_key = Some("admin-0123456789abcdef0123456789abcdef".into());
    let policy = Policy::new(&config);
    let now = unix_now();
    let valid = format!(
        "Bearer {}",
        mint("k1", KEY.as_bytes(), &claims(now + 3600)).unwrap()
    );
    let forged = {
        // The valid token's header and claims, another signature.
        let mut t = valid.clone();
        t.pop();
        t.push(if valid.ends_with('A') { 'B' } else { 'A' });
        t
    };
    let expired = format!(
        "Bearer {}",
        mint("k1", KEY.as_bytes(), &claims(now - 3600)).unwrap()
    );
    let unknown = format!(
        "Bearer {}",
        mint(
            "k9",
            b"ffffffffffffffffffffffffffffffffffff",
            &claims(now + 3600)
        )
        .unwrap()
    );
    let mut g = c.benchmark_group("access");
    for (name, value) in [
        ("valid token", Some(valid.as_str())),
        ("forged signature", Some(forged.as_str())),
        ("expired token", Some(expired.as_str())),
        ("unknown key", Some(unknown.as_str())),
        ("malformed", Some("Bearer x.y.z")),
        (
            "admin key",
            Some("Bearer admin-0123456789abcdef0123456789abcdef"),
        ),
        ("anonymous", None),
    ] {
        g.bench_function(name, |b| {
            b.iter(|| {
                let caller = policy.identify(black_box(value.map(str::as_bytes)), Some("r"));
                black_box(caller.map(|c| policy.allow(&c, "r", Need::Publish)))
            })
        });
    }
    g.finish();
}

criterion_group!(benches, access);
criterion_main!(benches);
