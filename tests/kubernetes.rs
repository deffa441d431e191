//! The Kubernetes manifests of `dist/kubernetes/`: first what every manifest must keep (read
//! with yaml-rust2): probes through `kresctl health`, no privilege beyond the runtime's default
//! capabilities and workers without any, the cache in memory, the configuration from the
//! ConfigMap and watched, a drain shorter than the grace period, selectors that match the
//! pods, the DaemonSet running the Deployment's pod. Then the Deployment itself under `podman
//! kube play` (loopback only, see `testbed::podman`), with our image: it answers DNS, its probes
//! and health check pass, the API wants the bearer token and serves Prometheus a pod-address
//! `Host`, a ConfigMap update swapped in the way the kubelet does reloads it, and a stop drains
//! (readiness off, DNS answered) before the container ends with exit code 0.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use testbed::podman::{Container, Context, Health, Kube, Made, Podman};
use yaml_rust2::{Yaml, YamlEmitter, YamlLoader};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/dist/kubernetes");

/// Every manifest, by file name.
const MANIFESTS: &[(&str, &str)] = &[
    (
        "configmap.yaml",
        include_str!("../dist/kubernetes/configmap.yaml"),
    ),
    (
        "daemonset.yaml",
        include_str!("../dist/kubernetes/daemonset.yaml"),
    ),
    (
        "deployment.yaml",
        include_str!("../dist/kubernetes/deployment.yaml"),
    ),
    ("pdb.yaml", include_str!("../dist/kubernetes/pdb.yaml")),
    (
        "service.yaml",
        include_str!("../dist/kubernetes/service.yaml"),
    ),
    (
        "servicemonitor.yaml",
        include_str!("../dist/kubernetes/servicemonitor.yaml"),
    ),
];

/// Capabilities every container runtime grants by default that the daemon may keep.
const DEFAULT_CAPABILITIES: &[&str] = &[
    "CHOWN",
    "DAC_OVERRIDE",
    "KILL",
    "NET_BIND_SERVICE",
    "SETGID",
    "SETUID",
];

/// Generous bound for anything to happen on a loaded 2-core machine; never a timing claim.
const WAIT: Duration = Duration::from_secs(60);

/// The played Secret's `token`: "kube-play-token" in base64. podman 4.3 writes `data` values
/// into the volume undecoded, so the test reads the token the pod got from the pod itself.
const TOKEN_DATA: &str = "a3ViZS1wbGF5LXRva2Vu";

fn load(file: &str) -> Vec<Yaml> {
    let text = MANIFESTS
        .iter()
        .find(|(name, _)| *name == file)
        .map(|(_, text)| *text)
        .unwrap_or_else(|| panic!("no manifest {file}"));
    YamlLoader::load_from_str(text).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// The one document of `kind` in `file`.
fn one(file: &str, kind: &str) -> Yaml {
    let mut found: Vec<Yaml> = load(file)
        .into_iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect();
    assert_eq!(found.len(), 1, "one {kind} in {file}");
    found.remove(0)
}

fn str_of(y: &Yaml) -> &str {
    y.as_str().unwrap_or_else(|| panic!("not a string: {y:?}"))
}

fn list(y: &Yaml) -> &Vec<Yaml> {
    y.as_vec().unwrap_or_else(|| panic!("not a list: {y:?}"))
}

fn strings(y: &Yaml) -> Vec<&str> {
    list(y).iter().map(str_of).collect()
}

/// The pod template of the Deployment and of the DaemonSet.
fn pod_templates() -> Vec<(&'static str, Yaml)> {
    vec![
        (
            "Deployment",
            one("deployment.yaml", "Deployment")["spec"]["template"].clone(),
        ),
        (
            "DaemonSet",
            one("daemonset.yaml", "DaemonSet")["spec"]["template"].clone(),
        ),
    ]
}

/// The pod's only container.
fn resolver(template: &Yaml) -> &Yaml {
    let containers = list(&template["spec"]["containers"]);
    assert_eq!(containers.len(), 1, "one container");
    &containers[0]
}

/// The pod volume mounted at `path`.
fn volume_at<'a>(template: &'a Yaml, path: &str) -> &'a Yaml {
    let mount = list(&resolver(template)["volumeMounts"])
        .iter()
        .find(|m| m["mountPath"].as_str() == Some(path))
        .unwrap_or_else(|| panic!("nothing mounted at {path}"));
    let name = str_of(&mount["name"]);
    list(&template["spec"]["volumes"])
        .iter()
        .find(|v| v["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no volume {name}"))
}

