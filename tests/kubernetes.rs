//! The Deployment of `dist/kubernetes/` under `podman kube play` (loopback only, see
//! `testbed::podman`), with our image: the startup, liveness and readiness probes pass and
//! DNS is answered; the liveness probe became a passing health check; the API refuses a
//! request without the Secret's bearer token and serves Prometheus, which names the pod's
//! address in `Host`; two ConfigMap updates, written the way the kubelet writes them (a new
//! `..data` symlink), are reloaded by `--watch-config`; SIGTERM drains (readiness off while
//! liveness holds and DNS is answered) and the resolver then ends with exit code 0, and the
//! pod's restart policy brings it back. What every manifest must keep is checked without
//! a runtime in tests/kubernetes_manifests.rs.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Result;
use testbed::podman::{Container, Context, Health, Kube, Made, Podman};
use yaml_rust2::{Yaml, YamlEmitter, YamlLoader};

const CONFIGMAP: &str = include_str!("../dist/kubernetes/configmap.yaml");
const DEPLOYMENT: &str = include_str!("../dist/kubernetes/deployment.yaml");

/// Generous bound for anything to happen on a loaded 2-core machine; never a timing claim.
const WAIT: Duration = Duration::from_secs(60);

/// The played Secret's `token`: "kube-play-token" in base64. podman 4.3 writes `data` values
/// into the volume undecoded (and ignores `stringData`, which secret.yaml uses), so the test
/// writes its own Secret and reads the token the pod got from the pod itself.
const TOKEN_DATA: &str = "a3ViZS1wbGF5LXRva2Vu";

/// The one document of a manifest.
fn one(text: &str) -> Yaml {
    let mut docs = YamlLoader::load_from_str(text).expect("valid YAML");
    assert_eq!(docs.len(), 1, "one document");
    docs.remove(0)
}

fn str_of(y: &Yaml) -> &str {
    y.as_str().unwrap_or_else(|| panic!("not a string: {y:?}"))
}

fn list(y: &Yaml) -> &Vec<Yaml> {
    y.as_vec().unwrap_or_else(|| panic!("not a list: {y:?}"))
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

/// The value of `--flag VALUE` or `--flag=VALUE` in the container's arguments.
fn arg_value(container: &Yaml, flag: &str) -> Option<String> {
    let args: Vec<&str> = list(&container["args"]).iter().map(str_of).collect();
    args.iter().enumerate().find_map(|(i, a)| {
        if *a == flag {
            args.get(i + 1).map(|v| (*v).to_owned())
        } else {
            a.strip_prefix(&format!("{flag}=")).map(str::to_owned)
        }
    })
}

/// The port of an `http://HOST:PORT` text.
fn port_of(text: &str) -> Option<u16> {
    text.rsplit(':').next()?.parse().ok()
}

/// The file played: the ConfigMap, a Secret with [`TOKEN_DATA`], and the Deployment with three
/// changes: our image, one replica, and no `ports` (podman 4.3 publishes container ports on
/// the host, which a pod on `--network none` refuses). What playing it makes besides pods.
fn played(image: &str) -> (String, Vec<Made>) {
    let configmap = one(CONFIGMAP);
    let mut deployment = one(DEPLOYMENT);
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

    let deployment = one(DEPLOYMENT);
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
    .unwrap_or_else(|e| {
        panic!(
            "the startup probe never passed: {e:#}\n{}",
            ct.logs().unwrap_or_default()
        )
    });
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
    let base = str_of(&one(CONFIGMAP)["data"]["config.yaml"]).to_owned();
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
