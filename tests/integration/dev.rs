//! `mcm dev` as a user runs it: the binary, a kubeconfig, the real kubectl, Ctrl-C.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::Kubectl;

#[tokio::test]
async fn mcm_dev_serves_kubectl_and_stops_on_ctrl_c() {
    let dir = std::env::temp_dir().join(format!("mcm-dev-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let kubeconfig = dir.join("kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .args(["dev", "--listen", "127.0.0.1:0", "--kubeconfig-out"])
        .arg(&kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    let ready = loop {
        let line = lines.next().expect("mcm dev printed its ready line").unwrap();
        if line.starts_with("mcm dev ready:") {
            break line;
        }
        assert!(Instant::now() < deadline, "mcm dev did not get ready");
    };
    assert!(ready.contains(kubeconfig.file_name().unwrap().to_str().unwrap()), "{ready}");

    let kubectl = Kubectl::for_kubeconfig(&kubeconfig);
    let crds = kubectl.run(&["get", "crds", "-o", "name"]).await;
    assert!(crds.contains("customresourcedefinition.apiextensions.k8s.io/machines.machine.sapcloud.io"), "{crds}");
    kubectl.run(&["get", "nodes"]).await;
    let sample = kubectl.run(&["-n", "mcm-sample", "get", "mcd,mcc", "-o", "name"]).await;
    assert_eq!(
        sample.lines().collect::<Vec<_>>(),
        ["machinedeployment.machine.sapcloud.io/workers", "machineclass.machine.sapcloud.io/inmemory-small"],
        "the sample is applied"
    );

    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    assert_eq!(rest.last().map(String::as_str), Some("mcm dev: stopped"), "{rest:?}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn dev_building_blocks_apply_the_sample_and_turn_vms_into_ready_nodes() {
    use k8s_openapi::api::core::v1::Node;
    use kube::Api;
    use mcm::api::mcm::{MachineClass, MachineDeployment};
    use mcm::dev::{DevEnvironment, DevOptions};
    use mcm::providers::{ClassInfo, MachineInfo, MachineRequest};

    let dir = crate::support::TempDir::new("mcm-dev-env");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        data_dir: None,
        apiserver_only: false,
        sample: true,
        ..Default::default()
    };
    let env = DevEnvironment::start(&options, |_| {}).await.unwrap();
    let client = env.client.clone();
    Api::<MachineDeployment>::namespaced(client.clone(), "mcm-sample").get("workers").await.unwrap();
    let class = Api::<MachineClass>::namespaced(client.clone(), "mcm-sample").get("inmemory-small").await.unwrap();

    let request = MachineRequest {
        machine: MachineInfo { name: "probe-vm".into(), namespace: "mcm-sample".into(), ..Default::default() },
        class: ClassInfo {
            name: "inmemory-small".into(),
            provider: class.spec.provider.clone().unwrap(),
            provider_spec: class.spec.provider_spec.clone(),
            node_template: class.spec.node_template.clone(),
        },
        ..Default::default()
    };
    let driver = env.drivers.get("InMemory").unwrap();
    let created = driver.create_machine(&request).await.unwrap();
    let nodes: Api<Node> = Api::all(client);
    let node = crate::support::wait_until("the VM's Node to be Ready", Duration::from_secs(30), || async {
        let node = nodes.get_opt(&created.node_name).await.unwrap()?;
        let ready = node.status.as_ref()?.conditions.as_ref()?.iter().any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(node)
    })
    .await;
    assert_eq!(node.spec.unwrap().provider_id.as_deref(), Some(created.provider_id.as_str()));
    assert_eq!(node.metadata.labels.unwrap()["node.kubernetes.io/instance-type"], "m.small");
    env.shutdown().await;
}

/// The kubeconfig `mcm dev` wrote, as kube-rs reads it.
async fn written_config(kubeconfig: &std::path::Path) -> kube::Config {
    let file = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default()).await.unwrap()
}

/// GET `path` with `config`: the status and the body as JSON, or the client's error.
async fn get(config: kube::Config, path: &str) -> Result<(u16, serde_json::Value), kube::Error> {
    let client = kube::Client::try_from(config)?;
    let request = http::Request::builder().uri(path).body(kube::client::Body::empty()).unwrap();
    let response = client.send(request).await?;
    let status = response.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(response.into_body()).await.unwrap().to_bytes();
    Ok((status, serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null)))
}

fn unauthorized() -> serde_json::Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
}