/// The value of `--flag VALUE` (or `--flag=VALUE`) in the container's arguments.
fn arg_value(container: &Yaml, flag: &str) -> Option<String> {
    let args = strings(&container["args"]);
    args.iter().enumerate().find_map(|(i, a)| {
        if *a == flag {
            args.get(i + 1).map(|v| (*v).to_owned())
        } else {
            a.strip_prefix(&format!("{flag}=")).map(str::to_owned)
        }
    })
}

/// The resolver's configuration held by the ConfigMap.
fn resolver_config() -> Yaml {
    let map = one("configmap.yaml", "ConfigMap");
    YamlLoader::load_from_str(str_of(&map["data"]["config.yaml"]))
        .expect("config.yaml of the ConfigMap")
        .remove(0)
}

/// Whether every label of `selector` is on the pods of `template`.
fn selects(selector: &Yaml, template: &Yaml) -> bool {
    let labels = &template["metadata"]["labels"];
    selector.as_hash().is_some_and(|h| {
        !h.is_empty()
            && h.iter()
                .all(|(k, v)| labels[str_of(k)].as_str() == v.as_str())
    })
}

/// `Some(port)` of an `ADDRESS@PORT` or `http://HOST:PORT` text.
fn port_of(text: &str) -> Option<u16> {
    text.rsplit(['@', ':']).next()?.parse().ok()
}

#[test]
fn every_manifest_is_checked_and_names_itself() {
    let on_disk: BTreeSet<String> = std::fs::read_dir(DIR)
        .expect("dist/kubernetes")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    let known: BTreeSet<String> = MANIFESTS.iter().map(|(n, _)| (*n).to_owned()).collect();
    assert_eq!(on_disk, known, "every manifest is in MANIFESTS");
    for (file, _) in MANIFESTS {
        let docs = load(file);
        assert!(!docs.is_empty(), "{file} is empty");
        for doc in &docs {
            for key in ["apiVersion", "kind"] {
                assert!(doc[key].as_str().is_some(), "{file}: no {key}");
            }
            assert!(
                doc["metadata"]["name"].as_str().is_some(),
                "{file}: no name"
            );
        }
    }
}

#[test]
fn pods_are_probed_through_kresctl_health() {
    let config = resolver_config();
    let api_port = port_of(str_of(&config["management"]["interface"])).expect("API port");
    for (kind, template) in pod_templates() {
        let c = resolver(&template);
        for (probe, ready) in [
            ("startupProbe", false),
            ("livenessProbe", false),
            ("readinessProbe", true),
        ] {
            let p = &c[probe];
            assert!(
                p["httpGet"].is_badvalue(),
                "{kind} {probe}: podman 4.3 needs curl for httpGet"
            );
            let command = strings(&p["exec"]["command"]);
            assert_eq!(command[0], "kresctl", "{kind} {probe}: {command:?}");
            let socket = command
                .iter()
                .position(|a| *a == "-s")
                .and_then(|i| command.get(i + 1))
                .unwrap_or_else(|| panic!("{kind} {probe}: no -s"));
            assert_eq!(
                port_of(socket),
                Some(api_port),
                "{kind} {probe} asks the API"
            );
            assert!(
                socket.starts_with("http://127.0.0.1:"),
                "{kind} {probe}: {socket}"
            );
            assert!(command.contains(&"health"), "{kind} {probe}: {command:?}");
            assert_eq!(
                command.contains(&"--ready"),
                ready,
                "{kind} {probe}: {command:?}"
            );
            assert!(
                p["timeoutSeconds"].as_i64().is_some(),
                "{kind} {probe}: a timeout"
            );
        }
        let api = list(&c["ports"])
            .iter()
            .find(|p| p["name"].as_str() == Some("api"))
            .expect("an api port");
        assert_eq!(api["containerPort"].as_i64(), Some(i64::from(api_port)));
        let token = list(&c["env"])
            .iter()
            .find(|e| e["name"].as_str() == Some("KRES_API_TOKEN_FILE"))
            .expect("the API's bearer token");
        let token_dir = Path::new(str_of(&token["value"])).parent().expect("dir");
        let secret = volume_at(&template, &token_dir.to_string_lossy());
        assert!(
            secret["secret"]["secretName"].as_str().is_some(),
            "{kind}: from a Secret"
        );
    }
}

