//! The Helm chart in `dist/helm/knot-resolver`, through real Helm (`helm lint`, `helm
//! template`) over several value sets, its rendered objects checked by kubernetes-validate
//! `--strict` and checkov (tools from `tests/testbed/provision-helm-tools.sh`):
//! - every value set lints and renders, and every object of Kubernetes' own kinds is valid;
//! - the default is Kubernetes' restricted Pod Security profile (non-root, group 0, every
//!   capability dropped but NET_BIND_SERVICE, no escalation, seccomp RuntimeDefault, read-only
//!   root file system, no `--worker-user`); the privilege-separated mode runs the daemon as
//!   root with its six capabilities and `--worker-user`;
//! - the configuration in the ConfigMap validates, with the rundir and the cache on the pod's
//!   memory volumes and the API where the probes ask; it is followed in place
//!   (`--watch-config`), with no checksum annotation restarting pods;
//! - checkov leaves at most the three failures the chart's README justifies;
//! - a value the schema refuses fails with a message naming it;
//! - the DNS Service carries DNS ports only; the API is on a Service of its own, the one the
//!   ServiceMonitor selects, and an API Service that leaves the cluster (NodePort,
//!   LoadBalancer) fails the chart with a message naming the values, unless TLS is said to
//!   be terminated in front of it;
//! - the rendered pod (default values: the restricted profile) runs under `podman kube play`
//!   with our image: its probes pass, it answers DNS, every process runs as the chart's UID.
//!
//! The object counts per value set, checkov's counts (the plain manifests of
//! `dist/kubernetes/` beside the chart's default rendering) and the time from `podman kube
//! play` to the first answer are printed.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use testbed::podman::{Context, Kube, Made, Podman};

use yaml_rust2::{Yaml, YamlEmitter, YamlLoader};

const CHART: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/dist/helm/knot-resolver");
const NAMESPACE: &str = "dns";

/// The checkov failures the chart's README justifies (with the default values): no digest to
/// pin in a chart, NET_BIND_SERVICE for port 53, and `IfNotPresent` for a pinned image.
const JUSTIFIED: &[&str] = &["CKV_K8S_43", "CKV_K8S_25", "CKV_K8S_15"];

/// The value sets rendered: (name, values file contents).
const VALUE_SETS: &[(&str, &str)] = &[
    ("default", ""),
    (
        "daemonset-privilege-separated",
        "kind: DaemonSet\nsecurityMode: privilege-separated\n\
         priorityClassName: system-node-critical\n",
    ),
    (
        "everything",
        "replicas: 3\nimage:\n  repository: registry.example/knot-resolver\n  \
         digest: sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef\n\
         config:\n  workers: 4\n  network:\n    listen:\n      - interface: 0.0.0.0@53\n      \
         - interface: 0.0.0.0@853\n        kind: dot\n      - interface: 0.0.0.0@443\n        \
         kind: doh2\n\
         dnsOverTls:\n  enabled: true\ndnsOverHttps:\n  enabled: true\n\
         autoscaling:\n  enabled: true\npodAntiAffinity: hard\n\
         priorityClassName: system-cluster-critical\n\
         serviceMonitor:\n  enabled: true\nprometheusRule:\n  enabled: true\n\
         grafanaDashboard:\n  enabled: true\n\
         networkPolicy:\n  apiFrom:\n    - namespaceSelector:\n        matchLabels:\n          \
         kubernetes.io/metadata.name: monitoring\n",
    ),
    ("openshift", "uid: null\n"),
];

/// The directory of helm, kubernetes-validate and checkov, provisioned once.
fn tools() -> &'static Path {
    static TOOLS: OnceLock<PathBuf> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/testbed/provision-helm-tools.sh");
        let out = Command::new("bash")
            .arg(script)
            .output()
            .expect("running provision-helm-tools.sh");
        let stdout = testbed::succeeded("provision-helm-tools.sh", &out).expect("the tools");
        PathBuf::from(stdout.lines().last().expect("a directory").trim())
    })
}

