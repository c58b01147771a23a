//! The configuration's tests: defaults, files, flags, validation.

use super::*;

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn defaults_listen_on_loopback_7700() {
    let c = Config::from_args(&[]).unwrap();
    assert_eq!(c.listen.to_string(), "127.0.0.1:7700");
    assert_eq!(c.metrics_listen.unwrap().to_string(), "127.0.0.1:7701");
    assert!(c.shards >= 1 && c.event_loops >= 1);
}

#[test]
fn flags_override_the_file_which_overrides_defaults() {
    let mut c = Config::default();
    c.merge_toml("listen = \"127.0.0.1:9000\"\nmax_connections = 5\nmetrics_listen = \"off\"\n")
        .unwrap();
    c.merge_flags(&args(&["--max-connections", "7"])).unwrap();
    assert_eq!(
        (c.listen.port(), c.max_connections, c.metrics_listen),
        (9000, 7, None)
    );
}

#[test]
fn durability_settings_come_from_the_file_and_the_flags() {
    let c = Config::from_args(&[]).unwrap();
    assert_eq!(c.sync, Sync::Always);
    assert!(c.data_dir.ends_with("fila") || c.data_dir.ends_with("fila-data"));
    let mut c = Config::default();
    c.merge_toml("sync = \"interval\"\nsync_interval_ms = 20\ndata_dir = \"/x\"\n")
        .unwrap();
    assert_eq!(
        (c.sync, c.sync_interval_ms, c.data_dir.to_str()),
        (Sync::Interval, 20, Some("/x"))
    );
    c.merge_flags(&args(&["--sync", "none", "--data-dir", "/y"]))
        .unwrap();
    assert_eq!((c.sync, c.data_dir.to_str()), (Sync::None, Some("/y")));
    let e = Config::from_args(&args(&["--sync", "sometimes"]))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "--sync: \"sometimes\" is not one of always, interval, none"
    );
    let e = Config::from_args(&args(&["--sync", "interval", "--sync-interval-ms", "0"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("sync_interval_ms must be 1..=60000"), "{e}");
}

#[test]
fn bad_input_is_one_clear_line() {
    let e = Config::from_args(&args(&["--shards", "many"]))
        .unwrap_err()
        .to_string();
    assert_eq!(e, "--shards: \"many\" is not a whole number");
    let e = Config::from_args(&args(&["--frobnicate"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown flag"), "{e}");
    let mut c = Config::default();
    let e = c.merge_toml("lisen = 1").unwrap_err().to_string();
    assert!(e.contains("lisen") && !e.contains('\n'), "{e}");
}

#[test]
fn without_tokens_only_loopback_is_allowed() {
    let e = Config::from_args(&args(&["--listen", "0.0.0.0:7700"])).unwrap_err();
    assert!(e.to_string().contains("loopback only"));
    let mut c = Config::default();
    c.merge_toml("listen = \"0.0.0.0:7700\"\nallow_plaintext = true\n[[tokens]]\ntoken = \"t\"\n[[tokens.grants]]\nqueues = \"*\"\npermissions = [\"send\"]\n")
        .unwrap();
    c.validate().unwrap();
}

#[test]
fn metrics_off_loopback_need_tokens_and_tokens_may_not_be_empty() {
    let e = Config::from_args(&args(&["--metrics-listen", "0.0.0.0:7701"])).unwrap_err();
    assert!(
        e.to_string()
            .contains("metrics are served on loopback only"),
        "{e}"
    );
    let mut c = Config::default();
    let e = c.merge_toml("[[tokens]]\ntoken = \"\"\n").unwrap_err();
    assert!(e.to_string().contains("may not be empty"), "{e}");
}

#[test]
fn values_that_would_overflow_a_timer_are_refused() {
    for flag in [
        "--shutdown-grace-secs",
        "--idle-timeout-secs",
        "--auth-timeout-secs",
    ] {
        let e = Config::from_args(&args(&[flag, &u64::MAX.to_string()])).unwrap_err();
        assert!(e.to_string().contains("must be 0..="), "{flag}: {e}");
    }
    let mut c = Config::default();
    let e = c
        .merge_toml(&format!("shutdown_grace_secs = {}\n", i64::MAX))
        .and_then(|()| c.validate())
        .unwrap_err();
    assert!(e.to_string().contains("shutdown_grace_secs"), "{e}");
    let e = Config::from_args(&args(&["--max-output-bytes", "65536"])).unwrap_err();
    assert!(e.to_string().contains("max_output_bytes"), "{e}");
}

#[test]
fn unknown_permissions_are_refused() {
    let mut c = Config::default();
    let e = c
        .merge_toml("[[tokens]]\ntoken = \"t\"\n[[tokens.grants]]\nqueues = \"a\"\npermissions = [\"admin\"]\n")
        .unwrap_err();
    assert!(e.to_string().contains("\"admin\""));
}

#[test]
fn token_ids_are_checked_and_unique() {
    let mut c = Config::default();
    c.merge_toml("[[tokens]]\nid = \"app-1\"\ntoken = \"t\"\n")
        .unwrap();
    assert_eq!(c.tokens.by_id("app-1").map(|(_, s)| s), Some("t"));
    for bad in ["", "has space", "slash/no"] {
        let mut c = Config::default();
        let e = c
            .merge_toml(&format!("[[tokens]]\nid = {bad:?}\ntoken = \"t\"\n"))
            .unwrap_err();
        assert!(e.to_string().contains("tokens: id"), "{bad}: {e}");
    }
    let mut c = Config::default();
    let e = c
        .merge_toml(
            "[[tokens]]\nid = \"a\"\ntoken = \"t\"\n[[tokens]]\nid = \"a\"\ntoken = \"u\"\n",
        )
        .unwrap_err();
    assert!(e.to_string().contains("names two tokens"), "{e}");
}

#[test]
fn sqs_threads_is_still_accepted_and_does_nothing() {
    let c = Config::from_args(&args(&["--sqs-threads", "3"])).unwrap();
    assert_eq!(c.sqs_threads, 3);
    let c = Config::from_args(&args(&[])).unwrap();
    assert_eq!(c.sqs_threads, 0);
}

#[test]
fn off_loopback_needs_tls_or_allow_plaintext() {
    let token = "[[tokens]]\ntoken = \"t\"\n";
    let mut c = Config::default();
    c.merge_toml(&format!("listen = \"0.0.0.0:7700\"\n{token}"))
        .unwrap();
    let e = c.clone().validate().unwrap_err().to_string();
    assert!(
        e.contains("listen 0.0.0.0:7700") && e.contains("allow_plaintext"),
        "{e}"
    );
    let mut plain = c.clone();
    plain.allow_plaintext = true;
    plain.validate().unwrap();
    assert_eq!(plain.plaintext_off_loopback().len(), 1);
    let mut tls = c.clone();
    tls.merge_toml("tls_cert = \"/c.pem\"\ntls_key = \"/k.pem\"\n")
        .unwrap();
    tls.validate().unwrap();
    assert!(tls.plaintext_off_loopback().is_empty());
    let e = Config::from_args(&args(&["--sqs-listen", "0.0.0.0:9324"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("sqs_listen"), "{e}");
    let e = Config::from_args(&args(&["--azure-listen", "0.0.0.0:10001"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("azure_listen"), "{e}");
    let off = Config::from_args(&args(&["--azure-listen", "off"])).unwrap();
    assert_eq!(off.azure_listen, None);
    assert_eq!(
        Config::default().azure_listen,
        Some("127.0.0.1:10001".parse().unwrap())
    );
}

#[test]
fn tls_settings_go_together() {
    for (flags, want) in [
        (
            &["--tls-cert", "/c"][..],
            "tls_cert and tls_key go together",
        ),
        (&["--tls-key", "/k"][..], "tls_cert and tls_key go together"),
        (&["--tls-client-ca", "/ca"][..], "tls_client_ca needs TLS"),
        (
            &[
                "--tls-cert",
                "/c",
                "--tls-key",
                "/k",
                "--tls-client-auth",
                "required",
            ][..],
            "needs tls_client_ca",
        ),
        (
            &["--tls-client-auth", "sometimes"][..],
            "not one of optional, required",
        ),
        (
            &[
                "--tls-cert",
                "/c",
                "--tls-key",
                "/k",
                "--tls-handshake-timeout-secs",
                "0",
            ][..],
            "tls_handshake_timeout_secs must be 1..=300",
        ),
        (&["--log-format", "xml"][..], "not one of text, json"),
    ] {
        let e = Config::from_args(&args(flags)).unwrap_err().to_string();
        assert!(e.contains(want), "{flags:?}: {e}");
    }
    let c = Config::from_args(&args(&[
        "--tls-cert",
        "/c",
        "--tls-key",
        "/k",
        "--tls-client-ca",
        "/ca",
        "--log-format",
        "json",
    ]))
    .unwrap();
    let files = c.tls_files().unwrap();
    assert_eq!(files.client_ca.as_deref(), Some(Path::new("/ca")));
    assert_eq!(c.log_format, LogFormat::Json);
    assert_eq!(c.args.len(), 8, "the command line is kept for reloads");
}

#[test]
fn a_token_may_be_a_certificate_name_only() {
    let mut c = Config::default();
    c.merge_toml("[[tokens]]\ncertificates = [\"worker-1\"]\n[[tokens.grants]]\nqueues = \"*\"\npermissions = [\"send\"]\n")
        .unwrap();
    let id = c.tokens.by_certificate(&["worker-1".into()]).unwrap();
    assert!(c.tokens.allows(id, "q", crate::auth::Permission::Send));
    let mut c = Config::default();
    let e = c.merge_toml("[[tokens]]\n").unwrap_err().to_string();
    assert!(e.contains("needs a token, or certificates"), "{e}");
    let e = c
        .merge_toml("[[tokens]]\nid = \"a\"\ncertificates = [\"w\"]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("an id needs a token"), "{e}");
}

#[test]
fn the_deploy_example_is_a_valid_config() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/fila.toml");
    let mut c = Config::default();
    c.merge_file(&path).unwrap();
    c.validate().unwrap();
    assert!(c.tls_files().is_some_and(|f| f.client_ca.is_some()));
    assert!(c
        .tokens
        .by_certificate(&["worker-1.internal".into()])
        .is_some());
}

#[test]
fn the_readme_example_is_a_valid_config() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../README.md"))
            .unwrap();
    let start = readme.find("```toml\n# fila.toml").expect("the example") + "```toml\n".len();
    let len = readme[start..].find("```").unwrap();
    let mut c = Config::default();
    c.merge_toml(&readme[start..start + len]).unwrap();
    c.validate().unwrap();
    assert!(c.tls_files().is_some() && c.tokens.len() == 2);
}

#[test]
fn the_console_listens_on_loopback_by_default_off_loopback_only_with_tokens() {
    let c = Config::from_args(&args(&[])).unwrap();
    assert_eq!(c.console_listen, Some("127.0.0.1:7702".parse().unwrap()));
    let c = Config::from_args(&args(&["--console-listen", "off"])).unwrap();
    assert_eq!(c.console_listen, None);
    let e = Config::from_args(&args(&["--console-listen", "0.0.0.0:7702"]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("console_listen") && e.contains("tokens"), "{e}");
    let mut c = Config::default();
    c.merge_toml(
        "console_listen = \"0.0.0.0:7702\"\nallow_plaintext = true\n[[tokens]]\ntoken = \"t\"\n[[tokens.grants]]\nqueues = \"*\"\npermissions = [\"manage\"]\n",
    )
    .unwrap();
    c.validate().unwrap();
    assert_eq!(c.console_listen, Some("0.0.0.0:7702".parse().unwrap()));
    let plain: Vec<&str> = c.plaintext_off_loopback().iter().map(|(n, _)| *n).collect();
    assert_eq!(plain, ["console_listen"]);
}

const CLUSTER: &str = "sqs_listen = \"off\"\nconsole_listen = \"off\"\ndata_dir = \"/d\"\n\
[cluster]\nnode_id = 2\nlisten = \"127.0.0.1:7710\"\nsecret = \"sixteen bytes at least\"\n\
[[cluster.members]]\nid = 1\npeer = \"127.0.0.1:7710\"\nclient = \"127.0.0.1:7700\"\n\
[[cluster.members]]\nid = 2\npeer = \"127.0.0.1:7711\"\nclient = \"127.0.0.1:7703\"\n";

fn cluster_with(replace: &[(&str, &str)]) -> Result<Config, ConfigError> {
    let mut text = CLUSTER.to_owned();
    for (from, to) in replace {
        assert!(text.contains(from), "{from}");
        text = text.replace(from, to);
    }
    let mut c = Config::default();
    c.merge_toml(&text)?;
    c.validate()?;
    Ok(c)
}

#[test]
fn a_cluster_section_names_the_node_its_peers_and_the_secret() {
    let c = cluster_with(&[]).unwrap();
    let cluster = c.cluster.unwrap();
    assert_eq!((cluster.node_id, cluster.listen.port()), (2, 7710));
    assert_eq!(cluster.members.len(), 2);
    assert_eq!(cluster.members[1].client, "127.0.0.1:7703");
    assert!(
        !cluster.join,
        "a node starts its cluster unless it joins one"
    );
    assert!(Config::default().cluster.is_none());
    let joins = cluster_with(&[("node_id = 2\n", "node_id = 2\njoin = true\n")]).unwrap();
    // The SQS API serves a cluster (a follower forwards to the leader).
    let sqs = cluster_with(&[("sqs_listen = \"off\"\n", "")]).unwrap();
    assert!(sqs.sqs_listen.is_some());
    // So does the console.
    let console = cluster_with(&[("console_listen = \"off\"\n", "")]).unwrap();
    assert!(console.console_listen.is_some());
    assert!(joins.cluster.unwrap().join);
    // One partition unless told.
    assert_eq!(cluster_with(&[]).unwrap().cluster.unwrap().partitions, 1);
    let parts = cluster_with(&[("node_id = 2\n", "node_id = 2\npartitions = 8\n")]).unwrap();
    assert_eq!(parts.cluster.unwrap().partitions, 8);
    // Three replicas of each partition unless told.
    assert_eq!(cluster_with(&[]).unwrap().cluster.unwrap().replicas, 3);
    let one = cluster_with(&[("node_id = 2\n", "node_id = 2\nreplicas = 1\n")]).unwrap();
    assert_eq!(one.cluster.unwrap().replicas, 1);
    // Peers over TLS may listen off loopback without allow_plaintext.
    let tls = cluster_with(&[
        (
            "sqs_listen",
            "tls_cert = \"/c.crt\"\ntls_key = \"/c.key\"\nsqs_listen",
        ),
        (
            "node_id = 2\nlisten = \"127.0.0.1:7710\"",
            "node_id = 2\nlisten = \"0.0.0.0:7710\"\ntls_ca = \"/ca.crt\"",
        ),
    ])
    .unwrap();
    assert_eq!(
        tls.cluster.unwrap().tls_ca,
        Some(std::path::PathBuf::from("/ca.crt"))
    );
}

#[test]
fn a_cluster_section_that_cannot_work_is_one_clear_line() {
    let cases: &[(&[(&str, &str)], &str)] = &[
        (
            &[("node_id = 2", "node_id = 3")],
            "is not one of cluster.members",
        ),
        (&[("id = 2", "id = 1")], "each once"),
        (&[("sixteen bytes at least", "short")], "at least 16 bytes"),
        (&[("data_dir = \"/d\"\n", "sync = \"none\"\n")], "durable"),
        (
            &[("listen = \"127.0.0.1:7710\"", "listen = \"0.0.0.0:7710\"")],
            "allow_plaintext",
        ),
        (
            &[("listen = \"127.0.0.1:7710\"", "listen = \"nowhere\"")],
            "not an address",
        ),
        (&[("secret", "secrets")], "unknown field"),
        (
            &[("node_id = 2\n", "node_id = 2\npartitions = 0\n")],
            "cluster.partitions: 1..=64",
        ),
        (
            &[("node_id = 2\n", "node_id = 2\npartitions = 65\n")],
            "cluster.partitions: 1..=64",
        ),
        (
            &[("node_id = 2\n", "node_id = 2\nreplicas = 2\n")],
            "cluster.replicas: 1, 3 or 5",
        ),
        // With TLS on, the peers speak it too: they need the CA.
        (
            &[(
                "sqs_listen",
                "tls_cert = \"/c.crt\"\ntls_key = \"/c.key\"\nsqs_listen",
            )],
            "cluster.tls_ca",
        ),
        (
            &[("node_id = 2\n", "node_id = 2\ntls_ca = \"/ca.crt\"\n")],
            "needs TLS",
        ),
    ];
    for (replace, want) in cases {
        let e = cluster_with(replace).unwrap_err().to_string();
        assert!(e.contains(want), "{replace:?}: {e}");
        assert!(!e.contains('\n'), "{e}");
    }
}