/// Starts the `mcm dev` binary with `args` and waits for its ready line.
fn spawn_dev(
    args: &[&str],
    kubeconfig: &std::path::Path,
) -> (std::process::Child, std::io::Lines<BufReader<std::process::ChildStdout>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mcm"))
        .arg("dev")
        .args(args)
        .arg("--kubeconfig-out")
        .arg(kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let line = lines.next().expect("mcm dev printed its ready line").unwrap();
        if line.starts_with("mcm dev ready:") {
            break;
        }
        assert!(Instant::now() < deadline, "mcm dev did not get ready");
    }
    (child, lines)
}

/// Stops `mcm dev` with Ctrl-C and checks it exits cleanly.
fn stop_dev(mut child: std::process::Child) {
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
    assert!(child.wait().unwrap().success());
}

#[tokio::test]
async fn mcm_dev_turns_away_requests_without_its_token_or_its_ca() {
    let dir = crate::support::TempDir::new("mcm-dev-auth");
    let kubeconfig = dir.0.join("kubeconfig");
    let (child, _lines) = spawn_dev(&["--listen", "127.0.0.1:0", "--no-sample"], &kubeconfig);

    // The kubeconfig is the owner's only and carries an https URL, the CA and the token.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&kubeconfig).unwrap().permissions().mode() & 0o777, 0o600);
    }
    let config = written_config(&kubeconfig).await;
    assert_eq!(config.cluster_url.scheme_str(), Some("https"), "{}", config.cluster_url);
    assert!(config.root_cert.is_some() && config.auth_info.token.is_some());

    // The real kubectl with the written kubeconfig lists machines.
    let kubectl = Kubectl::for_kubeconfig(&kubeconfig);
    kubectl.run(&["get", "machines.machine.sapcloud.io", "-A"]).await;
    kubectl.run(&["get", "machines.cluster.x-k8s.io", "-A"]).await;

    // No token, a wrong token: kube-apiserver's 401, for Secrets as for everything else.
    let mut anonymous = config.clone();
    anonymous.auth_info.token = None;
    let mut wrong = config.clone();
    wrong.auth_info.token = Some("0123456789abcdef0123456789abcdef".to_string().into());
    for path in ["/api/v1/secrets", "/apis/machine.sapcloud.io/v1alpha1/machines", "/api", "/metrics"] {
        assert_eq!(get(anonymous.clone(), path).await.unwrap(), (401, unauthorized()), "no token: {path}");
        assert_eq!(get(wrong.clone(), path).await.unwrap(), (401, unauthorized()), "wrong token: {path}");
    }
    // Probes carry no credentials: the health checks and the version are public, as kube-apiserver's.
    for path in ["/healthz", "/livez", "/readyz", "/version"] {
        assert_eq!(get(anonymous.clone(), path).await.unwrap().0, 200, "{path}");
    }
    // kubectl with another token is told it is unauthorized (without any, kubectl asks for a user name instead).
    let text = std::fs::read_to_string(&kubeconfig).unwrap();
    let token_line = text.lines().find(|l| l.trim_start().starts_with("token:")).unwrap();
    let wrong_token = text.replace(token_line, "    token: \"0123456789abcdef0123456789abcdef\"");
    std::fs::write(dir.0.join("wrong-token"), wrong_token).unwrap();
    let (ok, _, stderr) = Kubectl::for_kubeconfig(&dir.0.join("wrong-token")).try_run(&["get", "secrets", "-A"]).await;
    assert!(!ok && stderr.contains("You must be logged in to the server"), "{stderr}");

    // A client that trusts another CA does not get past the TLS handshake, token or not.
    let other = mcm::apiserver::CertificateAuthority::generate().unwrap();
    let other_der = <rustls::pki_types::CertificateDer<'static> as rustls::pki_types::pem::PemObject>::from_pem_slice(
        other.cert_pem().as_bytes(),
    )
    .unwrap();
    let mut distrustful = config.clone();
    distrustful.root_cert = Some(vec![other_der.to_vec()]);
    let err = get(distrustful, "/api/v1/secrets").await.unwrap_err();
    assert!(!matches!(err, kube::Error::Api(_)), "TLS must fail before any answer: {err}");
    let message = format!("{err:?}");
    // Both CAs carry the same name, so the handshake finds the other one and rejects the signature.
    assert!(message.contains("UnknownIssuer") || message.contains("InvalidCertificate"), "{message}");
    let other_ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, other.cert_pem());
    let own_ca_line = text.lines().find(|l| l.contains("certificate-authority-data")).unwrap().to_string();
    let wrong_ca = text.replace(&own_ca_line, &format!("    certificate-authority-data: {other_ca}"));
    std::fs::write(dir.0.join("wrong-ca"), wrong_ca).unwrap();
    let (ok, _, stderr) = Kubectl::for_kubeconfig(&dir.0.join("wrong-ca")).try_run(&["get", "secrets", "-A"]).await;
    assert!(!ok && stderr.contains("x509"), "{stderr}");

    // Plain HTTP to the TLS port gets nothing: no object crosses the wire unencrypted.
    let url = config.cluster_url.to_string().replace("https://", "http://");
    let mut plain = kube::Config::new(url.parse().unwrap());
    plain.auth_info.token = config.auth_info.token.clone();
    match get(plain, "/api/v1/secrets").await {
        Ok((status, body)) => assert_ne!(status, 200, "{body}"),
        Err(err) => assert!(!matches!(err, kube::Error::Api(_)), "{err}"),
    }
    stop_dev(child);
}