fn tool(name: &str, args: &[&str]) -> Output {
    Command::new(tools().join(name))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {name}: {e}"))
}

fn stdout_of(what: &str, out: &Output) -> String {
    testbed::succeeded(what, out).unwrap_or_else(|e| panic!("{e:#}"))
}

/// A scratch directory of this test process (in the target directory's scratch space).
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir =
            Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("helm-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

fn values_file(name: &str, values: &str) -> PathBuf {
    let path = scratch().join(format!("{name}.values.yaml"));
    std::fs::write(&path, values).expect("values file");
    path
}

/// `helm lint` and `helm template` of the chart with `values`; the rendered file and its
/// objects.
fn render(name: &str, values: &str) -> (PathBuf, Vec<Yaml>) {
    let file = values_file(name, values);
    let file = file.to_str().expect("a UTF-8 path");
    let lint = tool("helm", &["lint", "--strict", CHART, "-f", file]);
    stdout_of(&format!("helm lint ({name})"), &lint);
    let out = tool(
        "helm",
        &["template", "r", CHART, "--namespace", NAMESPACE, "-f", file],
    );
    let text = stdout_of(&format!("helm template ({name})"), &out);
    let rendered = scratch().join(format!("{name}.rendered.yaml"));
    std::fs::write(&rendered, &text).expect("rendered file");
    let objects = YamlLoader::load_from_str(&text)
        .expect("helm renders YAML")
        .into_iter()
        .filter(|d| !d.is_null())
        .collect();
    (rendered, objects)
}

fn kind_of(doc: &Yaml) -> &str {
    doc["kind"].as_str().unwrap_or_default()
}

fn find<'a>(objects: &'a [Yaml], kind: &str) -> &'a Yaml {
    objects
        .iter()
        .find(|d| kind_of(d) == kind)
        .unwrap_or_else(|| panic!("no {kind}"))
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

/// kubernetes-validate `--strict` accepts the rendered file: every object of Kubernetes' own
/// kinds passes (the Prometheus operator's kinds have no schema there).
fn validate(name: &str, rendered: &Path, objects: &[Yaml]) {
    let out = tool(
        "kubernetes-validate",
        &["--strict", rendered.to_str().expect("a UTF-8 path")],
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "kubernetes-validate ({name}): {said}");
    for doc in objects {
        let kind = kind_of(doc);
        if doc["apiVersion"]
            .as_str()
            .unwrap_or_default()
            .starts_with("monitoring.coreos.com")
        {
            continue;
        }
        let resource = format!(
            "passed for resource {}/{}",
            kind.to_lowercase(),
            doc["metadata"]["name"].as_str().unwrap_or_default()
        );
        assert!(
            said.contains(&resource),
            "{name}: no `{resource}` in {said}"
        );
    }
}

