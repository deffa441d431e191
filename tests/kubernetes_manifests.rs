//! The Kubernetes manifests in `dist/kubernetes/` hold together: the Deployment and the
//! DaemonSet run the same pod; the probes go through `kresctl health` at the API the
//! ConfigMap's configuration opens; the configuration validates and its rundir and cache are
//! the pod's memory volumes; the daemon drains within the grace period and watches its
//! configuration; nothing is privileged and the workers' user is not root; the Service, the
//! PodDisruptionBudget and the ServiceMonitor select the pod and name its ports and secret.
//! (tests/kubernetes.rs runs the pod for real with `podman kube play`.)

use std::path::{Path, PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/dist/kubernetes");

fn load(file: &str) -> Yaml {
    let text = std::fs::read_to_string(Path::new(DIR).join(file)).expect("manifest");
    let mut docs = YamlLoader::load_from_str(&text).expect("valid YAML");
    assert_eq!(docs.len(), 1, "{file}: one document");
    docs.remove(0)
}

/// `doc` at a path of keys (and list indices as numbers).
fn at<'a>(doc: &'a Yaml, path: &[&str]) -> &'a Yaml {
    path.iter()
        .fold(doc, |node, key| match key.parse::<usize>() {
            Ok(i) => &node[i],
            Err(_) => &node[*key],
        })
}

fn text<'a>(doc: &'a Yaml, path: &[&str]) -> &'a str {
    at(doc, path)
        .as_str()
        .unwrap_or_else(|| panic!("no text at {path:?}"))
}