#[test]
fn mcm_dev_refuses_insecure_http_on_an_address_others_can_reach() {
    let dir = crate::support::TempDir::new("mcm-dev-insecure");
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let output = Command::new(env!("CARGO_BIN_EXE_mcm"))
            .args(["dev", "--apiserver-only", "--insecure-http", "--listen", listen, "--kubeconfig-out"])
            .arg(dir.0.join("kubeconfig"))
            .arg("--data-dir")
            .arg(dir.0.join("data"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{listen}: {stderr}");
        assert!(stderr.contains("refusing to serve plain HTTP on") && stderr.contains("loopback"), "{stderr}");
        assert!(!dir.0.join("kubeconfig").exists(), "nothing is written when refused");
        assert!(!dir.0.join("data").exists(), "nothing is written when refused");
    }
}

#[tokio::test]
async fn insecure_http_on_loopback_serves_plain_http_and_still_wants_the_token() {
    use mcm::dev::{DevEnvironment, DevOptions};
    let dir = crate::support::TempDir::new("mcm-dev-plain");
    let kubeconfig = dir.0.join("kubeconfig");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: kubeconfig.clone(),
        insecure_http: true,
        apiserver_only: true,
        ..Default::default()
    };
    let env = DevEnvironment::start(&options, |_| {}).await.unwrap();
    assert!(env.server.url().starts_with("http://127.0.0.1:"), "{}", env.server.url());
    let config = written_config(&kubeconfig).await;
    assert!(config.root_cert.is_none() && config.auth_info.token.is_some());
    assert_eq!(get(config.clone(), "/api/v1/namespaces").await.unwrap().0, 200);
    let mut anonymous = config;
    anonymous.auth_info.token = None;
    assert_eq!(get(anonymous, "/api/v1/namespaces").await.unwrap(), (401, unauthorized()));
    // kubectl (client-go) sends credentials only over TLS, so over plain HTTP it is turned away: plain HTTP is for
    // clients that send the token anyway (kube-rs, curl), never a way around it.
    let (ok, _, stderr) = Kubectl::for_kubeconfig(&kubeconfig).try_run(&["get", "namespaces"]).await;
    assert!(!ok && stderr.contains("provide credentials"), "{stderr}");
    env.shutdown().await;
}

#[tokio::test]
async fn a_restarted_mcm_dev_with_a_data_dir_keeps_its_ca_and_token() {
    use mcm::dev::{DevEnvironment, DevOptions};
    let dir = crate::support::TempDir::new("mcm-dev-restart");
    let options = DevOptions {
        listen: Some("127.0.0.1:0".parse().unwrap()),
        kubeconfig_out: dir.0.join("kubeconfig"),
        data_dir: Some(dir.0.join("data")),
        apiserver_only: true,
        ..Default::default()
    };
    let first = DevEnvironment::start(&options, |_| {}).await.unwrap();
    let before = written_config(&options.kubeconfig_out).await;
    first.shutdown().await;
    #[cfg(unix)]
    for secret in ["token", "pki/ca.key", "apiserver-state.json"] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.0.join("data").join(secret)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{secret}");
    }

    let second = DevEnvironment::start(&options, |_| {}).await.unwrap();
    // What a client started against the first run holds (its CA and token), pointed at the new port.
    let mut old = before;
    old.cluster_url = second.server.url().parse().unwrap();
    assert_eq!(get(old, "/api/v1/namespaces").await.unwrap().0, 200);
    second.shutdown().await;

    // Without a data directory every run has its own.
    let fresh = DevOptions { data_dir: None, ..options.clone() };
    let third = DevEnvironment::start(&fresh, |_| {}).await.unwrap();
    let mut old = written_config(&options.kubeconfig_out).await;
    third.shutdown().await;
    let fourth = DevEnvironment::start(&fresh, |_| {}).await.unwrap();
    old.cluster_url = fourth.server.url().parse().unwrap();
    assert!(get(old, "/api/v1/namespaces").await.is_err(), "a new CA is not trusted by the old kubeconfig");
    fourth.shutdown().await;
}