#[test]
fn pods_keep_no_privilege_beyond_the_default_capabilities() {
    for (kind, template) in pod_templates() {
        let spec = &template["spec"];
        for host in ["hostNetwork", "hostPID", "hostIPC"] {
            assert_ne!(spec[host].as_bool(), Some(true), "{kind}: {host}");
        }
        assert_eq!(
            spec["securityContext"]["seccompProfile"]["type"].as_str(),
            Some("RuntimeDefault")
        );
        let c = resolver(&template);
        let sc = &c["securityContext"];
        assert_ne!(sc["privileged"].as_bool(), Some(true), "{kind}: privileged");
        assert_eq!(
            sc["allowPrivilegeEscalation"].as_bool(),
            Some(false),
            "{kind}"
        );
        assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true), "{kind}");
        assert_eq!(strings(&sc["capabilities"]["drop"]), vec!["ALL"], "{kind}");
        for cap in strings(&sc["capabilities"]["add"]) {
            assert!(DEFAULT_CAPABILITIES.contains(&cap), "{kind}: {cap} added");
        }
        // The image's entrypoint switches the workers to this user; arguments must not
        // replace the entrypoint.
        assert!(c["command"].is_badvalue(), "{kind}: the entrypoint is kept");
        let entrypoint = include_str!("../dist/container/Containerfile")
            .lines()
            .find(|l| l.starts_with("ENTRYPOINT"))
            .expect("ENTRYPOINT")
            .to_owned();
        assert!(
            entrypoint.contains("\"--worker-user\", \"knot-resolver\""),
            "{entrypoint}"
        );
    }
}

#[test]
fn cache_in_memory_configuration_watched_drain_within_the_grace_period() {
    let config = resolver_config();
    let configmap = one("configmap.yaml", "ConfigMap");
    for (kind, template) in pod_templates() {
        let c = resolver(&template);
        let cache = volume_at(&template, str_of(&config["cache"]["storage"]));
        assert_eq!(
            cache["emptyDir"]["medium"].as_str(),
            Some("Memory"),
            "{kind}"
        );
        let limit = str_of(&cache["emptyDir"]["sizeLimit"]);
        let limit_mib: u64 = limit
            .trim_end_matches("Mi")
            .parse()
            .expect("a sizeLimit in Mi");
        let size_max = str_of(&config["cache"]["size-max"]);
        let size_mb: u64 = size_max
            .trim_end_matches('M')
            .parse()
            .expect("size-max in M");
        assert!(
            size_mb * 1_000_000 < limit_mib * 1_048_576,
            "{kind}: {size_max} in {limit}"
        );
        let rundir = volume_at(&template, str_of(&config["rundir"]));
        assert!(
            rundir["emptyDir"].as_hash().is_some(),
            "{kind}: rundir writable"
        );

        let conf = volume_at(&template, "/etc/knot-resolver");
        assert_eq!(
            conf["configMap"]["name"].as_str(),
            configmap["metadata"]["name"].as_str(),
            "{kind}: the configuration is the ConfigMap"
        );
        assert_eq!(
            arg_value(c, "-c").as_deref(),
            Some("/etc/knot-resolver/config.yaml")
        );
        assert!(strings(&c["args"]).contains(&"--watch-config"), "{kind}");
        let drain: i64 = arg_value(c, "--drain-period")
            .expect("--drain-period")
            .parse()
            .expect("seconds");
        let grace = template["spec"]["terminationGracePeriodSeconds"]
            .as_i64()
            .expect("terminationGracePeriodSeconds");
        assert!(
            drain > 0 && grace > drain,
            "{kind}: drain {drain} s, grace {grace} s"
        );
        // podman 4.3 panics on a secret volume without an explicit `optional`.
        for v in list(&template["spec"]["volumes"]) {
            if v["secret"].as_hash().is_some() {
                assert!(v["secret"]["optional"].as_bool().is_some(), "{kind}: {v:?}");
            }
        }
    }
}