fn strings(node: &Yaml) -> Vec<String> {
    node.as_vec()
        .map(|v| {
            v.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The ConfigMap's configuration, validated as the daemon would (paths not checked: they
/// exist only in the pod).
fn configuration() -> kres_config::KresConfig {
    let cm = load("configmap.yaml");
    let text = text(&cm, &["data", "config.yaml"]);
    let dir = std::env::temp_dir().join(format!("kres-k8s-manifests-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("config.yaml");
    std::fs::write(&file, text).expect("write");
    let loaded = kres_config::load_files(
        &[file],
        kres_config::PathChecks::Lenient,
        Default::default(),
    );
    let _ = std::fs::remove_dir_all(&dir);
    loaded
        .expect("the ConfigMap's configuration is valid")
        .model
}

#[test]
fn deployment_and_daemonset_run_the_same_pod() {
    let deployment = load("deployment.yaml");
    let daemonset = load("daemonset.yaml");
    assert_eq!(text(&deployment, &["kind"]), "Deployment");
    assert_eq!(text(&daemonset, &["kind"]), "DaemonSet");
    assert_eq!(
        at(&deployment, &["spec", "template"]),
        at(&daemonset, &["spec", "template"]),
        "the two pod templates differ"
    );
    for doc in [&deployment, &daemonset] {
        assert_eq!(
            at(doc, &["spec", "selector", "matchLabels"]),
            at(doc, &["spec", "template", "metadata", "labels"]),
            "the selector selects the pod"
        );
    }
}

#[test]
fn the_pod_probes_drains_and_runs_unprivileged() {
    let deployment = load("deployment.yaml");
    let pod = at(&deployment, &["spec", "template", "spec"]);
    let container = at(pod, &["containers", "0"]);
    let cfg = configuration();

    // Probes: kresctl at the API's TCP endpoint (the ConfigMap's), liveness and readiness.
    let api = cfg
        .management
        .interface
        .as_ref()
        .map(|i| i.to_string())
        .expect("the API listens on TCP, for probes and Prometheus");
    let port: u16 = api
        .rsplit_once('@')
        .and_then(|(_, p)| p.parse().ok())
        .expect("a port");
    let url = format!("http://127.0.0.1:{port}");
    for (probe, ready) in [
        ("startupProbe", false),
        ("livenessProbe", false),
        ("readinessProbe", true),
    ] {
        let command = strings(at(container, &[probe, "exec", "command"]));
        let mut expected = vec!["kresctl", "-s", &url, "health"];
        if ready {
            expected.push("--ready");
        }
        assert_eq!(command, expected, "{probe}");
    }
    let api_port = at(container, &["ports"])
        .as_vec()
        .expect("ports")
        .iter()
        .find(|p| p["name"].as_str() == Some("api"))
        .and_then(|p| p["containerPort"].as_i64());
    assert_eq!(api_port, Some(i64::from(port)), "the api port is the API's");
    let token_file = at(container, &["env"])
        .as_vec()
        .expect("env")
        .iter()
        .find(|e| e["name"].as_str() == Some("KRES_API_TOKEN_FILE"))
        .and_then(|e| e["value"].as_str())
        .expect("a bearer token for the TCP API");

    // The command line: the daemon with the configuration it mounts, unprivileged workers,
    // watch, drain.
    assert_eq!(
        strings(at(container, &["command"])),
        vec!["/usr/bin/knot-resolver"]
    );
    let args = strings(at(container, &["args"]));
    assert!(args.contains(&"--config=/etc/knot-resolver/config.yaml".to_owned()));
    assert!(args.contains(&"--watch-config".to_owned()));
    let worker_user = args
        .iter()
        .find_map(|a| a.strip_prefix("--worker-user="))
        .expect("workers run as their own user");
    assert_ne!(worker_user, "root");
    let drain: i64 = args
        .iter()
        .find_map(|a| a.strip_prefix("--drain-period="))
        .and_then(|s| s.parse().ok())
        .expect("a drain period");
    let grace = at(pod, &["terminationGracePeriodSeconds"])
        .as_i64()
        .expect("a grace period");
    assert!(
        grace >= drain + 10,
        "the grace period ({grace} s) leaves the drain ({drain} s) time to stop"
    );

    // Volumes: where each mount comes from.
    let mounts: Vec<(String, String)> = at(container, &["volumeMounts"])
        .as_vec()
        .expect("mounts")
        .iter()
        .map(|m| {
            (
                m["name"].as_str().expect("name").to_owned(),
                m["mountPath"].as_str().expect("path").to_owned(),
            )
        })
        .collect();
    let volume = |path: &Path| -> &Yaml {
        let name = &mounts
            .iter()
            .find(|(_, p)| Path::new(p) == path)
            .unwrap_or_else(|| panic!("nothing mounted at {}", path.display()))
            .0;
        at(pod, &["volumes"])
            .as_vec()
            .expect("volumes")
            .iter()
            .find(|v| v["name"].as_str() == Some(name))
            .unwrap_or_else(|| panic!("no volume {name}"))
    };
    assert_eq!(
        volume(Path::new("/etc/knot-resolver"))["configMap"]["name"].as_str(),
        Some("knot-resolver-config")
    );
    let cache = volume(&PathBuf::from(&cfg.cache.storage));
    assert_eq!(cache["emptyDir"]["medium"].as_str(), Some("Memory"));
    assert!(volume(&cfg.rundir)["emptyDir"].as_hash().is_some());
    let secret_dir = Path::new(token_file).parent().expect("dir");
    let secret = volume(secret_dir)["secret"]["secretName"]
        .as_str()
        .expect("the token from a Secret")
        .to_owned();
    assert_eq!(text(&load("secret.yaml"), &["metadata", "name"]), secret);

    // podman kube play (4.3) fails on a secret volume that does not state `optional`.
    for v in at(pod, &["volumes"]).as_vec().expect("volumes") {
        if v["secret"].as_hash().is_some() {
            assert!(v["secret"]["optional"].as_bool().is_some(), "{v:?}");
        }
    }

    // Privileges: none beyond what the daemon needs of the runtime's default set (binding,
    // user switching, signalling and reaching the workers), none for the workers.
    assert_eq!(
        at(pod, &["securityContext", "seccompProfile", "type"]).as_str(),
        Some("RuntimeDefault")
    );
    let sc = at(container, &["securityContext"]);
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_ne!(sc["privileged"].as_bool(), Some(true));
    assert_eq!(strings(&sc["capabilities"]["drop"]), vec!["ALL"]);
    for cap in strings(&sc["capabilities"]["add"]) {
        assert!(
            [
                "NET_BIND_SERVICE",
                "SETUID",
                "SETGID",
                "CHOWN",
                "KILL",
                "DAC_OVERRIDE"
            ]
            .contains(&cap.as_str()),
            "capability {cap}"
        );
    }
    assert_ne!(at(pod, &["hostNetwork"]).as_bool(), Some(true));
}

#[test]
fn service_budget_and_monitor_select_the_pod() {
    let labels = at(
        &load("deployment.yaml"),
        &["spec", "template", "metadata", "labels"],
    )
    .clone();
    let service = load("service.yaml");
    assert_eq!(at(&service, &["spec", "selector"]), &labels);
    let pdb = load("pdb.yaml");
    assert_eq!(text(&pdb, &["kind"]), "PodDisruptionBudget");
    assert_eq!(at(&pdb, &["spec", "selector", "matchLabels"]), &labels);
    let ports = |service: &Yaml| -> Vec<String> {
        at(service, &["spec", "ports"])
            .as_vec()
            .expect("ports")
            .iter()
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect()
    };
    // DNS only on the DNS Service; the API on a ClusterIP Service of its own.
    assert_eq!(ports(&service), ["dns-udp", "dns-tcp"]);
    let api = load("api-service.yaml");
    assert_eq!(at(&api, &["spec", "selector"]), &labels);
    assert_eq!(text(&api, &["spec", "type"]), "ClusterIP");
    assert_eq!(ports(&api), ["api"]);
    let monitor = load("servicemonitor.yaml");
    assert_eq!(
        at(&monitor, &["spec", "selector", "matchLabels"]),
        at(&api, &["metadata", "labels"])
    );
    assert_ne!(
        at(&monitor, &["spec", "selector", "matchLabels"]),
        at(&service, &["metadata", "labels"]),
        "the monitor selects the API's Service only"
    );
    let endpoint = at(&monitor, &["spec", "endpoints", "0"]);
    assert!(ports(&api).iter().any(|p| p == text(endpoint, &["port"])));
    assert_eq!(text(endpoint, &["path"]), "/metrics/prometheus");
    assert_eq!(
        text(endpoint, &["authorization", "credentials", "name"]),
        text(&load("secret.yaml"), &["metadata", "name"])
    );
}