/// checkov's (passed, failed check ids) on a file or directory.
fn checkov(target: &Path) -> (u64, Vec<String>) {
    let flag = if target.is_dir() { "-d" } else { "-f" };
    let out = tool(
        "checkov",
        &[
            flag,
            target.to_str().expect("a UTF-8 path"),
            "--framework",
            "kubernetes",
            "--quiet",
            "--compact",
            "--output",
            "json",
        ],
    );
    // checkov exits 1 when a check fails; its report is what counts.
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("checkov's report: {e}"));
    let report = if report.is_array() {
        &report[0]
    } else {
        &report
    };
    let passed = report["summary"]["passed"].as_u64().expect("passed count");
    let failed = report["results"]["failed_checks"]
        .as_array()
        .map(|checks| {
            checks
                .iter()
                .filter_map(|c| c["check_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    (passed, failed)
}

/// The configuration the ConfigMap carries, validated as the daemon would (paths unchecked:
/// they exist only in the pod).
fn configuration(objects: &[Yaml]) -> kres_config::KresConfig {
    let cm = objects
        .iter()
        .find(|d| kind_of(d) == "ConfigMap" && d["data"]["config.yaml"].as_str().is_some())
        .expect("the configuration's ConfigMap");
    let text = cm["data"]["config.yaml"].as_str().expect("config.yaml");
    let file = scratch().join("config.yaml");
    std::fs::write(&file, text).expect("write");
    kres_config::load_files(
        &[file],
        kres_config::PathChecks::Lenient,
        Default::default(),
    )
    .expect("the ConfigMap's configuration is valid")
    .model
}

#[test]
fn the_chart_renders_valid_restricted_objects_for_every_value_set() {
    let mut counts = Vec::new();
    for (name, values) in VALUE_SETS {
        let (rendered, objects) = render(name, values);
        validate(name, &rendered, &objects);
        let workload = objects
            .iter()
            .find(|d| ["Deployment", "DaemonSet"].contains(&kind_of(d)))
            .expect("a workload");
        let pod = &workload["spec"]["template"]["spec"];
        let container = &pod["containers"][0];
        let args = strings(&container["args"]);
        assert!(args.contains(&"--watch-config".to_owned()), "{args:?}");
        assert!(
            workload["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
                .is_badvalue(),
            "{name}: no restart on a change of the configuration"
        );
        let caps = strings(&container["securityContext"]["capabilities"]["add"]);
        assert_eq!(
            strings(&container["securityContext"]["capabilities"]["drop"]),
            ["ALL"]
        );
        assert_eq!(
            container["securityContext"]["allowPrivilegeEscalation"].as_bool(),
            Some(false)
        );
        assert_eq!(
            container["securityContext"]["readOnlyRootFilesystem"].as_bool(),
            Some(true)
        );
        assert_eq!(
            pod["securityContext"]["seccompProfile"]["type"].as_str(),
            Some("RuntimeDefault")
        );
        if name.contains("privilege-separated") {
            assert_eq!(caps.len(), 6, "{caps:?}");
            assert!(
                args.contains(&"--worker-user=knot-resolver".to_owned()),
                "{args:?}"
            );
            assert!(pod["securityContext"]["runAsNonRoot"].is_badvalue());
        } else {
            assert_eq!(caps, ["NET_BIND_SERVICE"], "{name}");
            assert!(
                !args.iter().any(|a| a.starts_with("--worker-user")),
                "{args:?}"
            );
            assert_eq!(pod["securityContext"]["runAsNonRoot"].as_bool(), Some(true));
            assert_eq!(pod["securityContext"]["runAsGroup"].as_i64(), Some(0));
            let uid = pod["securityContext"]["runAsUser"].as_i64();
            if *name == "openshift" {
                assert_eq!(uid, None, "OpenShift picks the UID");
            } else {
                assert!(uid.is_some_and(|u| u >= 10000), "{uid:?}");
            }
        }

        // The configuration validates and puts the rundir and the cache on the pod's memory
        // volumes, and the API where the probes ask.
        let model = configuration(&objects);
        let mounts: Vec<(String, String)> = container["volumeMounts"]
            .as_vec()
            .expect("mounts")
            .iter()
            .map(|m| {
                (
                    m["mountPath"].as_str().unwrap_or_default().to_owned(),
                    m["name"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        let volume_medium = |mount: &str| {
            let (_, volume) = mounts
                .iter()
                .find(|(path, _)| path == mount)
                .unwrap_or_else(|| panic!("nothing mounted at {mount}"));
            pod["volumes"]
                .as_vec()
                .expect("volumes")
                .iter()
                .find(|v| v["name"].as_str() == Some(volume.as_str()))
                .and_then(|v| v["emptyDir"]["medium"].as_str())
                .map(str::to_owned)
        };
        assert_eq!(
            volume_medium(&model.rundir.to_string_lossy()).as_deref(),
            Some("Memory")
        );
        assert_eq!(
            volume_medium(&model.cache.storage.to_string_lossy()).as_deref(),
            Some("Memory")
        );
        let api = model
            .management
            .interface
            .as_ref()
            .expect("the API on TCP")
            .socket_addr();
        let probe = strings(&container["livenessProbe"]["exec"]["command"]);
        assert_eq!(
            probe[..3],
            ["kresctl", "-s", &format!("http://127.0.0.1:{}", api.port())]
        );

        // Every port a Service names is one the container has; the DNS Service has DNS
        // ports only, the API Service the API port only.
        let container_ports: Vec<String> = container["ports"]
            .as_vec()
            .expect("ports")
            .iter()
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect();
        for service in objects.iter().filter(|d| kind_of(d) == "Service") {
            for (target, _, _) in service_ports(service) {
                assert!(container_ports.contains(&target), "{name}: {target}");
            }
        }
        let dns_ports: Vec<String> = service_ports(service_of(&objects, "dns"))
            .into_iter()
            .map(|(target, _, _)| target)
            .collect();
        assert!(
            dns_ports.iter().all(|p| p.starts_with("dns-")),
            "{name}: {dns_ports:?}"
        );
        let api = service_of(&objects, "api");
        assert_eq!(api["spec"]["type"].as_str(), Some("ClusterIP"), "{name}");
        assert_eq!(
            service_ports(api),
            [("api".to_owned(), 5000, "TCP".to_owned())],
            "{name}"
        );

        let mut kinds: Vec<&str> = objects.iter().map(kind_of).collect();
        kinds.sort_unstable();
        counts.push((name, objects.len(), kinds.join(" ")));
        if *name == "everything" {
            for kind in [
                "HorizontalPodAutoscaler",
                "ServiceMonitor",
                "PrometheusRule",
                "NetworkPolicy",
                "PodDisruptionBudget",
                "Secret",
            ] {
                assert!(kinds.contains(&kind), "{name}: no {kind}");
            }
            // The ServiceMonitor selects the API Service, not the DNS one, and scrapes its
            // port.
            let monitor = find(&objects, "ServiceMonitor");
            let selects = |service: &Yaml| {
                monitor["spec"]["selector"]["matchLabels"]
                    .as_hash()
                    .expect("matchLabels")
                    .iter()
                    .all(|(k, v)| {
                        service["metadata"]["labels"][k.as_str().unwrap_or_default()] == *v
                    })
            };
            assert!(selects(service_of(&objects, "api")));
            assert!(!selects(service_of(&objects, "dns")));
            assert_eq!(
                monitor["spec"]["endpoints"][0]["port"].as_str(),
                Some("api")
            );
            let rule = find(&objects, "PrometheusRule");
            let alerts = rule["spec"]["groups"][0]["rules"].as_vec().expect("rules");
            let shipped = std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/dist/prometheus/knot-resolver-alerts.yml"
            ))
            .expect("the shipped alerts");
            assert_eq!(
                alerts.len(),
                shipped.matches("- alert: ").count(),
                "every shipped alert"
            );
            assert!(
                workload["spec"]["replicas"].is_badvalue(),
                "the HPA owns the replica count"
            );
        }
    }

    let (default_rendered, _) = render("default-for-checkov", "");
    let (passed_before, failed_before) = checkov(Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/dist/kubernetes"
    )));
    let (passed_after, failed_after) = checkov(&default_rendered);
    let unjustified: Vec<&String> = failed_after
        .iter()
        .filter(|id| !JUSTIFIED.contains(&id.as_str()))
        .collect();
    assert!(
        unjustified.is_empty(),
        "checkov failures the README does not justify: {unjustified:?}"
    );
    assert!(failed_after.len() <= 6, "{failed_after:?}");

    for (name, count, kinds) in &counts {
        eprintln!("{name:32} {count:2} objects: {kinds}");
    }
    eprintln!(
        "checkov: dist/kubernetes/ {passed_before} passed, {} failed; the chart's default {passed_after} passed, {} failed ({failed_after:?})",
        failed_before.len(),
        failed_after.len()
    );
}

/// The Service of a component (`dns` or `api`).
fn service_of<'a>(objects: &'a [Yaml], component: &str) -> &'a Yaml {
    objects
        .iter()
        .find(|d| {
            kind_of(d) == "Service"
                && d["metadata"]["labels"]["app.kubernetes.io/component"].as_str()
                    == Some(component)
        })
        .unwrap_or_else(|| panic!("no {component} Service"))
}

/// A Service's ports: (target port's name, port, protocol).
fn service_ports(service: &Yaml) -> Vec<(String, i64, String)> {
    service["spec"]["ports"]
        .as_vec()
        .expect("service ports")
        .iter()
        .map(|p| {
            (
                p["targetPort"].as_str().expect("a named target").to_owned(),
                p["port"].as_i64().expect("a port number"),
                p["protocol"].as_str().expect("a protocol").to_owned(),
            )
        })
        .collect()
}

/// `helm template` of the chart with `values`, which must fail: what Helm said.
fn refused(values: &str) -> String {
    // A file of its own: tests refusing values run at once.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let file = values_file(&format!("refused-{n}"), values);
    let out = tool(
        "helm",
        &[
            "template",
            "r",
            CHART,
            "-f",
            file.to_str().expect("a UTF-8 path"),
        ],
    );
    assert!(!out.status.success(), "{values:?} accepted");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_value_the_schema_refuses_is_named() {
    for (values, named) in [
        ("kind: StatefulSet\n", "/kind"),
        ("securityMode: root\n", "/securityMode"),
        ("api:\n  port: 70000\n", "/api/port"),
        (
            "api:\n  service:\n    type: ExternalName\n",
            "/api/service/type",
        ),
        ("replica: 3\n", "replica"),
    ] {
        let said = refused(values);
        assert!(said.contains(named), "{values:?}: {said}");
    }
}

#[test]
fn the_api_leaves_the_cluster_only_behind_tls() {
    // The defaults: DNS on 53 alone, the API on a ClusterIP Service of its own.
    let (_, objects) = render("api-default", "");
    let dns = service_of(&objects, "dns");
    assert_eq!(
        service_ports(dns),
        [
            ("dns-udp".to_owned(), 53, "UDP".to_owned()),
            ("dns-tcp".to_owned(), 53, "TCP".to_owned()),
        ]
    );
    assert_eq!(
        objects.iter().filter(|d| kind_of(d) == "Service").count(),
        2
    );

    // DNS from outside the cluster: the load balancer has no API port.
    let (_, objects) = render("dns-load-balancer", "service:\n  type: LoadBalancer\n");
    let dns = service_of(&objects, "dns");
    assert_eq!(dns["spec"]["type"].as_str(), Some("LoadBalancer"));
    assert!(service_ports(dns).iter().all(|(_, port, _)| *port == 53));
    assert_eq!(
        service_of(&objects, "api")["spec"]["type"].as_str(),
        Some("ClusterIP")
    );

    // The API from outside the cluster, in clear text: refused, naming the values.
    for exposed in ["LoadBalancer", "NodePort"] {
        let said = refused(&format!(
            "service:\n  type: LoadBalancer\napi:\n  service:\n    type: {exposed}\n"
        ));
        for named in [
            &format!("api.service.type={exposed}") as &str,
            "clear text",
            "api.service.tlsTerminatedInFront=true",
        ] {
            assert!(said.contains(named), "{exposed}: no {named:?} in {said}");
        }
    }
    // Behind TLS the operator terminates: rendered.
    let (_, objects) = render(
        "api-behind-tls",
        "api:\n  service:\n    type: LoadBalancer\n    tlsTerminatedInFront: true\n",
    );
    assert_eq!(
        service_of(&objects, "api")["spec"]["type"].as_str(),
        Some("LoadBalancer")
    );

    // Without the API Service, no ServiceMonitor could scrape; a ServiceMonitor without it is
    // refused.
    let (_, objects) = render("no-api-service", "api:\n  service:\n    enabled: false\n");
    assert_eq!(
        objects.iter().filter(|d| kind_of(d) == "Service").count(),
        1
    );
    let said = refused("api:\n  service:\n    enabled: false\nserviceMonitor:\n  enabled: true\n");
    assert!(
        said.contains("serviceMonitor.enabled needs api.service.enabled=true"),
        "{said}"
    );
}

/// Generous bound for anything to happen on a loaded 2-core machine; never a timing claim.
const WAIT: Duration = Duration::from_secs(60);

#[test]
fn the_charts_pod_under_podman_kube_play() {
    let podman = Podman::get().expect("podman bed");
    let image = common::our_image(podman).expect("our image");
    // One replica of our image; the Secret's tokens given (podman 4.3 writes a Secret's
    // `data` into the volume undecoded: the daemon and the probes read the same file).
    let values = format!(
        "replicas: 1\nimage:\n  repository: {}\n  tag: latest\n\
         api:\n  token: kube-play-token\n  readOnlyToken: kube-play-read-only\n",
        image.name
    );
    let (_, objects) = render("kube-play", &values);
    let played: Vec<Yaml> = objects
        .into_iter()
        .filter(|d| ["ConfigMap", "Secret", "Deployment"].contains(&kind_of(d)))
        .map(|mut d| {
            if kind_of(&d) == "Deployment" {
                // podman would publish the container's ports on the host.
                d["spec"]["template"]["spec"]["containers"][0]
                    .as_mut_hash()
                    .expect("container")
                    .remove(&Yaml::String("ports".into()));
            }
            d
        })
        .collect();
    let deployment = find(&played, "Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    let uid = pod["securityContext"]["runAsUser"]
        .as_i64()
        .expect("the chart's UID");
    let container = &pod["containers"][0];
    let probe = strings(&container["livenessProbe"]["exec"]["command"]);
    let ready = strings(&container["readinessProbe"]["exec"]["command"]);
    let mut made = Vec::new();
    for v in pod["volumes"].as_vec().expect("volumes") {
        let name = v["name"].as_str().expect("a volume's name");
        if v["emptyDir"].as_hash().is_some() {
            made.push(Made::Volume(name.to_owned()));
        }
        if let Some(cm) = v["configMap"]["name"].as_str() {
            made.push(Made::Volume(cm.to_owned()));
        }
        if let Some(secret) = v["secret"]["secretName"].as_str() {
            made.push(Made::Volume(secret.to_owned()));
            made.push(Made::Secret(secret.to_owned()));
        }
    }
    let mut text = String::new();
    for doc in &played {
        let mut out = String::new();
        let mut emitter = YamlEmitter::new(&mut out);
        emitter.multiline_strings(true);
        emitter.dump(doc).expect("emit");
        text.push_str(&out);
        text.push('\n');
    }
    // Declared before the pods: removed after they are taken down.
    let context = Context::new("helm-kube").expect("a directory");
    context.write("play.yaml", &text).expect("the played file");
    let name = format!(
        "{}-pod-0-{}",
        deployment["metadata"]["name"].as_str().expect("name"),
        container["name"].as_str().expect("container name")
    );

    let played_at = Instant::now();
    let kube = Kube::play(&context.dir.join("play.yaml"), made).expect("podman kube play");
    let ct = kube.container(&name);
    let passes = |argv: &[String]| -> anyhow::Result<bool> {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        Ok(ct.exec(&argv)?.status.success())
    };
    testbed::wait_for("the liveness probe passes", WAIT, || {
        Ok(passes(&probe)?.then_some(()))
    })
    .unwrap_or_else(|e| panic!("{e:#}\n{}", ct.logs().unwrap_or_default()));
    testbed::wait_for("localhost answered", WAIT, || {
        Ok(ct
            .dig_a("localhost")?
            .iter()
            .any(|a| a == "127.0.0.1")
            .then_some(()))
    })
    .expect("DNS answered");
    let first_answer = played_at.elapsed();
    assert!(passes(&ready).expect("probe"), "the readiness probe passes");
    let procs = ct.processes().expect("processes");
    for comm in ["knot-resolver", "kres-manager", "kresd", "kres-cache-gc"] {
        let of: Vec<_> = procs.iter().filter(|p| p.info.comm == comm).collect();
        assert!(!of.is_empty(), "no {comm}: {procs:#?}");
        for p in of {
            assert_eq!(i64::from(p.uid), uid, "{p:?}");
        }
    }
    drop(kube);
    eprintln!(
        "the chart's pod (restricted, uid {uid}): first answer {:.2} s after podman kube play",
        first_answer.as_secs_f64()
    );
}