#[test]
fn the_configmaps_configuration_is_valid() {
    let dir = std::env::temp_dir().join(format!("kres-kube-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("config.yaml");
    let map = one("configmap.yaml", "ConfigMap");
    std::fs::write(&file, str_of(&map["data"]["config.yaml"])).expect("write");
    let out = std::process::Command::new(common::KRESCTL)
        .arg("validate")
        .arg(&file)
        .output()
        .expect("kresctl validate");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn selectors_match_the_pods() {
    let deployment = one("deployment.yaml", "Deployment");
    let daemonset = one("daemonset.yaml", "DaemonSet");
    let pdb = one("pdb.yaml", "PodDisruptionBudget");
    let monitor = one("servicemonitor.yaml", "ServiceMonitor");
    let services = load("service.yaml");
    for (kind, template) in pod_templates() {
        assert!(
            selects(&pdb["spec"]["selector"]["matchLabels"], &template),
            "the PodDisruptionBudget covers the {kind}'s pods"
        );
        for s in &services {
            assert!(selects(&s["spec"]["selector"], &template), "{kind}");
            for port in list(&s["spec"]["ports"]) {
                let target = str_of(&port["targetPort"]);
                assert!(
                    list(&resolver(&template)["ports"])
                        .iter()
                        .any(|p| p["name"].as_str() == Some(target)),
                    "{kind} has port {target}"
                );
            }
        }
    }
    for owner in [&deployment, &daemonset] {
        assert!(selects(
            &owner["spec"]["selector"]["matchLabels"],
            &owner["spec"]["template"]
        ));
    }
    assert!(
        pdb["spec"]["maxUnavailable"].as_i64().is_some()
            || pdb["spec"]["minAvailable"].as_i64().is_some()
    );

    // The ServiceMonitor picks the API's Service only, by a port that Service has.
    let as_pod = |s: &Yaml| {
        let mut t = yaml_rust2::yaml::Hash::new();
        t.insert(Yaml::String("metadata".into()), s["metadata"].clone());
        Yaml::Hash(t)
    };
    let picked: Vec<&Yaml> = services
        .iter()
        .filter(|s| selects(&monitor["spec"]["selector"]["matchLabels"], &as_pod(s)))
        .collect();
    assert_eq!(picked.len(), 1, "the ServiceMonitor selects one Service");
    let api = picked[0];
    assert_eq!(
        api["spec"]["clusterIP"].as_str(),
        Some("None"),
        "scraped per pod"
    );
    for endpoint in list(&monitor["spec"]["endpoints"]) {
        assert_eq!(endpoint["path"].as_str(), Some("/metrics/prometheus"));
        let port = str_of(&endpoint["port"]);
        assert!(list(&api["spec"]["ports"])
            .iter()
            .any(|p| p["name"].as_str() == Some(port)));
        let secret = &endpoint["authorization"]["credentials"]["name"];
        let template = &deployment["spec"]["template"];
        let mounted = list(&template["spec"]["volumes"])
            .iter()
            .any(|v| v["secret"]["secretName"].as_str() == secret.as_str());
        assert!(mounted, "Prometheus sends the pods' own token: {secret:?}");
    }
}

#[test]
fn the_daemonset_runs_the_deployments_pod() {
    let mut deployment = one("deployment.yaml", "Deployment")["spec"]["template"].clone();
    let daemonset = one("daemonset.yaml", "DaemonSet")["spec"]["template"].clone();
    deployment["spec"]
        .as_mut_hash()
        .expect("spec")
        .remove(&Yaml::String("affinity".into()));
    assert_eq!(deployment, daemonset);
}

/// The file played: the ConfigMap, a Secret with [`TOKEN_DATA`], and the Deployment with three
/// changes: our image, one replica, and no `ports` (podman 4.3 publishes container ports on
/// the host, which a pod on `--network none` refuses). What playing it makes besides pods.
fn played(image: &str) -> (String, Vec<Made>) {
    let configmap = one("configmap.yaml", "ConfigMap");
    let mut deployment = one("deployment.yaml", "Deployment");
    deployment["spec"]["replicas"] = Yaml::Integer(1);
    let spec = &mut deployment["spec"]["template"]["spec"];
    let container = &mut spec["containers"][0];
    container["image"] = Yaml::String(image.to_owned());
    container
        .as_mut_hash()
        .expect("container")
        .remove(&Yaml::String("ports".into()));
    let mut made = Vec::new();
    let mut secret_name = String::new();
    for v in list(&spec["volumes"]) {
        if v["emptyDir"].as_hash().is_some() {
            made.push(Made::Volume(str_of(&v["name"]).to_owned()));
        }
        if let Some(name) = v["configMap"]["name"].as_str() {
            made.push(Made::Volume(name.to_owned()));
        }
        if let Some(name) = v["secret"]["secretName"].as_str() {
            made.push(Made::Volume(name.to_owned()));
            made.push(Made::Secret(name.to_owned()));
            secret_name = name.to_owned();
        }
    }
    let secret = YamlLoader::load_from_str(&format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {secret_name}\ndata:\n  token: {TOKEN_DATA}\n"
    ))
    .expect("secret")
    .remove(0);
    let mut text = String::new();
    for doc in [&configmap, &secret, &deployment] {
        let mut out = String::new();
        let mut emitter = YamlEmitter::new(&mut out);
        emitter.multiline_strings(true);
        emitter.dump(doc).expect("emit");
        text.push_str(&out);
        text.push('\n');
    }
    (text, made)
}

/// `kresctl health [--ready]` inside the pod, as its probes run it: whether it passed.
fn probe(ct: &Container, argv: &[&str]) -> Result<(bool, String)> {
    let out = ct.exec(argv)?;
    Ok((
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    ))
}

/// Write a ConfigMap's new files the way the kubelet does: a fresh timestamped directory,
/// then `..data` switched to it by renaming a symlink, and `KEY` → `..data/KEY` links.
fn kubelet_update(dir: &Path, version: &str, files: &[(&str, &str)]) -> Result<()> {
    let fresh = dir.join(format!("..{version}"));
    std::fs::create_dir(&fresh)?;
    for (name, text) in files {
        std::fs::write(fresh.join(name), text)?;
    }
    let old = std::fs::read_link(dir.join("..data")).ok();
    std::os::unix::fs::symlink(format!("..{version}"), dir.join("..data_tmp"))?;
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data"))?;
    for (name, _) in files {
        let link = dir.join(name);
        if std::fs::read_link(&link).is_err() {
            let tmp = dir.join(format!("{name}.tmp"));
            std::os::unix::fs::symlink(format!("..data/{name}"), &tmp)?;
            std::fs::rename(&tmp, &link)?;
        }
    }
    if let Some(old) = old {
        std::fs::remove_dir_all(dir.join(old))?;
    }
    Ok(())
}

fn wait_answer(ct: &Container, name: &str, address: &str) -> Result<()> {
    testbed::wait_for(&format!("{name} answered with {address}"), WAIT, || {
        Ok(ct.dig_a(name)?.iter().any(|a| a == address).then_some(()))
    })
}

#[test]
fn the_deployments_pod_under_podman_kube_play() {
    let began = Instant::now();
    let podman = Podman::get().expect("podman bed");
    let image = common::our_image(podman).expect("our image");
    let (text, made) = played(&image.name);
    // Declared before the pods: removed after they are taken down.
    let context = Context::new("kube").expect("a directory");
    context.write("play.yaml", &text).expect("the played file");
    let file = context.dir.join("play.yaml");

    let deployment = one("deployment.yaml", "Deployment");
    let template = &deployment["spec"]["template"];
    let c = resolver(template);
    let api = str_of(&c["startupProbe"]["exec"]["command"][2]).to_owned();
    let name = format!(
        "{}-pod-0-{}",
        str_of(&deployment["metadata"]["name"]),
        str_of(&c["name"])
    );

    let played_at = Instant::now();
    let kube = Kube::play(&file, made).expect("podman kube play");
    let ct = kube.container(&name);
    // The startup probe's question, then DNS (kresd answers `localhost` on its own).
    testbed::wait_for("started", WAIT, || {
        Ok(probe(&ct, &["kresctl", "-s", &api, "health"])?
            .0
            .then_some(()))
    })
    .expect("the startup probe passes");
    wait_answer(&ct, "localhost", "127.0.0.1").expect("DNS answered");
    let first_answer = played_at.elapsed();
    let (ready, said) = probe(&ct, &["kresctl", "-s", &api, "health", "--ready"]).expect("probe");
    assert!(ready, "the readiness probe passes: {said}");
    // podman turns the liveness probe into the container's health check.
    let check = ct.inspect("{{json .Config.Healthcheck}}").expect("inspect");
    assert!(
        check.contains("kresctl") && check.contains("health"),
        "{check}"
    );
    assert_eq!(ct.health().expect("health check"), Health::Healthy);

    // Without the Secret's token the API refuses, probes included.
    let (ok, said) = probe(
        &ct,
        &[
            "sh",
            "-c",
            &format!("KRES_API_TOKEN_FILE= kresctl -s {api} health"),
        ],
    )
    .expect("probe");
    assert!(!ok && said.contains("bearer token"), "{said}");
    // Prometheus names the pod's address in Host and sends the token.
    let token_file = list(&c["env"])
        .iter()
        .find(|e| e["name"].as_str() == Some("KRES_API_TOKEN_FILE"))
        .map(|e| str_of(&e["value"]).to_owned())
        .expect("token file");
    let token = ct.ok(&["cat", &token_file]).expect("the pod's token");
    let token = token.trim();
    let port = port_of(&api).expect("port");
    let scrape = ct
        .ok(&[
            "bash",
            "-c",
            &format!(
                "exec 3<>/dev/tcp/127.0.0.1/{port}; printf 'GET /metrics/prometheus HTTP/1.1\\r\\n\
                 Host: 10.244.1.7:{port}\\r\\nAuthorization: Bearer {token}\\r\\n\
                 Connection: close\\r\\n\\r\\n' >&3; cat <&3"
            ),
        ])
        .expect("scrape");
    assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
    assert!(scrape.contains("# TYPE"), "{scrape}");

    // ConfigMap updates, as the kubelet writes them, reload the pod (--watch-config).
    let base = str_of(&one("configmap.yaml", "ConfigMap")["data"]["config.yaml"]).to_owned();
    let dir = kube
        .volume_dir(str_of(
            &volume_at(template, "/etc/knot-resolver")["configMap"]["name"],
        ))
        .expect("the ConfigMap's volume");
    let with =
        |address: &str| format!("{base}local-data:\n  addresses:\n    t.example: {address}\n");
    kubelet_update(
        &dir,
        "2026_01_01_00_00_00.1",
        &[("config.yaml", &with("192.0.2.7"))],
    )
    .expect("first update");
    wait_answer(&ct, "t.example", "192.0.2.7").expect("reloaded");
    kubelet_update(
        &dir,
        "2026_01_01_00_01_00.2",
        &[("config.yaml", &with("192.0.2.8"))],
    )
    .expect("second update");
    wait_answer(&ct, "t.example", "192.0.2.8").expect("reloaded again");

    // SIGTERM, as the kubelet stops a pod, drains: readiness off while liveness holds and DNS
    // is answered; then the resolver ends by itself with exit code 0 (`podman stop` would
    // refuse every exec while it waits, hence the signal).
    let signalled = Instant::now();
    ct.kill("TERM").expect("SIGTERM");
    let said = testbed::wait_for("readiness off", WAIT, || {
        let (ready, said) = probe(&ct, &["kresctl", "-s", &api, "health", "--ready"])?;
        Ok((!ready).then_some(said))
    })
    .expect("the readiness probe fails while draining");
    assert!(said.contains("draining"), "{said}");
    let (alive, why) = probe(&ct, &["kresctl", "-s", &api, "health"]).expect("probe");
    assert!(alive, "liveness holds while draining: {why}");
    assert_eq!(
        ct.dig_a("t.example").expect("dig"),
        vec!["192.0.2.8".to_owned()]
    );
    let died = testbed::wait_for("the drained resolver ended", WAIT, || {
        let died = ct.died()?;
        Ok((!died.is_empty()).then_some(died))
    })
    .expect("ended");
    let drained = signalled.elapsed();
    assert_eq!(died, vec![0], "ended cleanly after the drain");
    // restartPolicy: Always (the Deployment's) brings it back, as the kubelet would.
    wait_answer(&ct, "t.example", "192.0.2.8").expect("answers after the restart");
    drop(kube);

    println!();
    println!(
        "kube play to first answer  {:>8.2} s",
        first_answer.as_secs_f64()
    );
    println!(
        "SIGTERM to exit, {} s drain {:>8.2} s (exit {})",
        arg_value(c, "--drain-period").unwrap_or_default(),
        drained.as_secs_f64(),
        died[0]
    );
    println!(
        "whole test                 {:>8.2} s",
        began.elapsed().as_secs_f64()
    );
}
